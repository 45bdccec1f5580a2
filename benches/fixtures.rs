//! What the benchmarks share: the inner service, an offer, an in-process facilitator that
//! accepts everything at once, and syntactically valid payments with fresh nonces.
//!
//! ```
//! use tower_x402_benches::{offer, unsigned_payment};
//! use tower_x402::proto::UsdcDeployment;
//!
//! let offer = offer(&UsdcDeployment::BASE);
//! assert!(unsigned_payment(&offer, 7).len() > 100);
//! ```

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderValue, Request, Response};
use http_body_util::Full;
use tower_x402::BoxFuture;
use tower_x402::proto::{
    FacilitatorRequest, PaymentPayload, ResourceInfo, SettleResponse, SupportedResponse,
    UsdcDeployment, VerifyResponse, X402Version, header,
};
use tower_x402::{Facilitator, FacilitatorError, Offer, SettlementMode};

/// Where every benchmark's payments go.
pub const PAY_TO: &str = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";

/// The inner service: a fixed small body.
pub async fn inner(_request: Request<Full<Bytes>>) -> Result<Response<Full<Bytes>>, Infallible> {
    Ok(Response::new(Full::new(Bytes::from_static(b"the report"))))
}

/// 1.00 USDC on `network` for `/report`, settled after the inner service answers.
pub fn offer(network: &UsdcDeployment) -> Arc<Offer> {
    offer_with(network, SettlementMode::After)
}

/// 1.00 USDC on `network` for `/report`, settled in `mode`.
pub fn offer_with(network: &UsdcDeployment, mode: SettlementMode) -> Arc<Offer> {
    Arc::new(
        Offer::builder(ResourceInfo::new("https://shop.example/report"))
            .usdc(network, "1.00".parse().expect("price"), PAY_TO)
            .settlement(mode)
            .build()
            .expect("offer"),
    )
}

/// A facilitator that accepts everything at once: isolates the layer's own cost.
#[derive(Clone, Debug)]
pub struct InstantFacilitator;

impl Facilitator for InstantFacilitator {
    fn verify<'a>(
        &'a self,
        _: &'a FacilitatorRequest,
    ) -> BoxFuture<'a, Result<VerifyResponse, FacilitatorError>> {
        Box::pin(async {
            Ok(VerifyResponse {
                is_valid: true,
                ..VerifyResponse::default()
            })
        })
    }

    fn settle<'a>(
        &'a self,
        request: &'a FacilitatorRequest,
    ) -> BoxFuture<'a, Result<SettleResponse, FacilitatorError>> {
        Box::pin(async move {
            Ok(SettleResponse {
                success: true,
                error_reason: None,
                error_message: None,
                payer: None,
                transaction: "0x01".into(),
                network: request.payment_requirements.network.clone(),
                amount: Some(request.payment_requirements.amount),
                extensions: None,
            })
        })
    }

    fn supported(&self) -> BoxFuture<'_, Result<Arc<SupportedResponse>, FacilitatorError>> {
        Box::pin(async { Ok(Arc::default()) })
    }
}

/// A syntactically valid payment for `offer` with `nonce` as its EIP-3009 nonce; its signature
/// is not real (the instant facilitator and the load benchmark's stub do not check it).
pub fn unsigned_payment(offer: &Offer, nonce: u64) -> HeaderValue {
    let accepted = offer.accepts()[0].clone();
    let payload = PaymentPayload {
        x402_version: X402Version::V2,
        resource: Some(offer.resource().clone()),
        payload: serde_json::json!({
            "signature": format!("0x{}", "ab".repeat(65)),
            "authorization": {
                "from": "0x857b06519E91e3A54538791bDbb0E22373e36b66",
                "to": accepted.pay_to,
                "value": accepted.amount,
                "validAfter": "0",
                "validBefore": "99999999999",
                "nonce": format!("0x{nonce:064x}"),
            }
        }),
        accepted,
        extensions: None,
    };
    header::encode(&payload).expect("encode")
}

/// A GET of `path`, with `payment` in `PAYMENT-SIGNATURE` when given.
pub fn request(path: &str, payment: Option<&HeaderValue>) -> Request<Full<Bytes>> {
    let mut builder = Request::get(path);
    if let Some(payment) = payment {
        builder = builder.header("payment-signature", payment.clone());
    }
    builder.body(Full::new(Bytes::new())).expect("request")
}
