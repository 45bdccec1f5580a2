//! The stub facilitator: the sandbox facilitator trusting the benchmark's made-up signatures
//! (every other check holds; each nonce settles once, from a balance that never runs out), plus
//! `/stats`: how many connections it accepted, how many `/settle` calls it answered and how many
//! of those repeated a nonce (every payment is well-formed and funded, so a `/settle` that does
//! not settle is a nonce seen before).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::Json;
use axum::routing::get;
use axum::serve::ListenerExt;
use serde_json::json;
use tower_x402_sandbox::{SandboxFacilitator, Step};
use x402_wire::AtomicAmount;

/// Serves the stub on `listener` until the process ends.
pub(crate) async fn serve(listener: tokio::net::TcpListener) -> std::io::Result<()> {
    let facilitator = SandboxFacilitator::new()
        .with_starting_balance(AtomicAmount(u128::from(u64::MAX)))
        .with_verify(Step::Trust)
        .with_settle(Step::Trust);
    let connections = Arc::new(AtomicU64::new(0));
    let counted = Arc::clone(&connections);
    let stats = {
        let facilitator = facilitator.clone();
        move || async move {
            let settles = facilitator.settle_calls();
            Json(json!({
                "connections": connections.load(Ordering::Relaxed),
                "settles": settles,
                "repeatedNonces": settles.saturating_sub(facilitator.settlement_count()),
            }))
        }
    };
    let router = facilitator.router().route("/stats", get(stats));
    let listener = listener.tap_io(move |_tcp| {
        counted.fetch_add(1, Ordering::Relaxed);
    });
    axum::serve(listener, router).await
}
