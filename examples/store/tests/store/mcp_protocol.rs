//! The MCP discovery server: transport rules, JSON-RPC errors and the six tools.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use serde_json::{Value, json};

use super::support::store;

async fn initialize_negotiates_the_protocol_version() {
    let store = store().await;
    for (asked, answered) in [
        ("2025-06-18", "2025-06-18"),
        ("2025-03-26", "2025-03-26"),
        ("2025-11-25", "2025-11-25"),
        ("2099-01-01", "2025-11-25"),
    ] {
        let answer = store
            .mcp(&json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": asked, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}).to_string())
            .await;
        assert_eq!(answer.status, StatusCode::OK);
        assert_eq!(answer.json["id"], 1);
        assert_eq!(answer.json["result"]["protocolVersion"], answered);
        assert!(answer.json["result"]["capabilities"]["tools"].is_object());
        assert!(answer.json["result"]["serverInfo"]["name"].is_string());
        assert!(answer.json["result"]["serverInfo"]["version"].is_string());
        assert!(answer.header("mcp-session-id").is_none(), "stateless");
    }
    let notification = store
        .mcp(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
        .await;
    assert_eq!(notification.status, StatusCode::ACCEPTED);
    assert!(notification.text.is_empty());
    let ping = store
        .mcp(r#"{"jsonrpc":"2.0","id":"p","method":"ping"}"#)
        .await;
    assert_eq!(
        ping.json,
        json!({"jsonrpc": "2.0", "id": "p", "result": {}})
    );
}

async fn json_rpc_errors_have_their_codes() {
    let store = store().await;
    let cases: &[(&str, StatusCode, i64)] = &[
        ("{not json", StatusCode::BAD_REQUEST, -32700),
        ("42", StatusCode::BAD_REQUEST, -32600),
        (
            r#"{"jsonrpc":"1.0","id":1,"method":"ping"}"#,
            StatusCode::BAD_REQUEST,
            -32600,
        ),
        (
            r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#,
            StatusCode::BAD_REQUEST,
            -32600,
        ),
        (
            r#"{"jsonrpc":"2.0","id":1.5,"method":"ping"}"#,
            StatusCode::BAD_REQUEST,
            -32600,
        ),
        (
            r#"{"jsonrpc":"2.0","id":1,"method":7}"#,
            StatusCode::BAD_REQUEST,
            -32600,
        ),
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":[1]}"#,
            StatusCode::BAD_REQUEST,
            -32600,
        ),
        ("[]", StatusCode::BAD_REQUEST, -32600),
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"resources/list"}"#,
            StatusCode::OK,
            -32601,
        ),
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#,
            StatusCode::OK,
            -32602,
        ),
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{}}"#,
            StatusCode::OK,
            -32602,
        ),
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"buy_now"}}"#,
            StatusCode::OK,
            -32602,
        ),
    ];
    for (body, status, code) in cases {
        let answer = store.mcp(body).await;
        assert_eq!(answer.status, *status, "{body}");
        assert_eq!(
            answer.json["error"]["code"], *code,
            "{body}: {}",
            answer.text
        );
        assert_eq!(answer.json["jsonrpc"], "2.0");
    }
    let unknown = store
        .mcp(r#"{"jsonrpc":"2.0","id":9,"method":"nope"}"#)
        .await;
    assert_eq!(unknown.json["id"], 9);
}

