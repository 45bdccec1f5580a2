//! The paid handler: `GET /api/x402/{sku}` once the paywall has settled the payment.
//!
//! The layer runs settle-before, so by the time [`purchase`] runs the money has moved and the
//! settlement record is saved. The handler records the order (Passport, fulfillment key hash,
//! referral) in one transaction and answers 200 with:
//!
//! ```json
//! {
//!   "passport": { "passport", "sku", "resource", "verify", "amountUsdc", "demo", "issued" },
//!   "status": "live" | "demo",
//!   "fulfillment": [ { "name": "...", "url": "https://…/api/fulfillment/pp_…/FILE?key=…" } ],
//!   "referral": { "header", "cited", "counted", "reason", "detail", "cite": { "header", "value" } },
//!   "settlement": { "network", "transaction" },
//!   "replayed": false,
//!   "notice": "A Passport is proof of purchase only…"
//! }
//! ```
//!
//! - `passport` holds the seven citation fields of spec 2.4; `verify` is `/api/passport/{id}`,
//!   `amountUsdc` a decimal string, `issued` RFC 3339 UTC.
//! - `fulfillment` URLs carry a secret key: whoever holds a URL can download that file. Only the
//!   key's hash is stored; the key itself is derived from the Passport id and the store's
//!   fulfillment secret (`STORE_FULFILLMENT_SECRET`, or else one generated once and kept in the
//!   database), so a retry of the same payment returns the same Passport with the same key and
//!   adds no row, on every instance and after a restart. When the secret is rotated, the retry
//!   adds the new key: one key per order per secret.
//!
//! Re-delivery is for a lost response, not a lasting credential: a retry of the same
//! `PAYMENT-SIGNATURE` later than `STORE_REDELIVERY_WINDOW_SECS` (7 days by default) after the
//! Passport was issued gets 410 Gone with a JSON `error`; the keys already handed out keep
//! working and the Passport stays verifiable.
//! - `referral` says whether the request's `X-REFERRER-PASSPORT` counted and, if not, why
//!   (see [`crate::sales::referral`]); `cite` is how a later buyer cites this Passport.
//! - `replayed` is true when this payment had already been answered; nothing was charged again.
//!
//! Any failure after settlement (the database unavailable) is a 503 asking the client to retry
//! the same `PAYMENT-SIGNATURE`: the retry is answered from the settlement record, not charged
//! twice. The order is also written in the background as soon as the database takes it, so a
//! paid order exists even when the buyer never comes back; the buyer's retry then finds it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::{Value, json};
use tower_x402::SettledPayment;
use tower_x402::VerifiedPayment;
use tower_x402_siwx::SignedIn;
use x402_wire::{AtomicAmount, PaymentRequirements, SettleResponse, UsdAmount, UsdcDeployment};

use crate::catalog::{Catalog, Sku};
use crate::config::Config;
use crate::http_errors::json_error;
use crate::sales::fulfillment::{self, FileLink};
use crate::sales::fulfillment_key::FulfillmentKey;
use crate::sales::passport::{self, Citation, NOTICE, PassportId, SettlementSummary};
use crate::sales::referral::{self, ReferralAnswer};
use crate::storage::{NewOrder, Order, Recorded, Store, unix_now};

/// The 200 body of a purchase; see the [module docs](self).
#[derive(Clone, Debug, Serialize)]
pub struct PurchaseBody {
    /// The Passport's citation record.
    pub passport: Citation,
    /// `live` or `demo`.
    pub status: &'static str,
    /// The files bought, at capability URLs.
    pub fulfillment: Vec<FileLink>,
    /// The verdict on `X-REFERRER-PASSPORT`.
    pub referral: ReferralAnswer,
    /// Where the payment settled.
    pub settlement: SettlementSummary,
    /// Whether this payment had already been answered.
    pub replayed: bool,
    /// What a Passport is and is not.
    pub notice: &'static str,
}

