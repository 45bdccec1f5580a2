//! The `channels` example as the process it is: started from its built binary
//! (`target/<profile>/examples/channels`, built by `cargo test` with the examples, or by
//! `cargo build --example channels`) against a sandbox facilitator served from this test, a
//! buyer paying it over loopback with the sandbox wallet — one deposit, then vouchers — and
//! SIGTERM sent with `kill`: the claims and the sweep are read on the sandbox's chain. With
//! `--database-url`, a second process on the same PostgreSQL database continues the channel.

use std::io::{BufRead as _, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use tower_x402_sandbox::{SandboxFacilitator, SandboxWallet, Step};
use x402_wire::{
    AtomicAmount, Network, PAYMENT_RESPONSE, PAYMENT_SIGNATURE, PaymentPayload, PaymentRequired,
    PaymentRequirements, SettleResponse, UsdcDeployment, header,
};

#[path = "../examples/store/tests/store/postgres_server.rs"]
#[allow(dead_code)]
mod postgres_server;

const PAY_TO: &str = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";
const MAXIMUM: u128 = 10_000;
const ROW: u128 = 1_000;

/// The example running as a child process.
struct Example {
    child: Child,
    base: String,
}

impl Example {
    /// Starts the example with `args` and waits for its `listening on` line.
    async fn start(args: &[&str]) -> Self {
        Self::start_with(args, Stdio::inherit()).await
    }

    /// [`start`](Self::start), its stderr going to `stderr`.
    async fn start_with(args: &[&str], stderr: Stdio) -> Self {
        let test = std::env::current_exe().unwrap();
        let profile = test.parent().and_then(|deps| deps.parent()).unwrap();
        let binary: PathBuf = profile.join("examples").join("channels");
        assert!(
            binary.exists(),
            "{} is not built: run `cargo build --example channels` (or `cargo test`, which \
             builds the examples) first",
            binary.display()
        );
        let mut child = Command::new(&binary)
            .args(["--listen", "127.0.0.1:0"])
            .args(args)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .unwrap_or_else(|e| panic!("{}: {e}", binary.display()));
        let stdout = child.stdout.take().expect("piped stdout");
        // Read off the runtime: the sandbox facilitator it serves answers the start-up's calls.
        let line = tokio::task::spawn_blocking(move || {
            let mut line = String::new();
            BufReader::new(stdout).read_line(&mut line).map(|_| line)
        })
        .await
        .unwrap()
        .unwrap();
        let base = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("channels printed {line:?}"))
            .to_owned();
        Self { child, base }
    }

    /// Sends SIGTERM, as Docker, systemd and Kubernetes do, and waits (up to 30 s) for the exit.
    async fn terminate(&mut self) -> ExitStatus {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success(), "kill -TERM failed");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "still running 30 s after SIGTERM"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Example {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// `sandbox` served over loopback HTTP; its URL.
async fn serve(sandbox: &SandboxFacilitator) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(sandbox.clone().serve(listener));
    url
}

/// The `batch-settlement` requirement the route's 402 asks.
async fn challenge(url: &str) -> PaymentRequirements {
    let response = reqwest::get(url).await.unwrap();
    assert_eq!(response.status(), 402, "{url}");
    let required: PaymentRequired =
        header::decode(response.headers()["payment-required"].as_bytes()).unwrap();
    let [accept] = <[PaymentRequirements; 1]>::try_from(required.accepts).unwrap();
    accept
}

/// `url` paid with `payment`: the status, the rows, and the `PAYMENT-RESPONSE`.
async fn buy(url: &str, payment: &PaymentPayload) -> (u16, Value, SettleResponse) {
    let response = reqwest::Client::new()
        .get(url)
        .header(PAYMENT_SIGNATURE, header::encode(payment).unwrap())
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let settlement = response
        .headers()
        .get(PAYMENT_RESPONSE)
        .map(|value| header::decode(value.as_bytes()).unwrap())
        .unwrap_or_else(|| panic!("HTTP {status} without PAYMENT-RESPONSE"));
    (status, response.json().await.unwrap(), settlement)
}

fn rows(count: u64) -> Value {
    json!((0..count).map(|n| json!({"row": n})).collect::<Vec<_>>())
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_counts_are_refused_in_json_before_any_payment_is_asked() {
    let sandbox = SandboxFacilitator::new();
    let facilitator = serve(&sandbox).await;
    let mut example = Example::start(&["--facilitator", &facilitator]).await;
    for count in ["11", "0", "-1", "four", "3&count=4"] {
        let url = format!("{}/v1/rows?count={count}", example.base);
        let response = reqwest::get(&url).await.unwrap();
        assert_eq!(response.status(), 400, "count={count}");
        assert!(
            response.headers().get("payment-required").is_none(),
            "count={count}: a payment was asked"
        );
        let body: Value = response.json().await.unwrap();
        assert!(body["error"].is_string(), "count={count}: {body}");
    }
    assert!(example.terminate().await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deposit_then_vouchers_are_claimed_and_swept_on_sigterm() {
    let sandbox = SandboxFacilitator::new();
    let facilitator = serve(&sandbox).await;
    // Claims only on SIGTERM: the interval is longer than the test.
    let mut example = Example::start(&[
        "--facilitator",
        &facilitator,
        "--pay-to",
        PAY_TO,
        "--claim-every",
        "3600",
    ])
    .await;
    let url = |count: u64| format!("{}/v1/rows?count={count}", example.base);

    let accept = challenge(&url(4)).await;
    let usdc = &UsdcDeployment::BASE;
    assert_eq!(
        (
            accept.scheme.as_str(),
            &accept.network,
            accept.amount.get(),
            accept.asset.as_str(),
            accept.pay_to.as_str()
        ),
        (
            "batch-settlement",
            &Network::BASE,
            MAXIMUM,
            usdc.asset,
            PAY_TO
        )
    );
    let extra = accept.extra.clone().unwrap_or_default();
    assert_eq!(
        extra["receiverAuthorizer"],
        json!(sandbox.receiver_authorizer()),
        "the receiver authorizer is the facilitator's"
    );

    let wallet = SandboxWallet::random();
    let config = wallet.channel_config(&accept, [0; 32]).unwrap();
    let channel = SandboxWallet::channel_id(&config, &accept.network).unwrap();
    let deposit = 20 * MAXIMUM;
    let counts = [4_u64, 1, 10, 3, 7, 2];
    let mut charged = 0_u128;
    for (n, count) in counts.into_iter().enumerate() {
        let ceiling = charged + MAXIMUM;
        let payment = if n == 0 {
            wallet
                .deposit_payment_at(&accept, &config, deposit, ceiling, now())
                .unwrap()
        } else {
            wallet.voucher_payment(&accept, &config, ceiling).unwrap()
        };
        let (status, body, settlement) = buy(&url(count), &payment).await;
        assert_eq!((status, &body), (200, &rows(count)), "request {n}");
        charged += u128::from(count) * ROW;
        let extra = settlement.extra.clone().unwrap_or_default();
        assert!(settlement.success, "request {n}: {settlement:?}");
        assert_eq!(
            extra["chargedAmount"],
            json!((u128::from(count) * ROW).to_string()),
            "request {n}: count={count} charges {} (0.001 USDC a row)",
            u128::from(count) * ROW
        );
        assert_eq!(
            extra["channelState"]["chargedCumulativeAmount"],
            json!(charged.to_string()),
            "request {n}"
        );
        if n == 0 {
            assert_eq!(
                settlement.transaction.len(),
                66,
                "the deposit's transaction"
            );
            assert_eq!(settlement.amount, Some(AtomicAmount(deposit)), "deposited");
        } else {
            assert_eq!(
                settlement.transaction, "",
                "request {n}: a voucher moves nothing"
            );
            assert_eq!(settlement.amount, None, "request {n}: a voucher's amount");
        }
    }

    // Nothing claimed while the example runs; everything claimed and swept by its SIGTERM.
    let state = sandbox.channel_state(&Network::BASE, &channel).unwrap();
    assert_eq!((state.balance, state.total_claimed), (deposit, 0));
    assert!(example.terminate().await.success(), "exit status");
    let state = sandbox.channel_state(&Network::BASE, &channel).unwrap();
    assert_eq!(state.total_claimed, charged, "claimed on SIGTERM");
    assert_eq!(
        sandbox
            .receiver_totals(&Network::BASE, PAY_TO, usdc.asset)
            .unwrap(),
        (charged, charged),
        "claimed and swept to the receiver"
    );
}

/// Buys `count` rows on the channel with `payment`; answers the charge reported and the new
/// cumulative.
async fn paid_rows(url: &str, count: u64, payment: &PaymentPayload) -> (Value, Value) {
    let (status, body, settlement) = buy(url, payment).await;
    assert_eq!(
        (status, &body),
        (200, &rows(count)),
        "{url}: {settlement:?}"
    );
    let extra = settlement.extra.unwrap_or_default();
    (
        extra["chargedAmount"].clone(),
        extra["channelState"]["chargedCumulativeAmount"].clone(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_database_url_a_restarted_example_continues_the_channel() {
    postgres_server::require();
    let database = postgres_server::fresh_database().await;
    let sandbox = SandboxFacilitator::new();
    let facilitator = serve(&sandbox).await;
    let args = [
        "--facilitator",
        &facilitator,
        "--pay-to",
        PAY_TO,
        "--database-url",
        &database,
        "--claim-every",
        "3600",
    ];

    let mut first = Example::start(&args).await;
    let url = format!("{}/v1/rows?count=2", first.base);
    let accept = challenge(&url).await;
    let wallet = SandboxWallet::random();
    let config = wallet.channel_config(&accept, [0; 32]).unwrap();
    let channel = SandboxWallet::channel_id(&config, &accept.network).unwrap();
    let deposit = wallet
        .deposit_payment_at(&accept, &config, 20 * MAXIMUM, MAXIMUM, now())
        .unwrap();
    assert_eq!(
        paid_rows(&url, 2, &deposit).await,
        (json!("2000"), json!("2000"))
    );
    let voucher = wallet
        .voucher_payment(&accept, &config, 2 * ROW + MAXIMUM)
        .unwrap();
    assert_eq!(
        paid_rows(&url, 2, &voucher).await,
        (json!("2000"), json!("4000"))
    );
    assert!(first.terminate().await.success());
    assert_eq!(
        sandbox
            .channel_state(&Network::BASE, &channel)
            .unwrap()
            .total_claimed,
        4 * ROW,
        "claimed on the first process's SIGTERM"
    );

    // Another process on the same database: the channel goes on from its cumulative, and the
    // voucher the first process accepted is not accepted again.
    let mut second = Example::start(&args).await;
    let url = format!("{}/v1/rows?count=5", second.base);
    let replayed = reqwest::Client::new()
        .get(&url)
        .header(PAYMENT_SIGNATURE, header::encode(&voucher).unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(
        replayed.status(),
        402,
        "a voucher accepted before the restart"
    );
    let corrective: PaymentRequired =
        header::decode(replayed.headers()["payment-required"].as_bytes()).unwrap();
    assert_eq!(
        corrective.error.as_deref(),
        Some("invalid_batch_settlement_evm_cumulative_amount_mismatch")
    );
    let state = &corrective.accepts[0].extra.as_ref().unwrap()["channelState"];
    assert_eq!(state["chargedCumulativeAmount"], json!("4000"), "{state}");
    let next = wallet
        .voucher_payment(&accept, &config, 4 * ROW + MAXIMUM)
        .unwrap();
    assert_eq!(
        paid_rows(&url, 5, &next).await,
        (json!("5000"), json!("9000"))
    );
    assert!(second.terminate().await.success());
    assert_eq!(
        sandbox
            .channel_state(&Network::BASE, &channel)
            .unwrap()
            .total_claimed,
        9 * ROW,
        "claimed on the second process's SIGTERM"
    );
    assert_eq!(
        sandbox
            .receiver_totals(&Network::BASE, PAY_TO, UsdcDeployment::BASE.asset)
            .unwrap(),
        (9 * ROW, 9 * ROW),
        "claimed and swept to the receiver"
    );
}

/// A deposit of 20 × the maximum and one voucher on the example at `base`, 4,000 charged; the
/// wallet's channel id.
async fn four_rows_charged(base: &str) -> String {
    let url = format!("{base}/v1/rows?count=2");
    let accept = challenge(&url).await;
    let wallet = SandboxWallet::random();
    let config = wallet.channel_config(&accept, [7; 32]).unwrap();
    let deposit = wallet
        .deposit_payment_at(&accept, &config, 20 * MAXIMUM, MAXIMUM, now())
        .unwrap();
    assert_eq!(
        paid_rows(&url, 2, &deposit).await,
        (json!("2000"), json!("2000"))
    );
    let voucher = wallet
        .voucher_payment(&accept, &config, 2 * ROW + MAXIMUM)
        .unwrap();
    assert_eq!(
        paid_rows(&url, 2, &voucher).await,
        (json!("2000"), json!("4000"))
    );
    SandboxWallet::channel_id(&config, &accept.network).unwrap()
}

/// Waits (up to 10 s) until `sandbox` has received `calls` `/settle` calls.
async fn settle_calls_reach(sandbox: &SandboxFacilitator, calls: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while sandbox.settle_calls() < calls {
        assert!(
            Instant::now() < deadline,
            "{} /settle calls",
            sandbox.settle_calls()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn after_a_kill_during_a_claim_a_restarted_example_claims_the_channel_on_sigterm() {
    postgres_server::require();
    let database = postgres_server::fresh_database().await;
    let sandbox = SandboxFacilitator::new();
    let facilitator = serve(&sandbox).await;
    // The deposit settles; the first claim never answers (and does nothing).
    sandbox.queue_settle(Step::Answer);
    sandbox.queue_settle(Step::Hang);
    let args = |every: &'static str| {
        vec![
            "--facilitator".to_owned(),
            facilitator.clone(),
            "--pay-to".into(),
            PAY_TO.into(),
            "--database-url".into(),
            database.clone(),
            "--claim-every".into(),
            every.into(),
            "--claim-lease".into(),
            "3".into(),
        ]
    };
    let claiming = args("1");
    let claiming: Vec<&str> = claiming.iter().map(String::as_str).collect();
    let mut first = Example::start(&claiming).await;
    let channel = four_rows_charged(&first.base).await;
    // The claim is sent and hangs; the instance dies under it.
    settle_calls_reach(&sandbox, 2).await;
    first.child.kill().unwrap();
    first.child.wait().unwrap();
    let state = sandbox.channel_state(&Network::BASE, &channel).unwrap();
    assert_eq!(state.total_claimed, 0, "the hung claim did nothing");

    // A restart stopped at once: its shutdown waits for the dead claimer's lease, then claims.
    let idle = args("3600");
    let idle: Vec<&str> = idle.iter().map(String::as_str).collect();
    let mut second = Example::start(&idle).await;
    let status = second.terminate().await;
    assert!(status.success(), "{status}");
    assert_eq!(
        sandbox
            .channel_state(&Network::BASE, &channel)
            .unwrap()
            .total_claimed,
        4 * ROW,
        "claimed on the restarted process's SIGTERM"
    );
    assert_eq!(
        sandbox
            .receiver_totals(&Network::BASE, PAY_TO, UsdcDeployment::BASE.asset)
            .unwrap(),
        (4 * ROW, 4 * ROW),
        "and swept"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn claims_refused_through_shutdown_make_the_example_exit_non_zero_naming_the_amount() {
    let sandbox = SandboxFacilitator::new().with_settle(Step::Refuse(
        "invalid_batch_settlement_evm_claim_simulation_failed".into(),
    ));
    let facilitator = serve(&sandbox).await;
    sandbox.queue_settle(Step::Answer);
    let log = std::env::temp_dir().join(format!("channels-refused-{}.log", now()));
    let file = std::fs::File::create(&log).unwrap();
    let mut example = Example::start_with(
        &[
            "--facilitator",
            &facilitator,
            "--pay-to",
            PAY_TO,
            "--claim-every",
            "1",
        ],
        Stdio::from(file),
    )
    .await;
    let channel = four_rows_charged(&example.base).await;
    // Refused while running, then once more on SIGTERM.
    settle_calls_reach(&sandbox, 2).await;
    let status = example.terminate().await;
    let stderr = std::fs::read_to_string(&log).unwrap();
    let _ = std::fs::remove_file(&log);
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("4000 charged left unclaimed on 1 channels") && stderr.contains(&channel),
        "{stderr}"
    );
    assert!(
        stderr.contains("claim refused"),
        "the refusal is logged: {stderr}"
    );
}
