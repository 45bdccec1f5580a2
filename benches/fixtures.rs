//! What the benchmarks share: the inner service, an offer, an in-process facilitator that
//! accepts everything at once, and syntactically valid payments with fresh nonces — `exact`
//! (EIP-3009) and metered `upto` (Permit2).
//!
//! ```
//! use tower_x402_benches::{offer, unsigned_payment};
//! use x402_wire::UsdcDeployment;
//!
//! let offer = offer(&UsdcDeployment::BASE);
//! assert!(unsigned_payment(&offer, 7).len() > 100);
//! ```

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use http::{HeaderValue, Request, Response};
use http_body_util::Full;
use tower_x402::BoxFuture;
use tower_x402::payment::{HookStages, PaymentContext, PaymentEvent, PaymentHooks};
use tower_x402::{Charge, Facilitator, FacilitatorError, Offer, SettlementMode};
use x402_wire::{
    AtomicAmount, FacilitatorRequest, Network, PaymentPayload, ResourceInfo, SettleResponse,
    SupportedKind, SupportedResponse, UPTO_PROXY_ADDRESS, UPTO_SCHEME, UsdcDeployment,
    VerifyResponse, X402Version, header,
};

/// Where every benchmark's payments go.
pub const PAY_TO: &str = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";

/// The inner service: a fixed small body.
pub async fn inner(_request: Request<Full<Bytes>>) -> Result<Response<Full<Bytes>>, Infallible> {
    Ok(Response::new(Full::new(Bytes::from_static(b"the report"))))
}

/// What a metered request costs in the benchmarks: 0.25 USDC, set by [`inner_metered`].
pub const METERED_CHARGE: AtomicAmount = AtomicAmount(250_000);

/// The address [`InstantFacilitator`] lists in `/supported` for `upto` (its `facilitatorAddress`,
/// which `upto` payments name as their witness' `facilitator`).
pub const INSTANT_FACILITATOR_ADDRESS: &str = "0x1111111111111111111111111111111111111111";

/// The inner service of a metered route: sets the request's [`Charge`] to
/// [`METERED_CHARGE`], then answers as [`inner`] does.
pub async fn inner_metered(
    request: Request<Full<Bytes>>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    if let Some(charge) = request.extensions().get::<Charge>() {
        charge.set(METERED_CHARGE);
    }
    inner(request).await
}

/// Up to 1.00 USDC on `network` for `/report` (`upto`), settled after the inner service
/// answers, built for `facilitator`'s `/supported` (which must list `upto` on that network).
///
/// # Errors
///
/// The offer's, e.g. when the facilitator does not list `upto` on `network`.
pub async fn upto_offer<F: Facilitator>(
    network: &UsdcDeployment,
    facilitator: &F,
) -> Result<Arc<Offer>, tower_x402::pricing::OfferError> {
    Offer::builder(ResourceInfo::new("https://shop.example/report"))
        .usdc_upto(network, "1.00".parse().expect("price"), PAY_TO)
        .build_for(facilitator)
        .await
        .map(Arc::new)
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

/// The first SKU of the example store as the store sells it in demo mode, and the sign-in the
/// store registers on it: the store's own catalog code builds the offer (the resource with its
/// description and tags, the Base `exact` accept, settlement before the work, the `bazaar`
/// extension describing the answer), and the sign-in carries the store's origin and statement
/// (its secret is a fixed one here). Returns the SKU's path, its offer and the sign-in.
///
/// # Panics
///
/// When the store's catalog cannot be built.
pub async fn store_sku() -> (String, Arc<Offer>, tower_x402_siwx::SignInWithX) {
    use x402_store::catalog::Catalog;
    use x402_store::config::Config;
    use x402_store::paywall::doors::Doors;
    use x402_store::sales::purchase;

    // Not opened: the catalog is built from the settings alone.
    let config = Config::for_tests("sqlite::memory:");
    let doors = Doors::resolve(&config, Err("not asked"));
    let catalog = Catalog::build(&config, doors, true, async |sku| {
        purchase::response_example(&config, sku, true).await
    })
    .await
    .expect("the store's catalog");
    let sku = catalog.iter().next().expect("the store sells something");
    let path = sku
        .resource_url
        .strip_prefix(&config.base_url)
        .expect("the resource is under the base URL")
        .to_owned();
    let sign_in = tower_x402_siwx::SignInWithX::new(&config.origin(), [7_u8; 32])
        .expect("sign-in settings")
        .statement("Sign in with the wallet that paid to get your purchase again");
    (path, Arc::clone(&sku.offer), sign_in)
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
                network: request.payment_requirements().network.clone(),
                amount: Some(request.payment_requirements().amount),
                extensions: None,
                extra: None,
            })
        })
    }

    /// `exact` and `upto` on Base, `upto` with [`INSTANT_FACILITATOR_ADDRESS`].
    fn supported(&self) -> BoxFuture<'_, Result<Arc<SupportedResponse>, FacilitatorError>> {
        Box::pin(async {
            let kind = |scheme: &str, extra| SupportedKind {
                x402_version: X402Version::V2,
                scheme: scheme.to_owned(),
                network: Network::BASE,
                extra,
            };
            let mut upto = serde_json::Map::new();
            upto.insert(
                "facilitatorAddress".into(),
                INSTANT_FACILITATOR_ADDRESS.into(),
            );
            Ok(Arc::new(SupportedResponse {
                kinds: vec![kind("exact", None), kind(UPTO_SCHEME, Some(upto))],
                ..SupportedResponse::default()
            }))
        })
    }
}

