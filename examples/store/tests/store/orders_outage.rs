//! PostgreSQL stopped between settlement and the order: the buyer is answered 503 (never 402),
//! and the order is written in the background once the database is back, with no request from
//! the buyer; the buyer's retry then finds that one order.

use std::sync::Arc;
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::Value;
use tower_x402::proto::{PaymentRequired, header};
use tower_x402_sandbox::{SandboxFacilitator, SandboxWallet, Step};
use x402_store::app::app;
use x402_store::config::Config;
use x402_store::serve::{ServeLimits, serve};
use x402_store::state::build_state_with;

use super::postgres_server::PgServer;
use super::support::RECEIPT;

/// Far above every wait the store may take here; only a hang reaches it.
const PATIENCE: Duration = Duration::from_secs(30);

async fn orders(url: &str) -> Option<i64> {
    let pool = sqlx::PgPool::connect(url).await.ok()?;
    let count = sqlx::query_scalar("SELECT count(*) FROM orders")
        .fetch_one(&pool)
        .await
        .ok();
    pool.close().await;
    count
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_order_the_database_missed_is_written_once_it_is_back_without_a_retry() {
    super::postgres_server::require();
    let server = PgServer::start_own().unwrap();
    let url = server.url("postgres");
    let sandbox = SandboxFacilitator::new();
    let state = build_state_with(
        Config::for_tests(url.clone()),
        Arc::new(sandbox.clone()),
        true,
    )
    .await
    .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(serve(
        listener,
        app(state),
        ServeLimits::default(),
        std::future::pending(),
    ));
    let client = reqwest::Client::new();
    let product = format!("{base}/api/x402/{RECEIPT}");
    let challenge = client.get(&product).send().await.unwrap();
    let required: PaymentRequired =
        header::decode(challenge.headers()["payment-required"].as_bytes()).unwrap();
    let payment = SandboxWallet::random().pay(&required).unwrap();
    let signature = header::encode(&payment)
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();

    // The database goes while /settle is held open: the money moves, nothing can be written.
    sandbox.queue_settle(Step::Answer.after(Duration::from_secs(2)));
    let buyer = {
        let (client, product, signature) = (client.clone(), product.clone(), signature.clone());
        tokio::spawn(async move {
            let answer = client
                .get(&product)
                .header("payment-signature", &signature)
                .send()
                .await
                .unwrap();
            let status = answer.status();
            let body: Value = answer.json().await.unwrap_or(Value::Null);
            (status, body)
        })
    };
    let started = Instant::now();
    while sandbox.settle_calls() == 0 {
        assert!(started.elapsed() < PATIENCE, "/settle never came");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    server.stop();
    let (during, body) = buyer.await.unwrap();
    assert_eq!(during, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert!(body["error"].is_string(), "a JSON error: {body}");
    assert_eq!(sandbox.settlement_count(), 1, "the money moved");

    // Back again: the order appears with no request from anyone.
    server.start_again().unwrap();
    let started = Instant::now();
    loop {
        if orders(&url).await == Some(1) {
            break;
        }
        assert!(
            started.elapsed() < PATIENCE,
            "the order was never written in the background"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let took = started.elapsed();

    // The buyer's retry finds that order: delivered, replayed, nothing charged again.
    let retry = client
        .get(&product)
        .header("payment-signature", &signature)
        .send()
        .await
        .unwrap();
    assert_eq!(retry.status(), StatusCode::OK);
    let delivered: Value = retry.json().await.unwrap();
    assert_eq!(delivered["replayed"], true, "{delivered}");
    assert_eq!(orders(&url).await, Some(1), "still one order");
    assert_eq!(sandbox.settle_calls(), 1, "one /settle in all");
    assert_eq!(sandbox.settlement_count(), 1, "one transfer");
    println!(
        "PostgreSQL stopped during /settle: buyer 503; restarted: order written in the background after {took:?}; the retry delivered it (replayed), /settle calls 1"
    );
}
