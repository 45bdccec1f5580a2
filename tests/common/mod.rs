//! What the layer tests share: the sandbox facilitator scripted to trust the tests' made-up
//! signatures, run in process or served over HTTP on loopback, and helpers to build offers,
//! payments and requests.
#![allow(dead_code, unreachable_pub, missing_docs)]

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use serde_json::json;
use tower_x402::{Offer, SettlementMode, VerifiedPayment};
pub use tower_x402_sandbox::{SandboxFacilitator, Step};
use x402_wire::{
    PaymentPayload, PaymentRequired, ResourceInfo, SettleResponse, UsdcDeployment, X402Version,
    header,
};

pub const PAY_TO: &str = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";
pub const PAYER: &str = "0x857b06519E91e3A54538791bDbb0E22373e36b66";

/// A sandbox facilitator that answers every `/verify` with `verify` and every `/settle` with
/// `settle`; [`Step::Trust`] accepts the made-up signatures of [`payment`].
pub fn scripted(verify: Step, settle: Step) -> SandboxFacilitator {
    SandboxFacilitator::new()
        .with_verify(verify)
        .with_settle(settle)
}

/// A facilitator that verifies and settles every well-formed payment, each nonce once.
pub fn accepting() -> SandboxFacilitator {
    scripted(Step::Trust, Step::Trust)
}

/// Serves `facilitator` over HTTP on 127.0.0.1 and returns the base URL.
pub async fn serve(facilitator: &SandboxFacilitator) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(facilitator.clone().serve(listener));
    format!("http://{addr}")
}

/// An offer for `url` at one dollar on Base, settled in `mode`.
pub fn offer(url: &str, mode: SettlementMode) -> Arc<Offer> {
    Arc::new(
        Offer::builder(ResourceInfo::new(url))
            .usdc(&UsdcDeployment::BASE, "1.00".parse().unwrap(), PAY_TO)
            .settlement(mode)
            .build()
            .unwrap(),
    )
}

/// A payment for `offer`'s first accept, with a distinct EIP-3009 nonce per `seed`.
/// The signature is not real: a facilitator scripted with [`Step::Trust`] does not read it.
pub fn payment(offer: &Offer, seed: u8) -> PaymentPayload {
    let accepted = offer.accepts()[0].clone();
    PaymentPayload {
        x402_version: X402Version::V2,
        resource: Some(offer.resource().clone()),
        payload: serde_json::value::to_raw_value(&json!({
            "signature": format!("0x{}", "ab".repeat(65)),
            "authorization": {
                "from": PAYER,
                "to": accepted.pay_to,
                "value": accepted.amount,
                "validAfter": "0",
                "validBefore": "99999999999",
                "nonce": format!("0x{}", format!("{seed:02x}").repeat(32)),
            }
        }))
        .expect("a JSON payload"),
        accepted,
        extensions: None,
    }
}

pub fn payment_header(payload: &PaymentPayload) -> http::HeaderValue {
    header::encode(payload).unwrap()
}

pub fn get(uri: &str) -> Request<Full<Bytes>> {
    Request::get(uri).body(Full::default()).unwrap()
}

pub fn paid_get(uri: &str, payload: &PaymentPayload) -> Request<Full<Bytes>> {
    Request::get(uri)
        .header("payment-signature", payment_header(payload))
        .body(Full::default())
        .unwrap()
}

/// The inner service of most tests: echoes what the layer told it about the payment.
pub async fn echo_payment(
    request: Request<Full<Bytes>>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let payment = request.extensions().get::<VerifiedPayment>();
    let body = json!({
        "paid": payment.is_some(),
        "settled": payment.and_then(|p| p.settlement.as_ref()).is_some(),
        "replayed": payment.is_some_and(|p| p.replayed),
        "payer": payment.and_then(|p| p.payer.clone()),
    });
    Ok(Response::new(Full::new(Bytes::from(body.to_string()))))
}

pub async fn body_json<B>(response: Response<B>) -> serde_json::Value
where
    B: http_body::Body,
    B::Error: std::fmt::Debug,
{
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| panic!("not JSON: {}", String::from_utf8_lossy(&bytes)))
}

pub fn decode_required<B>(response: &Response<B>) -> PaymentRequired {
    header::decode(response.headers()["payment-required"].as_bytes()).unwrap()
}

pub fn decode_settlement<B>(response: &Response<B>) -> SettleResponse {
    header::decode(response.headers()["payment-response"].as_bytes()).unwrap()
}
