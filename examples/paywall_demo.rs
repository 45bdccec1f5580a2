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
use serde_json::json;
use tower_x402::proto::{ResourceInfo, UsdcDeployment};
use tower_x402::{HttpFacilitator, Offer, SettlementMode, VerifiedPayment, X402Layer};
use tower_x402_sandbox::SandboxFacilitator;

const USAGE: &str = "\
A one-route paywall for trying x402 clients against.

usage: paywall_demo [--listen HOST:PORT] [--facilitator URL] [--settle-first] [--pay-to ADDRESS]

  --listen HOST:PORT   address to listen on; port 0 picks a free one
                       [env DEMO_LISTEN, default 127.0.0.1:3402]
  --facilitator URL    facilitator base URL; without it the sandbox runs in process
                       [env DEMO_FACILITATOR]
  --settle-first       settle before running the handler instead of after
  --pay-to ADDRESS     where payments go [default 0x209693Bc6afc0C5328bA36FaF03C514EF312287C]
  -h, --help           this text";

#[derive(Debug)]
struct Args {
    listen: String,
    facilitator: Option<String>,
    settle_first: bool,
    pay_to: String,
}

impl Args {
    /// The command line (flags win over environment variables), or the message to exit with.
    fn from_env() -> Result<Self, String> {
        let mut args = pico_args::Arguments::from_env();
        if args.contains(["-h", "--help"]) {
            println!("{USAGE}");
            std::process::exit(0);
        }
        let text = |args: &mut pico_args::Arguments, flag: &'static str| {
            args.opt_value_from_str::<_, String>(flag)
                .map_err(|e| e.to_string())
        };
        let parsed = Self {
            listen: text(&mut args, "--listen")?
                .or_else(|| std::env::var("DEMO_LISTEN").ok())
                .unwrap_or_else(|| "127.0.0.1:3402".to_owned()),
            facilitator: text(&mut args, "--facilitator")?
                .or_else(|| std::env::var("DEMO_FACILITATOR").ok()),
            settle_first: args.contains("--settle-first"),
            pay_to: text(&mut args, "--pay-to")?
                .unwrap_or_else(|| "0x209693Bc6afc0C5328bA36FaF03C514EF312287C".to_owned()),
        };
        let rest = args.finish();
        if !rest.is_empty() {
            return Err(format!("unexpected arguments {rest:?}\n\n{USAGE}"));
        }
        Ok(parsed)
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = match Args::from_env() {
        Ok(args) => args,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::FAILURE;
        }
    };
    match serve(args).await {
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