async fn transport_rules() {
    let store = store().await;
    let stream = store
        .send(
            Request::get("/mcp")
                .header("accept", "text/event-stream")
                .body(Body::empty())
                .unwrap(),
        )
        .await;
    assert_eq!(stream.status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(stream.header("allow"), Some("GET, POST"));
    assert_eq!(stream.json["jsonrpc"], "2.0");
    let delete = store
        .send(Request::delete("/mcp").body(Body::empty()).unwrap())
        .await;
    assert_eq!(delete.status, StatusCode::METHOD_NOT_ALLOWED);

    let post = |content_type: &str, accept: &str, origin: Option<&str>, version: Option<&str>| {
        let mut request = Request::post("/mcp")
            .header("content-type", content_type)
            .header("accept", accept);
        if let Some(origin) = origin {
            request = request.header("origin", origin);
        }
        if let Some(version) = version {
            request = request.header("mcp-protocol-version", version);
        }
        request
            .body(Body::from(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#))
            .unwrap()
    };
    let ok = "application/json, text/event-stream";
    assert_eq!(
        store.send(post("text/plain", ok, None, None)).await.status,
        StatusCode::UNSUPPORTED_MEDIA_TYPE
    );
    assert_eq!(
        store
            .send(post("application/json", "text/html", None, None))
            .await
            .status,
        StatusCode::NOT_ACCEPTABLE
    );
    assert_eq!(
        store
            .send(post(
                "application/json",
                ok,
                Some("https://evil.example"),
                None
            ))
            .await
            .status,
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        store
            .send(post(
                "application/json",
                ok,
                Some("http://127.0.0.1:4020"),
                None
            ))
            .await
            .status,
        StatusCode::OK
    );
    assert_eq!(
        store
            .send(post(
                "application/json; charset=utf-8",
                ok,
                None,
                Some("2025-06-18")
            ))
            .await
            .status,
        StatusCode::OK
    );
    let modern = store
        .send(post("application/json", ok, None, Some("2026-07-28")))
        .await;
    assert_eq!(modern.status, StatusCode::BAD_REQUEST);
    assert_ne!(
        modern.json["error"]["code"], -32022,
        "a legacy server never answers with the modern error"
    );

    // Batches: only in 2025-03-26 (or with no version header).
    let batch = r#"[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","method":"notifications/initialized"},{"jsonrpc":"2.0","id":2,"method":"nope"}]"#;
    let answer = store.mcp(batch).await;
    assert_eq!(answer.status, StatusCode::OK);
    let answers = answer.json.as_array().unwrap();
    assert_eq!(answers.len(), 2);
    assert_eq!(answers[1]["error"]["code"], -32601);
    let only_notes = store
        .mcp(r#"[{"jsonrpc":"2.0","method":"notifications/initialized"}]"#)
        .await;
    assert_eq!(only_notes.status, StatusCode::ACCEPTED);
    let mut newer = post("application/json", ok, None, Some("2025-06-18"));
    *newer.body_mut() = Body::from(batch);
    assert_eq!(store.send(newer).await.json["error"]["code"], -32600);
}

/// A batch is answered up to `MAX_BATCH` messages; a longer one is refused whole, with a
/// JSON-RPC error and before any tool runs (the funnel counts no catalog read).
async fn batches_are_bounded() {
    let store = store().await;
    let search = |id: usize| {
        serde_json::json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "search_catalog", "arguments": {"limit": 100}}})
    };
    let full: Vec<Value> = (0..x402_store::mcp::MAX_BATCH).map(search).collect();
    let answer = store.mcp(&Value::Array(full).to_string()).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.text);
    assert_eq!(
        answer.json.as_array().unwrap().len(),
        x402_store::mcp::MAX_BATCH
    );
    let retrieved = store
        .state
        .standing
        .snapshot()
        .await
        .unwrap()
        .demo("retrieved");

    let over: Vec<Value> = (0..=x402_store::mcp::MAX_BATCH).map(search).collect();
    let refused = store.mcp(&Value::Array(over).to_string()).await;
    assert_eq!(refused.status, StatusCode::BAD_REQUEST, "{}", refused.text);
    assert_eq!(refused.json["jsonrpc"], "2.0");
    assert_eq!(refused.json["error"]["code"], -32600);
    assert!(
        refused.json["error"]["message"]
            .as_str()
            .unwrap()
            .contains(&format!("at most {}", x402_store::mcp::MAX_BATCH)),
        "{}",
        refused.text
    );
    assert!(refused.bytes.len() < 512, "{}", refused.text);
    assert_eq!(
        store
            .state
            .standing
            .snapshot()
            .await
            .unwrap()
            .demo("retrieved"),
        retrieved,
        "no tool of the refused batch ran"
    );
    // 500 small messages, the size of the batch that used to answer 16 MB: refused in bytes.
    let many: Vec<Value> = (0..500).map(search).collect();
    let body = Value::Array(many).to_string();
    assert!(body.len() < x402_store::app::MAX_BODY_BYTES);
    let refused = store.mcp(&body).await;
    assert_eq!(refused.status, StatusCode::BAD_REQUEST);
    assert!(refused.bytes.len() < 512, "{}", refused.text);
}

