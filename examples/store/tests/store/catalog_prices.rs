//! Every product answers an unpaid GET with a 402 whose price and tag are the price list's.

use axum::http::StatusCode;
use serde_json::json;

use super::support::store;

/// The price list of the specification, written out again here on purpose (not read from
/// `catalog.rs`), with the bracketed suffixes replaced by their neutral words.
const PRICE_LIST: [(&str, &str, &str); 45] = [
    ("rail-receipt", "1.00", "data"),
    ("agent-dataset", "29.00", "data"),
    ("passport-protocol", "39.00", "credentials"),
    ("stamps-afr-protocol", "42.00", "credentials"),
    ("tax-protocol", "42.00", "credentials"),
    ("recording-receipt", "45.00", "credentials"),
    ("receipt-protocol", "47.00", "credentials"),
    ("assistant-plugin", "48.00", "software"),
    ("x402-boilerplate", "49.00", "software"),
    ("x402-foundation", "54.00", "data"),
    ("functional-safety-protocol", "54.00", "credentials"),
    ("usdc-merchant-protocol", "55.00", "credentials"),
    ("ros2-protocol", "58.00", "credentials"),
    ("iso-15118-protocol", "58.00", "credentials"),
    ("vda-5050-protocol", "58.00", "credentials"),
    ("title-file-protocol", "59.00", "credentials"),
    ("seller-carry-protocol", "59.00", "credentials"),
    ("design-packet-protocol", "62.00", "credentials"),
    ("genesis-engine-protocol", "62.00", "credentials"),
    ("v2g-pki-protocol", "64.00", "credentials"),
    ("facilitator-atlas", "65.00", "data"),
    ("mletr-protocol", "66.00", "credentials"),
    ("robot-middleware-atlas", "68.00", "data"),
    ("ev-charging-atlas", "68.00", "data"),
    ("agent-identity-protocol", "69.00", "credentials"),
    ("equity-protocol", "69.00", "credentials"),
    ("router-protocol", "69.00", "credentials"),
    ("agentic-protocol-atlas", "71.00", "data"),
    ("robotics-safety-atlas", "74.00", "data"),
    ("powered-lift-atlas", "74.00", "data"),
    ("maritime-atlas", "76.00", "data"),
    ("ucc-atlas", "79.00", "data"),
    ("clerk-atlas", "79.00", "data"),
    ("source-atlas", "79.00", "data"),
    ("registry-atlas", "79.00", "data"),
    ("ron-atlas", "79.00", "data"),
    ("defense-atlas", "79.00", "data"),
    ("lender-overlay", "79.00", "data"),
    ("baas-atlas", "79.00", "data"),
    ("gpuaas-atlas", "79.00", "data"),
    ("mcp-pack", "79.00", "software"),
    ("tax-atlas", "85.00", "data"),
    ("parcel-intel", "89.00", "data"),
    ("api-pack", "99.00", "software"),
    ("desk-credits", "199.00", "desk"),
];

/// "29.00" → "29000000" (USDC has 6 decimals), by string arithmetic alone.
fn atomic(price: &str) -> String {
    let (dollars, cents) = price.split_once('.').unwrap();
    format!("{dollars}{cents}0000")
}

async fn every_sku_answers_402_with_its_listed_price() {
    let store = store().await;
    assert_eq!(store.state.catalog.len(), 45);
    for (suffix, price, tag) in PRICE_LIST {
        let slug = format!("store-{suffix}");
        let answer = store.get(&format!("/api/x402/{slug}")).await;
        assert_eq!(answer.status, StatusCode::PAYMENT_REQUIRED, "{slug}");
        let challenge = answer.challenge();
        assert_eq!(challenge["x402Version"], 2);
        assert_eq!(
            challenge["resource"]["url"],
            format!("http://127.0.0.1:4020/api/x402/{slug}")
        );
        assert_eq!(challenge["resource"]["mimeType"], "application/json");
        let canonical = &challenge["accepts"][0];
        assert_eq!(
            canonical,
            &json!({
                "scheme": "exact",
                "network": "eip155:8453",
                "amount": atomic(price),
                "asset": "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913",
                "payTo": x402_store::config::DEMO_PAY_TO,
                "maxTimeoutSeconds": canonical["maxTimeoutSeconds"],
                "extra": {"name": "USD Coin", "version": "2"},
            }),
            "{slug}"
        );
        assert!(canonical["maxTimeoutSeconds"].as_u64().unwrap() > 0);
        assert_eq!(
            challenge["accepts"].as_array().unwrap().len(),
            1,
            "{slug}: only the canonical door is open"
        );
        // The body carries the same object as the header.
        assert_eq!(answer.json, challenge, "{slug}");

        let sku = store.state.catalog.get(&slug).unwrap();
        let record = sku.record();
        assert_eq!(record["operationId"], slug);
        assert_eq!(record["tags"], json!([tag]));
        assert_eq!(
            record["price"],
            json!({"mode": "fixed", "currency": "USD", "amount": price})
        );
        assert_eq!(record["protocols"], json!([{"name": "x402", "version": 2}]));
        assert!(!sku.summary.is_empty() && !sku.description.is_empty());
    }
}

