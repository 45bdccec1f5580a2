//! A payment buys one delivery of one request, over real HTTP on loopback against the sandbox
//! facilitator served over HTTP, with real signatures from the sandbox wallet: a metered
//! (`upto`) payment is never served twice nor for another query, a fixed-price (`exact`) one is
//! delivered again only for the identical request, sequentially and with concurrent copies,
//! with the ledger in memory and in PostgreSQL; and an `upto` permit signing another amount
//! than the offer's maximum is refused before `/verify`.

#[path = "../examples/store/tests/store/postgres_server.rs"]
#[allow(dead_code, unreachable_pub)]
mod postgres_server;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::{OriginalUri, Query};
use axum::routing::get;
use serde_json::Value;
use tower_x402::payment::Payments;
use tower_x402::{Charge, HttpFacilitator, Offer, X402Layer};
use tower_x402_postgres::PostgresSettlementStore;
use tower_x402_sandbox::{SandboxFacilitator, SandboxWallet, Step};
use x402_wire::{
    AtomicAmount, PAYMENT_SIGNATURE, PaymentPayload, PaymentRequired, ResourceInfo, SettleResponse,
    UsdcDeployment, header,
};

const PAY_TO: &str = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";

/// Where the ledger is kept.
#[derive(Clone, Copy, Debug)]
enum Ledger {
    Memory,
    Postgres,
}

#[derive(serde::Deserialize)]
struct Rows {
    count: u32,
}

/// Every request a handler ran for: its path and query.
type Runs = Arc<Mutex<Vec<String>>>;

struct Shop {
    sandbox: SandboxFacilitator,
    rows: Arc<Offer>,
    report: Arc<Offer>,
    base: String,
    runs: Runs,
}

/// `/rows?count=N`: metered (`upto`, up to 0.50 USDC), 0.01 USDC a row. `/report?…`: 0.10 USDC,
/// fixed. Both log each run of their handler.
async fn shop(ledger: Ledger) -> Shop {
    let sandbox = SandboxFacilitator::new();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let facilitator_url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(sandbox.clone().serve(listener));
    let facilitator = HttpFacilitator::new(facilitator_url).unwrap();

    let rows = Offer::builder(ResourceInfo::new("https://api.example.com/rows"))
        .usdc_upto(&UsdcDeployment::BASE, "0.50".parse().unwrap(), PAY_TO)
        .build_for(&facilitator)
        .await
        .map(Arc::new)
        .unwrap();
    let report = Offer::builder(ResourceInfo::new("https://api.example.com/report"))
        .usdc(&UsdcDeployment::BASE, "0.10".parse().unwrap(), PAY_TO)
        .build()
        .map(Arc::new)
        .unwrap();
    let store = match ledger {
        Ledger::Memory => None,
        Ledger::Postgres => {
            postgres_server::require();
            let database = postgres_server::fresh_database().await;
            let pool = sqlx::postgres::PgPoolOptions::new()
                .max_connections(8)
                .connect(&database)
                .await
                .unwrap();
            tower_x402_postgres::migrate(&pool).await.unwrap();
            let store = PostgresSettlementStore::new(pool);
            Some(store)
        }
    };
    let layer = |offer: &Arc<Offer>| {
        let payments = Payments::new(facilitator.clone());
        let payments = match &store {
            Some(store) => payments.settlement_store(store.clone()),
            None => payments,
        };
        X402Layer::with_payments(payments, Arc::clone(offer))
    };
    let runs = Runs::default();
    let (rows_runs, report_runs) = (Arc::clone(&runs), Arc::clone(&runs));
    let app = Router::new()
        .route(
            "/rows",
            get(
                move |charge: Charge, uri: OriginalUri, Query(Rows { count }): Query<Rows>| async move {
                    rows_runs.lock().unwrap().push(uri.0.to_string());
                    charge.set(AtomicAmount(u128::from(count) * 10_000));
                    format!("{count} rows")
                },
            )
            .layer(layer(&rows)),
        )
        .route(
            "/report",
            get(move |uri: OriginalUri| async move {
                report_runs.lock().unwrap().push(uri.0.to_string());
                format!("the report for {}", uri.0.query().unwrap_or(""))
            })
            .layer(layer(&report)),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    Shop {
        sandbox,
        rows,
        report,
        base,
        runs,
    }
}

impl Shop {
    fn runs(&self) -> Vec<String> {
        self.runs.lock().unwrap().clone()
    }

    async fn get(&self, target: &str, payment: &PaymentPayload) -> Answer {
        send(&self.base, target, payment).await
    }
}

/// What came back: the status, the decoded `PAYMENT-RESPONSE` and the body.
#[derive(Debug)]
struct Answer {
    target: String,
    status: u16,
    settlement: Option<SettleResponse>,
    body: String,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }
}