impl PurchaseBody {
    /// The body for `order` of `sku` with fresh fulfillment `key`.
    pub async fn new(
        config: &Config,
        sku: &Sku,
        order: &Order,
        key: &FulfillmentKey,
        replayed: bool,
    ) -> Self {
        Self {
            passport: Citation::of(order),
            status: passport::status(order.demo),
            fulfillment: fulfillment::links(config, sku, &order.passport, key).await,
            referral: ReferralAnswer::new(order.referral.as_ref(), &order.passport),
            settlement: SettlementSummary::of(order),
            replayed,
            notice: NOTICE,
        }
    }
}

/// `GET /api/x402/{sku}` behind `X402Layer` in `SettlementMode::Before`: the layer only lets
/// a request through once its payment has settled for this very SKU ([`SettledPayment`]).
pub async fn purchase(
    State(catalog): State<Arc<Catalog>>,
    State(config): State<Arc<Config>>,
    State(store): State<Store>,
    uri: Uri,
    paid: Option<VerifiedPayment>,
    signed_in: Option<SignedIn>,
    headers: HeaderMap,
) -> Response {
    // The product the paywall priced: read from the path as the paywall read it.
    let Some(sku) = catalog.for_path(uri.path()) else {
        return json_error(StatusCode::NOT_FOUND, "no SKU with this slug");
    };
    let state = Shop {
        config: &config,
        store: &store,
        demo: catalog.is_demo(),
    };
    if let Some(signed_in) = signed_in {
        return redeliver(&state, sku, &signed_in).await;
    }
    let Some(paid) = paid.and_then(|payment| SettledPayment::try_from(payment).ok()) else {
        return json_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "no settled payment on this request: the paywall is not in front of this handler",
        );
    };
    let (payment, settlement) = (&paid.payment, &paid.settlement);
    match fulfil(&state, sku, payment, settlement, &headers).await {
        Ok(body) => paid_response(body),
        Err(Failure::OtherSku) => json_error(
            StatusCode::CONFLICT,
            "this payment already bought a different SKU",
        ),
        Err(Failure::Unkeyed) => json_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the fulfillment key could not be derived; retry with the same PAYMENT-SIGNATURE (it will not be charged again)",
        ),
        Err(Failure::RedeliveryClosed) => json_error(
            StatusCode::GONE,
            format!(
                "this payment was settled and delivered more than {} s ago: the re-delivery window is closed (the fulfillment URLs handed out keep working, and the Passport stays verifiable)",
                state.config.redelivery_window.as_secs()
            ),
        ),
        Err(Failure::Storage(error)) => {
            tracing::error!(%error, sku = %sku.slug, key = %payment.key, "settled payment could not be recorded as an order; writing it in the background");
            record_later(
                Arc::clone(&catalog),
                Arc::clone(&config),
                store.clone(),
                sku.slug.clone(),
                paid.clone(),
                headers,
            );
            let mut response = json_error(
                StatusCode::SERVICE_UNAVAILABLE,
                "the payment settled but the order could not be recorded; retry with the same PAYMENT-SIGNATURE (it will not be charged again)",
            );
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("2"));
            response
        }
    }
}

/// How long the background write of an order keeps trying before leaving it to the buyer's retry.
const RECORD_LATER_FOR: Duration = Duration::from_secs(3600);

