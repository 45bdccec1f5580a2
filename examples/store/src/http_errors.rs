//! The store's error answers. Every one has a JSON body: a handler writes it with
//! [`json_error`], and the [`json_errors`] middleware gives one to the errors the router and the
//! middleware write (405, 408, 413) and to a request with too many or too large headers (431).
//! On `/mcp` the body is a JSON-RPC error, as an MCP client expects.

use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// The most request headers the store reads.
pub const MAX_HEADERS: usize = 100;

/// The most bytes of request headers (names and values) the store reads.
pub const MAX_HEADER_BYTES: usize = 32 * 1024;

/// The store's one error answer: `{"error": message}` with `status` and
/// `Cache-Control: no-store` (an error is never worth caching).
pub fn json_error(status: StatusCode, message: impl Into<String>) -> Response {
    let mut response = (status, axum::Json(json!({"error": message.into()}))).into_response();
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// Middleware: answers 431 to a request over the header limits, and gives a JSON body to a 405,
/// 408, 413 or 431 that has none (or a non-JSON one).
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
    let message = match status {
        StatusCode::METHOD_NOT_ALLOWED => "method not allowed on this route",
        StatusCode::REQUEST_TIMEOUT => "the request took too long",
        StatusCode::PAYLOAD_TOO_LARGE => "request body too large",
        StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE => "request headers too many or too large",
        _ => return response,
    };
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.starts_with("application/json"));
    if is_json {
        return response;
    }
    let allow = response.headers().get(header::ALLOW).cloned();
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
        StatusCode::REQUEST_TIMEOUT | StatusCode::PAYLOAD_TOO_LARGE
    ) {
        // The body was not read to its end: close rather than wait for the rest of it.
        answer
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    answer
}
