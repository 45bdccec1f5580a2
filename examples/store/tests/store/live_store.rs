//! A store served over real HTTP on loopback, for the tests that take its database or its
//! process away: serving a built state (or one over a PostgreSQL server, with its operator's
//! address), signing a new payment, presenting one in the background, and waiting for what the
//! sandbox saw.

use std::sync::Arc;
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::Value;
use tower_x402_sandbox::{SandboxFacilitator, SandboxWallet};
use x402_store::app::app;
use x402_store::config::Config;
use x402_store::serve::{ServeLimits, serve};
use x402_store::state::{AppState, build_state_with};
use x402_wire::{PaymentRequired, header};

use super::postgres_server::PgServer;
use super::support::{RECEIPT, signature_header};

/// Far above every wait the store may take in these tests; only a hang reaches it.
pub(crate) const PATIENCE: Duration = Duration::from_secs(30);

/// Serves the store app over `state` on a free loopback port, until the test ends; returns its
/// base URL.
pub(crate) async fn serve_store(state: AppState) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(serve(
        listener,
        app(state),
        ServeLimits::default(),
        std::future::pending(),
    ));
    base
}

/// A store over `server`'s `postgres` database settling through `sandbox`, with its operator's
/// address: (the product's URL, `/readyz`'s URL).
pub(crate) async fn open_store(
    server: &PgServer,
    sandbox: &SandboxFacilitator,
) -> (String, String) {
    open_store_with(Config::for_tests(server.url("postgres")), sandbox).await
}

/// [`open_store`] with `config`.
pub(crate) async fn open_store_with(
    config: Config,
    sandbox: &SandboxFacilitator,
) -> (String, String) {
    let state = build_state_with(config, Arc::new(sandbox.clone()), true)
        .await
        .unwrap();
    let handle = x402_store::ops::install_recorder().unwrap();
    let ops_router = x402_store::ops::router(&state, handle, x402_store::ops::Draining::default());
    let ops_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let readyz = format!("http://{}/readyz", ops_listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(ops_listener, ops_router).await });
    let product = format!("{}/api/x402/{RECEIPT}", serve_store(state).await);
    (product, readyz)
}

/// A new signed payment for `product`, answering the 402 it gives.
pub(crate) async fn new_payment(client: &reqwest::Client, product: &str) -> String {
    let challenge = client.get(product).send().await.unwrap();
    assert_eq!(challenge.status(), StatusCode::PAYMENT_REQUIRED);
    let required: PaymentRequired =
        header::decode(challenge.headers()["payment-required"].as_bytes()).unwrap();
    signature_header(&SandboxWallet::random(), &required)
}

/// Presents `signature` in the background: (status, whether `Retry-After` came, body).
pub(crate) fn present(
    client: &reqwest::Client,
    product: &str,
    signature: &str,
) -> tokio::task::JoinHandle<(StatusCode, bool, Value)> {
    let (client, product, signature) = (client.clone(), product.to_owned(), signature.to_owned());
    tokio::spawn(async move {
        let answer = client
            .get(&product)
            .header("payment-signature", &signature)
            .send()
            .await
            .unwrap();
        let status = answer.status();
        let retry_after = answer.headers().contains_key("retry-after");
        (
            status,
            retry_after,
            answer.json().await.unwrap_or(Value::Null),
        )
    })
}

/// Polls `done` every 10 ms until it holds; fails with `never` after [`PATIENCE`].
pub(crate) async fn wait_until(never: &str, mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < PATIENCE, "{never}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
