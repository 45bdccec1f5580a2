//! The operator's address (`STORE_METRICS_LISTEN`): Prometheus metrics and health checks, on a
//! listener of their own so that they are never exposed with the shop.
//!
//! | path | answers |
//! |---|---|
//! | `GET /metrics` | the metrics of [`tower_x402_metrics`] in the Prometheus text format |
//! | `GET /healthz` | 200 `{"status":"ok"}` while the process answers |
//! | `GET /readyz` | 200 `{"status":"ready",…}` when the database answers a query and at least one facilitator can take a payment — its circuit breaker closed and its `/supported` answering now (asked afresh, never from the cache); 503 `{"status":"not_ready",…}` naming the failing check otherwise, and while the store shuts down |
//!
//! The listener has the shop's connection limits (see [`crate::serve`]): a client that connects
//! and sends nothing, or stays idle, is closed after the header deadline.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use serde_json::json;
use tower_x402::facilitator::{Endpoint, Facilitator, Facilitators};
use x402_wire::SupportedResponse;

use crate::state::AppState;
use crate::storage::Store;

/// How long `/readyz` waits for each of its checks.
const CHECK_TIMEOUT: Duration = Duration::from_secs(2);

/// Bucket bounds of the facilitator duration histogram, in seconds.
const DURATION_BUCKETS: [f64; 13] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// Installs the Prometheus recorder as the process's `metrics` recorder (once; later calls get
/// the same handle) and keeps its histograms up to date.
///
/// # Errors
///
/// Another recorder was installed first.
pub fn install_recorder() -> Result<PrometheusHandle, String> {
    static HANDLE: std::sync::OnceLock<Result<PrometheusHandle, String>> =
        std::sync::OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let recorder = PrometheusBuilder::new()
                .set_buckets(&DURATION_BUCKETS)
                .map_err(|e| e.to_string())?
                .build_recorder();
            let handle = recorder.handle();
            metrics::set_global_recorder(recorder).map_err(|e| e.to_string())?;
            tower_x402_metrics::describe();
            let upkeep = handle.clone();
            tokio::spawn(async move {
                let mut every = tokio::time::interval(Duration::from_secs(5));
                loop {
                    every.tick().await;
                    upkeep.run_upkeep();
                }
            });
            Ok(handle)
        })
        .clone()
}

/// Whether the store is shutting down; `/readyz` answers 503 from then on.
#[derive(Clone, Debug, Default)]
pub struct Draining(Arc<AtomicBool>);

