//! `GET /bazaar`: the first-party catalog as a page for people — products by tag with prices,
//! how to pay, the hosted checkout when configured, the payment doors and the doctrine.
//! Everything interpolated is escaped by maud.

use axum::extract::State;
use axum::response::Html;
use maud::{DOCTYPE, Markup, html};

use crate::app::AppState;
use crate::catalog::{Sku, TAGS};
use crate::documents::doctrine;
use crate::paywall::doors::DoorStatus;

/// `GET /bazaar`.
pub async fn page(State(state): State<AppState>) -> Html<String> {
    state.standing.record_retrieved();
    Html(render(&state).into_string())
}

/// The page.
pub fn render(state: &AppState) -> Markup {
    let config = &state.config;
    let base = &config.base_url;
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { "x402 example store — catalog" }
                link rel="alternate" type="application/json" href={ (base) "/api/bazaar" };
            }
            body {
                header {
                    h1 { "x402 example store" }
                    p { "First-party catalog of " (state.catalog.len()) " products. This page is the store describing itself; it is not a third-party index." }
                    @if state.demo {
                        p id="demo-notice" { strong { "Demo mode:" } " payments go through an in-process sandbox; no real funds move and Passports are marked demo." }
                    }
                }
                section id="how-to-pay" {
                    h2 { "How to pay" }
                    ol {
                        li { "Request a product's URL with " code { "GET" } " and no body. The answer is HTTP 402 with the challenge in the " code { "PAYMENT-REQUIRED" } " header (x402 v2)." }
                        li { "Pay one of the challenge's accepts: exact USDC on Base (" code { "eip155:8453" } "), or another open door below. Amounts are in atomic units (6 decimals)." }
                        li { "Repeat the GET with the " code { "PAYMENT-SIGNATURE" } " header. The paid answer carries a Passport: proof of purchase only." }
                    }
                    @if let Some(template) = &config.checkout_url {
                        p { "People can also buy on the hosted checkout page: " code class="checkout-template" { (template) } }
                    }
                }
                @for tag in TAGS {
                    section class="tag" id={ "tag-" (tag) } {
                        h2 { (tag) }
                        table {
                            thead { tr { th { "Product" } th { "Price (USD)" } th { "Buy" } } }
                            tbody {
                                @for sku in state.catalog.iter().filter(|sku| sku.tag == tag) {
                                    (row(state, sku))
                                }
                            }
                        }
                    }
                }
                section id="doors" {
                    h2 { "Payment doors" }
                    ul {
                        @for door in state.catalog.doors().iter() {
                            li class="door" data-status=(status_word(door.status)) {
                                strong { (door.name) } " (" code { (door.caip2) } ", USDC " code { (door.asset_id) } "): "
                                (status_word(door.status)) ". " (door.notes)
                            }
                        }
                    }
                }
                section id="doctrine" {
                    h2 { "What this store says, and does not" }
                    ul { @for statement in doctrine::statements(state.demo) { li { (statement) } } }
                }
                footer {
                    p {
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

fn row(state: &AppState, sku: &Sku) -> Markup {
    html! {
        tr class="sku" id=(sku.slug) {
            td {
                strong { (sku.summary) } br;
                code { (sku.slug) } br;
                span class="description" { (sku.description) }
            }
            td class="price" { (sku.price) }
            td {
                a href=(sku.resource_url) { "GET (x402)" }
                @if let Some(link) = state.config.checkout_link(&sku.slug) {
                    " · " a class="checkout" href=(link) { "hosted checkout" }
                }
            }
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
