//! `GET /bazaar`: the storefront for people — product cards grouped by tag with price and
//! summary, a tag and text filter (a small script; without it every product shows), a page per
//! product at `/bazaar/{sku}`, the payment doors and the doctrine. One stylesheet and one script
//! are served by the store itself; the pages allow nothing else (`Content-Security-Policy`).
//! Everything interpolated is escaped by maud.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use maud::{DOCTYPE, Markup, html};

use crate::catalog::{Catalog, Sku, TAGS};
use crate::config::Config;
use crate::documents::doctrine;
use crate::http_errors::json_error;
use crate::paywall::doors::DoorStatus;
use crate::sales::standing::Standing;

const STYLE: &str = include_str!("storefront/style.css");
const FILTER: &str = include_str!("storefront/filter.js");
const POLICY: &str = "default-src 'none'; style-src 'self'; script-src 'self'; base-uri 'none'; \
                      form-action 'self'; frame-ancestors 'none'";

/// What the pages show: the settings, the catalog and whether the store runs in demo mode.
struct Storefront<'a> {
    config: &'a Config,
    catalog: &'a Catalog,
    demo: bool,
}

impl<'a> Storefront<'a> {
    fn new(config: &'a Config, catalog: &'a Catalog) -> Self {
        Self {
            config,
            catalog,
            demo: catalog.is_demo(),
        }
    }
}

/// `GET /bazaar`.
pub async fn page(
    State(standing): State<Standing>,
    State(config): State<Arc<Config>>,
    State(catalog): State<Arc<Catalog>>,
) -> Response {
    standing.record_retrieved();
    let state = Storefront::new(&config, &catalog);
    with_policy(Html(render(&state).into_string()).into_response())
}

/// `GET /bazaar/{sku}`: one product, or 404.
pub async fn product(
    State(config): State<Arc<Config>>,
    State(catalog): State<Arc<Catalog>>,
    Path(slug): Path<String>,
) -> Response {
    let state = Storefront::new(&config, &catalog);
    match catalog.get(&slug) {
        Some(sku) => with_policy(Html(render_product(&state, sku).into_string()).into_response()),
        None => json_error(StatusCode::NOT_FOUND, "unknown SKU"),
    }
}

/// `GET /bazaar/style.css`.
pub async fn stylesheet() -> Response {
    asset("text/css; charset=utf-8", STYLE)
}

/// `GET /bazaar/filter.js`.
pub async fn filter_script() -> Response {
    asset("text/javascript; charset=utf-8", FILTER)
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=3600"),
    );
    response
}

fn with_policy(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(POLICY),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    response
}

/// The frame every storefront page shares: head, header, demo notice, footer.
fn frame(state: &Storefront<'_>, title: &str, main: Markup) -> Markup {
    let base = &state.config.base_url;
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) }
                link rel="stylesheet" href={ (base) "/bazaar/style.css" };
                link rel="alternate" type="application/json" href={ (base) "/api/bazaar" };
            }
            body {
                header {
                    div class="site" {
                        div class="wrap" {
                            h1 { a href={ (base) "/bazaar" } { "x402 example store" } }
                            p { (state.catalog.len()) " fixed-price data products, paid per request in USDC over HTTP 402. This is the store describing itself, not a third-party index." }
                        }
                    }
                    @if state.demo {
                        div class="demo" id="demo-notice" role="note" {
                            div class="wrap" { strong { "Demo mode:" } " payments go through an in-process sandbox; no real funds move and Passports are marked demo." }
                        }
                    }
                }
                main class="wrap" { (main) }
                footer {
                    div class="wrap" {
                        "Machine-readable: "
                        a href={ (base) "/.well-known/x402.json" } { "x402 catalog" } " · "
                        a href={ (base) "/openapi.json" } { "OpenAPI" } " · "
                        a href={ (base) "/llms.txt" } { "llms.txt" } " · "
                        a href={ (base) "/api/bazaar" } { "JSON" } " · "
                        a href={ (base) "/api/discovery" } { "discovery map" }
                    }
                }
            }
        }
    }
}

/// The catalog page.
fn render(state: &Storefront<'_>) -> Markup {
    let base = &state.config.base_url;
    let main = html! {
        form id="filter" class="filter" role="search" aria-label="Filter products" hidden {
            label for="filter-tag" { "Tag"
                select id="filter-tag" {
                    option value="" { "All tags" }
                    @for tag in TAGS { option value=(tag) { (tag) } }
                }
            }
            label for="filter-text" { "Search"
                input id="filter-text" type="search" placeholder="e.g. filing, receipt";
            }
            p id="count" role="status" aria-live="polite" {}
        }
        @for tag in TAGS {
            section class="tag" id={ "tag-" (tag) } aria-labelledby={ "h-" (tag) } {
                h2 id={ "h-" (tag) } { (tag) }
                ul class="cards" {
                    @for sku in state.catalog.iter().filter(|sku| sku.tag == tag) { (card(state, sku)) }
                }
            }
        }
        (how_to_pay(state))
        (doors(state))
        (doctrine_panel(state.demo))
        script src={ (base) "/bazaar/filter.js" } {}
    };
    frame(state, "x402 example store — catalog", main)
}

