//! Paid MCP tools: an MCP server over streamable HTTP whose tools are paid through x402, on the
//! same payment core as the HTTP layer.
//!
//! ```text
//! cargo run --release --features mcp --example paid_mcp -- \
//!     [--listen ADDR] [--facilitator URL] [--rpc-url URL] [--pay-to ADDRESS]
//! ```
//!
//! - `echo {text}`: free, answers the text;
//! - `quote {symbol}`: 0.05 USDC on Base (`exact`), answers a short quote;
//! - `summarize {text}`: up to 0.20 USDC on Base (`upto`), charged 0.01 USDC per started 100
//!   characters of `text`; a text longer than 2,000 characters (more than the maximum covers)
//!   is refused before any payment.
//!
//! The MCP endpoint is `/mcp` (streamable HTTP, stateless, JSON answers). A call of a paid tool
//! without `_meta["x402/payment"]` is answered with the payment-required result; see
//! `tower_x402::mcp`. Without `--facilitator` the in-process sandbox facilitator verifies and
//! settles; `--rpc-url` names an Ethereum JSON-RPC endpoint to look up a payment whose
//! settlement answer was lost. The first line on stdout is `listening on http://ADDR`.
//!
//! A call's arguments are checked before its payment is looked at: arguments a tool would
//! refuse cost nothing (`-32602`). A body that is not JSON is answered `-32700`, a batch or
//! a body that is not one JSON-RPC object `-32600`, both with HTTP 400; a body over 64 KiB is
//! refused (413) and at most 32 requests are handled at once. Served with the limits of
//! `examples/serve/mod.rs` (header and idle deadlines, a connection cap); SIGTERM or Ctrl-C lets
//! the calls in progress finish and settle, then exits 0. A demonstration: the settlement
//! records are kept in memory.

mod serve;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::middleware::Next;
use axum::response::{IntoResponse as _, Response};
use clap::Parser;
use rmcp::handler::server::tool::{Extension, ToolCallContext, ToolRouter};
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolRequestParams, CallToolResponse, ServerCapabilities, ServerConfig};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler, tool, tool_handler, tool_router};
use serde_json::{Value, json};
use tower_x402::mcp::PaidTools;
use tower_x402::payment::Payments;
use tower_x402::proto::{AtomicAmount, UsdAmount, UsdcDeployment};
use tower_x402::{Charge, Offer};
use tower_x402_evm::EvmRpcReconciler;
use tower_x402_sandbox::demo;

/// An MCP server with one free and two paid tools.
///
/// A demonstration, not a server to put on the internet as it is: settlement records are kept in
/// memory and it speaks plain HTTP/1.1 (put a reverse proxy in front for TLS). Its limits keep
/// one client from exhausting it, and SIGTERM or Ctrl-C drains it: requests and streams in
/// progress finish, their payments settle, then it exits 0.
#[derive(Debug, Parser)]
#[command(name = "paid_mcp")]
struct Args {
    /// Address to listen on; port 0 picks a free one.
    #[arg(long, value_name = "HOST:PORT", default_value = "127.0.0.1:4040")]
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
    /// settlement answer was lost; without it such a payment stays in doubt.
    #[arg(long, value_name = "URL")]
    rpc_url: Option<String>,
    #[command(flatten)]
    limits: serve::Limits,
}

/// The largest request body `/mcp` reads.
const MAX_BODY: usize = 64 * 1024;
/// How long a request body may take to arrive.
const BODY_TIMEOUT: Duration = Duration::from_secs(10);
/// Requests `/mcp` handles at once; more wait their turn.
const MAX_CONCURRENT: usize = 32;

/// `quote`'s price: 0.05 USDC (USDC has six decimals: micro-dollars are atomic units).
const QUOTE_MICROS: u64 = 50_000;
/// `summarize`'s maximum: 0.20 USDC, 0.01 USDC per started 100 characters.
const SUMMARIZE_MAXIMUM_MICROS: u64 = 200_000;
const PER_100_CHARACTERS_MICROS: u64 = 10_000;
/// The longest text the maximum covers.
const LONGEST_TEXT: usize = 2_000;

