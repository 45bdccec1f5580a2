//! Paid MCP tools over real HTTP: an `rmcp` server on streamable HTTP whose tools are priced with
//! `PaidTools`, called with raw JSON-RPC, paid by the sandbox wallet with real signatures, and
//! verified and settled by the sandbox facilitator served over HTTP.

#[path = "../examples/store/tests/store/postgres_server.rs"]
#[allow(dead_code, unreachable_pub)]
mod postgres_server;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use rmcp::handler::server::tool::{Extension, ToolRouter};
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock, ServerCapabilities, ServerConfig};
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ServerHandler, tool, tool_handler, tool_router};
use serde_json::{Value, json};
use tower_x402::mcp::{PAYMENT_META, PAYMENT_RESPONSE_META, PaidTools};
use tower_x402::payment::Payments;
use tower_x402::{Charge, HttpFacilitator, Offer};
use tower_x402_postgres::PostgresSettlementStore;
use tower_x402_sandbox::{SandboxFacilitator, SandboxWallet, Step};
use x402_wire::{AtomicAmount, PaymentPayload, PaymentRequired, UsdAmount, UsdcDeployment};

const PAY_TO: &str = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";

#[derive(Debug, serde::Deserialize, rmcp::schemars::JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
struct Symbol {
    symbol: String,
}

#[derive(Debug, serde::Deserialize, rmcp::schemars::JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
struct Units {
    units: u64,
}

/// The tools: `echo` free, `quote` exact, `broken` exact but always failing, `meter` upto at
/// 0.001 USDC a unit. Counts how often each paid tool ran.
#[derive(Clone)]
struct Tools {
    tool_router: ToolRouter<Self>,
    runs: Arc<AtomicUsize>,
}

#[tool_router]
impl Tools {
    #[tool(description = "Answers the symbol")]
    fn echo(&self, Parameters(Symbol { symbol }): Parameters<Symbol>) -> String {
        symbol
    }

    #[tool(description = "A quote")]
    fn quote(&self, Parameters(Symbol { symbol }): Parameters<Symbol>) -> String {
        self.runs.fetch_add(1, Ordering::SeqCst);
        format!("{symbol}: 42.00 USD")
    }

    #[tool(description = "Always fails")]
    fn broken(&self, Parameters(Symbol { symbol }): Parameters<Symbol>) -> CallToolResult {
        self.runs.fetch_add(1, Ordering::SeqCst);
        CallToolResult::error(vec![ContentBlock::text(format!("no quote for {symbol}"))])
    }

    #[tool(description = "Metered: 0.001 USDC a unit")]
    fn meter(
        &self,
        Extension(charge): Extension<Charge>,
        Parameters(Units { units }): Parameters<Units>,
    ) -> String {
        self.runs.fetch_add(1, Ordering::SeqCst);
        charge.set(AtomicAmount(u128::from(units) * 1_000));
        format!("{units} units")
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Tools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }
}

/// A sandbox facilitator served over HTTP, and the client to it.
struct Facilitator {
    sandbox: SandboxFacilitator,
    client: HttpFacilitator,
}

async fn facilitator() -> Facilitator {
    let sandbox = SandboxFacilitator::new();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(sandbox.clone().serve(listener));
    let client = HttpFacilitator::new(format!("http://{address}").as_str()).unwrap();
    Facilitator { sandbox, client }
}

