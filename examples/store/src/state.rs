//! The application state and how it is built at start-up.
//!
//! Handlers never take the whole [`AppState`]: each extracts the parts it uses as axum
//! substates (`State<Arc<Catalog>>`, `State<Store>`, `State<Arc<Config>>`, `State<Standing>`, …),
//! which [`FromRef`] derives for every field.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::FromRef;
use tower_x402::evm_rpc::EvmRpcReconciler;
use tower_x402::pricing::OfferError;
use tower_x402::settlement::Reconciler;
use tower_x402::{Facilitator, HttpFacilitator};
use tower_x402_sandbox::SandboxFacilitator;

use crate::catalog::{Catalog, Sku};
use crate::config::Config;
use crate::discovery;
use crate::documents::prebuilt::Prebuilt;
use crate::documents::{openapi, well_known};
use crate::paywall::doors::Doors;
use crate::sales::purchase;
use crate::sales::standing::Standing;
use crate::storage::Store;

/// How long start-up waits for the facilitator's `/supported`.
const SUPPORTED_TIMEOUT: Duration = Duration::from_secs(5);

/// Everything the handlers share; cheap to clone. Each field is a substate a handler can
/// extract on its own.
#[derive(Clone, FromRef)]
pub struct AppState {
    /// The settings.
    pub config: Arc<Config>,
    /// The products and their offers (and whether they are paid in demo mode).
    pub catalog: Arc<Catalog>,
    /// Orders, Passports and settlement records.
    pub store: Store,
    /// The funnel counters.
    pub standing: Standing,
    /// The catalog documents serialized once at start-up.
    pub documents: Arc<Prebuilt>,
    /// Verifies and settles payments.
    pub facilitator: Arc<dyn Facilitator>,
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
            .field("demo", &self.catalog.is_demo())
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

/// Builds the state with a given facilitator (`demo`: payments settle in the in-process
/// sandbox): opens the database, asks the facilitator's `/supported` which doors can open, and
/// builds every offer.
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
    let example = async |sku: &Sku| purchase::response_example(&config, sku, demo).await;
    let schema = purchase::response_schema();
    let catalog = Catalog::build(&config, doors, demo, &schema, example).await?;
    let http = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(2))
        .timeout(discovery::PROBE_TIMEOUT)
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(concat!("tower-x402-store/", env!("CARGO_PKG_VERSION")))
        .build()?;
    let documents = Arc::new(Prebuilt::new(
        &well_known::catalog_v2(&config, &catalog),
        &openapi::build(&config, &catalog, demo),
    ));
    Ok(AppState {
        documents,
        standing: Standing::new(store.clone(), demo),
        config: Arc::new(config),
        catalog: Arc::new(catalog),
        store,
        facilitator,
        reconciler,
        http,
    })
}