impl Draining {
    /// Marks the store as shutting down.
    pub fn start(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    fn is_on(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

#[derive(Clone)]
struct Ops {
    handle: PrometheusHandle,
    store: Store,
    facilitators: Facilitators,
    /// How each facilitator's `/supported` is asked afresh, in the order of `facilitators`.
    probes: Arc<[Probe]>,
    http: reqwest::Client,
    draining: Draining,
}

/// How `/readyz` asks a facilitator's `/supported` without its client's cache.
#[derive(Clone)]
enum Probe {
    /// An external facilitator: `GET` this URL with this bearer token.
    Http { url: String, bearer: Option<String> },
    /// The in-process sandbox: its own answer, which is always current.
    InProcess(Arc<dyn Facilitator>),
}

impl Probe {
    /// The probes of `state`'s facilitators: over HTTP for those of `STORE_FACILITATOR_URL`.
    fn all(state: &AppState) -> Arc<[Self]> {
        let urls = state.config.facilitators();
        if urls.is_empty() {
            return state
                .facilitators
                .iter()
                .map(|(_, facilitator)| Self::InProcess(Arc::clone(facilitator)))
                .collect();
        }
        urls.into_iter()
            .map(|(url, bearer)| Self::Http {
                url: tower_x402::HttpFacilitator::new(url).map_or_else(
                    |_| format!("{}/supported", url.trim_end_matches('/')),
                    |client| client.endpoint_url(Endpoint::Supported).to_owned(),
                ),
                bearer: bearer.map(str::to_owned),
            })
            .collect()
    }

    /// Whether `/supported` answers now.
    async fn check(&self, http: &reqwest::Client) -> Result<(), String> {
        match self {
            Self::InProcess(facilitator) => facilitator
                .supported()
                .await
                .map(drop)
                .map_err(|error| error.public_summary()),
            Self::Http { url, bearer } => {
                let mut request = http.get(url);
                if let Some(token) = bearer {
                    request = request.bearer_auth(token);
                }
                let answer = request
                    .send()
                    .await
                    .map_err(|_| "facilitator /supported is unreachable".to_owned())?;
                let status = answer.status();
                if !status.is_success() {
                    return Err(format!(
                        "facilitator /supported answered HTTP {}",
                        status.as_u16()
                    ));
                }
                answer
                    .json::<SupportedResponse>()
                    .await
                    .map(drop)
                    .map_err(|_| "facilitator /supported sent a malformed answer".to_owned())
            }
        }
    }
}

/// The operator's router: `/metrics`, `/healthz`, `/readyz`.
pub fn router(state: &AppState, handle: PrometheusHandle, draining: Draining) -> Router {
    Router::new()
        .route("/metrics", get(metrics_text))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .fallback(|| async {
            crate::http_errors::json_error(StatusCode::NOT_FOUND, "no such route")
        })
        .with_state(Ops {
            handle,
            store: state.store.clone(),
            facilitators: state.facilitators.clone(),
            probes: Probe::all(state),
            http: state.http.clone(),
            draining,
        })
}

async fn metrics_text(State(ops): State<Ops>) -> Response {
    tower_x402_metrics::refresh();
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        ops.handle.render(),
    )
        .into_response()
}

async fn healthz() -> Response {
    Json(json!({ "status": "ok" })).into_response()
}

async fn readyz(State(ops): State<Ops>) -> Response {
    let database = match tokio::time::timeout(CHECK_TIMEOUT, ops.store.fulfillment_secret()).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(error)) => Err(error.to_string()),
        Err(_) => Err(format!("no answer within {CHECK_TIMEOUT:?}")),
    };
    // Ready when at least one facilitator can take a payment: its breaker closed (it did not
    // just fail to verify or settle) and its `/supported` answering now, not from a cache.
    let mut facilitators = Vec::new();
    for ((label, _), probe) in ops.facilitators.iter().zip(ops.probes.iter()) {
        let result = if ops.facilitators.is_open(label).unwrap_or(false) {
            Err("its circuit breaker is open: recent calls failed".to_owned())
        } else {
            match tokio::time::timeout(CHECK_TIMEOUT, probe.check(&ops.http)).await {
                Ok(result) => result,
                Err(_) => Err(format!("no answer within {CHECK_TIMEOUT:?}")),
            }
        };
        facilitators.push((label, result));
    }
    let check = |result: &Result<(), String>| match result {
        Ok(()) => json!({ "ok": true }),
        Err(reason) => json!({ "ok": false, "error": reason }),
    };
    let facilitator = match facilitators.iter().find(|(_, result)| result.is_ok()) {
        Some(_) => Ok(()),
        None => Err("no facilitator can take a payment".to_owned()),
    };
    let each: Vec<_> = facilitators
        .iter()
        .map(|(label, result)| {
            let mut entry = check(result);
            entry["facilitator"] = json!(label);
            entry["circuit_open"] = json!(ops.facilitators.is_open(label).unwrap_or(false));
            entry
        })
        .collect();
    let draining = ops.draining.is_on();
    let ready = database.is_ok() && facilitator.is_ok() && !draining;
    let body = json!({
        "status": if ready { "ready" } else { "not_ready" },
        "shutting_down": draining,
        "checks": { "database": check(&database), "facilitator": check(&facilitator), "facilitators": each },
    });
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(body)).into_response()
}
