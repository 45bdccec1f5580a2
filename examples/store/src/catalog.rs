//! The 45 products, each with its x402 offer built once at start-up.
//!
//! Three suffixes of the specification name a third-party brand in angle brackets; the store
//! uses a neutral word instead: `<agent_tool>-plugin` → `assistant-plugin`,
//! `<router_vendor>-protocol` → `router-protocol`, `<state_registry>-atlas` → `registry-atlas`.

use std::collections::HashMap;
use std::sync::Arc;

use percent_encoding::percent_decode_str;
use serde_json::{Value, json};
use tower_x402::pricing::OfferError;
use tower_x402::{Offer, SettlementMode};
use x402_wire::{Extension, ResourceInfo, UsdAmount, UsdcDeployment};

use crate::config::Config;
use crate::paywall::doors::Doors;

/// The path every paid product lives under.
pub const PAID_PATH_PREFIX: &str = "/api/x402/";

/// The tags a product may carry, in display order.
pub const TAGS: [&str; 4] = ["data", "credentials", "software", "desk"];

/// One row of the price list: suffix, price in cents, tag, summary, one-line description.
struct Row(&'static str, u64, &'static str, &'static str, &'static str);

#[rustfmt::skip]
const ROWS: [Row; 45] = [
    Row("rail-receipt", 100, "data", "Rail receipt", "A sample receipt record from the store's own x402 rail; the lowest-priced first probe."),
    Row("agent-dataset", 2900, "data", "Agent dataset", "Structured records describing software-agent payment flows."),
    Row("passport-protocol", 3900, "credentials", "Passport protocol", "How the store issues and verifies its proof-of-purchase Passports."),
    Row("stamps-afr-protocol", 4200, "credentials", "Stamps AFR protocol", "Protocol document on stamp records and AFR filings."),
    Row("tax-protocol", 4200, "credentials", "Tax protocol", "Protocol document on tax records for digital sales."),
    Row("recording-receipt", 4500, "credentials", "Recording receipt", "Protocol document on receipts for recorded filings."),
    Row("receipt-protocol", 4700, "credentials", "Receipt protocol", "Protocol document describing a machine-readable receipt format."),
    Row("assistant-plugin", 4800, "software", "Assistant plugin", "Plugin package that lets a coding assistant read this catalog."),
    Row("x402-boilerplate", 4900, "software", "x402 boilerplate", "Starter source for a server that answers HTTP 402 with x402 v2 challenges."),
    Row("x402-foundation", 5400, "data", "x402 foundation notes", "Reference notes on the x402 specification and its versions."),
    Row("functional-safety-protocol", 5400, "credentials", "Functional safety protocol", "Protocol document on functional-safety documentation."),
    Row("usdc-merchant-protocol", 5500, "credentials", "USDC merchant protocol", "Protocol document for merchants accepting USDC over HTTP 402."),
    Row("ros2-protocol", 5800, "credentials", "ROS 2 protocol", "Protocol document on ROS 2 robot-software interfaces."),
    Row("iso-15118-protocol", 5800, "credentials", "ISO 15118 protocol", "Protocol document on ISO 15118 vehicle-to-charger communication."),
    Row("vda-5050-protocol", 5800, "credentials", "VDA 5050 protocol", "Protocol document on VDA 5050 messaging for mobile-robot fleets."),
    Row("title-file-protocol", 5900, "credentials", "Title file protocol", "Protocol document on assembling title files."),
    Row("seller-carry-protocol", 5900, "credentials", "Seller carry protocol", "Protocol document on seller-carried financing records."),
    Row("design-packet-protocol", 6200, "credentials", "Design packet protocol", "Protocol document on assembling design packets."),
    Row("genesis-engine-protocol", 6200, "credentials", "Genesis engine protocol", "Protocol document on genesis-engine records."),
    Row("v2g-pki-protocol", 6400, "credentials", "V2G PKI protocol", "Protocol document on vehicle-to-grid public-key infrastructure."),
    Row("facilitator-atlas", 6500, "data", "Facilitator atlas", "Atlas of x402 facilitators with their networks and schemes."),
    Row("mletr-protocol", 6600, "credentials", "MLETR protocol", "Protocol document on electronic transferable records under MLETR."),
    Row("robot-middleware-atlas", 6800, "data", "Robot middleware atlas", "Atlas of robot middleware stacks."),
    Row("ev-charging-atlas", 6800, "data", "EV charging atlas", "Atlas of EV charging protocols and operators."),
    Row("agent-identity-protocol", 6900, "credentials", "Agent identity protocol", "Protocol document on identifying software agents in payments."),
    Row("equity-protocol", 6900, "credentials", "Equity protocol", "Protocol document on equity record keeping."),
    Row("router-protocol", 6900, "credentials", "Router protocol", "Protocol document for a payment-router integration."),
    Row("agentic-protocol-atlas", 7100, "data", "Agentic protocol atlas", "Atlas of protocols used by software agents."),
    Row("robotics-safety-atlas", 7400, "data", "Robotics safety atlas", "Atlas of robotics safety standards."),
    Row("powered-lift-atlas", 7400, "data", "Powered-lift atlas", "Atlas of powered-lift aircraft rules."),
    Row("maritime-atlas", 7600, "data", "Maritime atlas", "Atlas of maritime trade documents."),
    Row("ucc-atlas", 7900, "data", "UCC atlas", "Atlas of UCC filing offices & their search rules."),
    Row("clerk-atlas", 7900, "data", "Clerk atlas", "Atlas of county clerk recording offices."),
    Row("source-atlas", 7900, "data", "Source atlas", "Atlas of public-record sources."),
    Row("registry-atlas", 7900, "data", "Registry atlas", "Atlas of a state business registry's filings."),
    Row("ron-atlas", 7900, "data", "RON atlas", "Atlas of remote online notarization rules."),
    Row("defense-atlas", 7900, "data", "Defense atlas", "Atlas of defense procurement sources."),
    Row("lender-overlay", 7900, "data", "Lender overlay", "Overlay dataset of lender requirements."),
    Row("baas-atlas", 7900, "data", "BaaS atlas", "Atlas of banking-as-a-service providers."),
    Row("gpuaas-atlas", 7900, "data", "GPUaaS atlas", "Atlas of GPU-as-a-service providers."),
    Row("mcp-pack", 7900, "software", "MCP pack", "Package of Model Context Protocol server configurations."),
    Row("tax-atlas", 8500, "data", "Tax atlas", "Atlas of sales & use tax rules."),
    Row("parcel-intel", 8900, "data", "Parcel intel", "Parcel-level property records."),
    Row("api-pack", 9900, "software", "API pack", "Package of API client definitions."),
    Row("desk-credits", 19900, "desk", "Desk credits", "Prepaid credits for the store's desk."),
];

