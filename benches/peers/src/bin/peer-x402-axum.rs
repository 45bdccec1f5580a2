//! The load benchmark's app behind x402-axum 2.0.2: `GET /bare` is the handler alone, and
//! `GET /paid` the same handler priced at 1.00 USDC on Base (x402 v2, scheme `exact`), verified
//! and settled through x402-axum's HTTP facilitator client, with its default settlement after the
//! handler.
//!
//! Usage: `peer-x402-axum --facilitator http://127.0.0.1:PORT`. It prints the address it listens
//! on as one line, then serves until killed.

use alloy_primitives::address;
use axum::Router;
use axum::routing::get;
use x402_axum::X402Middleware;
use x402_chain_eip155::{KnownNetworkEip155, V2Eip155Exact};
use x402_types::networks::USDC;

#[tokio::main]
async fn main() {
    let facilitator = x402_peers::facilitator_url("peer-x402-axum");
    let x402 = X402Middleware::try_new(&facilitator).expect("facilitator URL");
    let price = V2Eip155Exact::price_tag(
        address!("0x209693Bc6afc0C5328bA36FaF03C514EF312287C"),
        USDC::base().amount(1_000_000u64),
    );
    let paywall = x402
        .with_price_tag(price)
        .with_resource("https://shop.example/report".parse().expect("resource URL"));
    let app = Router::new()
        .route("/bare", get(x402_peers::handler))
        .route("/paid", get(x402_peers::handler).layer(paywall));

    x402_peers::serve(app).await;
}
