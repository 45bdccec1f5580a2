//! `GET /openapi.json`: OpenAPI 3.1 in the form x402 indexers read.
//!
//! One concrete path per product (no `{sku}` template: a template cannot carry 45 fixed prices,
//! and an indexer would probe it literally), each with `x-payment-info` in the structured form
//! `{"price":{"mode":"fixed","currency":"USD","amount":"NN.NN"},"protocols":[{"x402":{"version":2}}]}`,
//! a 200 schema and a 402 response. Free routes carry `security: []` and no `x-payment-info`.

use std::sync::Arc;

use axum::extract::State;
use axum::response::Response;
use serde_json::{Map, Value, json};

use crate::catalog::{self, Catalog, TAGS};
use crate::config::Config;
use crate::documents::prebuilt::Prebuilt;
use crate::sales::standing::Standing;

/// The API description's version, a date.
pub const API_VERSION: &str = "2026-09-08";

/// `GET /openapi.json`.
pub async fn document(
    State(standing): State<Standing>,
    State(documents): State<Arc<Prebuilt>>,
) -> Response {
    standing.record_retrieved();
    documents.openapi.response()
}

/// The OpenAPI document (`demo`: payments settle in the in-process sandbox).
pub fn build(config: &Config, catalog: &Catalog, demo: bool) -> Value {
    let base = &config.base_url;
    let mut paths = Map::new();
    for sku in catalog.iter() {
        let operation = json!({
            "operationId": sku.slug,
            "summary": sku.summary,
            "description": sku.description,
            "tags": [sku.tag],
            "security": [],
            "x-payment-info": {
                "price": catalog::price_json(sku.price),
                "protocols": [{"x402": {"version": 2}}],
            },
            "parameters": [
                {
                    "name": "PAYMENT-SIGNATURE",
                    "in": "header",
                    "required": false,
                    "description": "The payment: base64 of an x402 v2 PaymentPayload answering one accept of the 402's PAYMENT-REQUIRED challenge. Without it (or when it cannot be used) the answer is 402.",
                    "schema": {"type": "string", "contentEncoding": "base64"},
                },
                {
                    "name": "SIGN-IN-WITH-X",
                    "in": "header",
                    "required": false,
                    "description": "Sign-in-with-x: for a wallet that already paid for this product. Every 402 carries extensions[\"sign-in-with-x\"] (info with domain, uri, version, a one-time nonce, issuedAt, expirationTime; supportedChains; the fields a proof must carry). Sign its EIP-4361 message (personal_sign) with the wallet that paid and send base64 of the JSON {info fields, address, chainId, type, signature} within five minutes: the answer is the purchase again (same Passport and fulfillment URLs, replayed: true), without paying. Each proof works once; an invalid or unentitled proof gets the 402 whose error starts with an invalid_siwx_* code.",
                    "schema": {"type": "string", "contentEncoding": "base64"},
                },
                {
                    "name": "X-REFERRER-PASSPORT",
                    "in": "header",
                    "required": false,
                    "description": "Optional citation of a prior buyer's Passport (id or verify path).",
                    "schema": {"type": "string"},
                },
            ],
            "responses": {
                "200": {
                    "description": "Paid: a Passport (proof of purchase) and the fulfillment URLs.",
                    "headers": {"PAYMENT-RESPONSE": {
                        "description": "Base64 of the x402 v2 SettleResponse.",
                        "schema": {"type": "string"},
                    }},
                    "content": {"application/json": {
                        "schema": crate::sales::purchase::response_schema(),
                        "example": sku.example,
                    }},
                },
                "402": {
                    "description": "Payment Required",
                    "headers": {"PAYMENT-REQUIRED": {
                        "description": "Base64 of the x402 v2 PaymentRequired challenge.",
                        "schema": {"type": "string"},
                    }},
                },
                "404": {"description": "No product is sold at this path."},
            },
        });
        paths.insert(
            format!("/api/x402/{}", sku.slug),
            json!({ "get": operation }),
        );
    }
    for (path, methods) in free_routes() {
        let mut item = Map::new();
        for (method, operation_id, summary) in methods.iter() {
            let mut operation = json!({
                "operationId": operation_id,
                "summary": summary,
                "tags": ["discovery"],
                "security": [],
                "responses": {"200": {"description": "OK"}},
            });
            if path.contains("{id}") {
                operation["parameters"] = json!([{"name": "id", "in": "path", "required": true, "schema": {"type": "string"}}]);
            }
            if path.contains("{passport}") {
                operation["parameters"] = json!([
                    {"name": "passport", "in": "path", "required": true, "schema": {"type": "string"}},
                    {"name": "file", "in": "path", "required": true, "schema": {"type": "string"}},
                    {"name": "key", "in": "query", "required": true, "description": "The fulfillment key from the purchase's capability URL.", "schema": {"type": "string"}},
                ]);
                operation["responses"] = json!({
                    "200": {"description": "The file."},
                    "403": {"description": "The key does not unlock this Passport's files."},
                });
            }
            item.insert((*method).to_owned(), operation);
        }
        paths.insert((*path).to_owned(), Value::Object(item));
    }
    let mut tags: Vec<Value> = TAGS.iter().map(|tag| json!({"name": tag})).collect();
    tags.push(json!({"name": "discovery", "description": "Free catalog and discovery routes."}));
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "x402 example store",
            "version": API_VERSION,
            "description": if demo {
                "A first-party digital store: fixed-price products paid per GET over HTTP 402 (x402 v2). Demo mode: payments are settled by an in-process sandbox facilitator and no funds move."
            } else {
                "A first-party digital store: fixed-price products paid per GET over HTTP 402 (x402 v2), settled in USDC by an external facilitator."
            },
            "x-guidance": format!(
                "Each /api/x402/<slug> is a GET with no body. Unpaid, it answers 402 with the challenge in the PAYMENT-REQUIRED header (base64 JSON, x402Version 2). Pay one accept (exact USDC on eip155:8453; amounts in atomic units, 6 decimals) and repeat the GET with PAYMENT-SIGNATURE. The lowest-priced first probe is /api/x402/{}-rail-receipt. Catalog routes are free and never 402.",
                config.slug_prefix
            ),
            "contact": {"name": "x402 example store", "url": base},
        },
        "servers": [{"url": base}],
        "tags": tags,
        "x-service-info": {
            "categories": ["data", "software", "payments"],
            "docs": {"apiReference": format!("{base}/openapi.json"), "homepage": format!("{base}/bazaar"), "llms": format!("{base}/llms.txt")},
        },
        "paths": paths,
    })
}