/// A product: what it is, what it costs and the offer its 402 carries.
#[derive(Debug)]
pub struct Sku {
    /// `<prefix>-<suffix>`, the last path segment; also the OpenAPI operationId.
    pub slug: String,
    /// The suffix from the price list.
    pub suffix: &'static str,
    /// Short title.
    pub summary: &'static str,
    /// One-line description.
    pub description: &'static str,
    /// One of [`TAGS`].
    pub tag: &'static str,
    /// Fixed price in USD.
    pub price: UsdAmount,
    /// `{base_url}/api/x402/{slug}`.
    pub resource_url: String,
    /// The challenge, precomputed.
    pub offer: Arc<Offer>,
    /// An example of the paid answer (a Passport with visibly fake values), for the OpenAPI
    /// description; the 402 carries only the answer's schema.
    pub example: Value,
}

impl Sku {
    /// The SKU record of the specification (slug, operationId, summary, description, tags,
    /// price, protocols).
    pub fn record(&self) -> Value {
        json!({
            "slug": self.slug,
            "operationId": self.slug,
            "summary": self.summary,
            "description": self.description,
            "tags": [self.tag],
            "price": price_json(self.price),
            "protocols": [{"name": "x402", "version": 2}],
        })
    }
}

/// `{"mode":"fixed","currency":"USD","amount":"NN.NN"}`.
pub fn price_json(price: UsdAmount) -> Value {
    json!({"mode": "fixed", "currency": "USD", "amount": price.to_string()})
}

/// Every product, in price-list order, with lookup by slug.
#[derive(Debug)]
pub struct Catalog {
    skus: Vec<Sku>,
    by_slug: HashMap<String, usize>,
    doors: Doors,
    demo: bool,
}

