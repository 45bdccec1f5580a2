//! A scheme defined here owns its payments through the core's steps: it verifies and settles
//! through the core's facilitators (an HTTP facilitator on loopback, reached through the core's
//! pool), keeps its notes on the payment, and is settled exactly once under a lost `/settle`
//! answer and a restart, with the ledger in PostgreSQL — as `exact` is. The core asks its steps
//! only for its own payments.

#[path = "../examples/store/tests/store/postgres_server.rs"]
#[allow(dead_code, unreachable_pub)]
mod postgres_server;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::routing::{get, post};
use axum::{Json, Router};
use http::Extensions;
use serde_json::{Map, Value, json};
use tower_x402::payment::{PaymentContext, Payments, Refusal, Scheme};
use tower_x402::proto::{
    FacilitatorRequest, PAYMENT_SIGNATURE, PaymentPayload, PaymentRequirements, ResourceInfo,
    SettleResponse, VerifyResponse, X402Version, header,
};
use tower_x402::{
    BoxFuture, HttpFacilitator, Offer, PaymentKey, SettlementMode, VerifiedPayment, X402Layer,
};
use tower_x402_postgres::PostgresSettlementStore;

const URL: &str = "https://tickets.example/show";

/// What the scheme notes on a payment when it verifies it.
#[derive(Clone, Debug, PartialEq)]
struct Seat(String);

/// How often each of the scheme's steps ran, and what they saw.
#[derive(Default)]
struct Seen {
    verified: AtomicUsize,
    settled: AtomicUsize,
    /// Settle steps that found the payment's note.
    settled_with_seat: AtomicUsize,
    released: AtomicUsize,
}

/// `ticket`: a ticket's code is the payment; the facilitator verifies and settles it, through
/// the core; the seat it was verified for is noted on the payment.
struct Ticket(Arc<Seen>);

fn code(payload: &PaymentPayload) -> String {
    let proof: Value = serde_json::from_str(payload.payload.get()).unwrap_or_default();
    proof["code"].as_str().unwrap_or_default().to_owned()
}

impl Scheme for Ticket {
    fn name(&self) -> &str {
        "ticket"
    }

    fn identify(&self, payload: &PaymentPayload) -> Result<Arc<str>, Refusal> {
        Ok(format!("ticket:{}", code(payload)).into())
    }

    fn verify<'a>(
        &'a self,
        payment: &'a PaymentContext<'a>,
        notes: &'a mut Extensions,
    ) -> Option<BoxFuture<'a, Result<VerifyResponse, Refusal>>> {
        Some(Box::pin(async move {
            self.0.verified.fetch_add(1, Ordering::SeqCst);
            let verified = payment.verify_at_facilitator().await?;
            if verified.is_valid {
                notes.insert(Seat(format!(
                    "row-{}",
                    code(payment.request.payment_payload())
                )));
            }
            Ok(verified)
        }))
    }

    fn settle<'a>(
        &'a self,
        payment: &'a PaymentContext<'a>,
        notes: &'a mut Extensions,
    ) -> Option<BoxFuture<'a, Result<SettleResponse, Refusal>>> {
        Some(Box::pin(async move {
            self.0.settled.fetch_add(1, Ordering::SeqCst);
            if notes.get::<Seat>().is_some() {
                self.0.settled_with_seat.fetch_add(1, Ordering::SeqCst);
            }
            payment.settle_at_facilitator().await
        }))
    }

    fn settlement_extra(
        &self,
        _: &PaymentContext<'_>,
        notes: &Extensions,
        _: &SettleResponse,
    ) -> Option<Map<String, Value>> {
        let seat = notes.get::<Seat>()?;
        let mut extra = Map::new();
        extra.insert("seat".into(), seat.0.clone().into());
        Some(extra)
    }

    fn release(&self, _: &PaymentKey, notes: Extensions) -> Option<BoxFuture<'static, ()>> {
        assert!(notes.get::<Seat>().is_some());
        self.0.released.fetch_add(1, Ordering::SeqCst);
        None
    }
}