#[derive(Debug, serde::Deserialize, rmcp::schemars::JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
struct Text {
    /// The text.
    text: String,
}

#[derive(Debug, serde::Deserialize, rmcp::schemars::JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
struct Symbol {
    /// A ticker symbol, e.g. `ACME`.
    symbol: String,
}

#[derive(Clone, Debug)]
struct Tools {
    tool_router: ToolRouter<Self>,
}

#[tool_router]
impl Tools {
    #[tool(description = "Answers the text it is given (free)")]
    fn echo(&self, Parameters(Text { text }): Parameters<Text>) -> String {
        text
    }

    #[tool(description = "The latest quote of a ticker symbol (0.05 USDC)")]
    fn quote(&self, Parameters(Symbol { symbol }): Parameters<Symbol>) -> String {
        let symbol = symbol.trim().to_uppercase();
        // A made-up but stable price, so that the same symbol always quotes the same.
        let cents = symbol.bytes().fold(10_007_u32, |acc, byte| {
            acc.wrapping_mul(31).wrapping_add(u32::from(byte)) % 100_000
        });
        format!("{symbol}: {}.{:02} USD", cents / 100, cents % 100)
    }

    #[tool(
        description = "A short summary of a text of at most 2,000 characters (0.01 USDC per \
                       started 100 characters, at most 0.20 USDC)"
    )]
    fn summarize(
        &self,
        Extension(charge): Extension<Charge>,
        Parameters(Text { text }): Parameters<Text>,
    ) -> String {
        let characters = text.chars().count();
        let hundreds = characters.div_ceil(100) as u64;
        charge.set(AtomicAmount(u128::from(
            hundreds * PER_100_CHARACTERS_MICROS,
        )));
        summary(&text, characters)
    }
}

/// The first sentence (at most 30 words) and the text's size.
fn summary(text: &str, characters: usize) -> String {
    let words = text.split_whitespace().count();
    let first = text
        .split_inclusive(['.', '!', '?'])
        .next()
        .unwrap_or("")
        .split_whitespace()
        .take(30)
        .collect::<Vec<_>>()
        .join(" ");
    format!("{first} ({words} words, {characters} characters)")
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Tools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build()).with_instructions(
            "echo is free; quote and summarize are paid with x402 (USDC on Base)",
        )
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        // Arguments the tool would refuse are refused before any payment is looked at.
        check_arguments(&request)?;
        let call = ToolCallContext::new(self, request, context);
        self.tool_router.call(call).await
    }
}

/// Checks a call's arguments as its tool will read them, and what the maximum covers.
fn check_arguments(request: &CallToolRequestParams) -> Result<(), ErrorData> {
    let arguments = Value::Object(request.arguments.clone().unwrap_or_default());
    let invalid = |message: String| Err(ErrorData::invalid_params(message, None));
    match &*request.name {
        "quote" => {
            let Symbol { symbol } = serde_json::from_value(arguments)
                .map_err(|e| ErrorData::invalid_params(format!("quote: {e}"), None))?;
            let symbol = symbol.trim();
            if symbol.is_empty()
                || symbol.len() > 12
                || !symbol.bytes().all(|byte| byte.is_ascii_alphanumeric())
            {
                return invalid(format!(
                    "quote: symbol must be 1 to 12 letters or digits, not {symbol:?}"
                ));
            }
        }
        "summarize" | "echo" => {
            let Text { text } = serde_json::from_value(arguments)
                .map_err(|e| ErrorData::invalid_params(format!("{}: {e}", request.name), None))?;
            let characters = text.chars().count();
            if request.name == "summarize" && characters > LONGEST_TEXT {
                return invalid(format!(
                    "text of {characters} characters costs more than the 0.20 USDC maximum \
                     (at most {LONGEST_TEXT} characters)"
                ));
            }
        }
        _ => {}
    }
    Ok(())
}