/// Writes the order of a settled payment that could not be recorded while the buyer waited,
/// retrying with backoff (0.5 s doubling to 10 s) for [`RECORD_LATER_FOR`]. Recording is
/// idempotent per payment key, so this and the buyer's own retry (on any instance) end with the
/// one order, under one Passport.
fn record_later(
    catalog: Arc<Catalog>,
    config: Arc<Config>,
    store: Store,
    slug: String,
    paid: SettledPayment,
    headers: HeaderMap,
) {
    tokio::spawn(async move {
        let Some(sku) = catalog.get(&slug) else {
            return;
        };
        let state = Shop {
            config: &config,
            store: &store,
            demo: catalog.is_demo(),
        };
        let key = paid.payment.key.as_str();
        let started = Instant::now();
        let mut wait = Duration::from_millis(500);
        loop {
            tokio::time::sleep(wait).await;
            match fulfil(&state, sku, &paid.payment, &paid.settlement, &headers).await {
                Ok(_) => {
                    tracing::info!(sku = %slug, %key, "order of a settled payment recorded after the database came back");
                    return;
                }
                Err(Failure::Storage(error)) if started.elapsed() < RECORD_LATER_FOR => {
                    tracing::warn!(%error, sku = %slug, %key, "order of a settled payment still not recorded; trying again");
                    wait = (wait * 2).min(Duration::from_secs(10));
                }
                Err(Failure::Storage(error)) => {
                    tracing::error!(%error, sku = %slug, %key, "order of a settled payment not recorded; the buyer's retry with the same payment records it");
                    return;
                }
                // Nothing to write: another SKU's order, a closed window or no key.
                Err(Failure::OtherSku | Failure::RedeliveryClosed | Failure::Unkeyed) => return,
            }
        }
    });
}

/// A buyer signed in (sign-in-with-x) with the wallet that paid for `sku`: the same answer as
/// a re-delivery of the first order — its Passport, its fulfillment URLs (the same key), no new
/// order, nothing settled. The layer let the request through only for an address entitled to
/// this very SKU's resource.
async fn redeliver(state: &Shop<'_>, sku: &Sku, signed_in: &SignedIn) -> Response {
    let found = state
        .store
        .order_of_buyer(&sku.slug, signed_in.address())
        .await;
    let order = match found {
        Ok(Some(order)) => order,
        Ok(None) => {
            return json_error(
                StatusCode::CONFLICT,
                "signed in, but no order of this SKU is recorded for this wallet yet: retry the original PAYMENT-SIGNATURE (it will not be charged again)",
            );
        }
        Err(error) => return storage_unavailable(&error, &sku.slug),
    };
    let Some(key) = state
        .config
        .fulfillment_secret
        .as_deref()
        .and_then(|secret| FulfillmentKey::derive(secret, &order.passport))
    else {
        return json_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the fulfillment key could not be derived",
        );
    };
    // The key is the order's under the current secret; after a rotation, its grant is added.
    let granted = match state
        .store
        .grant_matches(&order.passport, &key.hash())
        .await
    {
        Ok(true) => Ok(()),
        Ok(false) => state.store.add_grant(&order.passport, &key.hash()).await,
        Err(error) => Err(error),
    };
    if let Err(error) = granted {
        return storage_unavailable(&error, &sku.slug);
    }
    paid_response(PurchaseBody::new(state.config, sku, &order, &key, true).await)
}

fn storage_unavailable(error: &crate::storage::StorageError, slug: &str) -> Response {
    tracing::error!(%error, sku = %slug, "order of a signed-in buyer could not be read");
    let mut response = json_error(
        StatusCode::SERVICE_UNAVAILABLE,
        "the order could not be read; sign in again",
    );
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("2"));
    response
}

/// What recording an order reads.
struct Shop<'a> {
    config: &'a Config,
    store: &'a Store,
    /// Whether the payment settled in the in-process sandbox.
    demo: bool,
}

enum Failure {
    OtherSku,
    RedeliveryClosed,
    Unkeyed,
    Storage(crate::storage::StorageError),
}

impl From<crate::storage::StorageError> for Failure {
    fn from(error: crate::storage::StorageError) -> Self {
        Self::Storage(error)
    }
}