/// A facilitator on loopback: every payment verifies; `/settle` moves money once per payment
/// (an identical request sent again answers the same settlement, as an idempotent facilitator
/// does), and answers nothing (a 504, after the work) while `lose_answer` is set.
#[derive(Clone, Default)]
struct Facilitator {
    transfers: Arc<Mutex<HashMap<String, String>>>,
    lose_answer: Arc<AtomicBool>,
    verify_calls: Arc<AtomicUsize>,
}

impl Facilitator {
    fn transfers(&self) -> usize {
        self.transfers.lock().unwrap().len()
    }
}

async fn verify(State(facilitator): State<Facilitator>, Json(_): Json<Value>) -> Json<Value> {
    facilitator.verify_calls.fetch_add(1, Ordering::SeqCst);
    Json(json!({ "isValid": true, "payer": "0x857b06519E91e3A54538791bDbb0E22373e36b66" }))
}

async fn settle(
    State(facilitator): State<Facilitator>,
    Json(request): Json<FacilitatorRequest>,
) -> Result<Json<Value>, http::StatusCode> {
    let payload = serde_json::to_string(&request.payment_payload().payload).unwrap();
    let transaction = {
        let mut transfers = facilitator.transfers.lock().unwrap();
        let next = format!("0x{:064x}", transfers.len() + 1);
        transfers.entry(payload).or_insert(next).clone()
    };
    if facilitator.lose_answer.load(Ordering::SeqCst) {
        return Err(http::StatusCode::GATEWAY_TIMEOUT);
    }
    let requirement = request.payment_requirements();
    Ok(Json(json!({
        "success": true, "transaction": transaction, "network": requirement.network,
        "payer": "0x857b06519E91e3A54538791bDbb0E22373e36b66",
    })))
}

async fn serve_facilitator(facilitator: &Facilitator) -> String {
    let app = Router::new()
        .route("/verify", post(verify))
        .route("/settle", post(settle))
        .with_state(facilitator.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}")
}

/// The handler: answers with the seat the scheme noted on the payment, if any.
async fn show(payment: VerifiedPayment) -> Json<Value> {
    let seat = payment.notes.get::<Seat>().map(|seat| seat.0.clone());
    Json(json!({ "scheme": payment.requirement.scheme, "seat": seat }))
}

/// One process: a core with the scheme and the ledger in `store`, served on loopback.
async fn start(facilitator: &str, store: &PostgresSettlementStore, seen: &Arc<Seen>) -> String {
    let payments = Payments::new(HttpFacilitator::new(facilitator).unwrap())
        .settlement_store(store.clone())
        .scheme(Ticket(Arc::clone(seen)));
    let layer = X402Layer::with_payments(payments, offer());
    let app = Router::new().route("/show", get(show).layer(layer));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}/show")
}

fn requirement(scheme: &str) -> PaymentRequirements {
    serde_json::from_value(json!({
        "scheme": scheme, "network": "eip155:8453", "amount": "1000",
        "asset": "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913",
        "payTo": "0x209693Bc6afc0C5328bA36FaF03C514EF312287C", "maxTimeoutSeconds": 60
    }))
    .unwrap()
}

/// Tickets, or `exact` at the same price, settled before the work.
fn offer() -> Arc<Offer> {
    offer_settled(SettlementMode::Before)
}

fn offer_settled(mode: SettlementMode) -> Arc<Offer> {
    Arc::new(
        Offer::builder(ResourceInfo::new(URL))
            .accept(requirement("ticket"))
            .accept(requirement("exact"))
            .settlement(mode)
            .build()
            .unwrap(),
    )
}

fn payment(scheme: &str, proof: Value) -> PaymentPayload {
    let offer = offer();
    let accepted = offer
        .accepts()
        .iter()
        .find(|accept| accept.scheme == scheme)
        .unwrap();
    PaymentPayload {
        x402_version: X402Version::V2,
        resource: Some(offer.resource().clone()),
        accepted: PaymentRequirements::clone(accepted),
        payload: serde_json::value::to_raw_value(&proof).unwrap(),
        extensions: None,
    }
}

