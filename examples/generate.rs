//! A paid `POST` bound to its body, and sign-in beside a meter.
//!
//! ```text
//! cargo run --release --example generate -- [--listen ADDR] [--facilitator URL] [--pay-to ADDRESS]
//! ```
//!
//! - `POST /gen`: 0.01 USDC (`exact`) for one generation from a JSON body `{"prompt": …}`. The
//!   payment buys this body: the same payment sent again with another body is refused 409
//!   (`payment_used_for_another_request`) and nothing is generated; with the same body it is
//!   delivered again (a buyer who lost the answer sends the same payment and body again). Each
//!   answer says which run of the handler made it.
//! - `GET /rows?count=N`: metered (`upto`, up to 0.50 USDC), 0.01 USDC a row, charged through
//!   `Charge`. Its 402 offers no sign-in, and a signed-in request goes on to payment as if
//!   unsigned: a meter is never served for free.
//! - `GET /report`: 0.10 USDC (`exact`), with sign-in: a wallet that bought it signs in
//!   (`SIGN-IN-WITH-X`, e.g. from the `siwx-proof` tool) and is served again without paying.
//!
//! Without `--facilitator` the in-process sandbox facilitator verifies and settles, so the
//! `pay` tool's sandbox wallet can buy. The first line on stdout is `listening on http://ADDR`.
//! Records and entitlements are kept in memory. Stopped by SIGTERM or Ctrl-C.

mod serve;

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::routing::{get, post};
use axum::{Json, Router};
use clap::Parser;
use serde_json::{Value, json};
use tower_x402::payment::Payments;
use tower_x402::proto::{AtomicAmount, ResourceInfo, UsdcDeployment};
use tower_x402::{Charge, Offer, VerifiedPayment, X402Layer};
use tower_x402_sandbox::demo;
use tower_x402_siwx::{SignInWithX, SignedIn};

/// A paid `POST` bound to its body, a metered route and a fixed-price one behind sign-in.
#[derive(Debug, Parser)]
#[command(name = "generate")]
struct Args {
    /// Address to listen on; port 0 picks a free one.
    #[arg(long, value_name = "HOST:PORT", default_value = "127.0.0.1:4060")]
    listen: String,
    /// The facilitator's base URL; the in-process sandbox facilitator when absent.
    #[arg(long, value_name = "URL")]
    facilitator: Option<String>,
    /// Who is paid.
    #[arg(
        long,
        value_name = "ADDRESS",
        default_value = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C"
    )]
    pay_to: String,
    #[command(flatten)]
    limits: serve::Limits,
}

/// The sign-in secret of this demonstration (every instance of a real server shares its own).
const SECRET: &[u8] = b"the generate example's own secret";

#[tokio::main]
async fn main() -> ExitCode {
    serve::log_to_stderr();
    serve::exit_code("generate", run(Args::parse()).await)
}

async fn run(args: Args) -> Result<(), String> {
    let (listener, address) = serve::listen(&args.listen).await?;
    let facilitator = demo::facilitator_or_sandbox(args.facilitator.as_deref())?;
    let origin = format!("http://{address}");
    let sign_in = SignInWithX::new(&origin, SECRET).map_err(|e| e.to_string())?;
    let payments = Arc::new(Payments::new(Arc::clone(&facilitator)).hook(sign_in));
    let resource = |path: &str| ResourceInfo::new(format!("{origin}{path}"));
    let fixed = |path: &str, price: &str| {
        Offer::builder(resource(path))
            .usdc(
                &UsdcDeployment::BASE,
                price.parse().map_err(|e| format!("{e}"))?,
                &args.pay_to,
            )
            .build()
            .map(Arc::new)
            .map_err(|e| format!("offer: {e}"))
    };
    let rows = Offer::builder(resource("/rows"))
        .usdc_upto(
            &UsdcDeployment::BASE,
            "0.50".parse().map_err(|e| format!("{e}"))?,
            &args.pay_to,
        )
        .build_for(&*facilitator)
        .await
        .map(Arc::new)
        .map_err(|e| format!("offer: {e}"))?;
    let paywall = |offer: Arc<Offer>| X402Layer::with_payments(Arc::clone(&payments), offer);
    let runs = Arc::new(AtomicU64::new(0));

    let app = Router::new()
        .route(
            "/gen",
            post(move |Json(body): Json<Value>| async move {
                let run = runs.fetch_add(1, Ordering::Relaxed) + 1;
                let prompt = body["prompt"].as_str().unwrap_or("").to_owned();
                tracing::info!(run, %prompt, "generating");
                Json(json!({"run": run, "text": format!("generated for {prompt:?}")}))
            })
            .layer(paywall(fixed("/gen", "0.01")?)),
        )
        .route("/rows", get(metered).layer(paywall(rows)))
        .route(
            "/report",
            get(report).layer(paywall(fixed("/report", "0.10")?)),
        );

    serve::serve(listener, app, args.limits, async move {
        payments.until_idle().await;
    })
    .await
}

/// One row, 0.01 USDC.
async fn metered(charge: Charge) -> Json<Value> {
    charge.set(AtomicAmount(10_000));
    Json(json!({"rows": [1]}))
}

/// The report, for a buyer who pays now or signs in with the wallet that paid before.
async fn report(paid: Option<VerifiedPayment>, signed_in: Option<SignedIn>) -> Json<Value> {
    let buyer = match (paid, signed_in) {
        (Some(paid), _) => json!({"paid": paid.payer}),
        (None, Some(buyer)) => json!({"signedIn": buyer.address()}),
        (None, None) => json!(null),
    };
    Json(json!({"report": "the report", "buyer": buyer}))
}
