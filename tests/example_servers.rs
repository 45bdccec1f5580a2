//! The example servers as the processes they are: each test starts the built example binary
//! (`target/<profile>/examples/NAME`, built by `cargo test` with the examples, or by
//! `cargo build --examples --all-features`) against a sandbox facilitator served from the test,
//! and talks to it over loopback HTTP — SIGTERM sent with `kill`, as Docker, systemd and
//! Kubernetes send it.

use std::io::{BufRead as _, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tower_x402::mcp::PAYMENT_META;
use tower_x402_sandbox::{SandboxFacilitator, SandboxWallet, Step};
use x402_wire::{PAYMENT_SIGNATURE, PaymentPayload, PaymentRequired, header};

/// An example server running as a child process.
struct Server {
    child: Child,
    base: String,
}

impl Server {
    /// Starts example `name` with `args`, the facilitator at `facilitator`, and waits for its
    /// `listening on` line.
    async fn start(name: &str, facilitator: &str, args: &[&str]) -> Self {
        let binary = example(name);
        let mut child = Command::new(&binary)
            .args(["--listen", "127.0.0.1:0", "--facilitator", facilitator])
            .args(args)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
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
            .unwrap_or_else(|| panic!("{name} printed {line:?}"))
            .to_owned();
        Self { child, base }
    }

    /// Sends SIGTERM.
    fn terminate(&self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success(), "kill -TERM failed");
    }

    /// Waits (up to `limit`) for the process to exit.
    async fn exited(&mut self, limit: Duration) -> ExitStatus {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < deadline, "still running after {limit:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The example binary `name`, next to this test's own directory.
fn example(name: &str) -> PathBuf {
    let test = std::env::current_exe().unwrap();
    let profile = test.parent().and_then(|deps| deps.parent()).unwrap();
    let binary = profile.join("examples").join(name);
    assert!(
        binary.exists(),
        "{} is not built: run `cargo build --examples --all-features` (or `cargo test`, which \
         builds the examples) first",
        binary.display()
    );
    binary
}

/// `sandbox` served over loopback HTTP; its URL.
async fn serve(sandbox: &SandboxFacilitator) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(sandbox.clone().serve(listener));
    url
}

/// A payment of what `url` (unpaid) asks, in its `scheme`, signed by a fresh wallet.
async fn pay(url: &str, scheme: &str) -> PaymentPayload {
    let response = reqwest::get(url).await.unwrap();
    assert_eq!(response.status(), 402, "{url}");
    let mut required: PaymentRequired =
        header::decode(response.headers()["payment-required"].as_bytes()).unwrap();
    required.accepts.retain(|accept| accept.scheme == scheme);
    SandboxWallet::random().pay(&required).unwrap()
}

fn signature(payload: &PaymentPayload) -> String {
    header::encode(payload)
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned()
}

/// Waits (up to 10 s) until `sandbox` has received `calls` `/settle` calls.
async fn settle_calls(sandbox: &SandboxFacilitator, calls: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while sandbox.settle_calls() < calls {
        assert!(Instant::now() < deadline, "no /settle");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Reads `response`'s body until it ends or fails; the `data:` events received.
async fn tokens_received(mut response: reqwest::Response, received: &mut usize) {
    while let Ok(Some(chunk)) = response.chunk().await {
        *received += chunk.windows(5).filter(|w| w == b"data:").count();
    }
}

#[tokio::test]
async fn sigterm_lets_a_metered_stream_finish_settles_it_once_and_exits_0() {
    let sandbox = SandboxFacilitator::new();
    let mut server = Server::start("metered", &serve(&sandbox).await, &[]).await;
    let url = format!("{}/v1/tokens?count=60", server.base);
    let payment = pay(&url, "upto").await;
    let mut response = reqwest::Client::new()
        .get(&url)
        .header(PAYMENT_SIGNATURE.as_str(), signature(&payment))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let first = response.chunk().await.unwrap().unwrap();
    assert!(first.starts_with(b"data: token 0"));

    server.terminate();
    // The stream goes on to its end (60 tokens, 3 s).
    let mut received = 1;
    while let Some(chunk) = response
        .chunk()
        .await
        .expect("the stream is finished, not cut")
    {
        received += chunk.windows(5).filter(|w| w == b"data:").count();
    }
    assert_eq!(received, 60);
    let status = server.exited(Duration::from_secs(20)).await;
    assert_eq!(status.code(), Some(0), "{status}");
    let settlements = sandbox.settlements();
    assert_eq!(settlements.len(), 1, "settled once");
    assert_eq!(settlements[0].amount.0, 60_000, "60 tokens at 0.001 USDC");
    assert_eq!(sandbox.settle_calls(), 1);
}

#[tokio::test]
async fn sigterm_cuts_a_stream_after_the_grace_and_settles_what_it_sent_once() {
    let sandbox = SandboxFacilitator::new();
    let facilitator = serve(&sandbox).await;
    let mut server = Server::start("metered", &facilitator, &["--shutdown-grace-secs", "1"]).await;
    let url = format!("{}/v1/tokens?count=400", server.base);
    let payment = pay(&url, "upto").await;
    let response = reqwest::Client::new()
        .get(&url)
        .header(PAYMENT_SIGNATURE.as_str(), signature(&payment))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    tokio::time::sleep(Duration::from_millis(300)).await;
    server.terminate();
    let mut received = 0;
    tokens_received(response, &mut received).await;
    assert!(
        (5..400).contains(&received),
        "cut after the 1 s grace: {received} tokens"
    );
    let status = server.exited(Duration::from_secs(20)).await;
    assert_eq!(status.code(), Some(0), "{status}");
    let settlements = sandbox.settlements();
    assert_eq!(settlements.len(), 1, "what was sent, settled once");
    let charged = settlements[0].amount.0 / 1_000;
    assert!(
        (received as u128..=received as u128 + 2).contains(&charged),
        "charged {charged} tokens, {received} received"
    );
    assert_eq!(sandbox.settle_calls(), 1);
}

#[tokio::test]
async fn sigterm_waits_for_a_settlement_whose_buyer_hung_up() {
    // The sandbox takes 1.5 s to settle.
    let sandbox =
        SandboxFacilitator::new().with_settle(Step::Answer.after(Duration::from_millis(1500)));
    let mut server = Server::start("paywall_demo", &serve(&sandbox).await, &[]).await;
    let url = format!("{}/report", server.base);
    let payment = pay(&url, "exact").await;
    let buyer = tokio::spawn({
        let (url, signature) = (url.clone(), signature(&payment));
        async move {
            reqwest::Client::new()
                .get(url)
                .header(PAYMENT_SIGNATURE.as_str(), signature)
                .send()
                .await
        }
    });
    settle_calls(&sandbox, 1).await;
    // The buyer hangs up mid-settlement, then the server is told to stop.
    buyer.abort();
    server.terminate();
    let status = server.exited(Duration::from_secs(20)).await;
    assert_eq!(status.code(), Some(0), "{status}");
    assert_eq!(
        sandbox.settlements().len(),
        1,
        "the settlement in flight finished before the process exited"
    );
    assert_eq!(sandbox.settle_calls(), 1);
}

#[tokio::test]
async fn the_sandbox_facilitator_process_exits_0_on_sigterm() {
    let binary = example("sandbox_facilitator");
    let mut child = Command::new(&binary)
        .args(["--listen", "127.0.0.1:0"])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.starts_with("listening on http://"), "{line:?}");
    let mut server = Server {
        child,
        base: String::new(),
    };
    server.terminate();
    let status = server.exited(Duration::from_secs(10)).await;
    assert_eq!(status.code(), Some(0), "{status}");
}

#[tokio::test]
async fn a_silent_connection_is_closed_after_the_header_deadline() {
    let sandbox = SandboxFacilitator::new();
    let server = Server::start(
        "metered",
        &serve(&sandbox).await,
        &["--header-timeout-secs", "1"],
    )
    .await;
    let address = server.base.trim_start_matches("http://");
    let started = Instant::now();
    let mut silent = tokio::net::TcpStream::connect(address).await.unwrap();
    let mut buffer = [0u8; 64];
    let read = tokio::time::timeout(Duration::from_secs(5), silent.read(&mut buffer))
        .await
        .expect("a connection that sends nothing is closed");
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
    assert!(started.elapsed() >= Duration::from_millis(900));

    // A slow client that sends half a request is closed as well.
    let mut slow = tokio::net::TcpStream::connect(address).await.unwrap();
    slow.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let read = tokio::time::timeout(Duration::from_secs(5), slow.read(&mut buffer))
        .await
        .expect("a slow request head is cut");
    assert!(matches!(read, Ok(_) | Err(_)));
    // The server still serves others.
    let index = reqwest::get(format!("{}/", server.base)).await.unwrap();
    assert_eq!(index.status(), 200);
}

#[tokio::test]
async fn a_repeated_count_is_refused_in_json_before_any_verify() {
    let sandbox = SandboxFacilitator::new();
    let server = Server::start("metered", &serve(&sandbox).await, &[]).await;
    let payment = pay(&format!("{}/v1/rows?count=5", server.base), "upto").await;
    for query in ["count=5&count=60", "count=x"] {
        let response = reqwest::Client::new()
            .get(format!("{}/v1/rows?{query}", server.base))
            .header(PAYMENT_SIGNATURE.as_str(), signature(&payment))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 400, "{query}");
        assert!(
            response.headers()["content-type"]
                .to_str()
                .unwrap()
                .starts_with("application/json"),
            "{query}"
        );
        let body: Value = response.json().await.unwrap();
        assert!(body["error"].as_str().unwrap().contains("count"), "{body}");
    }
    assert_eq!(sandbox.verify_calls(), 0, "refused before payment");
}

/// One POST of `body` to the MCP endpoint; the status and the JSON answer.
async fn mcp(base: &str, body: impl Into<reqwest::Body>) -> (u16, Value) {
    let response = reqwest::Client::new()
        .post(format!("{base}/mcp"))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-06-18")
        .body(body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    let value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{status} {e}: {text}"));
    (status, value)
}

fn call(tool: &str, arguments: Value, payment: Option<&PaymentPayload>) -> String {
    let mut params = json!({"name": tool, "arguments": arguments});
    if let Some(payment) = payment {
        params["_meta"] = json!({ PAYMENT_META: payment });
    }
    json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": params}).to_string()
}

#[tokio::test]
async fn paid_mcp_answers_bad_requests_as_json_rpc_errors_before_any_verify() {
    let sandbox = SandboxFacilitator::new();
    let server = Server::start("paid_mcp", &serve(&sandbox).await, &[]).await;
    let base = &server.base;

    let (status, answer) = mcp(base, "{not json").await;
    assert_eq!(
        (status, &answer["error"]["code"]),
        (400, &json!(-32700)),
        "{answer}"
    );
    assert_eq!(answer["id"], Value::Null);
    let (status, answer) = mcp(
        base,
        format!("[{}]", call("echo", json!({"text": "a"}), None)),
    )
    .await;
    assert_eq!(
        (status, &answer["error"]["code"]),
        (400, &json!(-32600)),
        "{answer}"
    );
    // A 4 MiB body is refused on its Content-Length, before it is read.
    let mut stream = tokio::net::TcpStream::connect(base.trim_start_matches("http://"))
        .await
        .unwrap();
    stream
        .write_all(
            b"POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
              Accept: application/json, text/event-stream\r\nContent-Length: 4194304\r\n\r\n",
        )
        .await
        .unwrap();
    let mut head = vec![0u8; 4096];
    let read = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut head))
        .await
        .expect("answered without the body")
        .unwrap();
    let answer = String::from_utf8_lossy(&head[..read]);
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(answer.contains("-32600"), "{answer}");

    // A payment for `quote`, sent with arguments `quote` refuses: refused before /verify.
    let (_, unpaid) = mcp(base, call("quote", json!({"symbol": "ACME"}), None)).await;
    let mut required: PaymentRequired =
        serde_json::from_value(unpaid["result"]["structuredContent"].clone()).unwrap();
    required.accepts.retain(|accept| accept.scheme == "exact");
    let payment = SandboxWallet::random().pay(&required).unwrap();
    for arguments in [json!({"symbol": ""}), json!({}), json!({"symbol": 7})] {
        let (status, answer) = mcp(base, call("quote", arguments.clone(), Some(&payment))).await;
        assert_eq!(status, 200);
        assert_eq!(answer["error"]["code"], -32602, "{arguments}: {answer}");
    }
    assert_eq!(
        sandbox.verify_calls(),
        0,
        "invalid arguments cost no /verify"
    );

    // A malformed payment is described as what it is: `_meta["x402/payment"]`.
    let mut params: Value =
        serde_json::from_str(&call("quote", json!({"symbol": "ACME"}), None)).unwrap();
    params["params"]["_meta"] = json!({ PAYMENT_META: {"x402Version": 2, "accepted": 1} });
    let (_, answer) = mcp(base, params.to_string()).await;
    let error = answer["result"]["structuredContent"]["error"]
        .as_str()
        .unwrap();
    assert!(error.contains("_meta[\"x402/payment\"]"), "{error}");
    assert!(!error.contains("header"), "{error}");

    // And the valid call is still paid and served.
    let (_, answer) = mcp(
        base,
        call("quote", json!({"symbol": "ACME"}), Some(&payment)),
    )
    .await;
    assert_eq!(answer["result"]["isError"], false, "{answer}");
    assert_eq!(sandbox.settlements().len(), 1);
}