/// The free routes: path → (method, operationId, summary).
fn free_routes() -> &'static [(
    &'static str,
    &'static [(&'static str, &'static str, &'static str)],
)] {
    &[
        (
            "/.well-known/x402.json",
            &[(
                "get",
                "wellKnownX402Json",
                "v2 catalog of every product with its accepts",
            )],
        ),
        (
            "/.well-known/x402",
            &[(
                "get",
                "wellKnownX402",
                "URL list of the paid products (never a 402)",
            )],
        ),
        ("/openapi.json", &[("get", "openapi", "This document")]),
        (
            "/api/bazaar",
            &[("get", "bazaarJson", "First-party catalog, machine form")],
        ),
        (
            "/bazaar",
            &[("get", "bazaarPage", "First-party catalog, human page")],
        ),
        (
            "/llms.txt",
            &[("get", "llmsTxt", "Plain-text doctrine and catalog")],
        ),
        (
            "/mcp",
            &[
                (
                    "get",
                    "mcpDescription",
                    "Description of the MCP discovery server (JSON, or HTML for browsers)",
                ),
                (
                    "post",
                    "mcp",
                    "MCP discovery server (Streamable HTTP, JSON responses)",
                ),
            ],
        ),
        (
            "/.well-known/mcp.json",
            &[("get", "mcpManifest", "Manifest of the discovery server")],
        ),
        (
            "/discovery",
            &[(
                "get",
                "discoveryPage",
                "Map of the discovery channels, probed",
            )],
        ),
        (
            "/api/discovery",
            &[
                ("get", "discovery", "Map of the discovery channels, probed"),
                (
                    "post",
                    "announce",
                    "Announce the store's own origin to channels that accept a URL",
                ),
            ],
        ),
        (
            "/api/passport/{id}",
            &[("get", "verifyPassport", "Verify a Passport")],
        ),
        (
            "/api/fulfillment/{passport}/{file}",
            &[(
                "get",
                "downloadFile",
                "Download a purchased file with its fulfillment key (the capability URL of a purchase)",
            )],
        ),
    ]
}
