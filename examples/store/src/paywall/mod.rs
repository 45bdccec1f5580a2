//! `GET /api/x402/{sku}`: the purchase handler behind the x402 paywall.
//!
//! The price of a request is decided from its path alone: the last segment, percent-decoded
//! exactly as axum's `Path` extractor decodes it for the handler, names the product. So every
//! spelling the handler would read as a known slug (`store-rail%2Dreceipt`) is priced, and a
//! slug the catalog does not know is [`Price::NotSold`]: the paywall answers 404 itself and the
//! handler never runs — an unknown product never gets a challenge and a known one never runs
//! unpaid. The request body is never looked at, so a body on the GET cannot stand between a
//! client and its 402.
//!
//! An unusable `PAYMENT-SIGNATURE` (not base64, not JSON, not version 2, too large) is answered
//! 402 with the challenge whose `error` says what was wrong with the header, as the
//! specification's error table and the reference servers do.
//!
//! Payments settle before the handler runs ([`SettlementMode::Before`](tower_x402::SettlementMode)),
//! because the handler issues a Passport: that must never happen without the money.

use std::sync::Arc;
use std::time::Duration;

use axum::handler::Handler;
use axum::http::request::Parts;
use axum::http::{HeaderName, HeaderValue};
use axum::routing::{MethodRouter, get};
use tower_http::cors::CorsLayer;
use tower_x402::cors::PAYMENT_REQUEST_HEADERS;
use tower_x402::layer::InvalidHeaderStatus;
use tower_x402::{PaywallPage, Price, X402Layer, payment_cors};

use crate::app::AppState;
use crate::sales::purchase::purchase;

pub mod doors;

/// The paid GET (mounted at `/api/x402/{sku}` by the app): the purchase handler behind the
/// paywall, priced from `state.catalog`, recording settlements in `state.store` and reporting
/// payment events to `state.standing`.
pub fn paid_get(state: &AppState) -> MethodRouter<AppState> {
    let catalog = state.catalog.clone();
    let pricing = move |parts: &Parts| match catalog.for_path(parts.uri.path()) {
        Some(sku) => Price::Charge(sku.offer.clone()),
        None => Price::not_found("unknown SKU: no product is sold at this path"),
    };
    let checkout = state.catalog.clone();
    let config = state.config.clone();
    let site_name = if state.demo {
        "x402 example store — demo mode: sandbox payments, no real money"
    } else {
        "x402 example store"
    };
    let page = PaywallPage::new()
        .site_name(site_name)
        .checkout(move |offer| {
            let slug = offer.resource().url.rsplit('/').next()?;
            let sku = checkout.get(slug)?;
            config.checkout_link(&sku.slug)
        });
    let mut paywall = X402Layer::new(state.facilitator.clone(), pricing)
        .settlement_store(state.store.clone())
        .settlement_lease(Duration::from_secs(state.config.settlement_lease))
        // The specification's answer to a paid resource requested without a valid payment.
        .invalid_header_status(InvalidHeaderStatus::PaymentRequired)
        .events(state.standing.clone())
        .paywall_page(page);
    if let Some(reconciler) = &state.reconciler {
        paywall = paywall.reconciler(Arc::clone(reconciler));
    }
    // The paywall wraps the handler only (not the method router), so other methods get 405;
    // CORS wraps the method router, so the preflight (OPTIONS) is answered before it.
    get(purchase.layer(paywall)).layer(cors(&state.config.cors_origins))
}

/// Any origin may pay unless `STORE_CORS_ORIGINS` names the allowed ones; pages may send the
/// referral header beside the payment's.
fn cors(origins: &[String]) -> CorsLayer {
    let headers: Vec<HeaderName> = PAYMENT_REQUEST_HEADERS
        .into_iter()
        .chain([crate::sales::referral::HEADER])
        .collect();
    let cors = payment_cors().allow_headers(headers);
    if origins.is_empty() {
        return cors;
    }
    let allowed: Vec<HeaderValue> = origins
        .iter()
        .filter_map(|origin| HeaderValue::try_from(origin.as_str()).ok())
        .collect();
    cors.allow_origin(allowed)
}