async fn slugs_follow_the_configured_prefix_and_use_neutral_words() {
    let store = super::support::store_with(
        |config| config.slug_prefix = "shop".to_owned(),
        std::sync::Arc::new(tower_x402_sandbox::SandboxFacilitator::new()),
    )
    .await;
    let slugs: Vec<&str> = store
        .state
        .catalog
        .iter()
        .map(|sku| sku.slug.as_str())
        .collect();
    let expected: Vec<String> = PRICE_LIST
        .iter()
        .map(|(suffix, _, _)| format!("shop-{suffix}"))
        .collect();
    assert_eq!(slugs, expected);
    assert!(
        slugs
            .iter()
            .all(|slug| !slug.contains('<') && !slug.contains('>'))
    );
    assert_eq!(
        store.get("/api/x402/shop-api-pack").await.status,
        StatusCode::PAYMENT_REQUIRED
    );
    assert_eq!(
        store.get("/api/x402/store-api-pack").await.status,
        StatusCode::NOT_FOUND
    );
}

async fn the_challenge_carries_a_bazaar_extension_indexers_can_read() {
    let store = store().await;
    let challenge = store.get("/api/x402/store-rail-receipt").await.challenge();
    let bazaar = &challenge["extensions"]["bazaar"];
    assert_eq!(
        bazaar["info"]["input"],
        json!({"type": "http", "method": "GET", "queryParams": {}})
    );
    // No example of the answer in the 402 (it is in /openapi.json): the challenge must fit the
    // 4 KB a reverse proxy reads.
    assert_eq!(bazaar["info"]["output"], json!({"type": "json"}));
    let openapi: serde_json::Value =
        serde_json::from_str(&store.get("/openapi.json").await.text).unwrap();
    let example = &openapi["paths"]["/api/x402/store-rail-receipt"]["get"]["responses"]["200"]["content"]
        ["application/json"]["example"];
    assert_eq!(example["passport"]["sku"], "store-rail-receipt");
    assert_eq!(example["passport"]["amountUsdc"], "1.00");

    let schema = &bazaar["schema"];
    assert_eq!(
        schema["$schema"],
        "https://json-schema.org/draft/2020-12/schema"
    );
    assert_eq!(schema["required"], json!(["input"]));
    let input = &schema["properties"]["input"];
    assert_eq!(input["properties"]["queryParams"]["type"], "object");
    assert_eq!(input["properties"]["method"]["enum"], json!(["GET"]));
    assert_eq!(input["additionalProperties"], false);
    // What indexers read as the output schema: an object, as in the spec's example. Its
    // fields, with the example above, are in /openapi.json.
    assert_eq!(
        schema["properties"]["output"]["properties"]["example"],
        json!({"type": "object"})
    );
    let described = &openapi["paths"]["/api/x402/store-rail-receipt"]["get"]["responses"]["200"]["content"]
        ["application/json"]["schema"];
    for key in described["required"].as_array().unwrap() {
        assert!(
            example.get(key.as_str().unwrap()).is_some(),
            "example lacks {key}"
        );
    }
    // `info` has only keys the schema's `input` allows.
    let allowed = input["properties"].as_object().unwrap();
    for key in bazaar["info"]["input"].as_object().unwrap().keys() {
        assert!(allowed.contains_key(key), "{key}");
    }
    assert!(challenge.get("routeTemplate").is_none());
}

super::support::on_both_backends!(
    every_sku_answers_402_with_its_listed_price,
    slugs_follow_the_configured_prefix_and_use_neutral_words,
    the_challenge_carries_a_bazaar_extension_indexers_can_read,
);
