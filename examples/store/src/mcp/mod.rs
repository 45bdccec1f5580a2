//! `/mcp`: a read-only MCP discovery server over Streamable HTTP — stateless (no session ids),
//! JSON responses (no SSE stream), handshake-era protocol versions.
//!
//! | request | answer |
//! |---|---|
//! | POST, one request | 200 JSON-RPC response (400 for `-32700` / `-32600`) |
//! | POST, a notification or a client response | 202, no body |
//! | POST, a batch (only under `2025-03-26`, or with no version header) | 200 array, or 202 if nothing to answer |
//! | POST, a batch of more than [`MAX_BATCH`] messages | 400, `-32600`; none of them is run |
//! | `Origin` present and not the store's | 403 |
//! | `Content-Type` not JSON / `Accept` excluding JSON | 415 / 406 |
//! | `MCP-Protocol-Version` not supported (including the stateless `2026-07-28`) | 400, `-32000` |
//! | GET asking for `text/event-stream` | 405 with `Allow: GET, POST` (no server-to-client stream) |
//! | any other GET (a crawler, a person) | 200: a description of the server (JSON, or HTML for browsers) |
//! | DELETE, any other method | 405 with `Allow: GET, POST` |
//!
//! A client speaking the stateless `2026-07-28` revision gets that 400, which is not a
//! recognized modern error, and falls back to `initialize`.

mod tools;

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

use crate::catalog::Catalog;
use crate::config::Config;
use crate::sales::standing::Standing;
use tools::Tools;

/// Protocol versions served, newest first.
pub const SUPPORTED_VERSIONS: [&str; 3] = ["2025-11-25", "2025-06-18", "2025-03-26"];

/// The most messages one batch may hold. Every answer is built in memory before it is sent, so
/// this bounds what one small request can make the store build (a `search_catalog` answer
/// listing the whole catalog is about 30 KB).
pub const MAX_BATCH: usize = 20;

/// The version assumed when a request carries no `MCP-Protocol-Version` header.
const ASSUMED_VERSION: &str = "2025-03-26";

/// JSON-RPC and MCP transport error codes used here.
mod code {
    pub(super) const PARSE_ERROR: i64 = -32700;
    pub(super) const INVALID_REQUEST: i64 = -32600;
    pub(super) const METHOD_NOT_FOUND: i64 = -32601;
    pub(super) const INVALID_PARAMS: i64 = -32602;
    pub(super) const SERVER_ERROR: i64 = -32000;
}

/// `GET /.well-known/mcp.json`: name, version, endpoint, transport and tool names.
pub async fn manifest(State(config): State<Arc<Config>>) -> Json<Value> {
    let endpoint = format!("{}/mcp", config.base_url);
    Json(json!({
        "name": "x402-example-store",
        "title": "x402 example store catalog",
        "version": env!("CARGO_PKG_VERSION"),
        "description": "Read-only catalog of a store whose products are paid over HTTP 402.",
        "endpoint": endpoint,
        "transport": "streamable-http",
        "stateless": true,
        "protocolVersions": SUPPORTED_VERSIONS,
        "remotes": [{"type": "streamable-http", "url": endpoint, "supportedProtocolVersions": SUPPORTED_VERSIONS}],
        "tools": tools::NAMES,
    }))
}

/// `GET /mcp`: a GET that asks for an event stream is the transport's and gets its 405; any
/// other GET gets a description of the server — name, transport, where to POST, the tools and
/// the manifest — as HTML when the client prefers it (a browser), JSON otherwise.
pub async fn describe(State(config): State<Arc<Config>>, headers: HeaderMap) -> Response {
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|value| value.to_str().ok())
        .unwrap_or("");
    let wants = |media: &str| {
        accept.split(',').any(|item| {
            item.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .eq_ignore_ascii_case(media)
        })
    };
    if wants("text/event-stream") {
        return method_not_allowed().await;
    }
    let base = &config.base_url;
    let description = json!({
        "name": "x402-example-store",
        "description": "A read-only MCP discovery server for the store's catalog. It speaks JSON-RPC over POST (Streamable HTTP, JSON responses, no event stream).",
        "transport": "streamable-http",
        "endpoint": {"method": "POST", "url": format!("{base}/mcp"), "contentType": "application/json"},
        "protocolVersions": SUPPORTED_VERSIONS,
        "tools": tools::NAMES,
        "manifest": format!("{base}/.well-known/mcp.json"),
    });
    let mut response = if wants("text/html") {
        axum::response::Html(describe_html(&description)).into_response()
    } else {
        Json(description).into_response()
    };
    response.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=300"),
    );
    response
}

