//! PostgreSQL stopped between settlement and the order: the buyer is answered 503 (never 402),
//! and the order is written in the background once the database is back, with no request from
//! the buyer; the buyer's retry then finds that one order.

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use tower_x402_sandbox::{SandboxFacilitator, Step};

use super::live_store::{PATIENCE, new_payment, open_store, present, wait_until};
use super::postgres_server::PgServer;

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
    let (product, _) = open_store(&server, &sandbox).await;
    let client = reqwest::Client::new();
    let signature = new_payment(&client, &product).await;

    // The database goes while /settle is held open: the money moves, nothing can be written.
    sandbox.queue_settle(Step::Answer.after(Duration::from_secs(2)));
    let buyer = present(&client, &product, &signature);
    wait_until("/settle never came", || sandbox.settle_calls() > 0).await;
    server.stop();
    let (during, _, body) = buyer.await.unwrap();
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
    let (retry, _, delivered) = present(&client, &product, &signature).await.unwrap();
    assert_eq!(retry, StatusCode::OK, "{delivered}");
    assert_eq!(delivered["replayed"], true, "{delivered}");
    assert_eq!(orders(&url).await, Some(1), "still one order");
    assert_eq!(sandbox.settle_calls(), 1, "one /settle in all");
    assert_eq!(sandbox.settlement_count(), 1, "one transfer");
    println!(
        "PostgreSQL stopped during /settle: buyer 503; restarted: order written in the background after {took:?}; the retry delivered it (replayed), /settle calls 1"
    );
}