async fn send(base: &str, target: &str, payment: &PaymentPayload) -> Answer {
    let response = reqwest::Client::new()
        .get(format!("{base}{target}"))
        .header(
            PAYMENT_SIGNATURE.as_str(),
            header::encode(payment).unwrap().to_str().unwrap(),
        )
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let settlement = response
        .headers()
        .get("payment-response")
        .map(|value| header::decode(value.as_bytes()).unwrap());
    Answer {
        target: target.to_owned(),
        status,
        settlement,
        body: response.text().await.unwrap(),
    }
}

/// A payment of `offer`'s only accept (the `upto` one for `/rows`), signed by a new wallet.
fn pay(offer: &Offer) -> PaymentPayload {
    SandboxWallet::random()
        .pay(offer.payment_required())
        .unwrap()
}

#[tokio::test]
async fn a_settled_metered_payment_buys_no_other_query_and_no_second_delivery() {
    for ledger in [Ledger::Memory, Ledger::Postgres] {
        let shop = shop(ledger).await;
        let payment = pay(&shop.rows);

        let first = shop.get("/rows?count=1", &payment).await;
        assert_eq!(first.status, 200, "{ledger:?}: {first:?}");
        assert_eq!(first.body, "1 rows");
        let settled = first.settlement.clone().unwrap();
        assert_eq!(settled.amount, Some(AtomicAmount(10_000)));

        // The same payment with another query, three times: refused, the handler not run,
        // the recorded settlement shown.
        for _ in 0..3 {
            let more = shop.get("/rows?count=50", &payment).await;
            assert_eq!(more.status, 409, "{ledger:?}: {more:?}");
            assert_eq!(more.json()["error"], "payment_used_for_another_request");
            assert_eq!(more.json()["x402Version"], 2);
            assert_eq!(more.settlement.as_ref(), Some(&settled));
            assert!(!more.body.contains("rows\""), "no rows served");
        }
        // The same query again: not served twice either.
        let again = shop.get("/rows?count=1", &payment).await;
        assert_eq!(again.status, 409, "{ledger:?}: {again:?}");
        assert_eq!(again.json()["error"], "payment_already_delivered");
        assert_eq!(again.settlement.as_ref(), Some(&settled));

        assert_eq!(
            shop.runs(),
            ["/rows?count=1"],
            "{ledger:?}: the handler ran once"
        );
        assert_eq!(
            shop.sandbox.settle_calls(),
            1,
            "{ledger:?}: one /settle in all"
        );
        assert_eq!(shop.sandbox.verify_calls(), 1, "{ledger:?}");
        assert_eq!(shop.sandbox.settlements()[0].amount, AtomicAmount(10_000));
    }
}

