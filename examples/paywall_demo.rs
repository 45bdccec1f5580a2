//! A minimal paid endpoint: `GET /report` costs $0.01 in USDC on Base Sepolia, paid through
//! `X402Layer`, with the sandbox facilitator in process (or a facilitator URL).
//!
//! ```text
//! cargo run --example paywall_demo                        # prints `listening on http://ADDR`
//! cargo run --example pay -- http://ADDR/report           # in another terminal
//!
//! cargo run --example sandbox_facilitator -- --listen 127.0.0.1:4021 &
//! cargo run --example paywall_demo -- --facilitator http://127.0.0.1:4021
//! ```

use std::io::Write as _;
use std::process::ExitCode;
use std::sync::Arc;

use axum::routing::get;
use axum::{Json, Router};
use clap::Parser;
use serde_json::json;
use tower_x402::proto::{ResourceInfo, UsdcDeployment};
use tower_x402::{HttpFacilitator, Offer, SettlementMode, VerifiedPayment, X402Layer};
use tower_x402_sandbox::SandboxFacilitator;

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
    match serve(Args::parse()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("paywall_demo: {message}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(args: Args) -> Result<(), String> {
    let listener = tokio::net::TcpListener::bind(&args.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", args.listen))?;
    let address = listener
        .local_addr()
        .map_err(|e| format!("bound address: {e}"))?;
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
    let paywall = match &args.facilitator {
        Some(url) => X402Layer::new(
            HttpFacilitator::new(url.as_str()).map_err(|e| format!("facilitator {url}: {e}"))?,
            offer,
        ),
        None => X402Layer::new(SandboxFacilitator::new(), offer),
    };
    let app = Router::new()
        .route(
            "/",
            get(|| async { "GET /report costs $0.01 (USDC, Base Sepolia)\n" }),
        )
        .route("/report", get(report).layer(paywall));

    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "listening on http://{address}")
        .and_then(|()| stdout.flush())
        .map_err(|e| format!("writing to stdout: {e}"))?;
    drop(stdout);
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            if tokio::signal::ctrl_c().await.is_err() {
                std::future::pending::<()>().await;
            }
        })
        .await
        .map_err(|e| format!("server error: {e}"))
}

async fn report(payment: VerifiedPayment) -> Json<serde_json::Value> {
    Json(json!({
        "report": "the paid content",
        "payer": payment.payer,
        "settlement": payment.settlement.map(|settlement| settlement.transaction),
    }))
}
