//! Heap allocations of a paid request and of a 402 through x402-axum 2.0.2 and r402 0.21.0,
//! each in front of the same axum handler and paying through an in-process facilitator that
//! answers at once, counted with dhat as tower-x402's are (`x402_peers::allocations`): every
//! paid request carries its own EIP-3009 authorization signed for the middleware's own 402
//! challenge. Prints one line per middleware under the table's header; `allocations.sh` beside
//! this crate adds tower-x402's line.
//!
//! Usage: `peer-allocations` (no arguments).

use std::time::{SystemTime, UNIX_EPOCH};

use alloy_primitives::address;
use axum::Router;
use axum::routing::get;
use x402_peers::allocations::{PATH, Row, handler, measure};
use x402_peers::instant::{R402Instant, X402AxumInstant};
use x402_peers::payment::Payer;

#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

/// Where the payments go, as in every benchmark.
const PAY_TO: alloy_primitives::Address = address!("0x209693Bc6afc0C5328bA36FaF03C514EF312287C");

/// The resource every paywall names.
const RESOURCE: &str = "https://shop.example/report";

/// x402-axum's paywall at 1.00 USDC on Base, settled after the handler (its default).
fn x402_axum() -> Router {
    use x402_chain_eip155::{KnownNetworkEip155, V2Eip155Exact};
    use x402_types::networks::USDC;

    let price = V2Eip155Exact::price_tag(PAY_TO, USDC::base().amount(1_000_000u64));
    let paywall = x402_axum::X402Middleware::from_facilitator(X402AxumInstant)
        .with_price_tag(price)
        .with_resource(RESOURCE.parse().expect("resource URL"));
    Router::new().route(PATH, get(handler).layer(paywall))
}

/// r402's paywall at 1.00 USDC on Base, with its default settlement (verify, the handler, then
/// settle).
fn r402() -> Router {
    use r402::evm::{Eip155Exact, USDC};

    let price = Eip155Exact::price_tag(PAY_TO, USDC::base().amount(1_000_000u64), None);
    let paywall = r402::http::server::X402Middleware::from_facilitator(R402Instant)
        .with_scheme("eip155:8453".parse().expect("network"), Eip155Exact)
        .with_base_url("https://shop.example".parse().expect("base URL"))
        .with_price_tag(price)
        .expect("price tag")
        .with_resource(RESOURCE.parse().expect("resource URL"));
    Router::new().route(PATH, get(handler).layer(paywall))
}

fn main() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let payer = Payer::new();
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_secs();
    let mut pay = |challenge: &[u8], nonce| payer.pay(challenge, nonce, now);
    println!("{}", Row::header());
    println!(
        "{}",
        measure(&runtime, "x402-axum", x402_axum(), &mut pay).line()
    );
    println!("{}", measure(&runtime, "r402", r402(), &mut pay).line());
}
