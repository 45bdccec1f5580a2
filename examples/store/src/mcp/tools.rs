//! The six read-only tools of the discovery server.
//!
//! Bad arguments and unknown products are tool results with `isError: true`; only a missing or
//! unknown tool name is a protocol error (`-32602`). Reading the catalog through a tool
//! (`search_catalog`, `get_sku`, `get_payment_required`) counts in the funnel's `retrieved`.

use serde_json::{Map, Value, json};
use x402_wire::UsdAmount;

use super::code;
use crate::catalog::{Catalog, Sku, TAGS, price_json};
use crate::config::Config;
use crate::discovery;
use crate::documents::doctrine;
use crate::sales::referral;
use crate::sales::standing::Standing;

/// What the tools read.
pub(super) struct Tools<'a> {
    pub(super) config: &'a Config,
    pub(super) catalog: &'a Catalog,
    /// Reading the catalog through a tool counts in its `retrieved` stage.
    pub(super) standing: &'a Standing,
}

/// Tool names, in the order `tools/list` gives them.
pub(super) const NAMES: [&str; 6] = [
    "search_catalog",
    "get_sku",
    "get_payment_required",
    "get_standing",
    "get_doctrine",
    "get_discovery",
];

/// The `tools/list` entries.
pub(super) fn definitions() -> Vec<Value> {
    let slug = json!({
        "type": "object",
        "properties": {"slug": {"type": "string", "description": "The product's slug, e.g. store-rail-receipt."}},
        "required": ["slug"],
        "additionalProperties": false,
    });
    let none = json!({"type": "object", "additionalProperties": false});
    let tools = [
        (
            "search_catalog",
            "Search catalog",
            "Find products by words in their slug, summary or description, by tag, or by a maximum price. Returns slug, price (USD and atomic USDC), network and the URL to GET.",
            json!({
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "Words that must all appear (case-insensitive)."},
                    "tag": {"type": "string", "enum": TAGS},
                    "maxPriceUsd": {"type": "string", "pattern": "^[0-9]+(\\.[0-9]{1,6})?$", "description": "Highest price in USD, e.g. \"50.00\"."},
                    "limit": {"type": "integer", "minimum": 1, "maximum": 100},
                },
                "additionalProperties": false,
            }),
        ),
        (
            "get_sku",
            "Get product",
            "One product's record: summary, description, tag, price, resource URL and hosted checkout link.",
            slug.clone(),
        ),
        (
            "get_payment_required",
            "Get payment challenge",
            "The exact PaymentRequired object (x402 v2) that an unpaid GET of the product answers with in its PAYMENT-REQUIRED header. Over HTTP the 402 also carries extensions[\"sign-in-with-x\"], a one-time challenge (fresh nonce per 402, so fetch it with a GET): a wallet that already paid signs its EIP-4361 message and repeats the GET with the SIGN-IN-WITH-X header (base64 JSON of the challenge's info plus address, chainId, type, signature) to get the purchase again without paying.",
            slug,
        ),
        (
            "get_standing",
            "Get standing",
            "The store's funnel counts: indexed, retrieved, considered, selected, purchased, used, returned, referred (live and demo).",
            none.clone(),
        ),
        (
            "get_doctrine",
            "Get doctrine",
            "What the store states and never states, and the referral schema.",
            none.clone(),
        ),
        (
            "get_discovery",
            "Get discovery map",
            "The discovery channels and payment doors, as configured (GET /api/discovery probes them live).",
            none,
        ),
    ];
    tools
        .into_iter()
        .map(|(name, title, description, input_schema)| {
            json!({
                "name": name,
                "title": title,
                "description": description,
                "inputSchema": input_schema,
                "annotations": {"title": title, "readOnlyHint": true, "destructiveHint": false, "idempotentHint": true, "openWorldHint": false},
            })
        })
        .collect()
}

/// `tools/call`.
pub(super) async fn call(
    state: &Tools<'_>,
    params: &Map<String, Value>,
) -> Result<Value, (i64, String)> {
    let Some(name) = params.get("name").and_then(Value::as_str) else {
        return Err((
            code::INVALID_PARAMS,
            "Invalid params: name (string) is required".to_owned(),
        ));
    };
    let empty = Map::new();
    let args = match params.get("arguments") {
        None | Some(Value::Null) => &empty,
        Some(Value::Object(args)) => args,
        Some(_) => return Ok(tool_error("arguments must be an object")),
    };
    let outcome = match name {
        "search_catalog" => search(state, args),
        "get_sku" => with_sku(state, args, |sku| sku_record(state, sku)),
        "get_payment_required" => with_sku(state, args, |sku| {
            serde_json::to_value(sku.offer.payment_required()).map_err(|e| e.to_string())
        }),
        // Never held up by the database: the last counts read if it is away.
        "get_standing" => no_arguments(args).and(match state.standing.latest().await {
            Some(report) => serde_json::to_value(report).map_err(|e| e.to_string()),
            None => Err("the funnel could not be read yet: the database is unreachable".to_owned()),
        }),
        "get_doctrine" => no_arguments(args).map(|()| {
            json!({"statements": doctrine::statements(state.catalog.is_demo()), "referralSchema": referral::schema(state.config)})
        }),
        "get_discovery" => no_arguments(args).map(|()| discovery::configured_map(state.config, state.catalog)),
        _ => return Err((code::INVALID_PARAMS, format!("Unknown tool: {name}"))),
    };
    Ok(match outcome {
        Ok(value) => tool_result(value),
        Err(message) => tool_error(&message),
    })
}