#[tokio::test]
async fn paid_mcp_serves_calls_in_parallel_within_its_limit() {
    let sandbox = SandboxFacilitator::new();
    let server = Server::start("paid_mcp", &serve(&sandbox).await, &[]).await;
    let base = Arc::new(server.base.clone());
    let calls = (0..40).map(|n| {
        let base = Arc::clone(&base);
        tokio::spawn(async move {
            mcp(
                &base,
                call("echo", json!({"text": format!("call {n}")}), None),
            )
            .await
        })
    });
    for (n, answer) in calls.collect::<Vec<_>>().into_iter().enumerate() {
        let (status, answer) = answer.await.unwrap();
        assert_eq!(status, 200);
        assert_eq!(answer["result"]["content"][0]["text"], format!("call {n}"));
    }
}

/// `sandbox`'s ledger as a chain over Ethereum JSON-RPC (Base); its URL.
async fn chain(sandbox: &SandboxFacilitator) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let router = sandbox.rpc_router(x402_wire::Network::BASE);
    tokio::spawn(async move { axum::serve(listener, router).await });
    url
}

#[tokio::test]
async fn a_lost_settle_answer_is_recovered_with_rpc_url_and_stays_in_doubt_without() {
    for with_rpc in [false, true] {
        let sandbox = SandboxFacilitator::new();
        // The first `/settle` moves the money and its answer is lost (504 from a proxy).
        sandbox.queue_settle(Step::AnswerLost);
        let rpc = chain(&sandbox).await;
        let args: &[&str] = if with_rpc { &["--rpc-url", &rpc] } else { &[] };
        let server = Server::start("metered", &serve(&sandbox).await, args).await;
        let url = format!("{}/v1/rows?count=2", server.base);
        let payment = pay(&url, "upto").await;
        let mut statuses = Vec::new();
        for _ in 0..3 {
            let response = reqwest::Client::new()
                .get(&url)
                .header(PAYMENT_SIGNATURE.as_str(), signature(&payment))
                .send()
                .await
                .unwrap();
            statuses.push(response.status().as_u16());
            if response.status() == 200 {
                assert!(response.headers().contains_key("payment-response"));
                break;
            }
            assert!(response.headers().contains_key("retry-after"));
        }
        if with_rpc {
            assert_eq!(statuses, [503, 200], "recovered from the chain");
        } else {
            assert_eq!(statuses, [503, 503, 503], "in doubt, never 402");
        }
        assert_eq!(sandbox.settlements().len(), 1, "one transfer in all");
    }
}

#[tokio::test]
async fn paywall_demo_moves_new_sales_off_a_facilitator_that_cannot_settle() {
    let primary = SandboxFacilitator::new().with_settle(Step::Status(500));
    let secondary = SandboxFacilitator::new();
    let facilitators = format!("{},{}", serve(&primary).await, serve(&secondary).await);
    let server = Server::start("paywall_demo", &facilitators, &[]).await;
    let url = format!("{}/report", server.base);
    let mut statuses = Vec::new();
    for _ in 0..5 {
        let payment = pay(&url, "exact").await;
        let response = reqwest::Client::new()
            .get(&url)
            .header(PAYMENT_SIGNATURE.as_str(), signature(&payment))
            .send()
            .await
            .unwrap();
        statuses.push(response.status().as_u16());
    }
    assert_eq!(statuses, [503, 503, 503, 200, 200]);
    assert_eq!(primary.settle_calls(), 3);
    assert_eq!(primary.settlement_count(), 0);
    assert_eq!(secondary.settlement_count(), 2);
}
