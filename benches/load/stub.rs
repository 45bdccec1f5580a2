//! The stub facilitator: `/verify` answers valid, `/settle` success (or a failure for a nonce it
//! has seen before), `/stats` how many connections it accepted, how many `/settle` calls it
//! answered and how many nonces repeated.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::extract::State;
use axum::routing::{get, post};
use axum::serve::ListenerExt;
use axum::{Json, Router};
use serde_json::{Value, json};

#[derive(Default)]
struct Counters {
    connections: AtomicU64,
    settles: AtomicU64,
    repeated_nonces: AtomicU64,
    nonces: Mutex<HashSet<String>>,
}

/// Serves the stub on `listener` until the process ends.
pub(crate) async fn serve(listener: tokio::net::TcpListener) -> std::io::Result<()> {
    let counters = Arc::new(Counters::default());
    let counted = Arc::clone(&counters);
    let router = Router::new()
        .route("/verify", post(verify))
        .route("/settle", post(settle))
        .route("/supported", get(supported))
        .route("/stats", get(stats))
        .with_state(counters);
    let listener = listener.tap_io(move |_tcp| {
        counted.connections.fetch_add(1, Ordering::Relaxed);
    });
    axum::serve(listener, router).await
}

async fn verify(Json(request): Json<Value>) -> Json<Value> {
    let payer = request["paymentPayload"]["payload"]["authorization"]["from"].clone();
    Json(json!({ "isValid": true, "payer": payer }))
}

async fn settle(State(counters): State<Arc<Counters>>, Json(request): Json<Value>) -> Json<Value> {
    counters.settles.fetch_add(1, Ordering::Relaxed);
    let requirements = &request["paymentRequirements"];
    let nonce = request["paymentPayload"]["payload"]["authorization"]["nonce"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let fresh = counters
        .nonces
        .lock()
        .map(|mut seen| seen.insert(nonce))
        .unwrap_or(false);
    if !fresh {
        counters.repeated_nonces.fetch_add(1, Ordering::Relaxed);
        return Json(json!({
            "success": false,
            "errorReason": "invalid_exact_evm_nonce_already_used",
            "transaction": "",
            "network": requirements["network"],
        }));
    }
    Json(json!({
        "success": true,
        "transaction": format!("0x{}", "ab".repeat(32)),
        "network": requirements["network"],
        "amount": requirements["amount"],
    }))
}

async fn supported() -> Json<Value> {
    Json(json!({
        "kinds": [
            { "x402Version": 2, "scheme": "exact", "network": "eip155:8453" }
        ],
        "extensions": [],
        "signers": {}
    }))
}

async fn stats(State(counters): State<Arc<Counters>>) -> Json<Value> {
    Json(json!({
        "connections": counters.connections.load(Ordering::Relaxed),
        "settles": counters.settles.load(Ordering::Relaxed),
        "repeatedNonces": counters.repeated_nonces.load(Ordering::Relaxed),
    }))
}