async fn tools_are_listed_read_only_with_input_schemas() {
    let store = store().await;
    let answer = store
        .mcp(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#)
        .await;
    let tools = answer.json["result"]["tools"].as_array().unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "search_catalog",
            "get_sku",
            "get_payment_required",
            "get_standing",
            "get_doctrine",
            "get_discovery"
        ]
    );
    for tool in tools {
        assert_eq!(tool["inputSchema"]["type"], "object");
        assert!(tool["description"].is_string());
        assert_eq!(tool["annotations"]["readOnlyHint"], true);
        assert_eq!(tool["annotations"]["openWorldHint"], false);
    }
}

async fn tools_answer_with_text_and_structured_content() {
    let store = store().await;
    let search = store
        .tool(
            "search_catalog",
            json!({"query": "atlas", "tag": "data", "maxPriceUsd": "70.00"}),
        )
        .await;
    assert_eq!(search["isError"], false);
    let slugs: Vec<&str> = search["structuredContent"]["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["slug"].as_str().unwrap())
        .collect();
    assert_eq!(
        slugs,
        [
            "store-facilitator-atlas",
            "store-robot-middleware-atlas",
            "store-ev-charging-atlas"
        ]
    );
    let text: serde_json::Value =
        serde_json::from_str(search["content"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(text, search["structuredContent"]);
    assert_eq!(
        search["structuredContent"]["results"][0]["amountAtomic"],
        "65000000"
    );

    let sku = store
        .tool("get_sku", json!({"slug": "store-rail-receipt"}))
        .await;
    assert_eq!(sku["structuredContent"]["price"]["amount"], "1.00");
    assert_eq!(
        sku["structuredContent"]["resource"],
        "http://127.0.0.1:4020/api/x402/store-rail-receipt"
    );

    let standing = store.tool("get_standing", json!({})).await;
    assert_eq!(
        standing["structuredContent"]["stages"]
            .as_array()
            .unwrap()
            .len(),
        8
    );

    let doctrine = store.tool("get_doctrine", json!({})).await;
    let statements = doctrine["structuredContent"]["statements"]
        .as_array()
        .unwrap();
    assert!(
        statements
            .iter()
            .any(|s| s.as_str().unwrap().contains("proof of purchase only"))
    );
    // The funnel's free stages are said to be inflatable, in the doctrine and in the standing.
    assert!(
        statements.iter().any(|s| {
            let s = s.as_str().unwrap();
            s.contains("considered") && s.contains("selected") && s.contains("can be inflated")
        }),
        "{statements:?}"
    );
    let meanings = standing["structuredContent"]["stages"].to_string();
    assert_eq!(meanings.matches("can be inflated").count(), 3, "{meanings}");
    assert_eq!(
        doctrine["structuredContent"]["referralSchema"]["header"],
        "X-REFERRER-PASSPORT"
    );
    assert_eq!(
        doctrine["structuredContent"]["referralSchema"]["kind"],
        "buyer_quote"
    );

    let discovery = store.tool("get_discovery", json!({})).await;
    assert_eq!(discovery["structuredContent"]["probed"], false);
    assert!(discovery["structuredContent"]["channels"]["x402scan"].is_object());
    assert_eq!(
        discovery["structuredContent"]["doors"]
            .as_array()
            .unwrap()
            .len(),
        3
    );
}

async fn bad_arguments_are_tool_errors() {
    let store = store().await;
    for (tool, arguments) in [
        ("get_sku", json!({"slug": "store-nothing"})),
        ("get_sku", json!({})),
        ("get_payment_required", json!({"slug": 5})),
        ("search_catalog", json!({"tag": "weapons"})),
        ("search_catalog", json!({"maxPriceUsd": "cheap"})),
        ("search_catalog", json!({"limit": 0})),
        ("search_catalog", json!({"sort": "price"})),
        ("get_standing", json!({"x": 1})),
    ] {
        let result = store.tool(tool, arguments.clone()).await;
        assert_eq!(result["isError"], true, "{tool} {arguments}");
        assert!(result["content"][0]["text"].is_string());
    }
}

#[tokio::test]
async fn a_plain_get_describes_the_server() {
    let store = store().await;
    let get = store.get("/mcp").await;
    assert_eq!(get.status, StatusCode::OK, "{}", get.text);
    assert!(
        get.header("content-type")
            .unwrap()
            .starts_with("application/json")
    );
    assert_eq!(get.json["transport"], "streamable-http");
    assert_eq!(get.json["endpoint"]["method"], "POST");
    assert_eq!(get.json["endpoint"]["url"], "http://127.0.0.1:4020/mcp");
    assert_eq!(get.json["tools"].as_array().unwrap().len(), 6);
    assert_eq!(
        get.json["manifest"],
        "http://127.0.0.1:4020/.well-known/mcp.json"
    );
    assert!(get.json["name"].is_string());

    let browser = store
        .send(
            Request::get("/mcp")
                .header("accept", "text/html,application/xhtml+xml,*/*;q=0.8")
                .body(Body::empty())
                .unwrap(),
        )
        .await;
    assert_eq!(browser.status, StatusCode::OK);
    assert!(
        browser
            .header("content-type")
            .unwrap()
            .starts_with("text/html")
    );
    assert!(browser.text.contains("/.well-known/mcp.json"));
    assert!(browser.text.contains("search_catalog"));

    let openapi = store.get("/openapi.json").await;
    let methods: Vec<&String> = openapi.json["paths"]["/mcp"]
        .as_object()
        .unwrap()
        .keys()
        .collect();
    assert_eq!(methods, ["get", "post"]);
}

/// Any JSON value up to a few levels deep, with the keys and values JSON-RPC and the tools read
/// mixed in, so messages get past the first checks.
fn json_value() -> impl proptest::strategy::Strategy<Value = serde_json::Value> {
    use proptest::prelude::*;
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::from),
        any::<i64>().prop_map(serde_json::Value::from),
        any::<f64>().prop_map(|f| serde_json::json!(f)),
        prop_oneof![
            Just("2.0".to_owned()),
            Just("tools/call".to_owned()),
            Just("initialize".to_owned()),
            Just("get_sku".to_owned()),
            Just("search_catalog".to_owned()),
            Just("store-rail-receipt".to_owned()),
            "\\PC{0,12}",
        ]
        .prop_map(serde_json::Value::from),
    ];
    leaf.prop_recursive(3, 24, 6, |inner| {
        let key = prop_oneof![
            Just("jsonrpc".to_owned()),
            Just("id".to_owned()),
            Just("method".to_owned()),
            Just("params".to_owned()),
            Just("name".to_owned()),
            Just("arguments".to_owned()),
            Just("slug".to_owned()),
            Just("query".to_owned()),
            Just("protocolVersion".to_owned()),
            "[a-z]{0,6}",
        ];
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::from),
            proptest::collection::btree_map(key, inner, 0..5)
                .prop_map(|map| serde_json::Value::Object(map.into_iter().collect())),
        ]
    })
}