/// The description as a small HTML page.
fn describe_html(description: &Value) -> String {
    let text = |pointer: &str| {
        description
            .pointer(pointer)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let tools: Vec<String> = tools::NAMES.iter().map(|name| (*name).to_owned()).collect();
    maud::html! {
        (maud::DOCTYPE)
        html lang="en" {
            head { meta charset="utf-8"; title { "MCP discovery server" } }
            body {
                h1 { "MCP discovery server" }
                p { (text("/description")) }
                p { "POST JSON-RPC messages to " code { (text("/endpoint/url")) } " (transport: streamable-http)." }
                h2 { "Tools" }
                ul { @for tool in &tools { li { code { (tool) } } } }
                p { "Manifest: " a href=(text("/manifest")) { (text("/manifest")) } }
            }
        }
    }
    .into_string()
}

/// Any method but GET and POST on `/mcp`, and a GET for an event stream: 405 with
/// `Allow: GET, POST`.
pub async fn method_not_allowed() -> Response {
    let mut response = rpc_error_response(
        StatusCode::METHOD_NOT_ALLOWED,
        code::SERVER_ERROR,
        "Method not allowed: this server offers no event stream; POST JSON-RPC messages",
    );
    response
        .headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static("GET, POST"));
    response
}

/// `POST /mcp`: one JSON-RPC message or a batch.
pub async fn handle(
    State(config): State<Arc<Config>>,
    State(catalog): State<Arc<Catalog>>,
    State(standing): State<Standing>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Some(origin) = headers.get(header::ORIGIN)
        && origin.as_bytes() != config.origin().as_bytes()
    {
        return rpc_error_response(
            StatusCode::FORBIDDEN,
            code::SERVER_ERROR,
            "Forbidden: Origin not allowed",
        );
    }
    if !media_type_is_json(headers.get(header::CONTENT_TYPE)) {
        return rpc_error_response(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            code::SERVER_ERROR,
            "Unsupported Media Type: Content-Type must be application/json",
        );
    }
    if !accepts_json(headers.get(header::ACCEPT)) {
        return rpc_error_response(
            StatusCode::NOT_ACCEPTABLE,
            code::SERVER_ERROR,
            "Not Acceptable: this server answers with application/json",
        );
    }
    let version = match headers.get("mcp-protocol-version").map(HeaderValue::to_str) {
        None => ASSUMED_VERSION,
        Some(Ok(version)) if SUPPORTED_VERSIONS.contains(&version) => version,
        Some(_) => {
            return rpc_error_response(
                StatusCode::BAD_REQUEST,
                code::SERVER_ERROR,
                &format!(
                    "Bad Request: unsupported MCP-Protocol-Version (supported: {})",
                    SUPPORTED_VERSIONS.join(", ")
                ),
            );
        }
    };
    let message: Value = match serde_json::from_slice(&body) {
        Ok(message) => message,
        Err(e) => {
            return rpc_error_response(
                StatusCode::BAD_REQUEST,
                code::PARSE_ERROR,
                &format!("Parse error: {e}"),
            );
        }
    };
    let state = Tools {
        config: &config,
        catalog: &catalog,
        standing: &standing,
    };
    match message {
        Value::Array(batch) if version == ASSUMED_VERSION && batch.len() > MAX_BATCH => {
            rpc_error_response(
                StatusCode::BAD_REQUEST,
                code::INVALID_REQUEST,
                &format!(
                    "Invalid Request: a batch holds at most {MAX_BATCH} messages (this one has {}); send them in smaller batches",
                    batch.len()
                ),
            )
        }
        Value::Array(batch) if version == ASSUMED_VERSION && !batch.is_empty() => {
            let mut answers = Vec::new();
            for message in batch {
                if let Some(answer) = dispatch(&state, message).await {
                    answers.push(answer);
                }
            }
            if answers.is_empty() {
                StatusCode::ACCEPTED.into_response()
            } else {
                Json(Value::Array(answers)).into_response()
            }
        }
        Value::Array(_) => rpc_error_response(
            StatusCode::BAD_REQUEST,
            code::INVALID_REQUEST,
            "Invalid Request: batches are empty or not allowed in this protocol version",
        ),
        message => match dispatch(&state, message).await {
            None => StatusCode::ACCEPTED.into_response(),
            Some(answer) => {
                let status = match answer.pointer("/error/code").and_then(Value::as_i64) {
                    Some(code::PARSE_ERROR | code::INVALID_REQUEST) => StatusCode::BAD_REQUEST,
                    _ => StatusCode::OK,
                };
                (status, Json(answer)).into_response()
            }
        },
    }
}

