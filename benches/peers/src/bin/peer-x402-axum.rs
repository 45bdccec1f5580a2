//! The load benchmark's app behind x402-axum 2.0.2: `GET /bare` is the handler alone, and
//! `GET /paid` the same handler priced at 1.00 USDC on Base (x402 v2, scheme `exact`), verified
//! and settled through x402-axum's HTTP facilitator client, with its default settlement after the
//! handler.
//!
//! Usage: `peer-x402-axum --facilitator http://127.0.0.1:PORT`. It prints the address it listens
//! on as one line, then serves until killed.

use std::io::Write;

use alloy_primitives::address;
use axum::Router;
use axum::routing::get;
use x402_axum::X402Middleware;
use x402_chain_eip155::{KnownNetworkEip155, V2Eip155Exact};
use x402_types::networks::USDC;

async fn handler() -> &'static str {
    "the report"
}

#[tokio::main]
async fn main() {
    let facilitator = facilitator_url();
    let x402 = X402Middleware::try_new(&facilitator).expect("facilitator URL");
    let price = V2Eip155Exact::price_tag(
        address!("0x209693Bc6afc0C5328bA36FaF03C514EF312287C"),
        USDC::base().amount(1_000_000u64),
    );
    let paywall = x402
        .with_price_tag(price)
        .with_resource("https://shop.example/report".parse().expect("resource URL"));
    let app = Router::new()
        .route("/bare", get(handler))
        .route("/paid", get(handler).layer(paywall));

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let mut stdout = std::io::stdout();
    writeln!(stdout, "{}", listener.local_addr().expect("address")).expect("stdout");
    stdout.flush().expect("stdout");
    axum::serve(listener, app).await.expect("serve");
}

/// The value of `--facilitator`.
fn facilitator_url() -> String {
    let mut args = std::env::args().skip(1);
    match (args.next().as_deref(), args.next(), args.next()) {
        (Some("--facilitator"), Some(url), None) => url,
        _ => {
            eprintln!("usage: peer-x402-axum --facilitator http://127.0.0.1:PORT");
            std::process::exit(2);
        }
    }
}
