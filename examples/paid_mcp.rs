//! Paid MCP tools: an MCP server over streamable HTTP whose tools are paid through x402, on the
//! same payment core as the HTTP layer.
//!
//! ```text
//! cargo run --release --example paid_mcp -- [--listen ADDR] [--facilitator URL] [--pay-to ADDRESS]
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
//! settles. The first line on stdout is `listening on http://ADDR`.

use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;
use rmcp::handler::server::tool::{Extension, ToolCallContext, ToolRouter};
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolRequestParams, CallToolResponse, ServerCapabilities, ServerConfig};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler, tool, tool_handler, tool_router};
use tower_x402::mcp::PaidTools;
use tower_x402::payment::Payments;
use tower_x402::proto::{AtomicAmount, UsdAmount, UsdcDeployment};
use tower_x402::{Charge, Offer};
use tower_x402_sandbox::demo;

/// An MCP server with one free and two paid tools.
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
}

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
        // A text the maximum does not cover is refused before any payment is asked for.
        if request.name == "summarize" {
            let characters = request
                .arguments
                .as_ref()
                .and_then(|arguments| arguments.get("text"))
                .and_then(|text| text.as_str())
                .map_or(0, |text| text.chars().count());
            if characters > LONGEST_TEXT {
                return Err(ErrorData::invalid_params(
                    format!(
                        "text of {characters} characters costs more than the 0.20 USDC maximum \
                         (at most {LONGEST_TEXT} characters)"
                    ),
                    None,
                ));
            }
        }
        let call = ToolCallContext::new(self, request, context);
        self.tool_router.call(call).await
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    demo::log_to_stderr();
    demo::exit_code("paid_mcp", serve(Args::parse()).await)
}

async fn serve(args: Args) -> Result<(), String> {
    let (listener, _) = demo::listen(&args.listen).await?;
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
    let paid = PaidTools::new(Payments::new(facilitator));
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
    let app = axum::Router::new().route_service("/mcp", mcp);

    demo::serve_until_ctrl_c(listener, app).await
}
