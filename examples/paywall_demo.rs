//! A minimal paid endpoint: `GET /report` costs $0.01 in USDC on Base Sepolia, paid through
//! `X402Layer`, with the sandbox facilitator in process (or a facilitator URL).
//!
//! ```text
//! cargo run --example paywall_demo                        # prints `listening on http://ADDR`
//! cargo run -p x402-buyer --bin pay -- http://ADDR/report # in another terminal
//!
//! cargo run --example sandbox_facilitator -- --listen 127.0.0.1:4021 &
//! cargo run --example paywall_demo -- --facilitator http://127.0.0.1:4021
//! ```

use std::process::ExitCode;
use std::sync::Arc;

use axum::routing::get;
use axum::{Json, Router};
use clap::Parser;
use serde_json::json;
use tower_x402::proto::{ResourceInfo, UsdcDeployment};
use tower_x402::{Offer, SettlementMode, VerifiedPayment, X402Layer};
use tower_x402_sandbox::demo;

/// A one-route paywall for trying x402 clients against.
#[derive(Debug, Parser)]
#[command(name = "paywall_demo")]
struct Args {
    /// Address to listen on; port 0 picks a free one.
    #[arg(
        long,
        value_name = "HOST:PORT",
        env = "DEMO_LISTEN",
        default_value = "127.0.0.1:3402"
    )]
    listen: String,
    /// Facilitator base URL; without it the sandbox runs in process.
    #[arg(long, value_name = "URL", env = "DEMO_FACILITATOR")]
    facilitator: Option<String>,
    /// Settle before running the handler instead of after.
    #[arg(long)]
    settle_first: bool,
    /// Where payments go.
    #[arg(
        long,
        value_name = "ADDRESS",
        default_value = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C"
    )]
    pay_to: String,
}

#[tokio::main]
async fn main() -> ExitCode {
    demo::exit_code("paywall_demo", serve(Args::parse()).await)
}

async fn serve(args: Args) -> Result<(), String> {
    let (listener, address) = demo::listen(&args.listen).await?;
    let mode = if args.settle_first {
        SettlementMode::Before
    } else {
        SettlementMode::After
    };
    let offer = Offer::builder(ResourceInfo::new(format!("http://{address}/report")))
        .usdc(
            &UsdcDeployment::BASE_SEPOLIA,
            "0.01".parse().map_err(|e| format!("price: {e}"))?,
            args.pay_to,
        )
        .settlement(mode)
        .build()
        .map(Arc::new)
        .map_err(|e| format!("offer: {e}"))?;
    let facilitator = demo::facilitator_or_sandbox(args.facilitator.as_deref())?;
    let paywall = X402Layer::new(facilitator, offer);
    let app = Router::new()
        .route(
            "/",
            get(|| async { "GET /report costs $0.01 (USDC, Base Sepolia)\n" }),
        )
        .route("/report", get(report).layer(paywall));

    demo::serve_until_ctrl_c(listener, app).await
}

async fn report(payment: VerifiedPayment) -> Json<serde_json::Value> {
    Json(json!({
        "report": "the paid content",
        "payer": payment.payer,
        "settlement": payment.settlement.map(|settlement| settlement.transaction),
    }))
}
