//! Metered payments (`upto`): each route is priced up to 0.50 USDC on Base, and charged for what
//! it actually served.
//!
//! ```text
//! cargo run --release --example metered -- \
//!     [--listen ADDR] [--facilitator URL] [--rpc-url URL] [--pay-to ADDRESS]
//! ```
//!
//! - `GET /v1/rows?count=N`: N rows as JSON, 0.01 USDC per row, through the typed `Charge`;
//! - `GET /v1/rows-legacy?count=N`: the same, the amount named in a `Settlement-Overrides`
//!   header (which the layer removes);
//! - `GET /v1/tokens?count=N`: N tokens as `text/event-stream`, 0.001 USDC per token actually
//!   sent, settled after the last one (`PAYMENT-RESPONSE` arrives as an HTTP trailer to a client
//!   that sends `TE: trailers`).
//!
//! A payment buys one delivery of one request: the same payment sent again is answered 409 with
//! the recorded `PAYMENT-RESPONSE` (`payment_already_delivered`, or
//! `payment_used_for_another_request` for another query), and the handler does not run.
//!
//! A `count` the maximum does not cover, or that is not one non-negative integer, is answered
//! 400 (JSON) before any payment is verified. Without `--facilitator` the in-process sandbox
//! facilitator verifies and settles. With `--rpc-url` a payment whose settlement answer was lost
//! is looked up on chain when the buyer retries it, and delivered once the transfer is found.
//! The first line on stdout is `listening on http://ADDR`.
//!
//! Served with the limits of `examples/serve/mod.rs` (header and idle deadlines, a connection
//! cap), and stopped by SIGTERM or Ctrl-C: streams in progress finish (or are cut after the
//! grace and charged for what they sent), their payments settle, and the process exits 0. The
//! settlement records are kept in memory: a restart forgets them (with `--rpc-url` a payment in
//! doubt is still recovered). Run it behind a reverse proxy (TLS, HTTP/2), as a demonstration.

mod serve;

use std::pin::Pin;
use std::process::ExitCode;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::http::Uri;
use axum::http::request::Parts;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Json, Router};
use bytes::Bytes;
use clap::Parser;
use serde_json::json;
use tower_x402::payment::Payments;
use tower_x402::proto::{AtomicAmount, ResourceInfo, UsdAmount, UsdcDeployment};
use tower_x402::{Charge, Offer, Price, SettlementMode, X402Layer};
use tower_x402_evm::EvmRpcReconciler;
use tower_x402_sandbox::demo;

/// A metered x402 API: rows and streamed tokens, charged for what was served.
///
/// A demonstration, not a server to put on the internet as it is: settlement records are kept in
/// memory and it speaks plain HTTP/1.1 (put a reverse proxy in front for TLS). Its limits keep
/// one client from exhausting it, and SIGTERM or Ctrl-C drains it: requests and streams in
/// progress finish, their payments settle, then it exits 0.
#[derive(Debug, Parser)]
#[command(name = "metered")]
struct Args {
    /// Address to listen on; port 0 picks a free one.
    #[arg(long, value_name = "HOST:PORT", default_value = "127.0.0.1:4030")]
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
    /// An Ethereum JSON-RPC endpoint of the payments' chain, to look up a payment whose
    /// settlement answer was lost; without it such a payment stays in doubt (503).
    #[arg(long, value_name = "URL")]
    rpc_url: Option<String>,
    #[command(flatten)]
    limits: serve::Limits,
}

/// Every route's maximum: 0.50 USDC.
const MAXIMUM_MICROS: u64 = 500_000;
/// 0.01 USDC a row, 0.001 USDC a token (USDC has six decimals: micro-dollars are atomic units).
const ROW_MICROS: u64 = 10_000;
const TOKEN_MICROS: u64 = 1_000;

#[tokio::main]
async fn main() -> ExitCode {
    serve::log_to_stderr();
    serve::exit_code("metered", run(Args::parse()).await)
}

async fn run(args: Args) -> Result<(), String> {
    let (listener, address) = serve::listen(&args.listen).await?;
    let facilitator = demo::facilitator_or_sandbox(args.facilitator.as_deref())?;
    // One payment core for the three routes: one ledger, and one place to wait for on shutdown.
    let mut payments = Payments::new(Arc::clone(&facilitator));
    if let Some(url) = &args.rpc_url {
        payments = payments.reconciler(EvmRpcReconciler::new(url).map_err(|e| e.to_string())?);
    }
    let offer = |path: &str, mode: SettlementMode| {
        let facilitator = Arc::clone(&facilitator);
        let (url, pay_to) = (format!("http://{address}{path}"), args.pay_to.clone());
        async move {
            Offer::builder(ResourceInfo::new(url))
                .usdc_upto(
                    &UsdcDeployment::BASE,
                    UsdAmount::from_micros(MAXIMUM_MICROS),
                    pay_to,
                )
                .settlement(mode)
                .build_for(&*facilitator)
                .await
                .map(Arc::new)
                .map_err(|e| format!("offer: {e}"))
        }
    };
    let rows_offer = offer("/v1/rows", SettlementMode::After).await?;
    let legacy_offer = offer("/v1/rows-legacy", SettlementMode::After).await?;
    let tokens_offer = offer("/v1/tokens", SettlementMode::AfterBody).await?;
    let paywall = |offer: Arc<Offer>, unit: u64| {
        X402Layer::with_payments(payments.clone(), move |parts: &Parts| {
            match count_of(&parts.uri) {
                Ok(count) if count.saturating_mul(unit) <= MAXIMUM_MICROS => {
                    Price::Charge(Arc::clone(&offer))
                }
                Ok(count) => Price::NotSold {
                    status: http::StatusCode::BAD_REQUEST,
                    message: format!(
                        "count {count} costs more than the 0.50 USDC maximum (at most {})",
                        MAXIMUM_MICROS / unit
                    )
                    .into(),
                },
                Err(error) => Price::NotSold {
                    status: http::StatusCode::BAD_REQUEST,
                    message: error.message().into(),
                },
            }
        })
    };
    let app = Router::new()
        .route("/", get(index))
        .route("/v1/rows", get(rows).layer(paywall(rows_offer, ROW_MICROS)))
        .route(
            "/v1/rows-legacy",
            get(rows_legacy).layer(paywall(legacy_offer, ROW_MICROS)),
        )
        .route(
            "/v1/tokens",
            get(tokens).layer(paywall(tokens_offer, TOKEN_MICROS)),
        );

    serve::serve(listener, app, args.limits, async move {
        payments.until_idle().await;
    })
    .await
}

