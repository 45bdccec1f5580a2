//! The measured app: a bare route and the same handler behind the layer, in both settlement
//! modes and metered (`upto`), paid through the stub facilitator over loopback HTTP, and
//! `/channel` paid with payment-channel vouchers (its own layer, so the other routes' path is
//! unchanged by the channel scheme's hooks).

use std::sync::Arc;

use axum::Router;
use axum::routing::get;
use bytes::Bytes;
use http::StatusCode;
use http::header::{
    ACCESS_CONTROL_EXPOSE_HEADERS, CACHE_CONTROL, CONTENT_TYPE, HeaderName, HeaderValue,
};
use tower_x402::Offer;
use tower_x402::{Charge, HttpFacilitator, SettlementMode, X402Layer};
use tower_x402_benches::{METERED_CHARGE, offer_with, upto_offer};
use x402_wire::{UsdcDeployment, header};

use crate::channel;
use crate::parts::{Part, PlainClient};

/// The paid route settled after the handler answers; unpaid, it is the 402 path.
pub(crate) const PAID_AFTER: &str = "/paid/after";
/// The paid route settled after the handler answers, at the path the peers' apps use, so that
/// this app run as a process of its own (`x402-load app`) is measured as they are.
pub(crate) const PAID: &str = "/paid";
/// The paid route settled before the handler runs.
pub(crate) const PAID_BEFORE: &str = "/paid/before";
/// The paid route metered (`upto`): the buyer signs up to 1.00 USDC, the handler charges
/// 0.25 USDC, settled after it answers.
pub(crate) const PAID_UPTO: &str = "/paid/upto";
/// The same handler without the layer.
pub(crate) const BARE: &str = "/bare";
/// A handler writing, without the layer, the very response the layer's 402 is: what the bytes
/// of a challenge cost on the wire, apart from the layer's work.
pub(crate) const BARE_402: &str = "/bare/402";

async fn handler() -> &'static str {
    "the report"
}

/// The same handler, charging [`METERED_CHARGE`] for it.
async fn metered(charge: Charge) -> &'static str {
    charge.set(METERED_CHARGE);
    handler().await
}

/// The app's router, paying through the facilitator at the base URL `facilitator` with the
/// paid path's `part` replaced (its `/supported` is read once, for the metered offer, and once
/// for the channel's, which pays through a facilitator client of its own).
pub(crate) async fn router(facilitator: &str, part: Part) -> Result<Router, String> {
    let channels = HttpFacilitator::new(facilitator)
        .map_err(|error| format!("facilitator client: {error}"))?;
    let channels = channel::routes(&std::sync::Arc::new(channels)).await?;
    let client = part
        .deadlines(HttpFacilitator::builder(facilitator).http2(part.http2()))
        .build()
        .map_err(|error| format!("facilitator client: {error}"))?;
    let after = offer_with(&UsdcDeployment::BASE, SettlementMode::After);
    let before = offer_with(&UsdcDeployment::BASE, SettlementMode::Before);
    let upto = upto_offer(&UsdcDeployment::BASE, &client)
        .await
        .map_err(|error| format!("metered offer: {error}"))?;
    // The stub's facilitator in this process, its `/stats` served beside the routes.
    let in_process = part.facilitator_in_process().then(crate::stub::facilitator);
    let payments = match &in_process {
        Some(facilitator) => part.core(facilitator.clone()),
        None if part.reqwest_plain() => part.core(PlainClient::new(facilitator)?),
        None => part.core(client),
    };
    let payments = part.apply(payments);
    let challenge = challenge_response(&after)?;
    let pricing = move |parts: &http::request::Parts| match parts.uri.path() {
        PAID_AFTER | PAID => Some(after.clone()),
        PAID_BEFORE => Some(before.clone()),
        PAID_UPTO => Some(upto.clone()),
        _ => None,
    };
    let bare_402 = move || {
        let challenge = challenge.clone();
        async move { challenge }
    };
    let paid = Router::new()
        .route(PAID_AFTER, get(handler))
        .route(PAID, get(handler))
        .route(PAID_BEFORE, get(handler))
        .route(PAID_UPTO, get(metered))
        .layer(X402Layer::with_payments(payments, pricing));
    let router = Router::new()
        .route(BARE, get(handler))
        .route(BARE_402, get(bare_402))
        .merge(paid)
        .merge(channels);
    Ok(match in_process {
        Some(facilitator) => router.merge(crate::stub::stats(facilitator, Arc::default())),
        None => router,
    })
}

/// The status, headers and body of the layer's 402 for `offer`, as a handler can return them.
fn challenge_response(
    offer: &Offer,
) -> Result<(StatusCode, [(HeaderName, HeaderValue); 4], Bytes), String> {
    let required = offer.payment_required();
    let header = header::encode(required).map_err(|error| error.to_string())?;
    let body = serde_json::to_vec(required).map_err(|error| error.to_string())?;
    Ok((
        StatusCode::PAYMENT_REQUIRED,
        [
            (CONTENT_TYPE, HeaderValue::from_static("application/json")),
            (CACHE_CONTROL, HeaderValue::from_static("no-store")),
            (
                ACCESS_CONTROL_EXPOSE_HEADERS,
                HeaderValue::from_static("PAYMENT-REQUIRED, PAYMENT-RESPONSE"),
            ),
            (HeaderName::from_static("payment-required"), header),
        ],
        Bytes::from(body),
    ))
}
