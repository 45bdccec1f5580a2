//! The MCP discovery server: transport rules, JSON-RPC errors and the six tools.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use serde_json::json;

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
    let get = store.get("/mcp").await;
    assert_eq!(get.status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(get.header("allow"), Some("POST"));
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

super::support::on_both_backends!(
    initialize_negotiates_the_protocol_version,
    json_rpc_errors_have_their_codes,
    transport_rules,
    tools_are_listed_read_only_with_input_schemas,
    tools_answer_with_text_and_structured_content,
    bad_arguments_are_tool_errors,
);