fn answers_json_rpc(
    runtime: &tokio::runtime::Runtime,
    store: &super::support::TestStore,
    body: Vec<u8>,
) {
    let answer = runtime.block_on(
        store.send(
            Request::post("/mcp")
                .header("content-type", "application/json")
                .header("accept", "application/json, text/event-stream")
                .body(Body::from(body))
                .unwrap(),
        ),
    );
    assert!(
        [
            StatusCode::OK,
            StatusCode::ACCEPTED,
            StatusCode::BAD_REQUEST
        ]
        .contains(&answer.status),
        "{}: {}",
        answer.status,
        answer.text
    );
    if answer.status != StatusCode::ACCEPTED {
        assert!(
            answer.json.is_object() || answer.json.is_array(),
            "{}",
            answer.text
        );
    }
}

#[test]
fn arbitrary_json_rpc_bodies_never_panic() {
    use proptest::prelude::*;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let store = runtime.block_on(store());
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(256));
    runner
        .run(&json_value(), |value| {
            answers_json_rpc(&runtime, &store, value.to_string().into_bytes());
            // The same value as a single-element batch and as a tools/call's arguments.
            answers_json_rpc(&runtime, &store, serde_json::json!([value]).to_string().into_bytes());
            let call = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "get_sku", "arguments": value}});
            answers_json_rpc(&runtime, &store, call.to_string().into_bytes());
            Ok(())
        })
        .unwrap();
    runner
        .run(&proptest::collection::vec(any::<u8>(), 0..256), |bytes| {
            answers_json_rpc(&runtime, &store, bytes);
            Ok(())
        })
        .unwrap();
}

super::support::on_both_backends!(
    initialize_negotiates_the_protocol_version,
    json_rpc_errors_have_their_codes,
    transport_rules,
    batches_are_bounded,
    tools_are_listed_read_only_with_input_schemas,
    tools_answer_with_text_and_structured_content,
    bad_arguments_are_tool_errors,
);
