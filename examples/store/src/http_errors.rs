//! Every error answer has a JSON body, including the ones written by the router, the
//! middleware and axum's extractors (405, 408, 413, a body that cannot be read) rather than by a
//! handler, and a request with too many or too large headers gets a JSON 431. On `/mcp` the body
//! is a JSON-RPC error, as an MCP client expects.
//!
//! What never reaches the app cannot be answered here: hyper itself refuses, with an empty body
//! and `connection: close`, an HTTP/1 request whose framing it cannot trust (400: two different
//! `Content-Length`, a `Transfer-Encoding` not ending in `chunked`, a malformed request line or
//! header) or whose request line and headers overflow its read buffer (431, about 400 KB).

use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// The most request headers the store reads.
pub const MAX_HEADERS: usize = 100;

/// The most bytes of request headers (names and values) the store reads.
pub const MAX_HEADER_BYTES: usize = 32 * 1024;

/// The most bytes of a plain-text error body kept as the JSON error's message.
const MAX_MESSAGE_BYTES: usize = 1024;

/// The store's one error answer: `{"error": message}` with `status` and
/// `Cache-Control: no-store` (an error is never worth caching).
pub fn json_error(status: StatusCode, message: impl Into<String>) -> Response {
    let mut response = (status, axum::Json(json!({"error": message.into()}))).into_response();
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// Middleware: answers 431 to a request over the header limits, and gives a JSON body to an
/// error answer that has none, or a plain-text one (an HTML page for a browser is kept).
pub async fn json_errors(request: Request, next: Next) -> Response {
    let is_mcp = request.uri().path() == "/mcp";
    let headers = request.headers();
    let header_bytes: usize = headers
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len())
        .sum();
    let response = if headers.len() > MAX_HEADERS || header_bytes > MAX_HEADER_BYTES {
        StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE.into_response()
    } else {
        next.run(request).await
    };
    let status = response.status();
    if !(status.is_client_error() || status.is_server_error()) {
        return response;
    }
    let plain = match response
        .headers()
        .get(header::CONTENT_TYPE)
        .map(|value| value.to_str().unwrap_or(""))
    {
        None => true,
        Some(kind) => kind.starts_with("text/plain"),
    };
    if !plain {
        return response;
    }
    let allow = response.headers().get(header::ALLOW).cloned();
    let message = match status {
        StatusCode::METHOD_NOT_ALLOWED => "method not allowed on this route".to_owned(),
        StatusCode::REQUEST_TIMEOUT => "the request took too long".to_owned(),
        StatusCode::PAYLOAD_TOO_LARGE => "request body too large".to_owned(),
        StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE => {
            "request headers too many or too large".to_owned()
        }
        // An extractor's rejection (a body that cannot be read, say): its text is the message.
        _ => match axum::body::to_bytes(response.into_body(), MAX_MESSAGE_BYTES).await {
            Ok(text) if !text.is_empty() => String::from_utf8_lossy(&text).into_owned(),
            _ => status
                .canonical_reason()
                .unwrap_or("request refused")
                .to_owned(),
        },
    };
    let message = message.as_str();
    let mut answer = if is_mcp {
        let body =
            json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32000, "message": message}});
        let mut answer = (status, axum::Json(body)).into_response();
        answer
            .headers_mut()
            .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        answer
    } else {
        json_error(status, message)
    };
    if let Some(allow) = allow {
        answer.headers_mut().insert(header::ALLOW, allow);
    }
    if matches!(
        status,
        StatusCode::REQUEST_TIMEOUT | StatusCode::PAYLOAD_TOO_LARGE | StatusCode::BAD_REQUEST
    ) {
        // The body was not read to its end: close rather than wait for the rest of it.
        answer
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    answer
}
