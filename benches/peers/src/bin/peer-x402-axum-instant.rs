//! The load benchmark's app behind x402-axum 2.0.2 as `peer-x402-axum` serves it, but paying
//! through an in-process facilitator that accepts every payment at once (no network, no
//! serialization): x402-axum's own work on a paid request, as tower-x402's `layer paid`
//! instruction budget measures its own.
//!
//! Usage: `peer-x402-axum-instant --facilitator http://127.0.0.1:PORT` (the URL is not used; it
//! is taken so that every app starts the same way). It prints the address it listens on as one
//! line, then serves until killed.

use alloy_primitives::address;
use axum::Router;
use axum::routing::get;
use x402_axum::X402Middleware;
use x402_chain_eip155::{KnownNetworkEip155, V2Eip155Exact};
use x402_peers::instant::X402AxumInstant;
use x402_types::networks::USDC;

#[tokio::main]
async fn main() {
    let _ = x402_peers::facilitator_url("peer-x402-axum-instant");
    let x402 = X402Middleware::from_facilitator(X402AxumInstant);
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