/// Lets through only what the MCP service can answer as JSON-RPC: a body of at most
/// [`MAX_BODY`] that is one JSON-RPC object. The rest is answered here as JSON-RPC errors.
async fn json_rpc_only(request: Request, next: Next) -> Response {
    if request.method() != http::Method::POST {
        return next.run(request).await;
    }
    let (parts, body) = request.into_parts();
    let declared = parts
        .headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|length| length.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|length| length > MAX_BODY as u64) {
        return too_large();
    }
    let bytes = match tokio::time::timeout(BODY_TIMEOUT, axum::body::to_bytes(body, MAX_BODY)).await
    {
        Ok(Ok(bytes)) => bytes,
        Ok(Err(_)) => return too_large(),
        Err(_) => {
            return json_rpc_error(
                http::StatusCode::REQUEST_TIMEOUT,
                -32600,
                "the request body did not arrive in time",
            );
        }
    };
    match serde_json::from_slice::<Value>(&bytes) {
        Err(error) => json_rpc_error(
            http::StatusCode::BAD_REQUEST,
            -32700,
            &format!("parse error: {error}"),
        ),
        Ok(Value::Array(_)) => json_rpc_error(
            http::StatusCode::BAD_REQUEST,
            -32600,
            "batches are not supported: send one JSON-RPC message per request",
        ),
        Ok(Value::Object(_)) => {
            next.run(Request::from_parts(parts, Body::from(bytes)))
                .await
        }
        Ok(_) => json_rpc_error(
            http::StatusCode::BAD_REQUEST,
            -32600,
            "a request must be a JSON-RPC object",
        ),
    }
}

fn too_large() -> Response {
    json_rpc_error(
        http::StatusCode::PAYLOAD_TOO_LARGE,
        -32600,
        &format!("the request body is over {MAX_BODY} bytes"),
    )
}

/// A JSON-RPC error answer without an id (the request's could not be read).
fn json_rpc_error(status: http::StatusCode, code: i32, message: &str) -> Response {
    let body = json!({"jsonrpc": "2.0", "id": null, "error": {"code": code, "message": message}});
    (status, axum::Json(body)).into_response()
}

#[tokio::main]
async fn main() -> ExitCode {
    serve::log_to_stderr();
    serve::exit_code("paid_mcp", run(Args::parse()).await)
}

async fn run(args: Args) -> Result<(), String> {
    let (listener, _) = serve::listen(&args.listen).await?;
    let facilitator = demo::facilitator_or_sandbox(args.facilitator.as_deref())?;
    let quote = Offer::builder(PaidTools::resource("quote"))
        .usdc(
            &UsdcDeployment::BASE,
            UsdAmount::from_micros(QUOTE_MICROS),
            args.pay_to.as_str(),
        )
        .build()
        .map_err(|e| format!("offer: {e}"))?;
    let summarize = Offer::builder(PaidTools::resource("summarize"))
        .usdc_upto(
            &UsdcDeployment::BASE,
            UsdAmount::from_micros(SUMMARIZE_MAXIMUM_MICROS),
            args.pay_to.as_str(),
        )
        .build_for(&*facilitator)
        .await
        .map_err(|e| format!("offer: {e}"))?;
    let mut payments = Payments::new(facilitator);
    if let Some(url) = &args.rpc_url {
        payments = payments.reconciler(EvmRpcReconciler::new(url).map_err(|e| e.to_string())?);
    }
    let paid = PaidTools::new(payments);
    let tool_router = paid
        .price(Tools::tool_router(), "quote", quote)
        .and_then(|router| paid.price(router, "summarize", summarize))
        .map_err(|e| format!("offer: {e}"))?;
    let tools = Tools { tool_router };

    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true);
    let mcp = StreamableHttpService::new(
        move || Ok(tools.clone()),
        Arc::new(NeverSessionManager::default()),
        config,
    );
    let app = axum::Router::new().route_service("/mcp", mcp).layer(
        tower::ServiceBuilder::new()
            .layer(tower::limit::GlobalConcurrencyLimitLayer::new(
                MAX_CONCURRENT,
            ))
            .layer(axum::middleware::from_fn(json_rpc_only)),
    );

    let payments = Arc::clone(paid.payments());
    serve::serve(listener, app, args.limits, async move {
        payments.until_idle().await;
    })
    .await
}
