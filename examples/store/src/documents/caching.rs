//! Caching of the catalog documents: a weak `ETag` (SHA-256 of the body) on each, `304 Not
//! Modified` when `If-None-Match` names it, and a `Cache-Control` lifetime suited to the
//! document. Compression is the app's ([`tower_http::compression`]), outside this layer, so the
//! tag names the content whatever its encoding (hence weak).

use std::fmt::Write as _;

use axum::body::{Body, to_bytes};
use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sha2::{Digest as _, Sha256};

/// The largest document body hashed; a larger one (none is near it) is sent untagged.
const MAX_TAGGED_BYTES: usize = 8 * 1024 * 1024;

/// The `Cache-Control` of the document at `path`: the catalog and its descriptions change only
/// when the store restarts with another configuration, the funnel counts in `/api/bazaar` more
/// often.
pub fn cache_control(path: &str) -> &'static str {
    match path {
        "/api/bazaar" => "public, max-age=60",
        "/llms.txt" | "/.well-known/mcp.json" => "public, max-age=3600",
        _ => "public, max-age=300",
    }
}

/// Middleware for the catalog documents: `ETag`, `304` and `Cache-Control` on a 200. A
/// response that already carries an `ETag` (a [prebuilt](super::prebuilt) document) keeps it;
/// any other body is read and hashed.
pub async fn etag(request: Request, next: Next) -> Response {
    let path = request.uri().path().to_owned();
    let if_none_match = request.headers().get(header::IF_NONE_MATCH).cloned();
    let response = next.run(request).await;
    if response.status() != StatusCode::OK {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let (tag, body) = match parts.headers.get(header::ETAG) {
        Some(tag) => (tag.clone(), body),
        None => {
            let Ok(bytes) = to_bytes(body, MAX_TAGGED_BYTES).await else {
                return crate::http_errors::json_error(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "document too large",
                );
            };
            (weak_etag(&bytes), Body::from(bytes))
        }
    };
    let control = HeaderValue::from_static(cache_control(&path));
    parts.headers.insert(header::CACHE_CONTROL, control.clone());
    parts.headers.insert(header::ETAG, tag.clone());
    if if_none_match.is_some_and(|value| matches_tag(&value, &tag)) {
        let mut not_modified = StatusCode::NOT_MODIFIED.into_response();
        let headers = not_modified.headers_mut();
        headers.insert(header::ETAG, tag);
        headers.insert(header::CACHE_CONTROL, control);
        for name in [header::VARY, header::ACCESS_CONTROL_ALLOW_ORIGIN] {
            if let Some(value) = parts.headers.get(&name) {
                headers.insert(name, value.clone());
            }
        }
        return not_modified;
    }
    Response::from_parts(parts, body)
}

/// The weak `ETag` of `body`: the first 16 bytes of its SHA-256, in hex.
pub fn weak_etag(body: &[u8]) -> HeaderValue {
    let digest = Sha256::digest(body);
    let mut tag = String::with_capacity(36);
    tag.push_str("W/\"");
    for byte in &digest[..16] {
        let _ = write!(tag, "{byte:02x}");
    }
    tag.push('"');
    // Hex digits, quotes and `W/` are all visible ASCII.
    HeaderValue::from_str(&tag).unwrap_or_else(|_| HeaderValue::from_static("W/\"\""))
}

/// Whether an `If-None-Match` value names `tag` (weak comparison) or is `*`.
fn matches_tag(value: &HeaderValue, tag: &HeaderValue) -> bool {
    let Ok(value) = value.to_str() else {
        return false;
    };
    let Ok(tag) = tag.to_str() else {
        return false;
    };
    let opaque = |candidate: &str| candidate.trim().trim_start_matches("W/").to_owned();
    value
        .split(',')
        .any(|candidate| candidate.trim() == "*" || opaque(candidate) == opaque(tag))
}
