//! A store process killed for real (SIGKILL) between writing its *settling* intent and recording
//! the outcome: restarted on the same SQLite file, the buyer's retry is delivered, one transfer.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use tower_x402_sandbox::{SandboxFacilitator, Step};
use x402_store::storage::Store;
use x402_wire::Network;

use super::live_store::{new_payment, present, wait_until};
use super::reliability;
use super::support::RECEIPT;

const PAY_TO: &str = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";
/// Seconds a store holds a payment it is settling.
const LEASE: u64 = 2;
/// How long any one wait in this test may last.
const PATIENCE: Duration = Duration::from_secs(30);

/// A `store` child process, killed when dropped.
struct StoreProcess(Child);

impl Drop for StoreProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn_store(port: u16, facilitator: &str, rpc: &str, database: &str) -> StoreProcess {
    let child = Command::new(env!("CARGO_BIN_EXE_store"))
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(["--facilitator-url", facilitator, "--pay-to", PAY_TO])
        .args(["--rpc-url", rpc, "--database-url", database])
        .args(["--settlement-lease", &LEASE.to_string()])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("the store binary starts");
    StoreProcess(child)
}

async fn wait_until_ready(client: &reqwest::Client, base: &str) {
    let started = Instant::now();
    loop {
        let ready = client
            .get(format!("{base}/.well-known/x402.json"))
            .send()
            .await;
        if ready.is_ok_and(|response| response.status() == StatusCode::OK) {
            return;
        }
        assert!(started.elapsed() < PATIENCE, "the store did not start");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn serve<F>(serve: impl FnOnce(tokio::net::TcpListener) -> F) -> String
where
    F: Future + Send + 'static,
{
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let future = serve(listener);
    tokio::spawn(async move {
        future.await;
    });
    url
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_mid_settlement_then_restarted_delivers_once() {
    let sandbox = SandboxFacilitator::new();
    let faulty = sandbox.clone();
    // The first /settle moves the money and then never answers.
    faulty.queue_settle(Step::NoAnswer);
    let facilitator = serve(|listener| faulty.clone().serve(listener)).await;
    let chain = sandbox.rpc_router(Network::BASE);
    let rpc = serve(|listener| async move { axum::serve(listener, chain).await }).await;
    let dir = tempfile::tempdir().unwrap();
    let database = format!("sqlite://{}", dir.path().join("store.db").display());
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let product = format!("{base}/api/x402/{RECEIPT}");
    let client = reqwest::Client::new();

    let mut store = spawn_store(port, &facilitator, &rpc, &database);
    wait_until_ready(&client, &base).await;
    let signature = new_payment(&client, &product).await;

    let first = tokio::spawn({
        let (client, product, signature) = (client.clone(), product.clone(), signature.clone());
        async move {
            client
                .get(&product)
                .header("payment-signature", signature)
                .send()
                .await
        }
    });
    // Wait until the money has moved: the store now waits for an answer that never comes.
    wait_until("the payment never reached /settle", || {
        sandbox.settlement_count() > 0
    })
    .await;
    // The write-ahead intent was on disk before /settle was sent.
    let ledger = Store::open(&database).await.unwrap();
    let unsettled = ledger.payments_in_doubt().await.unwrap();
    assert_eq!(unsettled.len(), 1);
    assert_eq!(unsettled[0].1.phase(), "settling");

    store.0.kill().unwrap(); // SIGKILL
    store.0.wait().unwrap();
    let cut = first.await.unwrap();
    assert!(
        cut.is_err(),
        "the first request dies with the process: {cut:?}"
    );

    let _store = spawn_store(port, &facilitator, &rpc, &database);
    wait_until_ready(&client, &base).await;
    // Held by the dead process until its lease runs out: 503, retry the same payment.
    let (held, retry_after, _) = present(&client, &product, &signature).await.unwrap();
    if held == StatusCode::SERVICE_UNAVAILABLE {
        assert!(retry_after);
    }
    tokio::time::sleep(Duration::from_secs(LEASE) + Duration::from_millis(200)).await;
    let mut statuses = Vec::new();
    let mut delivered = serde_json::Value::Null;
    for _ in 0..2 {
        let (status, _, body) = present(&client, &product, &signature).await.unwrap();
        statuses.push(status.as_u16().to_string());
        delivered = body;
    }
    assert_eq!(statuses, ["200", "200"], "{delivered}");
    assert!(
        delivered["passport"]["passport"]
            .as_str()
            .is_some_and(|id| id.starts_with("pp_")),
        "{delivered}"
    );
    assert_eq!(sandbox.settlement_count(), 1, "one transfer");
    assert_eq!(
        faulty.settle_calls(),
        2,
        "the identical /settle, re-sent once"
    );
    assert!(
        delivered
            .to_string()
            .contains(&sandbox.settlements()[0].transaction),
        "the Passport cites the real transaction: {delivered}"
    );
    let rows = ledger.row_counts().await.unwrap();
    assert_eq!(rows["orders"], 1, "counted once");
    assert!(ledger.payments_in_doubt().await.unwrap().is_empty());

    let transfers = sandbox.settlement_count();
    let row = reliability::Row {
        fault: "store process killed (SIGKILL) after its settling intent, the money moved; \
                restarted on the same database, retried after the lease"
            .to_owned(),
        mode: "before",
        client_sees: format!("connection closed → {}", statuses.join(" → ")),
        // Each run of the purchase handler adds one fulfillment grant to the order.
        inner_ran: usize::try_from(rows["fulfillment_grants"]).unwrap(),
        transfers,
        delivered_unpaid: transfers == 0,
    };
    reliability::check("store", &[row]);
}