/// Records the order (or finds the one this payment already bought) and builds the body.
async fn fulfil(
    state: &Shop<'_>,
    sku: &Sku,
    payment: &VerifiedPayment,
    settlement: &SettleResponse,
    headers: &HeaderMap,
) -> Result<PurchaseBody, Failure> {
    let payer = payer_of(payment, settlement);
    let existing = state
        .store
        .order_by_payment_key(payment.key.as_str())
        .await?;
    let secret = state
        .config
        .fulfillment_secret
        .as_deref()
        .ok_or(Failure::Unkeyed)?;
    if let Some(order) = existing {
        return answer_again(state, sku, &order, secret).await;
    }
    let referral = referral::evaluate(state.store, headers, payer.as_deref(), state.demo).await?;
    let passport = PassportId::generate().as_str().to_owned();
    let key = derived_key(secret, &passport)?;
    let new = NewOrder {
        order: Order {
            passport,
            sku: sku.slug.clone(),
            resource: sku.resource_url.clone(),
            payer,
            network: settlement.network.to_string(),
            transaction: settlement.transaction.clone(),
            amount: amount_paid(&payment.requirement, settlement, sku.price),
            payment_key: payment.key.as_str().to_owned(),
            demo: state.demo,
            issued: unix_now(),
            referral,
        },
        secret_hash: key.hash(),
    };
    match state.store.record_order(&new).await? {
        Recorded::Created(order) => {
            Ok(PurchaseBody::new(state.config, sku, &order, &key, false).await)
        }
        // Another copy of this payment (on this instance or another) recorded its order first,
        // under the Passport it generated: this request's Passport and key were never stored,
        // and the answer is that order's.
        Recorded::Existing(order) => answer_again(state, sku, &order, secret).await,
    }
}

/// The answer to a payment that already bought `order`: its Passport, with the key it derives
/// under the current secret (granted now if the order has no grant for it yet: one key per
/// order per secret). The citation was judged when the order was first recorded.
async fn answer_again(
    state: &Shop<'_>,
    sku: &Sku,
    order: &Order,
    secret: &[u8],
) -> Result<PurchaseBody, Failure> {
    if order.sku != sku.slug {
        return Err(Failure::OtherSku);
    }
    let window = i64::try_from(state.config.redelivery_window.as_secs()).unwrap_or(i64::MAX);
    if unix_now().saturating_sub(order.issued) >= window {
        return Err(Failure::RedeliveryClosed);
    }
    let key = derived_key(secret, &order.passport)?;
    if !state
        .store
        .grant_matches(&order.passport, &key.hash())
        .await?
    {
        state.store.add_grant(&order.passport, &key.hash()).await?;
    }
    Ok(PurchaseBody::new(state.config, sku, order, &key, true).await)
}

/// The fulfillment key of `passport`.
fn derived_key(secret: &[u8], passport: &str) -> Result<FulfillmentKey, Failure> {
    FulfillmentKey::derive(secret, passport).ok_or(Failure::Unkeyed)
}

/// The payer: as verified, else as settled, else the EIP-3009 `from`.
fn payer_of(payment: &VerifiedPayment, settlement: &SettleResponse) -> Option<String> {
    payment
        .payer
        .clone()
        .or_else(|| settlement.payer.clone())
        .or_else(|| {
            payment
                .payload
                .exact_evm()
                .ok()
                .map(|evm| evm.authorization.from)
        })
}

/// What was paid in USD: the settled (else required) atomic amount in the network's USDC
/// decimals, falling back to the SKU price when the network is not in the USDC table.
fn amount_paid(
    requirement: &PaymentRequirements,
    settlement: &SettleResponse,
    price: UsdAmount,
) -> UsdAmount {
    let atomic: AtomicAmount = settlement.amount.unwrap_or(requirement.amount);
    UsdcDeployment::for_network(&requirement.network)
        .and_then(|usdc| UsdAmount::from_atomic(atomic, usdc.decimals).ok())
        .unwrap_or(price)
}