/// Answers one message; `None` for notifications and client responses (202).
async fn dispatch(state: &Tools<'_>, message: Value) -> Option<Value> {
    let Value::Object(message) = message else {
        return Some(rpc_error(
            Value::Null,
            code::INVALID_REQUEST,
            "Invalid Request: not a JSON-RPC object",
        ));
    };
    let id = message.get("id").cloned();
    let id_ok = matches!(&id, Some(Value::String(_)))
        || id
            .as_ref()
            .is_some_and(|id| id.as_i64().is_some() || id.as_u64().is_some());
    // The id an error answer may echo: the request's, when it is a valid one.
    let error_id = match (&id, id_ok) {
        (Some(id), true) => id.clone(),
        _ => Value::Null,
    };
    if message.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Some(rpc_error(
            error_id,
            code::INVALID_REQUEST,
            "Invalid Request: jsonrpc must be \"2.0\"",
        ));
    }
    let Some(method) = message.get("method") else {
        // A response to a server request (none are sent) or garbage.
        return if id_ok && (message.contains_key("result") || message.contains_key("error")) {
            None
        } else {
            Some(rpc_error(
                Value::Null,
                code::INVALID_REQUEST,
                "Invalid Request: no method",
            ))
        };
    };
    let Some(method) = method.as_str() else {
        return Some(rpc_error(
            Value::Null,
            code::INVALID_REQUEST,
            "Invalid Request: method must be a string",
        ));
    };
    let params = match message.get("params") {
        None => Map::new(),
        Some(Value::Object(params)) => params.clone(),
        Some(_) => {
            return Some(rpc_error(
                error_id,
                code::INVALID_REQUEST,
                "Invalid Request: params must be an object",
            ));
        }
    };
    let Some(id) = id else {
        // Notifications (`notifications/initialized`, `notifications/cancelled`, …) need no answer.
        return None;
    };
    if !id_ok {
        return Some(rpc_error(
            Value::Null,
            code::INVALID_REQUEST,
            "Invalid Request: id must be a string or an integer",
        ));
    }
    let result = match method {
        "initialize" => initialize(&params),
        "ping" => Ok(json!({})),
        "tools/list" => Ok(json!({"tools": tools::definitions()})),
        "tools/call" => tools::call(state, &params).await,
        _ => Err((
            code::METHOD_NOT_FOUND,
            format!("Method not found: {method}"),
        )),
    };
    Some(match result {
        Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
        Err((code, message)) => rpc_error(id, code, &message),
    })
}

fn initialize(params: &Map<String, Value>) -> Result<Value, (i64, String)> {
    let Some(requested) = params.get("protocolVersion").and_then(Value::as_str) else {
        return Err((
            code::INVALID_PARAMS,
            "Invalid params: protocolVersion (string) is required".to_owned(),
        ));
    };
    let version = if SUPPORTED_VERSIONS.contains(&requested) {
        requested
    } else {
        SUPPORTED_VERSIONS[0]
    };
    Ok(json!({
        "protocolVersion": version,
        "capabilities": {"tools": {"listChanged": false}},
        "serverInfo": {
            "name": "x402-example-store",
            "title": "x402 example store catalog",
            "version": env!("CARGO_PKG_VERSION"),
        },
        "instructions": "Read-only catalog of a store selling fixed-price products over HTTP 402 (x402 v2, USDC). Use search_catalog and get_sku to find a product and get_payment_required for the exact challenge its GET answers with. Purchases happen over HTTP, not here.",
    }))
}

fn rpc_error(id: Value, code: i64, message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

fn rpc_error_response(status: StatusCode, code: i64, message: &str) -> Response {
    (status, Json(rpc_error(Value::Null, code, message))).into_response()
}

fn media_type_is_json(value: Option<&HeaderValue>) -> bool {
    value
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.split(';').next())
        .is_some_and(|media| media.trim().eq_ignore_ascii_case("application/json"))
}

/// An absent `Accept` accepts anything; otherwise JSON (or a wildcard covering it) must be listed.
fn accepts_json(value: Option<&HeaderValue>) -> bool {
    let Some(value) = value else { return true };
    let Ok(value) = value.to_str() else {
        return false;
    };
    value.split(',').any(|item| {
        let media = item.split(';').next().unwrap_or("").trim();
        ["application/json", "application/*", "*/*"]
            .iter()
            .any(|ok| media.eq_ignore_ascii_case(ok))
    })
}
