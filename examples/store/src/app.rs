//! The application: shared state, how it is built at start-up, and the router.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router, middleware};
use tower_http::compression::CompressionLayer;
use tower_http::cors::{Any, CorsLayer};
use tower_http::limit::RequestBodyLimitLayer;
use tower_http::timeout::TimeoutLayer;
use tower_x402::evm_rpc::EvmRpcReconciler;
use tower_x402::layer::pricing::OfferError;
use tower_x402::layer::settlement::Reconciler;
use tower_x402::sandbox::SandboxFacilitator;
use tower_x402::{Facilitator, HttpFacilitator};

use crate::catalog::Catalog;
use crate::config::Config;
use crate::documents::prebuilt::Prebuilt;
use crate::documents::{bazaar, bazaar_page, caching, llms_txt, openapi, well_known};
use crate::paywall::doors::Doors;
use crate::sales::{fulfillment, passport, standing};
use crate::storage::Store;
use crate::{discovery, http_errors, mcp, paywall, request_log};

/// Largest request body read by the routes that take one (`POST /mcp`, `POST /api/discovery`).
/// The paid GET ignores its body, so the limit does not stand between it and its 402.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// How long start-up waits for the facilitator's `/supported`.
const SUPPORTED_TIMEOUT: Duration = Duration::from_secs(5);

/// Everything a handler needs; cheap to clone.
#[derive(Clone)]
pub struct AppState {
    /// The settings.
    pub config: Arc<Config>,
    /// The products and their offers.
    pub catalog: Arc<Catalog>,
    /// Orders, Passports and settlement records.
    pub store: Store,
    /// The funnel counters.
    pub standing: standing::Standing,
    /// The catalog documents serialized once at start-up.
    pub documents: Arc<Prebuilt>,
    /// Verifies and settles payments.
    pub facilitator: Arc<dyn Facilitator>,
    /// Whether payments go through the in-process sandbox.
    pub demo: bool,
    /// Tells whether a payment in doubt settled: the sandbox in demo mode, the JSON-RPC node of
    /// `STORE_RPC_URL` otherwise, or nobody.
    pub reconciler: Option<Arc<dyn Reconciler>>,
    /// Outbound HTTP for discovery probes and announcements: short timeouts, no redirects.
    pub http: reqwest::Client,
}

impl std::fmt::Debug for AppState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppState")
            .field("config", &self.config)
            .field("demo", &self.demo)
            .finish_non_exhaustive()
    }
}

