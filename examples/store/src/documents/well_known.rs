//! The `/.well-known` documents: the v2 catalog, the v1 URL list for crawlers, and the 404 for
//! an agent card the store does not host.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Value, json};

use crate::catalog::Catalog;
use crate::config::Config;
use crate::documents::prebuilt::Prebuilt;
use crate::http_errors::json_error;
use crate::sales::standing::Standing;

/// `GET /.well-known/x402.json`: every product with its resource URL, its SKU record and the
/// exact `accepts` and `extensions` its 402 carries (serialized from the same offer).
pub async fn x402_json(
    State(standing): State<Standing>,
    State(documents): State<Arc<Prebuilt>>,
) -> Response {
    standing.record_retrieved();
    documents.x402_json.response()
}

/// The v2 catalog document.
pub fn catalog_v2(config: &Config, catalog: &Catalog) -> Value {
    let resources: Vec<Value> = catalog
        .iter()
        .map(|sku| {
            let required = sku.offer.payment_required();
            json!({
                "resource": sku.resource_url,
                "type": "http",
                "method": "GET",
                "sku": sku.record(),
                "description": required.resource.description,
                "mimeType": required.resource.mime_type,
                "accepts": required.accepts,
                "extensions": required.extensions,
            })
        })
        .collect();
    json!({
        "x402Version": 2,
        "origin": config.base_url,
        "note": "Each resource answers an unpaid GET with HTTP 402 and its challenge in the PAYMENT-REQUIRED header. This document is free and is not a paywall.",
        "v1": format!("{}/.well-known/x402", config.base_url),
        "openapi": format!("{}/openapi.json", config.base_url),
        "resources": resources,
    })
}

/// `GET /.well-known/x402`: the x402scan-style list (`version` 1, bare absolute URLs of the paid
/// products only) with a pointer to the v2 document.
pub async fn x402_list(
    State(standing): State<Standing>,
    State(config): State<Arc<Config>>,
    State(catalog): State<Arc<Catalog>>,
) -> Json<Value> {
    standing.record_retrieved();
    let base = &config.base_url;
    let resources: Vec<&str> = catalog
        .iter()
        .map(|sku| sku.resource_url.as_str())
        .collect();
    Json(json!({
        "version": 1,
        "resources": resources,
        "instructions": format!(
            "Each resource is a GET that answers 402 until paid (x402 v2, USDC). Full catalog with prices and accepts: {base}/.well-known/x402.json; guide: {base}/llms.txt"
        ),
        "v2": format!("{base}/.well-known/x402.json"),
    }))
}

/// `GET /.well-known/did.json`: 404, no agent card or DID document is hosted.
pub async fn did_json() -> Response {
    json_error(
        StatusCode::NOT_FOUND,
        "no agent card or DID document is hosted by this store",
    )
}