async fn buy(url: &str, payload: &PaymentPayload) -> (u16, Option<SettleResponse>, Value) {
    let response = reqwest::Client::new()
        .get(url)
        .header(
            PAYMENT_SIGNATURE.as_str(),
            header::encode(payload).unwrap().to_str().unwrap(),
        )
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let settlement = response
        .headers()
        .get("payment-response")
        .map(|value| header::decode(value.as_bytes()).unwrap());
    let body = response.json().await.unwrap_or(Value::Null);
    (status, settlement, body)
}

async fn postgres_store() -> PostgresSettlementStore {
    postgres_server::require();
    let database = postgres_server::fresh_database().await;
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(4)
        .connect(&database)
        .await
        .unwrap();
    tower_x402_postgres::migrate(&pool).await.unwrap();
    PostgresSettlementStore::new(pool)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scheme_verifies_and_settles_through_the_core_and_keeps_its_notes_on_the_payment() {
    let facilitator = Facilitator::default();
    let facilitator_url = serve_facilitator(&facilitator).await;
    let store = postgres_store().await;
    let seen = Arc::new(Seen::default());
    let url = start(&facilitator_url, &store, &seen).await;

    let ticket = payment("ticket", json!({ "code": "A7" }));
    let (status, settlement, body) = buy(&url, &ticket).await;
    assert_eq!(status, 200, "{body}");
    // The handler read the note the verify step wrote; the settlement's extra carries it.
    assert_eq!(body, json!({ "scheme": "ticket", "seat": "row-A7" }));
    let settlement = settlement.expect("PAYMENT-RESPONSE");
    assert!(settlement.success);
    assert_eq!(settlement.extra.unwrap()["seat"], "row-A7");
    assert_eq!(facilitator.verify_calls.load(Ordering::SeqCst), 1);
    assert_eq!(facilitator.transfers(), 1);
    assert_eq!(seen.verified.load(Ordering::SeqCst), 1);
    assert_eq!(seen.settled_with_seat.load(Ordering::SeqCst), 1);

    // An `exact` payment on the same core: verified and settled, none of the scheme's steps
    // asked.
    let exact = payment(
        "exact",
        json!({ "signature": "0x01", "authorization": {
            "from": "0x857b06519E91e3A54538791bDbb0E22373e36b66",
            "to": "0x209693Bc6afc0C5328bA36FaF03C514EF312287C", "value": "1000",
            "validAfter": "0", "validBefore": "99999999999", "nonce": format!("0x{:064x}", 9)
        }}),
    );
    let (status, settlement, body) = buy(&url, &exact).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body, json!({ "scheme": "exact", "seat": null }));
    assert!(settlement.unwrap().extra.is_none());
    assert_eq!(facilitator.transfers(), 2);
    assert_eq!(
        seen.verified.load(Ordering::SeqCst),
        1,
        "not the scheme's payment"
    );
    assert_eq!(
        seen.settled.load(Ordering::SeqCst),
        1,
        "not the scheme's payment"
    );
    assert_eq!(seen.released.load(Ordering::SeqCst), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scheme_settles_once_under_a_lost_settle_answer_and_a_restart() {
    let facilitator = Facilitator::default();
    let facilitator_url = serve_facilitator(&facilitator).await;
    let store = postgres_store().await;
    let seen = Arc::new(Seen::default());
    let first = start(&facilitator_url, &store, &seen).await;
    let ticket = payment("ticket", json!({ "code": "B2" }));

    // The money moves, the answer is lost: in doubt (503), never 402.
    facilitator.lose_answer.store(true, Ordering::SeqCst);
    let (status, _, body) = buy(&first, &ticket).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(facilitator.transfers(), 1);
    assert_eq!(seen.settled_with_seat.load(Ordering::SeqCst), 1);
    assert_eq!(
        seen.released.load(Ordering::SeqCst),
        0,
        "in doubt is not released"
    );
    let unsettled = store.unsettled().await.unwrap();
    let phases: Vec<_> = unsettled.iter().map(|(_, state)| state.phase()).collect();
    assert_eq!(phases, ["in_doubt"]);

    // A restarted process (a new core on the same ledger, nothing in memory): the retry
    // re-sends the identical `/settle` through the scheme's step and is delivered, once.
    facilitator.lose_answer.store(false, Ordering::SeqCst);
    let restarted = Arc::new(Seen::default());
    let second = start(&facilitator_url, &store, &restarted).await;
    let (status, settlement, body) = buy(&second, &ticket).await;
    assert_eq!(status, 200, "{body}");
    assert!(settlement.unwrap().success);
    // Recovered, not verified again; the restart lost the note, and the scheme was told so.
    assert_eq!(restarted.verified.load(Ordering::SeqCst), 0);
    assert_eq!(restarted.settled.load(Ordering::SeqCst), 1);
    assert_eq!(restarted.settled_with_seat.load(Ordering::SeqCst), 0);
    assert_eq!(body, json!({ "scheme": "ticket", "seat": null }));

    // Again: answered from the ledger, no step asked, no second transfer.
    let (status, _, _) = buy(&second, &ticket).await;
    assert_eq!(status, 200);
    assert_eq!(restarted.settled.load(Ordering::SeqCst), 1);
    assert_eq!(facilitator.transfers(), 1, "one transfer in all");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_payment_the_work_failed_is_released_by_its_scheme_with_its_notes() {
    let facilitator = Facilitator::default();
    let facilitator_url = serve_facilitator(&facilitator).await;
    let seen = Arc::new(Seen::default());
    let payments = Payments::new(HttpFacilitator::new(&facilitator_url).unwrap())
        .scheme(Ticket(Arc::clone(&seen)));
    let layer = X402Layer::with_payments(payments, offer_settled(SettlementMode::After));
    let failing = || async { (http::StatusCode::SERVICE_UNAVAILABLE, "sold out") };
    let app = Router::new().route("/show", get(failing).layer(layer));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let ticket = payment("ticket", json!({ "code": "C3" }));
    let (status, settlement, _) = buy(&format!("http://{addr}/show"), &ticket).await;
    assert_eq!(status, 503);
    assert!(settlement.is_none());
    // Released with the seat it noted (the step asserts it), never settled.
    assert_eq!(seen.verified.load(Ordering::SeqCst), 1);
    assert_eq!(seen.released.load(Ordering::SeqCst), 1);
    assert_eq!(seen.settled.load(Ordering::SeqCst), 0);
    assert_eq!(facilitator.transfers(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_core_holds_a_scheme_s_notes_while_its_payment_is_in_doubt() {
    let facilitator = Facilitator::default();
    let facilitator_url = serve_facilitator(&facilitator).await;
    let store = postgres_store().await;
    let seen = Arc::new(Seen::default());
    let url = start(&facilitator_url, &store, &seen).await;
    let ticket = payment("ticket", json!({ "code": "D4" }));

    facilitator.lose_answer.store(true, Ordering::SeqCst);
    let (status, _, _) = buy(&url, &ticket).await;
    assert_eq!(status, 503);
    facilitator.lose_answer.store(false, Ordering::SeqCst);

    // The same process recovers it: its settle step finds the seat the verify step noted, and
    // so do the settlement's extra and the work.
    let (status, settlement, body) = buy(&url, &ticket).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(seen.verified.load(Ordering::SeqCst), 1);
    assert_eq!(seen.settled.load(Ordering::SeqCst), 2);
    assert_eq!(seen.settled_with_seat.load(Ordering::SeqCst), 2);
    assert_eq!(settlement.unwrap().extra.unwrap()["seat"], "row-D4");
    assert_eq!(body, json!({ "scheme": "ticket", "seat": "row-D4" }));
    assert_eq!(facilitator.transfers(), 1);
}