impl Catalog {
    /// Builds every product's offer: the canonical Base accept (and, with `STORE_PERMIT2`, the
    /// same price on Base paid through Permit2, with `eip2612GasSponsoring`), then one accept
    /// per open door, and the `bazaar` extension; `example(sku)` is kept beside the offer for
    /// the OpenAPI description. The store passes a body built by the purchase code itself, so the
    /// description and the real answer cannot drift apart.
    ///
    /// # Errors
    ///
    /// When an offer cannot be built (a price the asset cannot carry, a relative base URL).
    /// `demo`: the offers are paid through the in-process sandbox.
    pub async fn build(
        config: &Config,
        doors: Doors,
        demo: bool,
        example: impl AsyncFn(&Sku) -> Value,
    ) -> Result<Self, OfferError> {
        let mut skus = Vec::with_capacity(ROWS.len());
        for Row(suffix, cents, tag, summary, description) in ROWS {
            let slug = format!("{}-{suffix}", config.slug_prefix);
            let resource_url = format!("{}{PAID_PATH_PREFIX}{slug}", config.base_url);
            let price = UsdAmount::from_micros(cents * 10_000);
            let mut resource = ResourceInfo::new(resource_url.clone());
            resource.description = Some(description.to_owned());
            resource.mime_type = Some("application/json".to_owned());
            resource.other.insert("tags".to_owned(), json!([tag]));
            let extra_accepts = doors
                .extra_accepts(price)
                .map_err(|source| OfferError::Money {
                    url: resource_url.clone(),
                    source,
                })?;
            let mut builder = Offer::builder(resource)
                .usdc(&UsdcDeployment::BASE, price, config.pay_to.clone())
                .settlement(SettlementMode::Before);
            if config.permit2 {
                builder = builder
                    .usdc_permit2(&UsdcDeployment::BASE, price, config.pay_to.clone())
                    .eip2612_gas_sponsoring();
            }
            for accept in extra_accepts {
                builder = builder.accept(accept);
            }
            // The example describes the answer for a SKU, so the SKU is built first with the
            // offer minus its extension, then given the complete offer.
            let draft = builder.build()?;
            let mut sku = Sku {
                slug,
                suffix,
                summary,
                description,
                tag,
                price,
                resource_url,
                offer: Arc::new(draft),
                example: Value::Null,
            };
            sku.example = example(&sku).await;
            sku.offer = Arc::new(
                sku.offer
                    .to_builder()
                    .extension("bazaar", bazaar_extension())
                    .build()?,
            );
            skus.push(sku);
        }
        let by_slug = skus
            .iter()
            .enumerate()
            .map(|(i, sku)| (sku.slug.clone(), i))
            .collect();
        Ok(Self {
            skus,
            by_slug,
            doors,
            demo,
        })
    }

    /// The product sold under `slug`.
    pub fn get(&self, slug: &str) -> Option<&Sku> {
        self.by_slug.get(slug).map(|&i| &self.skus[i])
    }

    /// Every product, in price-list order.
    pub fn iter(&self) -> impl Iterator<Item = &Sku> {
        self.skus.iter()
    }

    /// How many products there are.
    pub fn len(&self) -> usize {
        self.skus.len()
    }

    /// Whether the catalog has no products (never, once built).
    pub fn is_empty(&self) -> bool {
        self.skus.is_empty()
    }

    /// Whether the offers are paid through the in-process sandbox (demo mode: no real funds
    /// move and every Passport is marked demo).
    pub fn is_demo(&self) -> bool {
        self.demo
    }

    /// The payment doors the offers were built with.
    pub fn doors(&self) -> &Doors {
        &self.doors
    }

    /// The product a request path names, decoding its last segment the way axum's `Path`
    /// extractor does (percent-decoding into UTF-8, `+` left alone). A path that the paid
    /// route does not match (nothing after the prefix, a further `/`) names nothing.
    pub fn for_path(&self, path: &str) -> Option<&Sku> {
        let segment = path.strip_prefix(PAID_PATH_PREFIX)?;
        if segment.is_empty() || segment.contains('/') {
            return None;
        }
        // Without a `%` the segment decodes to itself: every 402 of a plain slug skips the
        // decoder's byte-by-byte pass.
        if !segment.contains('%') {
            return self.get(segment);
        }
        let slug = percent_decode_str(segment).decode_utf8().ok()?;
        self.get(&slug)
    }
}

/// The `bazaar` extension of a GET product without inputs, in the shape indexers read: an
/// empty `queryParams` object as the input schema, and the 200 answer an object (the spec's
/// `"example": {"type": "object"}`). Neither an example of the answer nor its fields: the whole
/// challenge travels base64-encoded in a response header that a stock nginx reads into 4 KB
/// with the 402's other headers, and with every door open that room is gone. The answer's
/// schema and an example, a whole Passport, are in `/openapi.json`, which indexers read too.
fn bazaar_extension() -> Extension {
    let info = json!({
        "input": {"type": "http", "method": "GET", "queryParams": {}},
        "output": {"type": "json"},
    });
    let schema = json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": {
            "input": {
                "type": "object",
                "properties": {
                    "type": {"type": "string", "const": "http"},
                    "method": {"type": "string", "enum": ["GET"]},
                    "queryParams": {"type": "object", "properties": {}, "additionalProperties": false},
                    "headers": {"type": "object", "additionalProperties": {"type": "string"}},
                },
                "required": ["type", "method"],
                "additionalProperties": false,
            },
            "output": {
                "type": "object",
                "properties": {"type": {"type": "string"}, "example": {"type": "object"}},
                "required": ["type"],
            },
        },
        "required": ["input"],
    });
    Extension::new(info, schema)
}
