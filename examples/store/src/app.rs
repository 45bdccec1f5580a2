//! The router: every path the store answers is mounted here, with the middleware around them.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{Extensions, HeaderMap, Method, StatusCode, Uri, Version, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Extension, Router, middleware};
use tower_http::compression::CompressionLayer;
use tower_http::compression::predicate::{DefaultPredicate, Predicate as _};
use tower_http::cors::{Any, CorsLayer};
use tower_http::limit::RequestBodyLimitLayer;
use tower_http::timeout::TimeoutLayer;

use crate::catalog::PAID_PATH_PREFIX;
use crate::config::Config;
use crate::documents::{bazaar, bazaar_page, caching, llms_txt, openapi, well_known};
use crate::http_errors::json_error;
use crate::sales::{fulfillment, passport};
use crate::state::AppState;
use crate::{discovery, http_errors, mcp, paywall, request_log};

/// Largest request body read by the routes that take one (`POST /mcp`, `POST /api/discovery`).
/// The paid GET ignores its body, so the limit does not stand between it and its 402.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// The whole service: every path the store answers is mounted here.
pub fn app(state: AppState) -> Router {
    // The catalog documents are public data meant for any client, browsers included.
    let open_cors = CorsLayer::new()
        .allow_origin(Any)
        .allow_methods([Method::GET])
        .allow_headers([header::CONTENT_TYPE]);
    let catalog_documents = Router::new()
        .route("/.well-known/x402.json", get(well_known::x402_json))
        .route("/.well-known/x402", get(well_known::x402_list))
        .route("/.well-known/mcp.json", get(mcp::manifest))
        .route("/openapi.json", get(openapi::document))
        .route("/api/bazaar", get(bazaar::catalog_json))
        .route("/llms.txt", get(llms_txt::llms_txt))
        .layer(middleware::from_fn(caching::etag))
        .layer(open_cors);
    // Only these routes read a request body; cap it.
    let with_bodies = Router::new()
        .route(
            "/mcp",
            post(mcp::handle)
                .get(mcp::describe)
                .fallback(mcp::method_not_allowed),
        )
        .route("/discovery", get(discovery::probed_map))
        .route(
            "/api/discovery",
            get(discovery::probed_map).post(discovery::announce),
        )
        .layer(Extension(Arc::new(discovery::Memory::default())))
        .layer(RequestBodyLimitLayer::new(MAX_BODY_BYTES));

    // Every route but the paid one has a request deadline; a payment being settled is never
    // abandoned halfway (the facilitator client's timeouts bound it).
    let free = Router::new()
        .merge(catalog_documents)
        .merge(with_bodies)
        .route("/api/passport/{id}", get(passport::verify))
        .route(
            "/api/fulfillment/{passport}/{file}",
            get(fulfillment::download),
        )
        .route("/", get(landing))
        .route("/bazaar", get(bazaar_page::page))
        .route("/bazaar/style.css", get(bazaar_page::stylesheet))
        .route("/bazaar/filter.js", get(bazaar_page::filter_script))
        .route("/bazaar/{sku}", get(bazaar_page::product))
        .route("/.well-known/did.json", get(well_known::did_json))
        .layer(TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            state.config.limits.request_timeout,
        ));

    // Each product's own path is a route of its own (the router resolves it without reading a
    // parameter out of the path); the parameter route takes every other spelling: a
    // percent-encoded slug, or an unknown product, which the paywall answers 404.
    let paid = paywall::paid_get(&state);
    let mut router = Router::new().merge(free);
    for sku in state.catalog.iter() {
        router = router.route(&format!("{PAID_PATH_PREFIX}{}", sku.slug), paid.clone());
    }
    router
        .route("/api/x402/{sku}", paid)
        .fallback(not_found)
        // JSON bodies for the errors the router and middleware write (405, 408, 413, 431).
        .layer(middleware::from_fn(http_errors::json_errors))
        // gzip for clients that ask for it (the catalog documents are 100–200 KB of JSON).
        .layer(CompressionLayer::new().compress_when(compressible.and(DefaultPredicate::new())))
        // One span per request, with method, redacted URI, status and latency.
        .layer(request_log::layer())
        .with_state(state)
}

/// Whether an answer may be compressed, beside tower-http's default rule: a 402 only when it is
/// the paywall page (HTML). A 402's JSON body (about 2 KB) repeats the challenge that its
/// `PAYMENT-REQUIRED` header carries uncompressed anyway, and setting up gzip for every such
/// answer would cost more than the bytes it saves; uncompressed, it does not vary on
/// `Accept-Encoding` either.
fn compressible(status: StatusCode, _: Version, headers: &HeaderMap, _: &Extensions) -> bool {
    status != StatusCode::PAYMENT_REQUIRED
        || headers
            .get(header::CONTENT_TYPE)
            .is_some_and(|kind| kind.as_bytes().starts_with(b"text/html"))
}

/// The free routes a trailing slash is redirected to (`/bazaar/` → `/bazaar`). Product paths are
/// not among them: a product is sold at exactly one path, and any other spelling is a 404.
const FREE_ROUTES: [&str; 11] = [
    "/bazaar",
    "/api/bazaar",
    "/openapi.json",
    "/llms.txt",
    "/mcp",
    "/discovery",
    "/api/discovery",
    "/.well-known/x402.json",
    "/.well-known/x402",
    "/.well-known/mcp.json",
    "/.well-known/did.json",
];

/// `/`: a person opening the store's origin lands on the storefront.
async fn landing(State(config): State<Arc<Config>>) -> Response {
    Redirect::temporary(&format!("{}/bazaar", config.base_url)).into_response()
}

/// Unknown paths: a free route spelled with trailing slashes is redirected (308, query kept) to
/// its one spelling under the public base URL; anything else is a JSON 404.
async fn not_found(State(config): State<Arc<Config>>, uri: Uri) -> Response {
    let path = uri.path();
    let trimmed = path.trim_end_matches('/');
    if trimmed.len() < path.len() && FREE_ROUTES.contains(&trimmed) {
        let base = &config.base_url;
        let target = match uri.query() {
            Some(query) => format!("{base}{trimmed}?{query}"),
            None => format!("{base}{trimmed}"),
        };
        return Redirect::permanent(&target).into_response();
    }
    json_error(StatusCode::NOT_FOUND, "no such route")
}