fn card(state: &Storefront<'_>, sku: &Sku) -> Markup {
    let base = &state.config.base_url;
    let search = format!(
        "{} {} {} {}",
        sku.slug, sku.summary, sku.description, sku.tag
    )
    .to_lowercase();
    html! {
        li class="card sku" id=(sku.slug) data-tag=(sku.tag) data-search=(search) {
            h3 { a href={ (base) "/bazaar/" (sku.slug) } { (sku.summary) } }
            p { (sku.description) }
            div class="row" {
                span class="price" { "$" (sku.price) }
                span class="tagname" { (sku.tag) }
            }
            p {
                a href=(sku.resource_url) { "Buy (x402)" }
                @if let Some(link) = state.config.checkout_link(&sku.slug) {
                    " · " a class="checkout" href=(link) { "hosted checkout" }
                }
            }
        }
    }
}

/// A product's own page.
fn render_product(state: &Storefront<'_>, sku: &Sku) -> Markup {
    let main = html! {
        p { a href={ (state.config.base_url) "/bazaar" } { "← All products" } }
        article class="panel" id=(sku.slug) {
            p { span class="tagname" { (sku.tag) } }
            h2 { (sku.summary) }
            p { (sku.description) }
            p class="price" { "$" (sku.price) " " small { "(" (sku.price) " USDC)" } }
            p { a class="buy" href=(sku.resource_url) { "Buy for $" (sku.price) } }
        }
        section class="panel" aria-labelledby="ways" {
            h2 id="ways" { "Three ways to pay" }
            ol {
                li { strong { "Browser wallet: " } "open " a href=(sku.resource_url) { "the product URL" } " and press Pay; your wallet signs a USDC transfer authorization for exactly this price." }
                li { strong { "Hosted checkout: " }
                    @if let Some(link) = state.config.checkout_link(&sku.slug) { a class="checkout" href=(link) { "pay on the checkout page" } }
                    @else { "not configured for this store." }
                }
                li { strong { "Agents: " } "request the URL, read the 402's " code { "PAYMENT-REQUIRED" } " header, sign one accept and repeat the request:" }
            }
            pre { "GET " (sku.resource_url) "\nPAYMENT-SIGNATURE: <base64 PaymentPayload>" }
        }
        section class="panel" aria-labelledby="passport-h" {
            h2 id="passport-h" { "What you get" }
            p { "The files of this product at private download links, and a Passport: a public record that you bought it. A Passport is proof of purchase only — not a rating, not an endorsement, and it grants nothing beyond these files." }
        }
        (doctrine_panel(state.demo))
    };
    frame(
        state,
        &format!("{} — x402 example store", sku.summary),
        main,
    )
}

fn how_to_pay(state: &Storefront<'_>) -> Markup {
    html! {
        section class="panel" id="how-to-pay" aria-labelledby="how-h" {
            h2 id="how-h" { "How to pay" }
            ol {
                li { "Request a product's URL with " code { "GET" } " and no body. The answer is HTTP 402 with the challenge in the " code { "PAYMENT-REQUIRED" } " header (x402 v2); a browser shows a page with a Pay button." }
                li { "Pay one of the challenge's accepts: exact USDC on Base (" code { "eip155:8453" } "), or another open door below. Amounts are in atomic units (6 decimals)." }
                li { "Repeat the GET with the " code { "PAYMENT-SIGNATURE" } " header. The paid answer carries a Passport: proof of purchase only." }
            }
            @if let Some(template) = &state.config.checkout_url {
                p { "People can also buy on the hosted checkout page: " code class="checkout-template" { (template) } }
            }
        }
    }
}

fn doors(state: &Storefront<'_>) -> Markup {
    html! {
        section class="panel" id="doors" aria-labelledby="doors-h" {
            h2 id="doors-h" { "Payment doors" }
            ul {
                @for door in state.catalog.doors().iter() {
                    li class="door" data-status=(status_word(door.status)) {
                        strong { (door.name) } " (" code { (door.caip2) } ", USDC " code { (door.asset_id) } "): "
                        (status_word(door.status)) ". " (door.notes)
                    }
                }
            }
        }
    }
}

fn doctrine_panel(demo: bool) -> Markup {
    html! {
        section class="panel" id="doctrine" aria-labelledby="doctrine-h" {
            h2 id="doctrine-h" { "What this store says, and does not" }
            ul { @for statement in doctrine::statements(demo) { li { (statement) } } }
        }
    }
}

fn status_word(status: DoorStatus) -> &'static str {
    match status {
        DoorStatus::Live => "live",
        DoorStatus::Gated => "gated",
        DoorStatus::Mapped => "mapped",
    }
}