fn paid_response(body: PurchaseBody) -> Response {
    let mut response = (StatusCode::OK, Json(body)).into_response();
    // The body carries fulfillment keys.
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// The Passport id of the example body: well-formed, and visibly an example.
pub const EXAMPLE_PASSPORT: &str = "pp_EXAMPLE00000000000000A";

/// The fulfillment key of the example body: well-formed, and visibly not a secret.
pub const EXAMPLE_KEY: &str = "EXAMPLE_KEY_NOT_A_SECRET000000000000000000A";

/// A complete example 200 body for `sku`, built by the same code as real responses, with
/// values that are visibly examples ([`EXAMPLE_PASSPORT`], [`EXAMPLE_KEY`], a zero transaction).
pub async fn response_example(config: &Config, sku: &Sku, demo: bool) -> Value {
    let Some(key) = FulfillmentKey::parse(EXAMPLE_KEY) else {
        return Value::Null;
    };
    let order = Order {
        passport: EXAMPLE_PASSPORT.to_owned(),
        sku: sku.slug.clone(),
        resource: sku.resource_url.clone(),
        payer: None,
        network: sku.offer.accepts().first().map_or_else(
            || "eip155:8453".to_owned(),
            |accept| accept.network.to_string(),
        ),
        transaction: format!("0x{}", "0".repeat(64)),
        amount: sku.price,
        payment_key: String::new(),
        demo,
        // 2026-09-08T12:00:00Z, the API description's version date.
        issued: 1_788_868_800,
        referral: None,
    };
    let body = PurchaseBody::new(config, sku, &order, &key, false).await;
    serde_json::to_value(body).unwrap_or(Value::Null)
}

/// JSON Schema of the 200 body, for OpenAPI and the catalog's output description.
pub fn response_schema() -> Value {
    let string = json!({ "type": "string" });
    json!({
        "type": "object",
        "required": ["passport", "status", "fulfillment", "referral", "settlement", "replayed", "notice"],
        "properties": {
            "passport": {
                "type": "object",
                "description": "The Passport's citation record (proof of purchase only).",
                "required": passport::CITATION_FIELDS,
                "properties": {
                    "passport": { "type": "string", "pattern": "^pp_[A-Za-z0-9_-]{22}$" },
                    "sku": string,
                    "resource": { "type": "string", "format": "uri" },
                    "verify": { "type": "string", "description": "/api/passport/{id}" },
                    "amountUsdc": { "type": "string", "pattern": "^[0-9]+\\.[0-9]{2,6}$" },
                    "demo": { "type": "boolean" },
                    "issued": { "type": "string", "format": "date-time" }
                }
            },
            "status": { "type": "string", "enum": ["live", "demo"] },
            "fulfillment": {
                "type": "array",
                "description": "Capability URLs: each carries a secret key that unlocks the file; the Passport id alone does not.",
                "items": {
                    "type": "object",
                    "required": ["name", "url"],
                    "properties": { "name": string, "url": { "type": "string", "format": "uri" } }
                }
            },
            "referral": {
                "type": "object",
                "description": "Whether X-REFERRER-PASSPORT counted in the referred stage, and why not.",
                "required": ["header", "cited", "counted", "reason", "detail", "cite"],
                "properties": {
                    "header": { "const": referral::HEADER_DISPLAY },
                    "cited": { "type": ["string", "null"] },
                    "counted": { "type": "boolean" },
                    "reason": {
                        "type": "string",
                        "enum": std::iter::once("none")
                            .chain(referral::Reason::ALL.map(referral::Reason::as_str))
                            .collect::<Vec<_>>()
                    },
                    "detail": string,
                    "cite": {
                        "type": "object",
                        "properties": { "header": string, "value": string }
                    }
                }
            },
            "settlement": {
                "type": "object",
                "required": ["network", "transaction"],
                "properties": { "network": string, "transaction": string }
            },
            "replayed": { "type": "boolean", "description": "True when this payment had already been answered; nothing was charged again." },
            "notice": string
        }
    })
}
