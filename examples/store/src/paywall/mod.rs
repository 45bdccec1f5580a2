//! `GET /api/x402/{sku}`: the purchase handler behind the x402 paywall.
//!
//! The price of a request is decided from its path alone: the last segment, percent-decoded
//! exactly as axum's `Path` extractor decodes it for the handler, names the product. So every
//! spelling the handler would read as a known slug (`store-rail%2Dreceipt`) is priced, and a
//! slug the catalog does not know is not priced and answered 404 here, before the handler —
//! an unknown product never gets a challenge and a known one never runs unpaid. The request
//! body is never looked at, so a body on the GET cannot stand between a client and its 402.
//!
//! Payments settle before the handler runs ([`SettlementMode::Before`](tower_x402::SettlementMode)),
//! because the handler issues a Passport: that must never happen without the money.

use axum::extract::Request;
use axum::handler::Handler;
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::{MethodRouter, get};
use tower::ServiceBuilder;
use tower_x402::{VerifiedPayment, X402Layer};

use crate::app::{AppState, json_error};
use crate::sales::purchase::purchase;

pub mod doors;

/// The paid GET (mounted at `/api/x402/{sku}` by the app): the purchase handler behind the
/// paywall, priced from `state.catalog`, recording settlements in `state.store` and reporting
/// payment events to `state.standing`.
pub fn paid_get(state: &AppState) -> MethodRouter<AppState> {
    let catalog = state.catalog.clone();
    let pricing = move |parts: &Parts| {
        catalog
            .for_path(parts.uri.path())
            .map(|sku| sku.offer.clone())
    };
    let paywall = X402Layer::new(state.facilitator.clone(), pricing)
        .settlement_store(state.store.clone())
        .events(state.standing.clone());
    // The paywall wraps the handler only (not the method router), so other methods get 405.
    let handler = purchase.layer(
        ServiceBuilder::new()
            .layer(paywall)
            .layer(middleware::from_fn(only_paid)),
    );
    get(handler)
}

/// Lets through only requests the paywall has seen paid. The paywall passes a request on
/// unpaid only when pricing found no product, so everything else here is an unknown SKU.
async fn only_paid(request: Request, next: Next) -> Response {
    if request.extensions().get::<VerifiedPayment>().is_some() {
        next.run(request).await
    } else {
        json_error(
            StatusCode::NOT_FOUND,
            "unknown SKU: no product is sold at this path",
        )
    }
}
