//! The application state and how it is built at start-up.
//!
//! Handlers never take the whole [`AppState`]: each extracts the parts it uses as axum
//! substates (`State<Arc<Catalog>>`, `State<Store>`, `State<Arc<Config>>`, `State<Standing>`, …),
//! which [`FromRef`] derives for every field.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::FromRef;
use tower_x402::facilitator::Facilitators;
use tower_x402::pricing::OfferError;
use tower_x402::settlement::Reconciler;
use tower_x402::{Facilitator, HttpFacilitator};
use tower_x402_evm::{AccountCode, EvmRpcReconciler};
use tower_x402_sandbox::SandboxFacilitator;
use tower_x402_solana::SolanaRpcReconciler;

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
    /// The most preferred facilitator.
    pub facilitator: Arc<dyn Facilitator>,
    /// Verify and settle payments, in order of preference.
    pub facilitators: Facilitators,
    /// Tells whether a payment in doubt settled: the sandbox in demo mode, the JSON-RPC node of
    /// `STORE_RPC_URL` otherwise, or nobody.
    pub reconciler: Option<Arc<dyn Reconciler>>,
    /// Tells a contract wallet from a key's account, for the EVM `exact` signature check: the
    /// sandbox's chain in demo mode, the JSON-RPC node of `STORE_RPC_URL` otherwise, or nobody
    /// (a signature that is not its payer's key's then goes to the facilitator).
    pub account_code: Option<Arc<dyn AccountCode>>,
    /// Outbound HTTP for discovery probes and announcements: short timeouts, no redirects.
    pub http: reqwest::Client,
    /// The paywall's payment core, once the app is built: on shutdown the process waits for the
    /// settlements it still runs (a buyer who hung up mid-settlement).
    pub payments: PaymentsInProgress,
}

/// Where the paywall leaves its payment core for the shutdown to wait on.
#[derive(Clone, Debug, Default)]
pub struct PaymentsInProgress(Arc<std::sync::OnceLock<Arc<tower_x402::payment::Payments>>>);

impl PaymentsInProgress {
    /// Keeps `payments` (the first one given; the paywall is built once).
    pub fn keep(&self, payments: Arc<tower_x402::payment::Payments>) {
        let _ = self.0.set(payments);
    }

    /// Resolves once no payment is being verified or settled (at once before any was kept).
    pub async fn until_idle(&self) {
        if let Some(payments) = self.0.get() {
            payments.until_idle().await;
        }
    }
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
    Rpc(#[from] tower_x402_evm::InvalidRpcUrl),
    /// The Solana JSON-RPC endpoint is not an http(s) URL.
    #[error("STORE_SOLANA_RPC_URL: {0}")]
    SolanaRpc(#[from] tower_x402_solana::rpc::InvalidRpcUrl),
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
    let mut facilitators: Option<Facilitators> = None;
    for (url, bearer) in config.facilitators() {
        let mut builder = HttpFacilitator::builder(url.to_owned());
        if let Some(token) = bearer {
            builder = builder.bearer(token.to_owned());
        }
        let facilitator: Arc<dyn Facilitator> = Arc::new(builder.build()?);
        let label = facilitator_label(url);
        facilitators = Some(match facilitators {
            None => Facilitators::new(label, facilitator),
            Some(list) => list.then(label, facilitator),
        });
    }
    match facilitators {
        Some(facilitators) => {
            let facilitators = facilitators
                .failures_to_open(config.facilitator_breaker_failures)
                .pause(config.facilitator_breaker_pause);
            build_state_with_facilitators(config, facilitators, false).await
        }
        None => {
            let sandbox = SandboxFacilitator::new();
            let mut config = config;
            config.open_demo_doors();
            let mut state = build_state_with(config, Arc::new(sandbox.clone()), true).await?;
            state.reconciler = Some(Arc::new(sandbox.clone()));
            state.account_code = Some(Arc::new(sandbox));
            Ok(state)
        }
    }
}

/// A facilitator's label in the ledger and the metrics: its URL without scheme, credentials,
/// query or fragment (host, port and path), stable when the list is reordered.
fn facilitator_label(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(mut parsed) => {
            // Cannot fail on the http(s) URLs the settings accept.
            let _ = parsed.set_username("");
            let _ = parsed.set_password(None);
            parsed.set_query(None);
            parsed.set_fragment(None);
            let text = parsed.as_str().trim_end_matches('/');
            let scheme = parsed.scheme().len() + "://".len();
            text.get(scheme..).unwrap_or(text).to_owned()
        }
        Err(_) => url.to_owned(),
    }
}

/// Builds the state with one facilitator; see [`build_state_with_facilitators`].
///
/// # Errors
///
/// See [`build_state_with_facilitators`].
pub async fn build_state_with(
    config: Config,
    facilitator: Arc<dyn Facilitator>,
    demo: bool,
) -> Result<AppState, StartupError> {
    let facilitators = Facilitators::new(tower_x402::facilitator::DEFAULT_LABEL, facilitator);
    build_state_with_facilitators(config, facilitators, demo).await
}

/// Builds the state with given facilitators (`demo`: payments settle in the in-process
/// sandbox): opens the database, asks the facilitators' `/supported` which doors can open (the
/// first one that answers, in order of preference), and builds every offer.
///
/// # Errors
///
/// The database cannot be opened, or an offer cannot be built. A failing `/supported` is not
/// an error: the doors that depend on it stay closed and a warning is logged.
pub async fn build_state_with_facilitators(
    mut config: Config,
    facilitators: Facilitators,
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
    let facilitator = match facilitators.iter().next() {
        Some((_, first)) => Arc::clone(first),
        None => return Err(StartupError::Storage("no facilitator".to_owned())),
    };
    let mut supported = Err("no facilitator".to_owned());
    for (label, facilitator) in facilitators.iter() {
        supported = match tokio::time::timeout(SUPPORTED_TIMEOUT, facilitator.supported()).await {
            Ok(Ok(supported)) => Ok(supported),
            Ok(Err(e)) => Err(format!("{label}: {e}")),
            Err(_) => Err(format!("{label}: no answer within {SUPPORTED_TIMEOUT:?}")),
        };
        if supported.is_ok() {
            break;
        }
    }
    if let Err(reason) = &supported {
        tracing::warn!(%reason, "facilitator /supported failed: the doors that need it stay closed");
    }
    let rpc = match &config.rpc_url {
        Some(url) => Some(Arc::new(EvmRpcReconciler::new(url)?)),
        None => None,
    };
    let account_code = rpc.clone().map(|rpc| -> Arc<dyn AccountCode> { rpc });
    let evm = rpc.map(|rpc| -> Arc<dyn Reconciler> { rpc });
    let reconciler: Option<Arc<dyn Reconciler>> = match (&config.solana_rpc_url, evm) {
        (Some(url), Some(evm)) => Some(Arc::new(SolanaRpcReconciler::new(url)?.beside(evm))),
        (Some(url), None) => Some(Arc::new(SolanaRpcReconciler::new(url)?)),
        (None, Some(evm)) => Some(evm),
        (None, None) => {
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
    let catalog = Catalog::build(&config, doors, demo, example).await?;
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
        facilitators,
        reconciler,
        account_code,
        http,
        payments: PaymentsInProgress::default(),
    })
}
