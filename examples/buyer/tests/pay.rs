//! The `pay` binary against a server on loopback whose facilitator is the sandbox: it buys a
//! fixed-price route and a metered one, and says what each charged — for the metered route the
//! amount settled, beside the maximum it signed.

use std::process::Command;

use axum::Router;
use axum::extract::Query;
use axum::routing::get;
use tower_x402::{Charge, Offer, X402Layer};
use tower_x402_sandbox::SandboxFacilitator;
use x402_wire::{AtomicAmount, ResourceInfo, UsdcDeployment};

const PAY_TO: &str = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";

#[derive(serde::Deserialize)]
struct Rows {
    count: u32,
}

async fn rows(charge: Charge, Query(Rows { count }): Query<Rows>) -> String {
    for _ in 0..count {
        charge.add(AtomicAmount(10_000));
    }
    format!("{count} rows")
}

/// Serves `/report` (0.10 USDC) and `/rows?count=N` (up to 0.50 USDC, 0.01 a row) with the
/// sandbox facilitator in process; returns the base URL and the facilitator.
async fn serve() -> (String, SandboxFacilitator) {
    let facilitator = SandboxFacilitator::new();
    let report = Offer::builder(ResourceInfo::new("http://shop.test/report"))
        .usdc(
            &UsdcDeployment::BASE_SEPOLIA,
            "0.10".parse().unwrap(),
            PAY_TO,
        )
        .build()
        .unwrap();
    let metered = Offer::builder(ResourceInfo::new("http://shop.test/rows"))
        .usdc_upto(
            &UsdcDeployment::BASE_SEPOLIA,
            "0.50".parse().unwrap(),
            PAY_TO,
        )
        .build_for(&facilitator)
        .await
        .unwrap();
    let app = Router::new()
        .route(
            "/report",
            get(|| async { "the report" }).layer(X402Layer::new(facilitator.clone(), report)),
        )
        .route(
            "/rows",
            get(rows).layer(X402Layer::new(facilitator.clone(), metered)),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (base, facilitator)
}

/// Runs `pay URL` to completion off the runtime; returns (success, stdout, stderr).
async fn pay(url: String) -> (bool, String, String) {
    tokio::task::spawn_blocking(move || {
        let output = Command::new(env!("CARGO_BIN_EXE_pay"))
            .arg(&url)
            .env_remove("PAYER_PRIVATE_KEY")
            .output()
            .unwrap();
        (
            output.status.success(),
            String::from_utf8(output.stdout).unwrap(),
            String::from_utf8(output.stderr).unwrap(),
        )
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn pay_says_what_each_route_charged() {
    let (base, facilitator) = serve().await;

    let (ok, stdout, stderr) = pay(format!("{base}/report")).await;
    assert!(ok, "{stderr}");
    assert!(stdout.starts_with("200 OK"), "{stdout}");
    assert!(stdout.contains("the report"), "{stdout}");
    assert!(
        stderr.contains("charged 0.10 USDC (100000 atomic units)"),
        "{stderr}"
    );

    let (ok, stdout, stderr) = pay(format!("{base}/rows?count=7")).await;
    assert!(ok, "{stderr}");
    assert!(stdout.contains("7 rows"), "{stdout}");
    assert!(
        stderr.contains("paying up to 0.50 USDC (500000 atomic units)"),
        "{stderr}"
    );
    assert!(
        stderr.contains(
            "charged 0.07 USDC (70000 atomic units) of the 0.50 USDC (500000 atomic units) signed"
        ),
        "{stderr}"
    );
    assert_eq!(facilitator.settlement_count(), 2);
}

/// `pay --network solana` against a server selling on Solana devnet (and Base Sepolia) through
/// the sandbox: it picks the Solana accept, signs a Solana transaction under the blockhash of
/// the sandbox's Solana JSON-RPC, and prints the network and the transaction.
#[tokio::test(flavor = "multi_thread")]
async fn pay_on_solana_picks_the_solana_accept() {
    const SOLANA_PAY_TO: &str = "2wKupLR9q6wXYppw8Gr2NvWxKBUqm4PPJKkQfoxHDBg4";
    let facilitator = SandboxFacilitator::new();
    let offer = Offer::builder(ResourceInfo::new("http://shop.test/report"))
        .usdc(
            &UsdcDeployment::BASE_SEPOLIA,
            "0.10".parse().unwrap(),
            PAY_TO,
        )
        .accept(facilitator.solana_requirement(
            &UsdcDeployment::SOLANA_DEVNET,
            AtomicAmount(100_000),
            SOLANA_PAY_TO,
        ))
        .build()
        .unwrap();
    let app = Router::new().route(
        "/report",
        get(|| async { "the report" }).layer(X402Layer::new(facilitator.clone(), offer)),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let rpc = format!("http://{}/rpc/solana", listener.local_addr().unwrap());
    tokio::spawn(facilitator.clone().serve(listener));

    let key = "07".repeat(32);
    let payer = x402_buyer::SolanaWallet::from_private_key_hex(&key)
        .unwrap()
        .address();
    let url = format!("{base}/report");
    let output = tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_pay"))
            .args(["--network", "solana", "--solana-rpc", &rpc, &url])
            .env("PAYER_SOLANA_PRIVATE_KEY", key)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8(output.stdout).unwrap();
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(output.status.success(), "{stderr}");
    assert!(stdout.starts_with("200 OK"), "{stdout}");
    assert!(stdout.contains("the report"), "{stdout}");
    let landed = facilitator.solana_settlements();
    assert_eq!(landed.len(), 1);
    assert_eq!(landed[0].payer, payer);
    assert!(
        stdout.contains(&format!("\"transaction\": \"{}\"", landed[0].transaction)),
        "{stdout}"
    );
    assert!(
        stdout.contains("\"network\": \"solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1\""),
        "{stdout}"
    );
    assert!(
        stderr.contains(
            "paying 0.10 USDC (100000 atomic units) on solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1"
        ),
        "{stderr}"
    );
    assert_eq!(facilitator.settlement_count(), 0, "nothing paid on Base");
}

#[tokio::test(flavor = "multi_thread")]
async fn pay_on_a_network_the_server_does_not_offer_says_so() {
    let (base, facilitator) = serve().await;
    let url = format!("{base}/report");
    let output = tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_pay"))
            .args(["--network", "solana", &url])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(!output.status.success());
    assert!(
        stderr.contains("no accept on solana: the server offers eip155:84532"),
        "{stderr}"
    );
    assert_eq!(facilitator.settlement_count(), 0);
}
