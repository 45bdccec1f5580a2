//! The load benchmark's app behind r402 0.21.0: `GET /bare` is the handler alone, and `GET /paid`
//! the same handler priced at 1.00 USDC on Base (x402 v2, scheme `exact`), verified and settled
//! through r402's HTTP facilitator client, with its default settlement (the `authorization` flow,
//! sequential: verify, then the handler, then settle).
//!
//! Usage: `peer-r402 --facilitator http://127.0.0.1:PORT`. It prints the address it listens on as
//! one line, then serves until killed.

use alloy_primitives::address;
use axum::Router;
use axum::routing::get;
use r402::evm::{Eip155Exact, USDC};
use r402::http::server::X402Middleware;

#[tokio::main]
async fn main() {
    let facilitator = x402_peers::facilitator_url("peer-r402");
    let x402 = X402Middleware::try_new(&facilitator)
        .expect("facilitator URL")
        .with_scheme("eip155:8453".parse().expect("network"), Eip155Exact)
        .with_base_url("https://shop.example".parse().expect("base URL"));
    let price = Eip155Exact::price_tag(
        address!("0x209693Bc6afc0C5328bA36FaF03C514EF312287C"),
        USDC::base().amount(1_000_000u64),
        None,
    );
    let paywall = x402
        .with_price_tag(price)
        .expect("price tag")
        .with_resource("https://shop.example/report".parse().expect("resource URL"));
    let app = Router::new()
        .route("/bare", get(x402_peers::handler))
        .route("/paid", get(x402_peers::handler).layer(paywall));

    x402_peers::serve(app).await;
}
