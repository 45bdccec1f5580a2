use std::sync::Arc;
use std::time::Duration;

use axum::http::request::Parts;
use axum::{Router, routing::get};
use tower_x402::payment::Payments;
use tower_x402::proto::{AtomicAmount, Network, ResourceInfo, UsdcDeployment};
use tower_x402::{Charge, HttpFacilitator, Offer, Price, SettlementMode, X402Layer};
use tower_x402_channels::{BatchSettlement, ChannelOffer, ClaimPolicy, Claimer, MemoryChannelStore};

/// One row for 0.001 USDC (USDC has six decimals: atomic units are micro-dollars).
async fn row(charge: Charge) -> &'static str {
    charge.set(AtomicAmount(1_000));
    "one row"
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let facilitator = HttpFacilitator::new("https://facilitator.example")?;
    // The channels' state: one store for every server paid to this receiver (see below).
    let channels = Arc::new(MemoryChannelStore::default());
    let payments = BatchSettlement::new(Arc::clone(&channels))
        .register(Payments::new(facilitator.clone()));

    // Up to 0.01 USDC a request, on Base.
    let terms = ChannelOffer::from_facilitator(&facilitator, &Network::BASE).await?;
    let offer = Offer::builder(ResourceInfo::new("https://api.example.com/row"))
        .accept(terms.usdc(&UsdcDeployment::BASE, AtomicAmount(10_000), "0x209693Bc6afc0C5328bA36FaF03C514EF312287C"))
        .settlement(SettlementMode::After)
        .build()?;
    let offer = Arc::new(offer);
    let paywall = X402Layer::with_payments(payments.clone(), move |_: &Parts| {
        Price::Charge(Arc::clone(&offer))
    });

    // Claims every minute, and everything outstanding on shutdown.
    let claimer = Claimer::new(Arc::clone(&channels), facilitator)
        .policy(ClaimPolicy::default().every(Duration::from_secs(60)))
        .spawn();

    let app = Router::new().route("/row", get(row).layer(paywall));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
    axum::serve(listener, app).await?;

    // Served and drained: claim every outstanding voucher and sweep.
    payments.until_idle().await;
    let report = claimer.shutdown().await?;
    println!("claimed {} channels", report.claimed.len());
    Ok(())
}
