//! What the `channels` example tells and refuses an operator, driven as real processes (the
//! built `examples/channels` binary, in `CARGO_TARGET_DIR` when set) against a sandbox
//! facilitator served from this test: a second process paid to the same receiver with a memory
//! store of its own refuses to start (it would serve vouchers the first already counted) until
//! the first has exited; without `--rpc-url`, a claim interval not well inside the channels'
//! withdrawal delay is warned about at start, as is running without `--database-url`; with
//! `--rpc-url` (the sandbox's chain view), a deposit whose `/settle` answer was lost is served
//! when the buyer sends it again, with one deposit on chain.

use std::io::{BufRead as _, BufReader, Read as _};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use tower_x402_sandbox::{SandboxFacilitator, SandboxWallet, Step};
use x402_wire::{
    Network, PAYMENT_SIGNATURE, PaymentPayload, PaymentRequired, PaymentRequirements, header,
};

const PAY_TO: &str = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";

/// The example binary of this test's profile: in `CARGO_TARGET_DIR` when it is set (the test
/// executable may live in a separate build directory), else beside the test's own profile.
fn binary() -> PathBuf {
    let test = std::env::current_exe().unwrap();
    let profile_dir = test.parent().and_then(|deps| deps.parent()).unwrap();
    let profile = profile_dir.file_name().unwrap();
    let binary = match std::env::var_os("CARGO_TARGET_DIR") {
        Some(target) => PathBuf::from(target)
            .join(profile)
            .join("examples/channels"),
        None => profile_dir.join("examples/channels"),
    };
    assert!(
        binary.exists(),
        "{} is not built: run `cargo build --example channels` first",
        binary.display()
    );
    binary
}

/// A running example, killed when dropped (a failed assertion leaves no process behind).
struct Example(Child);

impl std::ops::Deref for Example {
    type Target = Child;

    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for Example {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for Example {
    fn drop(&mut self) {
        if self.0.try_wait().ok().flatten().is_none() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// The example started with `args`, its stdout and stderr piped.
fn spawn(args: &[&str]) -> Example {
    let child = Command::new(binary())
        .args(["--listen", "127.0.0.1:0"])
        .args(args)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    Example(child)
}

/// The example started with `args`, once it printed its `listening on` line: the process, its
/// base URL, and what it writes on stderr (read on a thread of its own, whole once it exits).
async fn start(args: &[&str]) -> (Example, String, std::thread::JoinHandle<String>) {
    let mut child = spawn(args);
    let stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let errors = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
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
    (child, base, errors)
}

/// Waits (up to 30 s) for `child` to exit.
async fn exited(child: &mut Child) -> ExitStatus {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(Instant::now() < deadline, "still running after 30 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Sends SIGTERM and waits for the exit.
async fn terminate(child: &mut Child) -> ExitStatus {
    let sent = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success(), "kill -TERM failed");
    exited(child).await
}

async fn serve(sandbox: &SandboxFacilitator) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(sandbox.clone().serve(listener));
    url
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_process_on_the_same_receiver_with_its_own_memory_refuses_to_start() {
    let sandbox = SandboxFacilitator::new();
    let facilitator = serve(&sandbox).await;
    let args = ["--facilitator", &facilitator, "--pay-to", PAY_TO];
    let (mut first, _, first_errors) = start(&args).await;

    let mut second = spawn(&args);
    let status = exited(&mut second).await;
    let mut errors = String::new();
    second
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut errors)
        .unwrap();
    assert!(!status.success(), "the second process ran: {errors}");
    assert!(
        errors.contains("another process keeps the channels of receiver")
            && errors.contains("--database-url"),
        "{errors}"
    );

    // The first serves on; once it exited, the receiver is free again.
    assert!(first.try_wait().unwrap().is_none(), "the first stopped");
    assert!(terminate(&mut first).await.success());
    let warned = first_errors.join().unwrap();
    assert!(warned.contains("no --database-url"), "{warned}");
    let (mut again, _, _) = start(&args).await;
    assert!(terminate(&mut again).await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_interval_beyond_the_withdrawal_delay_without_a_watch_is_warned_about() {
    let sandbox = SandboxFacilitator::new();
    let facilitator = serve(&sandbox).await;
    let base = ["--facilitator", &facilitator, "--pay-to", PAY_TO];
    let (mut long, _, errors) = start(&[&base[..], &["--claim-every", "3600"]].concat()).await;
    assert!(terminate(&mut long).await.success());
    let errors = errors.join().unwrap();
    assert!(
        errors.contains("is not well inside the channels' withdrawal delay of 900s"),
        "{errors}"
    );

    let (mut short, _, errors) = start(&[&base[..], &["--claim-every", "60"]].concat()).await;
    assert!(terminate(&mut short).await.success());
    let errors = errors.join().unwrap();
    assert!(!errors.contains("withdrawal delay"), "{errors}");
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

/// `url` paid with `payment`: the status and the body.
async fn pay(url: &str, payment: &PaymentPayload) -> (u16, String) {
    let response = reqwest::Client::new()
        .get(url)
        .header(PAYMENT_SIGNATURE, header::encode(payment).unwrap())
        .send()
        .await
        .unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deposit_whose_settle_answer_was_lost_is_served_when_sent_again_with_rpc_url() {
    let sandbox = SandboxFacilitator::new();
    let facilitator = serve(&sandbox).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let rpc = format!("http://{}", listener.local_addr().unwrap());
    let chain = sandbox.rpc_router(Network::BASE);
    tokio::spawn(async move { axum::serve(listener, chain).await });
    let (mut example, base, _) = start(&[
        "--facilitator",
        &facilitator,
        "--pay-to",
        PAY_TO,
        "--rpc-url",
        &rpc,
    ])
    .await;
    let url = format!("{base}/v1/rows?count=2");
    let accept = challenge(&url).await;
    let wallet = SandboxWallet::random();
    let config = wallet.channel_config(&accept, [7; 32]).unwrap();
    let channel = SandboxWallet::channel_id(&config, &accept.network).unwrap();
    let deposited = 200_000;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let deposit = wallet
        .deposit_payment_at(&accept, &config, deposited, 10_000, now)
        .unwrap();

    // The deposit moves; its answer is lost.
    sandbox.queue_settle(Step::AnswerLost);
    let (status, body) = pay(&url, &deposit).await;
    assert_eq!(status, 503, "{body}");
    let view = sandbox.channel_state(&Network::BASE, &channel).unwrap();
    assert_eq!(view.balance, deposited, "the deposit moved");

    // The same deposit sent again: found on chain, served, the voucher's charge committed.
    let (status, body) = pay(&url, &deposit).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"row\""), "{body}");
    let view = sandbox.channel_state(&Network::BASE, &channel).unwrap();
    assert_eq!(view.balance, deposited, "one deposit");
    // Sent a third time, it is not served again.
    let (status, body) = pay(&url, &deposit).await;
    assert_ne!(status, 200, "{body}");

    // The charge is claimed on SIGTERM: the buyer paid for what it was served, once.
    assert!(terminate(&mut example).await.success());
    let view = sandbox.channel_state(&Network::BASE, &channel).unwrap();
    assert_eq!(view.total_claimed, 2_000);
}
