//! `GET /api/bazaar`: the first-party catalog in machine form — products by tag with their
//! prices, the payment doors and the store's own funnel numbers. It is the store describing
//! itself, not a third-party index.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use serde_json::{Map, Value, json};

use crate::catalog::{Catalog, TAGS, price_json};
use crate::config::Config;
use crate::sales::standing::Standing;

/// `GET /api/bazaar`.
pub async fn catalog_json(
    State(standing): State<Standing>,
    State(config): State<Arc<Config>>,
    State(catalog): State<Arc<Catalog>>,
) -> Json<Value> {
    standing.record_retrieved();
    // Never held up by the database: the last counts read if it is away (null before any).
    let standing = match standing.latest().await {
        Some(report) => serde_json::to_value(report).unwrap_or(Value::Null),
        None => Value::Null,
    };
    Json(build(&config, &catalog, standing))
}

/// The document, with `standing` already read.
pub fn build(config: &Config, catalog: &Catalog, standing: Value) -> Value {
    let mut by_tag = Map::new();
    for tag in TAGS {
        let skus: Vec<Value> = catalog
            .iter()
            .filter(|sku| sku.tag == tag)
            .map(|sku| {
                json!({
                    "slug": sku.slug,
                    "summary": sku.summary,
                    "description": sku.description,
                    "price": price_json(sku.price),
                    "amountAtomic": sku.offer.accepts().first().map(|accept| &accept.amount),
                    "resource": sku.resource_url,
                    "method": "GET",
                    "checkout": config.checkout_link(&sku.slug),
                })
            })
            .collect();
        by_tag.insert(tag.to_owned(), Value::Array(skus));
    }
    let doors: Vec<&crate::paywall::doors::Door> = catalog.doors().iter().collect();
    json!({
        "name": "x402 example store",
        "kind": "first_party",
        "origin": config.base_url,
        "mode": if catalog.is_demo() { "demo" } else { "live" },
        "howToPay": "GET the product's URL with no body; the 402 carries the challenge in PAYMENT-REQUIRED. Pay one accept and repeat the GET with PAYMENT-SIGNATURE.",
        "count": catalog.len(),
        "tags": by_tag,
        "doors": doors,
        "standing": standing,
        "documents": {
            "x402": format!("{}/.well-known/x402.json", config.base_url),
            "openapi": format!("{}/openapi.json", config.base_url),
            "llms": format!("{}/llms.txt", config.base_url),
            "mcp": format!("{}/mcp", config.base_url),
        },
    })
}