/// Why the store could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    /// The database could not be opened or migrated.
    #[error("STORE_DATABASE_URL: {0}")]
    Storage(String),
    /// The facilitator client could not be built.
    #[error("STORE_FACILITATOR_URL / STORE_FACILITATOR_BEARER: {0}")]
    Facilitator(#[from] tower_x402::facilitator::FacilitatorConfigError),
    /// A product's offer could not be built.
    #[error("catalog: {0}")]
    Offer(#[from] OfferError),
    /// The JSON-RPC endpoint is not an http(s) URL.
    #[error("STORE_RPC_URL: {0}")]
    Rpc(#[from] tower_x402::evm_rpc::InvalidRpcUrl),
    /// The outbound HTTP client could not be built.
    #[error("outbound HTTP client: {0}")]
    Http(#[from] reqwest::Error),
}

/// Builds the state from `config`: the in-process sandbox facilitator in demo mode, an external
/// one when `STORE_FACILITATOR_URL` is set.
///
/// # Errors
///
/// See [`build_state_with`].
pub async fn build_state(config: Config) -> Result<AppState, StartupError> {
    match &config.facilitator_url {
        Some(url) => {
            let mut builder = HttpFacilitator::builder(url.clone());
            if let Some(token) = &config.facilitator_bearer {
                builder = builder.bearer(token.clone());
            }
            let facilitator = builder.build()?;
            build_state_with(config, Arc::new(facilitator), false).await
        }
        None => {
            let sandbox = SandboxFacilitator::new();
            let mut state = build_state_with(config, Arc::new(sandbox.clone()), true).await?;
            state.reconciler = Some(Arc::new(sandbox));
            Ok(state)
        }
    }
}

/// Builds the state with a given facilitator: opens the database, asks the facilitator's
/// `/supported` which doors can open, and builds every offer.
///
/// # Errors
///
/// The database cannot be opened, or an offer cannot be built. A failing `/supported` is not
/// an error: the doors that depend on it stay closed and a warning is logged.
pub async fn build_state_with(
    mut config: Config,
    facilitator: Arc<dyn Facilitator>,
    demo: bool,
) -> Result<AppState, StartupError> {
    let store = Store::open_with_timeout(&config.database_url, config.database_timeout)
        .await
        .map_err(|e| StartupError::Storage(e.to_string()))?;
    if config.fulfillment_secret.is_none() {
        let secret = store
            .fulfillment_secret()
            .await
            .map_err(|e| StartupError::Storage(e.to_string()))?;
        config.fulfillment_secret = Some(secret.into_bytes());
    }
    let supported = match tokio::time::timeout(SUPPORTED_TIMEOUT, facilitator.supported()).await {
        Ok(Ok(supported)) => Ok(supported),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no answer within {SUPPORTED_TIMEOUT:?}")),
    };
    if let Err(reason) = &supported {
        tracing::warn!(%reason, "facilitator /supported failed: the doors that need it stay closed");
    }
    let reconciler: Option<Arc<dyn Reconciler>> = match &config.rpc_url {
        Some(url) => Some(Arc::new(EvmRpcReconciler::new(url)?)),
        None => {
            if !demo {
                tracing::warn!(
                    "STORE_RPC_URL is unset: a payment whose settlement answer is lost stays in doubt (503) until the facilitator settles it on a retry or an operator does"
                );
            }
            None
        }
    };
    let doors = Doors::resolve(&config, supported.as_deref().map_err(String::as_str));
    let catalog = Catalog::build(&config, doors, demo).await?;
    let http = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(2))
        .timeout(discovery::PROBE_TIMEOUT)
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(concat!("tower-x402-store/", env!("CARGO_PKG_VERSION")))
        .build()?;
    let documents = Arc::new(Prebuilt::build(&config, &catalog, demo));
    Ok(AppState {
        documents,
        standing: standing::Standing::new(store.clone(), demo),
        config: Arc::new(config),
        catalog: Arc::new(catalog),
        store,
        facilitator,
        demo,
        reconciler,
        http,
    })
}

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

    Router::new()
        .merge(free)
        .route("/api/x402/{sku}", paywall::paid_get(&state))
        .fallback(not_found)
        // JSON bodies for the errors the router and middleware write (405, 408, 413, 431).
        .layer(middleware::from_fn(http_errors::json_errors))
        // gzip for clients that ask for it (the catalog documents are 100–200 KB of JSON).
        .layer(CompressionLayer::new())
        // One span per request, with method, redacted URI, status and latency.
        .layer(request_log::layer())
        .with_state(state)
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
async fn landing(State(state): State<AppState>) -> Response {
    Redirect::temporary(&format!("{}/bazaar", state.config.base_url)).into_response()
}

/// Unknown paths: a free route spelled with trailing slashes is redirected (308, query kept) to
/// its one spelling under the public base URL; anything else is a JSON 404.
async fn not_found(State(state): State<AppState>, uri: Uri) -> Response {
    let path = uri.path();
    let trimmed = path.trim_end_matches('/');
    if trimmed.len() < path.len() && FREE_ROUTES.contains(&trimmed) {
        let base = &state.config.base_url;
        let target = match uri.query() {
            Some(query) => format!("{base}{trimmed}?{query}"),
            None => format!("{base}{trimmed}"),
        };
        return Redirect::permanent(&target).into_response();
    }
    json_error(StatusCode::NOT_FOUND, "no such route")
}

/// The store's one error answer: `{"error": message}` with `status` and
/// `Cache-Control: no-store` (an error is never worth caching).
pub fn json_error(status: StatusCode, message: impl Into<String>) -> Response {
    let mut response = (status, Json(serde_json::json!({"error": message.into()}))).into_response();
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}
