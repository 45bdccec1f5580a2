//! The measured app: a bare route and the same handler behind the layer, in both settlement
//! modes, paid through the stub facilitator over loopback HTTP.

use std::net::SocketAddr;

use axum::Router;
use axum::routing::get;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use tower_x402::proto::UsdcDeployment;
use tower_x402::{HttpFacilitator, SettlementMode, X402Layer};
use tower_x402_benches::{offer_with, unsigned_payment};

/// The paid route settled after the handler answers; unpaid, it is the 402 path.
pub(crate) const PAID_AFTER: &str = "/paid/after";
/// The paid route settled before the handler runs.
pub(crate) const PAID_BEFORE: &str = "/paid/before";
/// The same handler without the layer.
pub(crate) const BARE: &str = "/bare";

async fn handler() -> &'static str {
    "the report"
}

/// The app's router, paying through the facilitator at `facilitator`.
pub(crate) fn router(facilitator: SocketAddr) -> Result<Router, String> {
    let client = HttpFacilitator::new(format!("http://{facilitator}"))
        .map_err(|error| format!("facilitator client: {error}"))?;
    let after = offer_with(&UsdcDeployment::BASE, SettlementMode::After);
    let before = offer_with(&UsdcDeployment::BASE, SettlementMode::Before);
    let pricing = move |parts: &http::request::Parts| match parts.uri.path() {
        PAID_AFTER => Some(after.clone()),
        PAID_BEFORE => Some(before.clone()),
        _ => None,
    };
    let paid = Router::new()
        .route(PAID_AFTER, get(handler))
        .route(PAID_BEFORE, get(handler))
        .layer(X402Layer::new(client, pricing));
    Ok(Router::new().route(BARE, get(handler)).merge(paid))
}

/// A payment header for `mode`'s route and where, in it, wrk's script rewrites the nonce: the
/// 1-based index of 16 base64 characters that encode 12 of the nonce's hex digits.
pub(crate) fn payment_template(mode: SettlementMode) -> Result<(String, usize), String> {
    let offer = offer_with(&UsdcDeployment::BASE, mode);
    let header = unsigned_payment(&offer, 0);
    let json = STANDARD
        .decode(header.as_bytes())
        .map_err(|error| format!("payment header: {error}"))?;
    let nonce = format!("\"0x{}\"", "0".repeat(64));
    let at = json
        .windows(nonce.len())
        .position(|window| window == nonce.as_bytes())
        .ok_or("the nonce is not in the payment")?
        + 3;
    let aligned = at.div_ceil(3) * 3;
    let text = String::from_utf8_lossy(header.as_bytes()).into_owned();
    Ok((text, aligned / 3 * 4 + 1))
}