/// A paid MCP server on loopback over `payments`: its `/mcp` URL and its tool-run counter.
async fn server(facilitator: &Facilitator, payments: Payments) -> (String, Arc<AtomicUsize>) {
    let exact = |tool: &str| {
        Offer::builder(PaidTools::resource(tool))
            .usdc(&UsdcDeployment::BASE, "0.05".parse().unwrap(), PAY_TO)
            .build()
            .unwrap()
    };
    let meter = Offer::builder(PaidTools::resource("meter"))
        .usdc_upto(
            &UsdcDeployment::BASE,
            UsdAmount::from_micros(200_000),
            PAY_TO,
        )
        .build_for(&facilitator.client)
        .await
        .unwrap();
    let paid = PaidTools::new(payments);
    let mut router = Tools::tool_router();
    for tool in ["quote", "broken"] {
        router = paid.price(router, tool, exact(tool)).unwrap();
    }
    let router = paid.price(router, "meter", meter).unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    let tools = Tools {
        tool_router: router,
        runs: Arc::clone(&runs),
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
    (format!("http://{address}/mcp"), runs)
}

fn payments(facilitator: &Facilitator) -> Payments {
    Payments::new(facilitator.client.clone()).reconciler(facilitator.sandbox.clone())
}

/// One JSON-RPC request over streamable HTTP: its `result` (panics on a JSON-RPC error).
async fn rpc(url: &str, method: &str, params: Value) -> Value {
    let answer = rpc_answer(url, method, params).await;
    match answer.get("result") {
        Some(result) => result.clone(),
        None => panic!("{method}: {answer}"),
    }
}

/// One JSON-RPC request over streamable HTTP: the whole answer.
async fn rpc_answer(url: &str, method: &str, params: Value) -> Value {
    let response = reqwest::Client::new()
        .post(url)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-06-18")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}))
        .send()
        .await
        .unwrap();
    let status = response.status();
    let sse = response
        .headers()
        .get("content-type")
        .is_some_and(|value| value.as_bytes().starts_with(b"text/event-stream"));
    let body = response.text().await.unwrap();
    assert!(status.is_success(), "{method}: {status} {body}");
    if !sse {
        return serde_json::from_str(&body).unwrap_or_else(|e| panic!("{method}: {e}: {body}"));
    }
    body.lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .filter_map(|data| serde_json::from_str::<Value>(data.trim()).ok())
        .find(|message| message.get("id").is_some())
        .unwrap_or_else(|| panic!("{method}: no answer in {body}"))
}

/// `tools/call` of `tool` with `arguments`, paid with `payment` when given.
async fn call(url: &str, tool: &str, arguments: Value, payment: Option<&PaymentPayload>) -> Value {
    let mut params = json!({"name": tool, "arguments": arguments});
    if let Some(payment) = payment {
        params["_meta"] = json!({ PAYMENT_META: payment });
    }
    rpc(url, "tools/call", params).await
}

/// The payment-required result's challenge, after checking both fields carry it identically.
fn challenge(result: &Value) -> PaymentRequired {
    assert_eq!(result["isError"], true, "{result}");
    let structured = &result["structuredContent"];
    let text = result["content"][0]["text"].as_str().unwrap();
    assert_eq!(result["content"][0]["type"], "text");
    assert_eq!(
        &serde_json::from_str::<Value>(text).unwrap(),
        structured,
        "both fields carry the same PaymentRequired"
    );
    serde_json::from_value(structured.clone()).unwrap()
}

fn text_of(result: &Value) -> &str {
    result["content"][0]["text"].as_str().unwrap_or_default()
}

#[tokio::test]
async fn an_unpaid_call_is_answered_with_the_payment_required_result() {
    let facilitator = facilitator().await;
    let (url, runs) = server(&facilitator, payments(&facilitator)).await;

    let tools = rpc(&url, "tools/list", json!({})).await;
    let names: Vec<&str> = tools["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|tool| tool["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["broken", "echo", "meter", "quote"]);

    let free = call(&url, "echo", json!({"symbol": "free"}), None).await;
    assert_eq!((text_of(&free), &free["isError"]), ("free", &json!(false)));

    let result = call(&url, "quote", json!({"symbol": "ACME"}), None).await;
    let required = challenge(&result);
    assert_eq!(required.resource.url, "mcp://tool/quote");
    assert_eq!(required.accepts.len(), 1);
    assert_eq!(required.accepts[0].scheme, "exact");
    assert_eq!(required.accepts[0].network.as_str(), "eip155:8453");
    assert_eq!(required.accepts[0].amount, AtomicAmount(50_000));
    assert!(required.error.unwrap().contains("x402/payment"));
    let input = &result["structuredContent"]["extensions"]["bazaar"]["info"]["input"];
    assert_eq!(input["type"], "mcp");
    assert_eq!(input["toolName"], "quote");
    assert_eq!(
        input["inputSchema"]["properties"]["symbol"]["type"],
        "string"
    );
    assert!(result.get("_meta").is_none());

    let metered = challenge(&call(&url, "meter", json!({"units": 1}), None).await);
    assert_eq!(metered.accepts[0].scheme, "upto");
    assert_eq!(metered.accepts[0].amount, AtomicAmount(200_000));

    // A payload that is not a payment is answered with the challenge, saying why.
    let result = rpc(
        &url,
        "tools/call",
        json!({"name": "quote", "arguments": {"symbol": "ACME"}, "_meta": {PAYMENT_META: {"x402Version": 2}}}),
    )
    .await;
    assert!(challenge(&result).error.unwrap().contains("invalid"));
    assert_eq!(runs.load(Ordering::SeqCst), 0, "no paid tool ran");
    assert_eq!(facilitator.sandbox.verify_calls(), 0);
}

#[tokio::test]
async fn a_paid_call_delivers_with_the_payment_response_and_a_repeat_is_answered_from_the_record() {
    let facilitator = facilitator().await;
    let (url, runs) = server(&facilitator, payments(&facilitator)).await;
    let wallet = SandboxWallet::random();
    let required = challenge(&call(&url, "quote", json!({"symbol": "ACME"}), None).await);
    let payment = wallet.pay(&required).unwrap();

    let result = call(&url, "quote", json!({"symbol": "ACME"}), Some(&payment)).await;
    assert_eq!(result["isError"], false, "{result}");
    assert_eq!(text_of(&result), "ACME: 42.00 USD");
    let receipt = &result["_meta"][PAYMENT_RESPONSE_META];
    assert_eq!(receipt["success"], true, "{result}");
    assert_eq!(receipt["network"], "eip155:8453");
    assert_eq!(receipt["payer"], wallet.address());
    let transaction = receipt["transaction"].as_str().unwrap().to_owned();
    assert!(transaction.starts_with("0x"));
    let settlements = facilitator.sandbox.settlements();
    assert_eq!(settlements.len(), 1);
    assert_eq!(settlements[0].amount, AtomicAmount(50_000));
    assert_eq!(settlements[0].transaction, transaction);

    // The same payment again: delivered from the record, never settled again.
    let again = call(&url, "quote", json!({"symbol": "ACME"}), Some(&payment)).await;
    assert_eq!(text_of(&again), "ACME: 42.00 USD");
    assert_eq!(
        again["_meta"][PAYMENT_RESPONSE_META]["transaction"],
        transaction
    );
    assert_eq!(facilitator.sandbox.settle_calls(), 1);
    assert_eq!(facilitator.sandbox.settlement_count(), 1);
    assert_eq!(runs.load(Ordering::SeqCst), 2);

    // A payment for `quote` buys nothing else.
    let elsewhere = call(&url, "broken", json!({"symbol": "ACME"}), Some(&payment)).await;
    assert!(
        challenge(&elsewhere)
            .error
            .unwrap()
            .contains("different resource")
    );
    assert_eq!(facilitator.sandbox.settle_calls(), 1);
}

#[tokio::test]
async fn the_same_payment_sent_twenty_times_at_once_settles_once() {
    let facilitator = facilitator().await;
    facilitator
        .sandbox
        .queue_settle(Step::Answer.after(std::time::Duration::from_millis(200)));
    let (url, _) = server(&facilitator, payments(&facilitator)).await;
    let required = challenge(&call(&url, "quote", json!({"symbol": "ACME"}), None).await);
    let payment = SandboxWallet::random().pay(&required).unwrap();

    let calls = (0..20).map(|_| {
        let (url, payment) = (url.clone(), payment.clone());
        tokio::spawn(
            async move { call(&url, "quote", json!({"symbol": "ACME"}), Some(&payment)).await },
        )
    });
    let mut transactions = Vec::new();
    for answer in calls {
        let result = answer.await.unwrap();
        assert_eq!(result["isError"], false, "{result}");
        assert_eq!(text_of(&result), "ACME: 42.00 USD");
        transactions.push(result["_meta"][PAYMENT_RESPONSE_META]["transaction"].clone());
    }
    assert!(
        transactions.iter().all(|tx| *tx == transactions[0]),
        "{transactions:?}"
    );
    assert_eq!(facilitator.sandbox.settle_calls(), 1);
    assert_eq!(facilitator.sandbox.verify_calls(), 1);
    assert_eq!(facilitator.sandbox.settlement_count(), 1);
}

#[tokio::test]
async fn a_lost_settle_answer_is_in_doubt_then_the_same_payment_delivers_with_one_transfer() {
    let facilitator = facilitator().await;
    let (url, runs) = server(&facilitator, payments(&facilitator)).await;
    let required = challenge(&call(&url, "quote", json!({"symbol": "ACME"}), None).await);
    let payment = SandboxWallet::random().pay(&required).unwrap();
    facilitator.sandbox.queue_settle(Step::AnswerLost);

    let result = call(&url, "quote", json!({"symbol": "ACME"}), Some(&payment)).await;
    assert_eq!(result["isError"], true, "{result}");
    let doubt = &result["structuredContent"];
    assert_eq!(doubt["error"], "settlement_not_confirmed", "{result}");
    assert_eq!(doubt["retryWithSamePayment"], true);
    assert!(doubt["message"].as_str().unwrap().contains("same payment"));
    assert!(doubt.get("accepts").is_none(), "not a request to pay again");
    assert!(
        !text_of(&result).contains("42.00"),
        "the tool's content is withheld"
    );
    assert!(result.get("_meta").is_none());
    assert_eq!(facilitator.sandbox.settlement_count(), 1, "the money moved");

    let again = call(&url, "quote", json!({"symbol": "ACME"}), Some(&payment)).await;
    assert_eq!(again["isError"], false, "{again}");
    assert_eq!(text_of(&again), "ACME: 42.00 USD");
    let receipt = &again["_meta"][PAYMENT_RESPONSE_META];
    assert_eq!(receipt["success"], true);
    assert_eq!(
        receipt["transaction"].as_str(),
        Some(facilitator.sandbox.settlements()[0].transaction.as_str())
    );
    assert_eq!(facilitator.sandbox.settlement_count(), 1, "one transfer");
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_tool_that_errors_is_not_settled() {
    let facilitator = facilitator().await;
    let (url, runs) = server(&facilitator, payments(&facilitator)).await;
    let required = challenge(&call(&url, "broken", json!({"symbol": "ACME"}), None).await);
    let payment = SandboxWallet::random().pay(&required).unwrap();

    for attempt in 1..=2 {
        let result = call(&url, "broken", json!({"symbol": "ACME"}), Some(&payment)).await;
        assert_eq!(result["isError"], true, "{result}");
        assert_eq!(text_of(&result), "no quote for ACME");
        assert!(result.get("_meta").is_none(), "no payment response");
        assert_eq!(runs.load(Ordering::SeqCst), attempt);
        // Released, not refused: the same payment is verified again and still not settled.
        assert_eq!(facilitator.sandbox.verify_calls(), attempt);
    }
    assert_eq!(facilitator.sandbox.settle_calls(), 0);
    assert_eq!(facilitator.sandbox.settlement_count(), 0);
}

#[tokio::test]
async fn upto_is_charged_what_the_tool_metered() {
    let facilitator = facilitator().await;
    let (url, _) = server(&facilitator, payments(&facilitator)).await;
    let wallet = SandboxWallet::random();
    let required = challenge(&call(&url, "meter", json!({"units": 37}), None).await);
    let payment = wallet.pay(&required).unwrap();

    let result = call(&url, "meter", json!({"units": 37}), Some(&payment)).await;
    assert_eq!(result["isError"], false, "{result}");
    assert_eq!(text_of(&result), "37 units");
    let receipt = &result["_meta"][PAYMENT_RESPONSE_META];
    assert_eq!(receipt["success"], true, "{result}");
    assert_eq!(receipt["amount"], "37000");
    let settlements = facilitator.sandbox.settlements();
    assert_eq!(settlements.len(), 1);
    assert_eq!(settlements[0].scheme, "upto");
    assert_eq!(
        settlements[0].amount,
        AtomicAmount(37_000),
        "metered, not the maximum"
    );
    assert_eq!(settlements[0].from, wallet.address());

    // A repeat is not run again (the charge was the work's): refused with the recorded
    // settlement, no second transfer.
    let again = call(&url, "meter", json!({"units": 37}), Some(&payment)).await;
    assert_eq!(again["isError"], true, "{again}");
    assert_eq!(
        again["structuredContent"]["error"],
        "payment_already_delivered"
    );
    assert_eq!(again["_meta"][PAYMENT_RESPONSE_META]["amount"], "37000");
    assert_eq!(facilitator.sandbox.settlement_count(), 1);
}

#[tokio::test]
async fn a_paid_call_buys_its_own_arguments_only() {
    let facilitator = facilitator().await;
    let (url, runs) = server(&facilitator, payments(&facilitator)).await;
    let required = challenge(&call(&url, "quote", json!({"symbol": "USDC"}), None).await);
    let payment = SandboxWallet::random().pay(&required).unwrap();

    let bought = call(&url, "quote", json!({"symbol": "USDC"}), Some(&payment)).await;
    assert_eq!(text_of(&bought), "USDC: 42.00 USD", "{bought}");
    let transaction = bought["_meta"][PAYMENT_RESPONSE_META]["transaction"].clone();

    // The same payment with other arguments: refused, the tool not run, the settlement shown.
    for symbol in ["BTC", "ETH", "SOL"] {
        let other = call(&url, "quote", json!({"symbol": symbol}), Some(&payment)).await;
        assert_eq!(other["isError"], true, "{other}");
        let refusal = &other["structuredContent"];
        assert_eq!(
            refusal["error"], "payment_used_for_another_request",
            "{other}"
        );
        assert!(
            refusal.get("accepts").is_none(),
            "not a request to pay again"
        );
        assert!(!text_of(&other).contains("42.00"), "{other}");
        assert_eq!(
            other["_meta"][PAYMENT_RESPONSE_META]["transaction"],
            transaction
        );
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the tool ran once");

    // The same arguments again: the same call, delivered again (a lost answer is recovered).
    let again = call(&url, "quote", json!({"symbol": "USDC"}), Some(&payment)).await;
    assert_eq!(text_of(&again), "USDC: 42.00 USD", "{again}");
    assert_eq!(runs.load(Ordering::SeqCst), 2);

    // A metered tool: settled for 5 units, then asked for 200 with the same payment.
    let metered = challenge(&call(&url, "meter", json!({"units": 5}), None).await);
    let permit = SandboxWallet::random().pay(&metered).unwrap();
    let five = call(&url, "meter", json!({"units": 5}), Some(&permit)).await;
    assert_eq!(text_of(&five), "5 units", "{five}");
    let more = call(&url, "meter", json!({"units": 200}), Some(&permit)).await;
    assert_eq!(
        more["structuredContent"]["error"], "payment_used_for_another_request",
        "{more}"
    );
    assert_eq!(more["_meta"][PAYMENT_RESPONSE_META]["amount"], "5000");
    assert_eq!(runs.load(Ordering::SeqCst), 3);
    assert_eq!(
        facilitator.sandbox.settle_calls(),
        2,
        "one settlement per payment"
    );
}

#[tokio::test]
async fn ten_concurrent_calls_with_one_payment_and_mixed_arguments_serve_only_the_first() {
    for tool in ["quote", "meter"] {
        let facilitator = facilitator().await;
        facilitator
            .sandbox
            .queue_settle(Step::Answer.after(std::time::Duration::from_millis(200)));
        let (url, runs) = server(&facilitator, payments(&facilitator)).await;
        let arguments = |n: usize| match tool {
            "quote" => json!({"symbol": (["USDC", "BTC"][n % 2])}),
            _ => json!({"units": ([1, 150][n % 2])}),
        };
        let required = challenge(&call(&url, tool, arguments(0), None).await);
        let payment = SandboxWallet::random().pay(&required).unwrap();

        let calls: Vec<_> = (0..10)
            .map(|n| {
                let (url, payment, arguments) = (url.clone(), payment.clone(), arguments(n));
                tokio::spawn(async move {
                    let result = call(&url, tool, arguments.clone(), Some(&payment)).await;
                    (arguments, result)
                })
            })
            .collect();
        let mut answers = Vec::new();
        for answer in calls {
            answers.push(answer.await.unwrap());
        }
        let delivered: Vec<_> = answers
            .iter()
            .filter(|(_, result)| result["isError"] == false)
            .collect();
        let bought = delivered[0].0.clone();
        for (arguments, result) in &answers {
            let error = &result["structuredContent"]["error"];
            match (tool, *arguments == bought) {
                // A fixed price: the same arguments are delivered again.
                ("quote", true) => assert_eq!(result["isError"], false, "{result}"),
                // Metered: delivered once.
                (_, true) if result["isError"] == false => {}
                (_, true) => assert_eq!(*error, "payment_already_delivered", "{result}"),
                (_, false) => assert_eq!(*error, "payment_used_for_another_request", "{result}"),
            }
            assert_eq!(
                result["_meta"][PAYMENT_RESPONSE_META],
                delivered[0].1["_meta"][PAYMENT_RESPONSE_META],
                "{tool}: one settlement, shown to every call"
            );
        }
        if tool == "meter" {
            assert_eq!(delivered.len(), 1, "{answers:?}");
        }
        assert_eq!(
            runs.load(Ordering::SeqCst),
            delivered.len(),
            "{tool}: the tool ran once per delivered call, never for other arguments"
        );
        assert_eq!(facilitator.sandbox.settle_calls(), 1, "{tool}");
        assert_eq!(facilitator.sandbox.settlement_count(), 1, "{tool}");
    }
}

#[tokio::test]
async fn two_instances_sharing_a_postgres_ledger_settle_the_same_payment_once() {
    postgres_server::require();
    let database = postgres_server::fresh_database().await;
    let facilitator = facilitator().await;
    let mut urls = Vec::new();
    for _ in 0..2 {
        let pool = sqlx::postgres::PgPoolOptions::new()
            .max_connections(8)
            .connect(&database)
            .await
            .unwrap();
        tower_x402_postgres::migrate(&pool).await.unwrap();
        let store = PostgresSettlementStore::new(pool);
        let (url, _) = server(&facilitator, payments(&facilitator).settlement_store(store)).await;
        urls.push(url);
    }
    let required = challenge(&call(&urls[0], "quote", json!({"symbol": "ACME"}), None).await);
    let payment = SandboxWallet::random().pay(&required).unwrap();
    facilitator
        .sandbox
        .queue_settle(Step::Answer.after(std::time::Duration::from_millis(300)));

    let answers = tokio::join!(
        call(&urls[0], "quote", json!({"symbol": "ACME"}), Some(&payment)),
        call(&urls[1], "quote", json!({"symbol": "ACME"}), Some(&payment)),
    );
    for result in [&answers.0, &answers.1] {
        assert_eq!(result["isError"], false, "{result}");
        assert_eq!(text_of(result), "ACME: 42.00 USD");
    }
    assert_eq!(
        answers.0["_meta"][PAYMENT_RESPONSE_META]["transaction"],
        answers.1["_meta"][PAYMENT_RESPONSE_META]["transaction"]
    );
    // Each instance answers the other's payment from the shared record afterwards too, and
    // refuses it for other arguments.
    for url in &urls {
        let again = call(url, "quote", json!({"symbol": "ACME"}), Some(&payment)).await;
        assert_eq!(again["isError"], false, "{again}");
        let other = call(url, "quote", json!({"symbol": "BTC"}), Some(&payment)).await;
        assert_eq!(
            other["structuredContent"]["error"], "payment_used_for_another_request",
            "{other}"
        );
    }
    assert_eq!(facilitator.sandbox.settle_calls(), 1);
    assert_eq!(facilitator.sandbox.settlement_count(), 1);
}
