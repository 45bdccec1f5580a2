//! The catalog documents that depend only on the configuration and the catalog, serialized
//! once at start-up with their `ETag`: `/.well-known/x402.json` and `/openapi.json` are
//! 100–200 KB of JSON each, which building per request cost milliseconds of CPU.

use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, header};
use axum::response::Response;

use crate::documents::caching;

/// The prebuilt documents, shared by every request.
#[derive(Debug)]
pub struct Prebuilt {
    /// `GET /.well-known/x402.json`.
    pub x402_json: Document,
    /// `GET /openapi.json`.
    pub openapi: Document,
}

impl Prebuilt {
    /// Serializes the v2 catalog ([`well_known::catalog_v2`](super::well_known::catalog_v2)) and
    /// the API description ([`openapi::build`](super::openapi::build)).
    pub fn new(x402_json: &serde_json::Value, openapi: &serde_json::Value) -> Self {
        Self {
            x402_json: Document::json(x402_json),
            openapi: Document::json(openapi),
        }
    }
}

/// One serialized JSON document and its weak `ETag`.
#[derive(Debug, Clone)]
pub struct Document {
    body: Bytes,
    etag: HeaderValue,
}

impl Document {
    fn json(value: &serde_json::Value) -> Self {
        // A `Value` always serializes: its keys are strings.
        let body = Bytes::from(serde_json::to_vec(value).unwrap_or_default());
        let etag = caching::weak_etag(&body);
        Self { body, etag }
    }

    /// A 200 with the document, its content type and its `ETag` (the caching middleware adds
    /// `Cache-Control` and answers `If-None-Match`).
    pub fn response(&self) -> Response {
        let mut response = Response::new(Body::from(self.body.clone()));
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        headers.insert(header::ETAG, self.etag.clone());
        response
    }
}
