//! The store as an operator runs it, as a real `store` process: the Prometheus scrape and the
//! health checks on `STORE_METRICS_LISTEN`, and a rolling restart (SIGTERM while `/settle` is
//! held open) that loses no payment.

use std::process::Stdio;
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::process::{Child, Command};
use tower_x402::settlement::{PaymentKey, PaymentState, SettlementStore as _};
use tower_x402_sandbox::{SandboxFacilitator, SandboxWallet, Step};
use x402_store::storage::Store;
use x402_wire::{Network, PaymentPayload, PaymentRequired, header};

use super::support::RECEIPT;

const PAY_TO: &str = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";
/// How long any one wait in these tests may last.
const PATIENCE: Duration = Duration::from_secs(60);

/// A `store` process (killed when dropped) and where it listens.
pub(super) struct StoreProcess {
    pub(super) child: Child,
    pub(super) base: String,
    pub(super) ops: Option<String>,
}

/// Starts `store` against `facilitator` on `database`, with `extra` arguments, and waits for
/// the addresses it prints.
pub(super) async fn start(
    facilitator: &str,
    rpc: &str,
    database: &str,
    extra: &[&str],
) -> StoreProcess {
    let mut child = Command::new(env!("CARGO_BIN_EXE_store"))
        .args([
            "--listen",
            "127.0.0.1:0",
            "--base-url",
            "http://shop.example",
        ])
        .args(["--facilitator-url", facilitator, "--pay-to", PAY_TO])
        .args(["--rpc-url", rpc, "--database-url", database])
        .args(extra)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("the store binary starts");
    let stdout = child.stdout.take().expect("piped stdout");
    let mut lines = BufReader::new(stdout).lines();
    let mut ops = None;
    let base = tokio::time::timeout(PATIENCE, async {
        while let Some(line) = lines.next_line().await.expect("store stdout") {
            if let Some(address) = line.strip_prefix("metrics on ") {
                ops = Some(address.to_owned());
            }
            if let Some(address) = line.strip_prefix("listening on ") {
                return address.to_owned();
            }
        }
        panic!("the store exited before listening");
    })
    .await
    .expect("the store starts listening");
    // Keep draining stdout so the process never blocks on it.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    StoreProcess { child, base, ops }
}

/// Serves `app` on a loopback port: its URL.
async fn serve(app: axum::Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

/// The sandbox facilitator over HTTP, and its JSON-RPC chain view: their URLs.
pub(super) async fn sandbox_over_http(sandbox: &SandboxFacilitator) -> (String, String) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(sandbox.clone().serve(listener));
    (url, serve(sandbox.rpc_router(Network::BASE)).await)
}

/// One signed payment for the cheapest product, from `base`'s challenge: its header value and
/// the payment itself.
pub(super) async fn sign(client: &reqwest::Client, base: &str) -> (String, PaymentPayload) {
    let challenge = client
        .get(format!("{base}/api/x402/{RECEIPT}"))
        .send()
        .await
        .unwrap();
    assert_eq!(challenge.status(), StatusCode::PAYMENT_REQUIRED);
    let required: PaymentRequired =
        header::decode(challenge.headers()["payment-required"].as_bytes()).unwrap();
    let payment = SandboxWallet::random().pay(&required).unwrap();
    let encoded = header::encode(&payment)
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    (encoded, payment)
}

pub(super) async fn present(
    client: &reqwest::Client,
    base: &str,
    signature: &str,
) -> (StatusCode, Value) {
    let answer = client
        .get(format!("{base}/api/x402/{RECEIPT}"))
        .header("payment-signature", signature)
        .send()
        .await
        .unwrap();
    let status = answer.status();
    (status, answer.json().await.unwrap_or(Value::Null))
}

pub(super) async fn get_json(client: &reqwest::Client, url: &str) -> (StatusCode, Value) {
    let answer = client.get(url).send().await.unwrap();
    let status = answer.status();
    (status, answer.json().await.unwrap_or(Value::Null))
}

/// The value of the sample `series` (name and labels, as rendered) in `scrape`.
fn sample(scrape: &str, series: &str) -> Option<f64> {
    scrape.lines().find_map(|line| {
        let value = line.strip_prefix(series)?.strip_prefix(' ')?;
        value.trim().parse().ok()
    })
}

