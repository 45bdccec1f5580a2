//! The stub facilitator: the sandbox facilitator trusting the benchmark's made-up signatures
//! (every other check holds; each nonce settles once, from a balance that never runs out), plus
//! `/stats`: how many connections it accepted, how many `/settle` calls it answered and how many
//! of those repeated a nonce (every payment is well-formed and funded, so a `/settle` that does
//! not settle is a nonce seen before). A `/settle` counts as a call when it arrives and as a
//! settlement once settled, so one still under way looks like a repeat until it ends: read the
//! count once the calls have stopped.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::routing::get;
use axum::serve::ListenerExt;
use axum::{Json, Router};
use serde_json::json;
use tower_x402_sandbox::{SandboxFacilitator, Step};
use x402_wire::AtomicAmount;

/// The stub's facilitator: the sandbox trusting the benchmark's signatures, its balance never
/// running out. Served over HTTP by [`serve`], or in the app's own process
/// (`x402-load app --part facilitator-in-process`).
pub(crate) fn facilitator() -> SandboxFacilitator {
    SandboxFacilitator::new()
        .with_starting_balance(AtomicAmount(u128::from(u64::MAX)))
        .with_verify(Step::Trust)
        .with_settle(Step::Trust)
}

/// `/stats` of `facilitator`, with `connections` accepted so far.
pub(crate) fn stats(facilitator: SandboxFacilitator, connections: Arc<AtomicU64>) -> Router {
    let stats = move || {
        let facilitator = facilitator.clone();
        let connections = Arc::clone(&connections);
        async move {
            let settles = facilitator.settle_calls();
            Json(json!({
                "connections": connections.load(Ordering::Relaxed),
                "settles": settles,
                "repeatedNonces": settles.saturating_sub(facilitator.settlement_count()),
            }))
        }
    };
    Router::new().route("/stats", get(stats))
}

/// Serves the stub on `listener` until the process ends.
pub(crate) async fn serve(listener: tokio::net::TcpListener) -> std::io::Result<()> {
    let facilitator = facilitator();
    let connections = Arc::new(AtomicU64::new(0));
    let counted = Arc::clone(&connections);
    let router = facilitator.router().merge(stats(facilitator, connections));
    let listener = listener.tap_io(move |_tcp| {
        counted.fetch_add(1, Ordering::Relaxed);
    });
    axum::serve(listener, router).await
}
