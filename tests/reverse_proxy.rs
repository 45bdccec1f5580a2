//! Debian's nginx in front of x402 servers: the `metered` example behind the stock
//! configuration, its 402 passing the proxy and a metered (`upto`) payment made through the
//! proxy charged what was served; and a 402 too large for the stock buffer, refused by nginx
//! (`502`) until the buffers of the server block in `examples/store/DEPLOYMENT.md` are used.
//!
//! The example runs as its own process (built here with cargo, like an operator's
//! `cargo build --example metered`), settling through its in-process sandbox facilitator.

#[path = "common/nginx.rs"]
mod nginx;

use std::io::{BufRead as _, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use std::sync::Arc;

use axum::Router;
use axum::routing::get;
use serde_json::json;
use tower_x402::{Offer, X402Layer};
use tower_x402_sandbox::{SandboxFacilitator, SandboxWallet};
use x402_wire::{
    AtomicAmount, Extension, PaymentRequired, ResourceInfo, SettleResponse, UsdcDeployment, header,
};

use nginx::{Nginx, free_port};

/// The `metered` example's binary, built for this test's profile into this test's target
/// directory (a no-op when it is up to date).
fn metered_binary() -> PathBuf {
    let test_binary = std::env::current_exe().expect("the test binary's path");
    // …/target/<profile>/deps/reverse_proxy-<hash>
    let profile_dir = test_binary
        .parent()
        .and_then(|deps| deps.parent())
        .expect("the profile directory")
        .to_path_buf();
    let target_dir = profile_dir.parent().expect("the target directory");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut build = Command::new(cargo);
    build
        // Every feature, whatever the example requires: the library the tests were built with
        // (`--all-features`) is reused, and only the example is linked.
        .args([
            "build",
            "--quiet",
            "-p",
            "tower-x402",
            "--all-features",
            "--example",
            "metered",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("CARGO_TARGET_DIR", target_dir);
    if profile_dir.ends_with("release") {
        build.arg("--release");
    }
    let status = build.status().expect("cargo ran");
    assert!(status.success(), "cargo build --example metered: {status}");
    profile_dir.join("examples").join("metered")
}

/// The example running; killed when dropped.
struct Metered {
    child: Child,
    address: SocketAddr,
}

impl Metered {
    fn start() -> Self {
        let mut child = Command::new(metered_binary())
            .args(["--listen", "127.0.0.1:0"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("the metered example started");
        let stdout = child.stdout.take().expect("its stdout");
        let (sender, receiver) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if let Some(address) = line
                    .split("listening on http://")
                    .nth(1)
                    .and_then(|rest| rest.split_whitespace().next())
                    .and_then(|address| address.parse::<SocketAddr>().ok())
                {
                    let _ = sender.send(address);
                }
            }
        });
        let address = receiver
            .recv_timeout(Duration::from_secs(30))
            .expect("the metered example printed `listening on http://ADDR` within 30 s");
        Self { child, address }
    }
}

impl Drop for Metered {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test]
async fn a_metered_charge_through_a_stock_nginx() {
    let metered = Metered::start();
    let nginx = Nginx::start(free_port(), metered.address);
    let client = reqwest::Client::new();
    let url = format!("{}/v1/rows?count=3", nginx.origin());

    let started = Instant::now();
    let offer = client.get(&url).send().await.unwrap();
    assert_eq!(
        offer.status(),
        402,
        "nginx error log:\n{}",
        nginx.error_log()
    );
    let challenge = offer.headers()["payment-required"].clone();
    let required: PaymentRequired = header::decode(challenge.as_bytes()).unwrap();
    assert_eq!(required.accepts[0].scheme, "upto");

    let payment = header::encode(&SandboxWallet::random().pay(&required).unwrap()).unwrap();
    let paid = client
        .get(&url)
        .header("payment-signature", payment)
        .send()
        .await
        .unwrap();
    assert_eq!(
        paid.status(),
        200,
        "nginx error log:\n{}",
        nginx.error_log()
    );
    let settlement: SettleResponse =
        header::decode(paid.headers()["payment-response"].as_bytes()).unwrap();
    assert!(settlement.success, "{settlement:?}");
    assert_eq!(
        settlement.amount,
        Some(AtomicAmount(30_000)),
        "three rows at 0.01 USDC, not the 0.50 maximum"
    );
    let body = paid.text().await.unwrap();
    assert!(body.contains("row"), "{body}");
    let log = nginx.error_log();
    assert!(!log.contains("too big header"), "{log}");
    println!(
        "through nginx on {}: 402 ({} bytes of PAYMENT-REQUIRED), paid 200 charged {} of {} atomic units, in {:.2} s",
        nginx.origin(),
        challenge.len(),
        settlement.amount.map_or(0, |amount| amount.get()),
        required.accepts[0].amount.get(),
        started.elapsed().as_secs_f64()
    );
}

/// The body of the `location /` block of the nginx server block in `DEPLOYMENT.md`, proxying
/// to `upstream` instead of the `store` upstream group.
fn deployment_location(upstream: SocketAddr) -> String {
    let guide = include_str!("../examples/store/DEPLOYMENT.md");
    let block = guide
        .split("```nginx\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("DEPLOYMENT.md has an nginx block");
    let location = block
        .split("location / {")
        .nth(1)
        .and_then(|rest| rest.split("\n    }\n").next())
        .expect("the nginx block has `location / {`");
    assert!(location.contains("proxy_pass http://store;"), "{location}");
    location.replace(
        "proxy_pass http://store;",
        &format!("proxy_pass http://{upstream};"),
    )
}

#[tokio::test]
async fn a_402_too_large_for_the_stock_buffer_passes_with_the_deployment_guides_block() {
    // An offer with 6 KB of extensions: its 402's head is far past 4 KB.
    let offer = Offer::builder(ResourceInfo::new("https://shop.example/report"))
        .usdc(
            &UsdcDeployment::BASE,
            "0.10".parse().unwrap(),
            "0x209693Bc6afc0C5328bA36FaF03C514EF312287C",
        )
        .extension(
            "large",
            Extension::new(json!({"note": "x".repeat(4500)}), json!({})),
        )
        .build()
        .unwrap();
    let app = Router::new().route(
        "/report",
        get(|| async { "paid" }).layer(X402Layer::new(SandboxFacilitator::new(), Arc::new(offer))),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let upstream = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    let client = reqwest::Client::new();

    let stock = Nginx::start(free_port(), upstream);
    let refused = client
        .get(format!("{}/report", stock.origin()))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 502, "the stock buffer refuses it");
    let log = stock.error_log();
    assert!(log.contains("upstream sent too big header"), "{log}");

    let guided = Nginx::start_with(free_port(), &deployment_location(upstream));
    let answer = client
        .get(format!("{}/report", guided.origin()))
        .send()
        .await
        .unwrap();
    assert_eq!(
        answer.status(),
        402,
        "DEPLOYMENT.md's block passes it:\n{}",
        guided.error_log()
    );
    assert!(answer.headers()["payment-required"].len() > 6000);
}