fn tool_result(value: Value) -> Value {
    json!({"content": [{"type": "text", "text": value.to_string()}], "structuredContent": value, "isError": false})
}

fn tool_error(message: &str) -> Value {
    json!({"content": [{"type": "text", "text": message}], "isError": true})
}

fn no_arguments(args: &Map<String, Value>) -> Result<(), String> {
    match args.keys().next() {
        Some(key) => Err(format!("unexpected argument `{key}`: this tool takes none")),
        None => Ok(()),
    }
}

fn with_sku(
    state: &Tools<'_>,
    args: &Map<String, Value>,
    answer: impl FnOnce(&Sku) -> Result<Value, String>,
) -> Result<Value, String> {
    if let Some(key) = args.keys().find(|key| *key != "slug") {
        return Err(format!("unexpected argument `{key}`"));
    }
    let Some(slug) = args.get("slug").and_then(Value::as_str) else {
        return Err("argument `slug` (string) is required".to_owned());
    };
    let sku = state
        .catalog
        .get(slug)
        .ok_or_else(|| format!("no product has the slug `{slug}`"))?;
    state.standing.record_retrieved();
    answer(sku)
}

fn sku_record(state: &Tools<'_>, sku: &Sku) -> Result<Value, String> {
    let mut record = sku.record();
    if let Value::Object(fields) = &mut record {
        fields.insert("suffix".to_owned(), json!(sku.suffix));
        fields.insert("resource".to_owned(), json!(sku.resource_url));
        fields.insert("method".to_owned(), json!("GET"));
        fields.insert(
            "amountAtomic".to_owned(),
            json!(sku.offer.accepts().first().map(|a| &a.amount)),
        );
        fields.insert(
            "networks".to_owned(),
            json!(
                sku.offer
                    .accepts()
                    .iter()
                    .map(|a| &a.network)
                    .collect::<Vec<_>>()
            ),
        );
        fields.insert(
            "checkout".to_owned(),
            json!(state.config.checkout_link(&sku.slug)),
        );
    }
    Ok(record)
}

fn search(state: &Tools<'_>, args: &Map<String, Value>) -> Result<Value, String> {
    if let Some(key) = args
        .keys()
        .find(|key| !["query", "tag", "maxPriceUsd", "limit"].contains(&key.as_str()))
    {
        return Err(format!("unexpected argument `{key}`"));
    }
    let words: Vec<String> = match args.get("query") {
        None => Vec::new(),
        Some(Value::String(query)) => query.split_whitespace().map(str::to_lowercase).collect(),
        Some(_) => return Err("`query` must be a string".to_owned()),
    };
    let tag = match args.get("tag") {
        None => None,
        Some(Value::String(tag)) if TAGS.contains(&tag.as_str()) => Some(tag.as_str()),
        Some(_) => return Err(format!("`tag` must be one of {}", TAGS.join(", "))),
    };
    let max_price: Option<UsdAmount> = match args.get("maxPriceUsd") {
        None => None,
        Some(Value::String(price)) => {
            Some(price.parse().map_err(|e| format!("`maxPriceUsd`: {e}"))?)
        }
        Some(_) => {
            return Err("`maxPriceUsd` must be a decimal string such as \"50.00\"".to_owned());
        }
    };
    let limit = match args.get("limit") {
        None => 100,
        Some(limit) => match limit.as_u64() {
            Some(limit @ 1..=100) => limit as usize,
            _ => return Err("`limit` must be an integer from 1 to 100".to_owned()),
        },
    };
    let matches: Vec<&Sku> = state
        .catalog
        .iter()
        .filter(|sku| tag.is_none_or(|tag| sku.tag == tag))
        .filter(|sku| max_price.is_none_or(|max| sku.price <= max))
        .filter(|sku| {
            let text = format!("{} {} {}", sku.slug, sku.summary, sku.description).to_lowercase();
            words.iter().all(|word| text.contains(word.as_str()))
        })
        .collect();
    state.standing.record_retrieved();
    let results: Vec<Value> = matches
        .iter()
        .take(limit)
        .map(|sku| {
            json!({
                "slug": sku.slug,
                "summary": sku.summary,
                "description": sku.description,
                "tag": sku.tag,
                "price": price_json(sku.price),
                "amountAtomic": sku.offer.accepts().first().map(|a| &a.amount),
                "network": sku.offer.accepts().first().map(|a| &a.network),
                "resource": sku.resource_url,
                "method": "GET",
            })
        })
        .collect();
    Ok(json!({"total": matches.len(), "count": results.len(), "results": results}))
}
