//! Sign-in-with-x on paid MCP tools: a wallet that paid for a tool signs in with a real
//! secp256k1 proof in `_meta["sign-in-with-x"]` and is served again without a new payment, over
//! real HTTP (an `rmcp` server on streamable HTTP, the sandbox facilitator served on loopback).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use rmcp::handler::server::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{ServerCapabilities, ServerConfig};
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ServerHandler, tool, tool_handler, tool_router};
use serde_json::{Value, json};
use tower_x402::mcp::{PAYMENT_META, PAYMENT_RESPONSE_META, PaidTools};
use tower_x402::payment::Payments;
use tower_x402::{HttpFacilitator, Offer};
use tower_x402_sandbox::{SandboxFacilitator, SandboxWallet};
use tower_x402_siwx::{MemoryEntitlementStore, SignInWithX};
use x402_wire::{PaymentRequired, UsdcDeployment};

const PAY_TO: &str = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";
const SECRET: &[u8] = b"the secret every instance shares";

#[derive(Debug, serde::Deserialize, rmcp::schemars::JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
struct Symbol {
    symbol: String,
}

/// One paid tool, `quote`, counting its runs.
#[derive(Clone)]
struct Tools {
    tool_router: ToolRouter<Self>,
    runs: Arc<AtomicUsize>,
}

#[tool_router]
impl Tools {
    #[tool(description = "A quote")]
    fn quote(&self, Parameters(Symbol { symbol }): Parameters<Symbol>) -> String {
        self.runs.fetch_add(1, Ordering::SeqCst);
        format!("{symbol}: 42.00 USD")
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Tools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }
}

/// A paid MCP server on loopback whose payments sign-in plugs into: its `/mcp` URL.
async fn server(payments: Payments, runs: &Arc<AtomicUsize>) -> String {
    let offer = Offer::builder(PaidTools::resource("quote"))
        .usdc(&UsdcDeployment::BASE, "0.05".parse().unwrap(), PAY_TO)
        .build()
        .unwrap();
    let router = PaidTools::new(payments)
        .price(Tools::tool_router(), "quote", offer)
        .unwrap();
    let tools = Tools {
        tool_router: router,
        runs: Arc::clone(runs),
    };
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true);
    let service = StreamableHttpService::new(
        move || Ok(tools.clone()),
        Arc::new(NeverSessionManager::default()),
        config,
    );
    let app = axum::Router::new().route_service("/mcp", service);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{address}/mcp")
}

/// `tools/call quote` with `meta`: the JSON-RPC `result`.
async fn call(url: &str, meta: Option<Value>) -> Value {
    let mut params = json!({"name": "quote", "arguments": {"symbol": "ACME"}});
    if let Some(meta) = meta {
        params["_meta"] = meta;
    }
    let answer: Value = reqwest::Client::new()
        .post(url)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-06-18")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    answer
        .get("result")
        .cloned()
        .unwrap_or_else(|| panic!("{answer}"))
}

fn challenge(result: &Value) -> PaymentRequired {
    assert_eq!(result["isError"], true, "{result}");
    serde_json::from_value(result["structuredContent"].clone()).unwrap()
}

#[tokio::test]
async fn a_wallet_that_paid_for_a_tool_signs_in_and_is_served_without_a_second_settlement() {
    let sandbox = SandboxFacilitator::new();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(sandbox.clone().serve(listener));
    let client = HttpFacilitator::new(format!("http://{address}").as_str()).unwrap();
    let siwx = SignInWithX::new("https://tools.example", SECRET)
        .unwrap()
        .entitlement_store(MemoryEntitlementStore::default());
    let payments = Payments::new(client).hook(siwx);
    let runs = Arc::new(AtomicUsize::new(0));
    let url = server(payments, &runs).await;
    let wallet = SandboxWallet::random();

    // The payment-required result carries a sign-in challenge for the tool.
    let required = challenge(&call(&url, None).await);
    let extension = required.extensions.as_ref().unwrap()["sign-in-with-x"].clone();
    assert_eq!(extension["info"]["uri"], "mcp://tool/quote");

    // Signing in before paying is refused: this wallet bought nothing yet.
    let early = wallet.sign_in(&extension).unwrap();
    let refused = challenge(&call(&url, Some(json!({"sign-in-with-x": early}))).await);
    assert!(
        refused
            .error
            .as_deref()
            .unwrap()
            .starts_with("invalid_siwx_not_entitled"),
        "{:?}",
        refused.error
    );

    // The wallet pays once.
    let payment = wallet.pay(&required).unwrap();
    let paid = call(&url, Some(json!({ PAYMENT_META: payment }))).await;
    assert_eq!(paid["isError"], false, "{paid}");
    assert_eq!(paid["_meta"][PAYMENT_RESPONSE_META]["success"], true);
    assert_eq!(sandbox.settle_calls(), 1);

    // Back later with a sign-in proof for a fresh challenge: served, nothing paid or settled.
    let fresh = challenge(&call(&url, None).await);
    let proof = wallet
        .sign_in(&fresh.extensions.as_ref().unwrap()["sign-in-with-x"])
        .unwrap();
    let served = call(&url, Some(json!({"sign-in-with-x": proof}))).await;
    assert_eq!(served["isError"], false, "{served}");
    assert_eq!(served["content"][0]["text"], "ACME: 42.00 USD");
    assert!(
        served["_meta"].get(PAYMENT_RESPONSE_META).is_none(),
        "{served}"
    );
    assert_eq!((sandbox.verify_calls(), sandbox.settle_calls()), (1, 1));
    assert_eq!(runs.load(Ordering::SeqCst), 2);

    // The proof is used: presented again, it is refused.
    let reused = challenge(&call(&url, Some(json!({"sign-in-with-x": proof}))).await);
    assert!(
        reused
            .error
            .as_deref()
            .unwrap()
            .starts_with("invalid_siwx_nonce_used")
    );
}