/// Why a query names no usable `count`.
#[derive(Debug)]
enum CountError {
    NotANumber,
    Repeated,
}

impl CountError {
    fn message(&self) -> &'static str {
        match self {
            Self::NotANumber => "count must be a non-negative integer",
            Self::Repeated => "count is given more than once",
        }
    }

    /// The JSON 400 a handler answers (the paywall refuses the same queries before payment).
    fn response(&self) -> axum::response::Response {
        let body = json!({"error": self.message()});
        (http::StatusCode::BAD_REQUEST, Json(body)).into_response()
    }
}

/// The `count` query parameter (default 1): the price and the handlers read it alike, so a
/// query the handler would refuse is refused before payment.
fn count_of(uri: &Uri) -> Result<u64, CountError> {
    let mut counts = uri
        .query()
        .unwrap_or("")
        .split('&')
        .filter_map(|pair| pair.strip_prefix("count="));
    let count = counts.next();
    if counts.next().is_some() {
        return Err(CountError::Repeated);
    }
    match count {
        None => Ok(1),
        Some(count) => count.parse().map_err(|_| CountError::NotANumber),
    }
}

async fn index() -> Json<serde_json::Value> {
    Json(json!({
        "routes": [
            {"path": "/v1/rows?count=N", "price": "0.01 USDC per row, up to 0.50 USDC", "charged": "Charge handle"},
            {"path": "/v1/rows-legacy?count=N", "price": "0.01 USDC per row, up to 0.50 USDC", "charged": "Settlement-Overrides header"},
            {"path": "/v1/tokens?count=N", "price": "0.001 USDC per token sent, up to 0.50 USDC", "charged": "after the last token (trailer PAYMENT-RESPONSE)"},
        ],
        "network": "eip155:8453",
        "scheme": "upto",
    }))
}

fn rows_of(count: u64) -> Json<serde_json::Value> {
    Json(json!(
        (0..count).map(|n| json!({"row": n})).collect::<Vec<_>>()
    ))
}

async fn rows(charge: Charge, uri: Uri) -> axum::response::Response {
    let count = match count_of(&uri) {
        Ok(count) => count,
        Err(error) => return error.response(),
    };
    charge.set(AtomicAmount(0));
    for _ in 0..count {
        charge.add(AtomicAmount(u128::from(ROW_MICROS)));
    }
    rows_of(count).into_response()
}

async fn rows_legacy(uri: Uri) -> axum::response::Response {
    let count = match count_of(&uri) {
        Ok(count) => count,
        Err(error) => return error.response(),
    };
    let amount = json!({ "amount": (count * ROW_MICROS).to_string() }).to_string();
    let mut response = rows_of(count).into_response();
    if let Ok(value) = http::HeaderValue::try_from(amount) {
        response
            .headers_mut()
            .insert(tower_x402::layer::SETTLEMENT_OVERRIDES, value);
    }
    response
}

async fn tokens(charge: Charge, uri: Uri) -> axum::response::Response {
    let count = match count_of(&uri) {
        Ok(count) => count,
        Err(error) => return error.response(),
    };
    charge.set(AtomicAmount(0));
    let body = Tokens {
        left: count,
        sent: 0,
        tick: tokio::time::interval(Duration::from_millis(50)),
        charge,
    };
    (
        [(http::header::CONTENT_TYPE, "text/event-stream")],
        axum::body::Body::new(body),
    )
        .into_response()
}

/// `count` server-sent events, one every 50 ms, each charged as it is handed to the connection:
/// a client that hangs up is charged for the tokens it was sent.
struct Tokens {
    left: u64,
    sent: u64,
    tick: tokio::time::Interval,
    charge: Charge,
}

impl http_body::Body for Tokens {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        if self.left == 0 {
            return Poll::Ready(None);
        }
        std::task::ready!(self.tick.poll_tick(cx));
        self.left -= 1;
        let token = format!("data: token {}\n\n", self.sent);
        self.sent += 1;
        self.charge.add(AtomicAmount(u128::from(TOKEN_MICROS)));
        Poll::Ready(Some(Ok(http_body::Frame::data(Bytes::from(token)))))
    }
}