/// `promtool check metrics` on `scrape`: its verdict, and what it printed.
fn promtool_check(scrape: &str) -> (bool, String) {
    use std::io::Write as _;
    let mut promtool = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool is installed (Debian's `prometheus` package; tests/run.sh installs it)");
    promtool
        .stdin
        .take()
        .unwrap()
        .write_all(scrape.as_bytes())
        .unwrap();
    let output = promtool.wait_with_output().unwrap();
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), printed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_metrics_address_serves_a_valid_scrape_and_health_checks() {
    let dir = tempfile::tempdir().unwrap();
    let database = format!("sqlite://{}", dir.path().join("store.db").display());
    let sandbox = SandboxFacilitator::new();
    let (facilitator, rpc) = sandbox_over_http(&sandbox).await;
    let store = start(
        &facilitator,
        &rpc,
        &database,
        &["--metrics-listen", "127.0.0.1:0"],
    )
    .await;
    let ops = store
        .ops
        .clone()
        .expect("the store prints its metrics address");
    let client = reqwest::Client::new();

    let (status, health) = get_json(&client, &format!("{ops}/healthz")).await;
    assert_eq!((status, &health["status"]), (StatusCode::OK, &"ok".into()));
    let (status, ready) = get_json(&client, &format!("{ops}/readyz")).await;
    assert_eq!(status, StatusCode::OK, "{ready}");
    assert_eq!(ready["status"], "ready", "{ready}");

    // Three purchases, one of them presented again, and one payment the facilitator refuses.
    let mut first = None;
    for _ in 0..3 {
        let (signature, _) = sign(&client, &store.base).await;
        let (status, body) = present(&client, &store.base, &signature).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        first.get_or_insert(signature);
    }
    let (status, body) = present(&client, &store.base, first.as_deref().unwrap()).await;
    assert_eq!((status, &body["replayed"]), (StatusCode::OK, &true.into()));
    // The store settles first, `/settle` alone: the facilitator refuses it there.
    sandbox.queue_settle(Step::Refuse("insufficient_funds".to_owned()));
    let (signature, _) = sign(&client, &store.base).await;
    let (status, _) = present(&client, &store.base, &signature).await;
    assert_eq!(status, StatusCode::PAYMENT_REQUIRED);

    let answer = client.get(format!("{ops}/metrics")).send().await.unwrap();
    assert_eq!(answer.status(), StatusCode::OK);
    assert!(
        answer.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain")
    );
    let scrape = answer.text().await.unwrap();
    let interesting: Vec<&str> = scrape
        .lines()
        .filter(|line| line.starts_with("x402_") && !line.contains("_bucket{"))
        .collect();
    println!(
        "scrape after 3 purchases, 1 replay, 1 refusal:\n{}",
        interesting.join("\n")
    );

    let payments = |outcome: &str, refusal: &str| {
        sample(
            &scrape,
            &format!("x402_payments_total{{outcome=\"{outcome}\",refusal=\"{refusal}\"}}"),
        )
    };
    assert_eq!(payments("settled", "none"), Some(3.0), "{scrape}");
    assert_eq!(payments("replayed", "none"), Some(1.0), "{scrape}");
    assert_eq!(
        payments("refused", "settlement_refused"),
        Some(1.0),
        "{scrape}"
    );
    // A challenge for each signing, none for the paid requests.
    assert_eq!(
        sample(&scrape, "x402_challenges_total"),
        Some(4.0),
        "{scrape}"
    );
    // The store labels a facilitator by its URL without the scheme.
    let label = facilitator.trim_start_matches("http://");
    let calls = |endpoint: &str, outcome: &str| {
        sample(
            &scrape,
            &format!(
                "x402_facilitator_request_duration_seconds_count{{facilitator=\"{label}\",endpoint=\"{endpoint}\",outcome=\"{outcome}\"}}"
            ),
        )
    };
    assert_eq!(calls("settle", "ok"), Some(3.0), "{scrape}");
    assert_eq!(calls("settle", "rejected"), Some(1.0), "{scrape}");
    assert_eq!(calls("verify", "ok"), None, "one round trip: {scrape}");
    assert_eq!(
        sample(&scrape, "x402_payments_in_doubt"),
        Some(0.0),
        "{scrape}"
    );
    assert_eq!(
        sample(&scrape, "x402_payments_in_doubt_oldest_age_seconds"),
        Some(0.0),
        "{scrape}"
    );
    // Bounded labels: no address, nonce or URL ever becomes one.
    assert!(!scrape.contains("0x"), "{scrape}");
    assert!(!scrape.contains("http"), "{scrape}");

    let (valid, printed) = promtool_check(&scrape);
    assert!(valid, "promtool check metrics:\n{printed}\n{scrape}");

    let (status, missing) = get_json(&client, &format!("{ops}/nowhere")).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{missing}");
    drop(store);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_while_settle_is_held_completes_the_sale_and_exits_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let database = format!("sqlite://{}", dir.path().join("store.db").display());
    let sandbox = SandboxFacilitator::new();
    let (facilitator, rpc) = sandbox_over_http(&sandbox).await;
    let mut store = start(
        &facilitator,
        &rpc,
        &database,
        &[
            "--metrics-listen",
            "127.0.0.1:0",
            "--shutdown-grace-secs",
            "20",
        ],
    )
    .await;
    let ops = store
        .ops
        .clone()
        .expect("the store prints its metrics address");
    let client = reqwest::Client::new();
    let (signature, payment) = sign(&client, &store.base).await;

    // `/settle` is held open for 3 s; SIGTERM arrives while it is.
    sandbox.queue_settle(Step::Answer.after(Duration::from_secs(3)));
    let sale = {
        let (client, base, signature) = (client.clone(), store.base.clone(), signature.clone());
        tokio::spawn(async move { present(&client, &base, &signature).await })
    };
    let started = Instant::now();
    while sandbox.settle_calls() == 0 {
        assert!(started.elapsed() < PATIENCE, "/settle never came");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let pid = store.child.id().expect("the store runs").to_string();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(killed.success());
    let signalled = Instant::now();

    // While the sale settles, the store drains: not ready, and no new connection is taken.
    let mut draining = None;
    while draining.is_none() && signalled.elapsed() < Duration::from_secs(2) {
        let (status, body) = get_json(&client, &format!("{ops}/readyz")).await;
        if status == StatusCode::SERVICE_UNAVAILABLE {
            draining = Some(body);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let draining = draining.expect("/readyz says 503 while the store shuts down");
    assert_eq!(draining["shutting_down"], true, "{draining}");

    let (status, body) = sale.await.unwrap();
    assert_eq!(status, StatusCode::OK, "the sale completes: {body}");
    let exit = tokio::time::timeout(PATIENCE, store.child.wait())
        .await
        .expect("the store exits after the sale")
        .unwrap();
    println!(
        "SIGTERM during a 3 s /settle: sale {status}, exit {exit} {:.1} s after the signal",
        signalled.elapsed().as_secs_f64()
    );
    assert!(exit.success(), "the store exits 0: {exit}");
    assert_eq!(sandbox.settle_calls(), 1);
    assert_eq!(sandbox.settlement_count(), 1);

    // The ledger the process left: this payment settled, nothing settling or in doubt.
    {
        let ledger = Store::open(&database).await.unwrap();
        let entry = ledger
            .load(&PaymentKey::of(&payment))
            .await
            .unwrap()
            .expect("the payment is in the ledger");
        assert!(
            matches!(entry.state, PaymentState::Settled { .. }),
            "{:?}",
            entry.state
        );
        assert!(ledger.payments_in_doubt().await.unwrap().is_empty());
        assert_eq!(ledger.row_counts().await.unwrap()["orders"], 1);
    }

    // A restarted store answers the same payment from its record: no second settlement.
    let restarted = start(&facilitator, &rpc, &database, &[]).await;
    let (status, again) = present(&client, &restarted.base, &signature).await;
    assert_eq!(status, StatusCode::OK, "{again}");
    assert_eq!(again["replayed"], true, "{again}");
    assert_eq!(again["passport"], body["passport"]);
    assert_eq!(sandbox.settle_calls(), 1, "one /settle in all");
    assert_eq!(sandbox.settlement_count(), 1, "one transfer in all");
    println!(
        "restarted store: the same payment answered {status} from its record (replayed), /settle calls 1, transfers 1"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_waits_for_a_settlement_whose_buyer_hung_up() {
    let dir = tempfile::tempdir().unwrap();
    let database = format!("sqlite://{}", dir.path().join("store.db").display());
    let sandbox = SandboxFacilitator::new();
    let (facilitator, rpc) = sandbox_over_http(&sandbox).await;
    let mut store = start(&facilitator, &rpc, &database, &[]).await;
    let client = reqwest::Client::new();
    let (signature, payment) = sign(&client, &store.base).await;

    // `/settle` takes 2 s; the buyer hangs up while it runs, then SIGTERM comes.
    sandbox.queue_settle(Step::Answer.after(Duration::from_secs(2)));
    let sale = {
        let (client, base) = (client.clone(), store.base.clone());
        tokio::spawn(async move { present(&client, &base, &signature).await })
    };
    let started = Instant::now();
    while sandbox.settle_calls() == 0 {
        assert!(started.elapsed() < PATIENCE, "/settle never came");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    sale.abort();
    let pid = store.child.id().expect("the store runs").to_string();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(killed.success());
    let exit = tokio::time::timeout(PATIENCE, store.child.wait())
        .await
        .expect("the store exits")
        .unwrap();
    assert!(exit.success(), "the store exits 0: {exit}");
    assert_eq!(sandbox.settle_calls(), 1);
    assert_eq!(sandbox.settlement_count(), 1);
    // The settlement finished and was recorded before the process exited.
    let ledger = Store::open(&database).await.unwrap();
    let entry = ledger
        .load(&PaymentKey::of(&payment))
        .await
        .unwrap()
        .expect("the payment is in the ledger");
    assert!(
        matches!(entry.state, PaymentState::Settled { .. }),
        "{:?}",
        entry.state
    );
}
