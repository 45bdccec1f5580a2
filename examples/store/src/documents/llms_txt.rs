//! `GET /llms.txt` in the llmstxt.org layout: an H1, a summary blockquote, prose without
//! headings (the doctrine and how to pay), then `##` sections of links only.

use std::fmt::Write as _;
use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};

use crate::catalog::Catalog;
use crate::config::Config;
use crate::documents::doctrine;
use crate::sales::referral;
use crate::sales::standing::Standing;

/// `GET /llms.txt`.
pub async fn llms_txt(
    State(standing): State<Standing>,
    State(config): State<Arc<Config>>,
    State(catalog): State<Arc<Catalog>>,
) -> Response {
    standing.record_retrieved();
    let mut response = render(&config, &catalog).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

/// The text.
pub fn render(config: &Config, catalog: &Catalog) -> String {
    let base = &config.base_url;
    let mut text = String::new();
    let _ = writeln!(text, "# x402 example store\n");
    let _ = writeln!(
        text,
        "> A first-party digital store: {} fixed-price products, each a GET that answers HTTP 402 until paid in USDC (x402 v2). Catalog documents are free.\n",
        catalog.len()
    );
    let _ = writeln!(text, "{}\n", doctrine::prose(catalog.is_demo()));
    let _ = writeln!(
        text,
        "How to pay: GET a product URL with no request body. The answer is HTTP 402 with the challenge in the PAYMENT-REQUIRED header (base64 JSON, x402Version 2). Pay one of its accepts — exact USDC on Base (eip155:8453, asset 0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913), or another open door listed in /api/bazaar — and repeat the GET with the PAYMENT-SIGNATURE header. Prices are in USD; accepts carry atomic units (6 decimals: 1.00 USD = 1000000). The lowest-priced first probe is {base}/api/x402/{}-rail-receipt. Never probe the catalog documents for a 402.\n\nAlready bought? Every 402 also carries extensions[\"sign-in-with-x\"], a one-time sign-in challenge: sign its EIP-4361 message (personal_sign) with the wallet that paid and repeat the GET within five minutes with the SIGN-IN-WITH-X header (base64 JSON of the challenge's info fields plus address, chainId, type and signature). The answer is the same purchase (same Passport and fulfillment URLs), with nothing paid again; a proof works once.\n",
        config.slug_prefix
    );
    if catalog.is_demo() {
        let _ = writeln!(
            text,
            "This instance runs in demo mode: payments go through an in-process sandbox and Passports are marked demo.\n"
        );
    }

    let _ = writeln!(text, "## Products\n");
    for sku in catalog.iter() {
        let atomic = sku
            .offer
            .accepts()
            .first()
            .map(|accept| accept.amount.to_string())
            .unwrap_or_default();
        let _ = writeln!(
            text,
            "- [{}]({}): {} USD ({atomic} atomic USDC), GET, tag {} — {}: {}",
            sku.slug, sku.resource_url, sku.price, sku.tag, sku.summary, sku.description
        );
    }

    let _ = writeln!(text, "\n## Machine-readable\n");
    for (name, path, note) in [
        (
            "x402 catalog (v2)",
            "/.well-known/x402.json",
            "every product with the exact accepts and extensions of its 402",
        ),
        (
            "x402 URL list",
            "/.well-known/x402",
            "version 1 list of the paid URLs",
        ),
        (
            "OpenAPI",
            "/openapi.json",
            "one operation per product with x-payment-info",
        ),
        (
            "MCP discovery server",
            "/mcp",
            "Streamable HTTP, JSON-RPC, read-only catalog tools",
        ),
        (
            "MCP manifest",
            "/.well-known/mcp.json",
            "name, endpoint and tools of the discovery server",
        ),
        (
            "Catalog (JSON)",
            "/api/bazaar",
            "products by tag, payment doors, funnel numbers",
        ),
        ("Catalog (page)", "/bazaar", "the same for people"),
        (
            "Discovery map",
            "/api/discovery",
            "the indexes and how the store reaches each",
        ),
    ] {
        let _ = writeln!(text, "- [{name}]({base}{path}): {note}");
    }

    let schema = referral::schema(config);
    let _ = writeln!(text, "\n## Referrals\n");
    let _ = writeln!(
        text,
        "- [Passport verification]({base}/openapi.json): GET {base}/api/passport/<passport id> (operation verifyPassport) verifies a Passport; referral schema {}",
        serde_json::to_string(&schema).unwrap_or_default()
    );
    text
}
