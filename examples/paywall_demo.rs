//! A minimal paid endpoint: `GET /report` costs $0.01 in USDC on Base Sepolia, paid through
//! `X402Layer`, with the sandbox facilitator in process (or a facilitator URL).
//!
//! ```text
//! cargo run --example paywall_demo      # prints `listening on http://ADDR`
//! cargo run -p x402-buyer --bin pay -- http://ADDR/report # in another terminal
//!
//! cargo run --example sandbox_facilitator -- --listen 127.0.0.1:4021 &
//! cargo run --example paywall_demo -- --facilitator http://127.0.0.1:4021
//!
//! # failover: new sales move to the second while the first fails to verify or settle
//! cargo run --example paywall_demo -- --facilitator http://primary,http://fallback
//! ```
//!
//! `--rpc-url` names an Ethereum JSON-RPC endpoint to look up a payment whose settlement answer
//! was lost. Served with the limits of `examples/serve/mod.rs` (header and idle deadlines, a
//! connection cap); SIGTERM or Ctrl-C lets the requests in progress finish and settle, then
//! exits 0. A demonstration: the settlement records are kept in memory.

mod serve;

use std::process::ExitCode;
use std::sync::Arc;

use axum::routing::get;
use axum::{Json, Router};
use clap::Parser;
use serde_json::json;
use tower_x402::facilitator::{Facilitator, Facilitators};
use tower_x402::payment::Payments;
use tower_x402::proto::{ResourceInfo, UsdcDeployment};
use tower_x402::{HttpFacilitator, Offer, SettlementMode, VerifiedPayment, X402Layer};
use tower_x402_evm::EvmRpcReconciler;
use tower_x402_sandbox::demo;

/// A one-route paywall for trying x402 clients against.
///
/// A demonstration, not a server to put on the internet as it is: settlement records are kept in
/// memory and it speaks plain HTTP/1.1 (put a reverse proxy in front for TLS). Its limits keep
/// one client from exhausting it, and SIGTERM or Ctrl-C drains it: requests and streams in
/// progress finish, their payments settle, then it exits 0.
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
    /// Facilitator base URL; repeat it (or separate with commas) for fallbacks in order of
    /// preference: new sales move to the next one while a facilitator fails to answer /verify
    /// or /settle. Without it the sandbox runs in process.
    #[arg(
        long,
        value_name = "URL",
        env = "DEMO_FACILITATOR",
        value_delimiter = ','
    )]
    facilitator: Vec<String>,
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
    /// An Ethereum JSON-RPC endpoint of the payments' chain, to look up a payment whose
    /// settlement answer was lost; without it such a payment stays in doubt (503).
    #[arg(long, value_name = "URL")]
    rpc_url: Option<String>,
    #[command(flatten)]
    limits: serve::Limits,
}

#[tokio::main]
async fn main() -> ExitCode {
    serve::log_to_stderr();
    serve::exit_code("paywall_demo", run(Args::parse()).await)
}

async fn run(args: Args) -> Result<(), String> {
    let (listener, address) = serve::listen(&args.listen).await?;
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
    let mut payments = match args.facilitator.as_slice() {
        [] => Payments::new(demo::facilitator_or_sandbox(None)?),
        urls => {
            // Each facilitator labelled by its URL (in the ledger and the logs).
            let client = |url: &String| {
                HttpFacilitator::new(url.as_str())
                    .map(|client| Arc::new(client) as Arc<dyn Facilitator>)
                    .map_err(|e| format!("facilitator {url}: {e}"))
            };
            let mut facilitators = Facilitators::new(urls[0].as_str(), client(&urls[0])?);
            for url in &urls[1..] {
                facilitators = facilitators.then(url.as_str(), client(url)?);
            }
            Payments::with_facilitators(facilitators)
        }
    };
    if let Some(url) = &args.rpc_url {
        payments = payments.reconciler(EvmRpcReconciler::new(url).map_err(|e| e.to_string())?);
    }
    let paywall = X402Layer::with_payments(payments.clone(), offer);
    let app = Router::new()
        .route(
            "/",
            get(|| async { "GET /report costs $0.01 (USDC, Base Sepolia)\n" }),
        )
        .route("/report", get(report).layer(paywall));

    serve::serve(listener, app, args.limits, async move {
        payments.until_idle().await;
    })
    .await
}

async fn report(payment: VerifiedPayment) -> Json<serde_json::Value> {
    Json(json!({
        "report": "the paid content",
        "payer": payment.payer,
        "settlement": payment.settlement.map(|settlement| settlement.transaction),
    }))
}