#[tokio::test]
async fn twenty_concurrent_copies_of_a_metered_payment_with_mixed_queries_are_served_once() {
    for ledger in [Ledger::Memory, Ledger::Postgres] {
        let shop = shop(ledger).await;
        let payment = pay(&shop.rows);
        // The first settlement takes a while, so that every copy arrives while it is held.
        shop.sandbox
            .queue_settle(Step::Answer.after(Duration::from_millis(200)));
        let copies: Vec<_> = (0..20)
            .map(|n| {
                let target = format!("/rows?count={}", [1, 2, 50][n % 3]);
                let (base, payment) = (shop.base.clone(), payment.clone());
                tokio::spawn(async move { send(&base, &target, &payment).await })
            })
            .collect();
        let mut answers = Vec::new();
        for copy in copies {
            answers.push(copy.await.unwrap());
        }

        let served: Vec<&Answer> = answers.iter().filter(|a| a.status == 200).collect();
        assert_eq!(served.len(), 1, "{ledger:?}: one delivery: {answers:#?}");
        let delivered = served[0];
        assert_eq!(
            shop.runs(),
            std::slice::from_ref(&delivered.target),
            "{ledger:?}"
        );
        let settled = delivered.settlement.clone().unwrap();
        for answer in answers.iter().filter(|a| a.status != 200) {
            assert_eq!(answer.status, 409, "{ledger:?}: {answer:?}");
            let expected = if answer.target == delivered.target {
                "payment_already_delivered"
            } else {
                "payment_used_for_another_request"
            };
            assert_eq!(answer.json()["error"], expected, "{ledger:?}: {answer:?}");
            assert_eq!(answer.settlement.as_ref(), Some(&settled));
        }
        assert_eq!(shop.sandbox.settle_calls(), 1, "{ledger:?}: one settlement");
        assert_eq!(shop.sandbox.settlement_count(), 1, "{ledger:?}");
        let count: u128 = delivered.target["/rows?count=".len()..].parse().unwrap();
        assert_eq!(settled.amount, Some(AtomicAmount(count * 10_000)));
    }
}

#[tokio::test]
async fn a_fixed_price_payment_is_delivered_again_for_the_identical_request_only() {
    let shop = shop(Ledger::Memory).await;
    let payment = pay(&shop.report);

    let first = shop.get("/report?year=2025", &payment).await;
    assert_eq!(first.status, 200, "{first:?}");
    assert_eq!(first.body, "the report for year=2025");
    let settled = first.settlement.clone().unwrap();

    // The answer was lost: the identical request fetches it again, from the record.
    let again = shop.get("/report?year=2025", &payment).await;
    assert_eq!(again.status, 200, "{again:?}");
    assert_eq!(again.body, "the report for year=2025");
    assert_eq!(again.settlement.as_ref(), Some(&settled));

    // Another query is another report: not bought by this payment.
    let other = shop.get("/report?year=2024", &payment).await;
    assert_eq!(other.status, 409, "{other:?}");
    assert_eq!(other.json()["error"], "payment_used_for_another_request");
    assert_eq!(other.settlement.as_ref(), Some(&settled));

    assert_eq!(
        shop.runs(),
        ["/report?year=2025", "/report?year=2025"],
        "the handler ran for the identical request only"
    );
    assert_eq!(shop.sandbox.settle_calls(), 1);
    assert_eq!(shop.sandbox.verify_calls(), 1);
}

#[tokio::test]
async fn twenty_concurrent_copies_of_a_fixed_price_payment_serve_only_the_first_request() {
    let shop = shop(Ledger::Memory).await;
    let payment = pay(&shop.report);
    shop.sandbox
        .queue_settle(Step::Answer.after(Duration::from_millis(200)));
    let copies: Vec<_> = (0..20)
        .map(|n| {
            let target = format!("/report?year={}", 2023 + n % 3);
            let (base, payment) = (shop.base.clone(), payment.clone());
            tokio::spawn(async move { send(&base, &target, &payment).await })
        })
        .collect();
    let mut answers = Vec::new();
    for copy in copies {
        answers.push(copy.await.unwrap());
    }

    let served: Vec<&Answer> = answers.iter().filter(|a| a.status == 200).collect();
    let bought = served[0].target.clone();
    // Every copy of the request that was bought is delivered; every other copy refused.
    for answer in &answers {
        if answer.target == bought {
            assert_eq!(answer.status, 200, "{answer:?}");
        } else {
            assert_eq!(answer.status, 409, "{answer:?}");
            assert_eq!(answer.json()["error"], "payment_used_for_another_request");
        }
        assert_eq!(answer.settlement, served[0].settlement, "{answer:?}");
    }
    let runs = shop.runs();
    assert_eq!(
        runs.len(),
        served.len(),
        "the handler ran once per delivery"
    );
    assert!(runs.iter().all(|run| *run == bought), "{runs:?}");
    assert_eq!(shop.sandbox.settle_calls(), 1);
    assert_eq!(shop.sandbox.settlement_count(), 1);
}