/// A syntactically valid payment for `offer` with `nonce` as its EIP-3009 nonce; its signature
/// is not real (the instant facilitator and the load benchmark's stub do not check it).
pub fn unsigned_payment(offer: &Offer, nonce: u64) -> HeaderValue {
    let accepted = offer.accepts()[0].clone();
    let payload = PaymentPayload {
        x402_version: X402Version::V2,
        resource: Some(offer.resource().clone()),
        payload: serde_json::value::to_raw_value(&serde_json::json!({
            "signature": format!("0x{}", "ab".repeat(65)),
            "authorization": {
                "from": "0x857b06519E91e3A54538791bDbb0E22373e36b66",
                "to": accepted.pay_to,
                "value": accepted.amount,
                "validAfter": "0",
                "validBefore": "99999999999",
                "nonce": format!("0x{nonce:064x}"),
            }
        }))
        .expect("a JSON payload"),
        accepted,
        extensions: None,
    };
    header::encode(&payload).expect("encode")
}

/// A syntactically valid `upto` payment for `offer`'s first accept (which must be `upto`): a
/// Permit2 authorization of the accept's maximum with `nonce` as its Permit2 nonce and a
/// signature that is not real (the instant facilitator and the load benchmark's stub do not
/// check it).
pub fn unsigned_upto_payment(offer: &Offer, nonce: u64) -> HeaderValue {
    let accepted = offer.accepts()[0].clone();
    let facilitator = accepted
        .extra
        .as_ref()
        .and_then(|extra| extra.get("facilitatorAddress"))
        .cloned()
        .expect("an upto accept built for its facilitator");
    let payload = PaymentPayload {
        x402_version: X402Version::V2,
        resource: Some(offer.resource().clone()),
        payload: serde_json::value::to_raw_value(&serde_json::json!({
            "signature": format!("0x{}", "ab".repeat(65)),
            "permit2Authorization": {
                "from": "0x857b06519E91e3A54538791bDbb0E22373e36b66",
                "permitted": {"token": accepted.asset, "amount": accepted.amount},
                "spender": UPTO_PROXY_ADDRESS,
                "nonce": nonce.to_string(),
                "deadline": "99999999999",
                "witness": {"to": accepted.pay_to, "facilitator": facilitator, "validAfter": "0"},
            }
        }))
        .expect("a JSON payload"),
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

/// A hook observing every payment, as a metrics hook does: it counts the payments received and
/// settled, and takes part in no asynchronous stage but the settlement's end.
///
/// ```
/// use tower_x402::payment::Payments;
/// use tower_x402_benches::{InstantFacilitator, PaymentCounter};
///
/// let counter = PaymentCounter::default();
/// assert_eq!(counter.count(), 0);
/// let _payments = Payments::new(InstantFacilitator).hook(counter);
/// ```
#[derive(Debug, Default)]
pub struct PaymentCounter(AtomicU64);

impl PaymentCounter {
    /// The payments received and settled so far.
    pub fn count(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

impl PaymentHooks for PaymentCounter {
    fn stages(&self) -> HookStages {
        HookStages::AFTER_SETTLE
    }

    fn observe(&self, event: &PaymentEvent<'_>) {
        if let PaymentEvent::Received { .. } = event {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn after_settle<'a>(
        &'a self,
        _: &'a PaymentContext<'a>,
        _: &'a SettleResponse,
    ) -> BoxFuture<'a, ()> {
        self.0.fetch_add(1, Ordering::Relaxed);
        Box::pin(std::future::ready(()))
    }
}