#[tokio::test]
async fn an_upto_permit_for_another_amount_than_the_offers_maximum_is_refused_before_verify() {
    let shop = shop(Ledger::Memory).await;
    let wallet = SandboxWallet::random();
    let required: &PaymentRequired = shop.rows.payment_required();
    let accept = &required.accepts[0];
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    // 10 USDC and 0.10 USDC signed, 0.50 named in `accepted` (the offer's own accept).
    for signed in ["10000000", "100000"] {
        let mut permit = wallet.permit_at(accept, now).unwrap();
        permit.permitted.amount = signed.to_owned();
        let proof = wallet.sign_permit(accept, &permit).unwrap();
        let mut payment = wallet.pay(required).unwrap();
        payment.payload = serde_json::value::to_raw_value(&proof).unwrap();
        assert_eq!(payment.accepted, *accept);

        let answer = shop.get("/rows?count=1", &payment).await;
        assert_eq!(answer.status, 402, "{signed}: {answer:?}");
        let error = answer.json()["error"].as_str().unwrap().to_owned();
        assert!(error.contains("permit's signed amount differs"), "{error}");
        assert!(
            answer.json()["accepts"].is_array(),
            "the challenge to pay again"
        );
    }
    assert_eq!(
        shop.sandbox.verify_calls(),
        0,
        "nothing sent to the facilitator"
    );
    assert_eq!(shop.sandbox.settle_calls(), 0);
    assert!(shop.runs().is_empty());

    // The permit of the maximum is accepted.
    let good = shop
        .get("/rows?count=2", &wallet.pay(required).unwrap())
        .await;
    assert_eq!(good.status, 200, "{good:?}");
    assert_eq!(shop.sandbox.verify_calls(), 1);
}

#[tokio::test]
async fn an_upto_permit_amount_not_written_as_decimal_digits_is_refused_before_verify() {
    let shop = shop(Ledger::Memory).await;
    let wallet = SandboxWallet::random();
    let required: &PaymentRequired = shop.rows.payment_required();
    // The maximum itself, signed, then spelled `+500000`, ` 500000`, `0x7a120`: one amount has
    // one spelling, and nothing but decimal digits reaches the facilitator.
    for spelled in ["+500000", " 500000", "0x7a120", "500000 "] {
        let mut payment = wallet.pay(required).unwrap();
        let mut proof: Value = serde_json::from_str(payment.payload.get()).unwrap();
        let amount = &mut proof["permit2Authorization"]["permitted"]["amount"];
        assert_eq!(amount, "500000", "the maximum was signed");
        *amount = Value::from(spelled);
        payment.payload = serde_json::value::to_raw_value(&proof).unwrap();

        let answer = shop.get("/rows?count=1", &payment).await;
        assert_eq!(answer.status, 402, "{spelled:?}: {answer:?}");
        let error = answer.json()["error"].as_str().unwrap().to_owned();
        assert!(error.contains("decimal digits only"), "{error}");
    }
    assert_eq!(
        shop.sandbox.verify_calls(),
        0,
        "nothing sent to the facilitator"
    );
    assert_eq!(shop.sandbox.settle_calls(), 0);
    assert!(shop.runs().is_empty());
}
