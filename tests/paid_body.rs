//! A payment buys one delivery of one request, its body included, over real HTTP on loopback
//! against the sandbox facilitator served over HTTP, with real signatures from the sandbox
//! wallet: a paid `POST` presented again with other bodies never runs its handler again (with
//! the ledger in memory and in PostgreSQL), the same body is delivered again from the record, a
//! body declared larger than the layer's bound is delivered once and never again, one of
//! unknown length past the bound is refused before `/verify`, and a metered `POST` is served
//! once.

#[path = "../examples/store/tests/store/postgres_server.rs"]
#[allow(dead_code, unreachable_pub)]
mod postgres_server;

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::routing::post;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tower_x402::payment::Payments;
use tower_x402::{Charge, HttpFacilitator, Offer, X402Layer};
use tower_x402_postgres::PostgresSettlementStore;
use tower_x402_sandbox::{SandboxFacilitator, SandboxWallet};
use x402_wire::{
    AtomicAmount, PAYMENT_SIGNATURE, PaymentPayload, ResourceInfo, SettleResponse, UsdcDeployment,
    header,
};

const PAY_TO: &str = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";

/// The bound on paid bodies of `/upload`.
const UPLOAD_BOUND: usize = 64;

#[derive(Clone, Copy, Debug)]
enum Ledger {
    Memory,
    Postgres,
}

/// Every body a handler ran for, with its path.
type Runs = Arc<Mutex<Vec<String>>>;

struct Shop {
    sandbox: SandboxFacilitator,
    generate: Arc<Offer>,
    upload: Arc<Offer>,
    summarize: Arc<Offer>,
    base: String,
    runs: Runs,
}

/// `POST /gen`: 0.01 USDC, fixed, generates for its JSON body. `PUT /upload`: 0.01 USDC,
/// fixed, paid bodies read up to 64 bytes. `POST /summarize`: metered (`upto`, up to 0.50),
/// 0.01 a byte of body. Each handler logs its path and the body it ran for.
async fn shop(ledger: Ledger) -> Shop {
    let sandbox = SandboxFacilitator::new();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let facilitator_url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(sandbox.clone().serve(listener));
    let facilitator = HttpFacilitator::new(facilitator_url).unwrap();

    let fixed = |path: &str| {
        Offer::builder(ResourceInfo::new(format!("https://api.example.com{path}")))
            .usdc(&UsdcDeployment::BASE, "0.01".parse().unwrap(), PAY_TO)
            .build()
            .map(Arc::new)
            .unwrap()
    };
    let (generate, upload) = (fixed("/gen"), fixed("/upload"));
    let summarize = Offer::builder(ResourceInfo::new("https://api.example.com/summarize"))
        .usdc_upto(&UsdcDeployment::BASE, "0.50".parse().unwrap(), PAY_TO)
        .build_for(&facilitator)
        .await
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
            Some(PostgresSettlementStore::new(pool))
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
    let hooked = {
        let payments = Payments::new(facilitator.clone()).hook(Considers);
        let payments = match &store {
            Some(store) => payments.settlement_store(store.clone()),
            None => payments,
        };
        X402Layer::with_payments(payments, Arc::clone(&generate))
    };
    let runs = Runs::default();
    let log = |path: &'static str| {
        let runs = Arc::clone(&runs);
        move |body: String| runs.lock().unwrap().push(format!("{path} {body}"))
    };
    let (gen_log, upload_log, summary_log) = (log("/gen"), log("/upload"), log("/summarize"));
    let hooked_log = log("/gen-hooked");
    let app = Router::new()
        .route(
            "/gen",
            post(move |body: String| async move {
                gen_log(body.clone());
                format!("generated for {body}")
            })
            .layer(layer(&generate)),
        )
        .route(
            "/gen-hooked",
            post(move |body: String| async move {
                hooked_log(body.clone());
                format!("generated for {body}")
            })
            .layer(hooked),
        )
        .route(
            "/upload",
            axum::routing::put(move |body: String| async move {
                upload_log(body.clone());
                format!("stored {} bytes", body.len())
            })
            .layer(layer(&upload).max_paid_body(UPLOAD_BOUND)),
        )
        .route(
            "/summarize",
            post(move |charge: Charge, body: String| async move {
                summary_log(body.clone());
                charge.set(AtomicAmount(body.len() as u128 * 10_000));
                format!("summary of {} bytes", body.len())
            })
            .layer(layer(&summarize)),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    Shop {
        sandbox,
        generate,
        upload,
        summarize,
        base,
        runs,
    }
}

/// A hook that considers every request and lets each go on: the path through the hooks' gate.
#[derive(Debug)]
struct Considers;

impl tower_x402::payment::PaymentHooks for Considers {
    fn stages(&self) -> tower_x402::payment::HookStages {
        tower_x402::payment::HookStages::REQUEST
    }
}

impl Shop {
    fn runs(&self) -> Vec<String> {
        self.runs.lock().unwrap().clone()
    }

    /// `method` `path` with `body` (sent with its `Content-Length`) and `payment`.
    async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        body: &str,
        payment: &PaymentPayload,
    ) -> Answer {
        let response = reqwest::Client::new()
            .request(method, format!("{}{path}", self.base))
            .header(
                PAYMENT_SIGNATURE.as_str(),
                header::encode(payment).unwrap().to_str().unwrap(),
            )
            .header("content-type", "application/json")
            .body(body.to_owned())
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        let settlement = response
            .headers()
            .get("payment-response")
            .map(|value| header::decode(value.as_bytes()).unwrap());
        Answer {
            status,
            settlement,
            body: response.text().await.unwrap(),
        }
    }
}

/// What came back: the status, the decoded `PAYMENT-RESPONSE` and the body.
#[derive(Debug)]
struct Answer {
    status: u16,
    settlement: Option<SettleResponse>,
    body: String,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }
}

fn pay(offer: &Offer) -> PaymentPayload {
    SandboxWallet::random()
        .pay(offer.payment_required())
        .unwrap()
}

#[tokio::test]
async fn a_paid_post_replayed_with_other_bodies_never_runs_the_handler_again() {
    for ledger in [Ledger::Memory, Ledger::Postgres] {
        let shop = shop(ledger).await;
        let payment = pay(&shop.generate);

        let first = shop
            .send(reqwest::Method::POST, "/gen", r#"{"prompt":"A"}"#, &payment)
            .await;
        assert_eq!(first.status, 200, "{ledger:?}: {first:?}");
        assert_eq!(first.body, r#"generated for {"prompt":"A"}"#);
        let settled = first.settlement.clone().unwrap();

        // The same payment with bodies B, C and D: refused, the handler not run.
        for other in ["B", "C", "D"] {
            let body = format!(r#"{{"prompt":"{other}"}}"#);
            let more = shop
                .send(reqwest::Method::POST, "/gen", &body, &payment)
                .await;
            assert_eq!(more.status, 409, "{ledger:?}: {more:?}");
            assert_eq!(more.json()["error"], "payment_used_for_another_request");
            assert_eq!(more.json()["x402Version"], 2);
            assert!(
                more.json()["message"].as_str().unwrap().contains("body"),
                "{more:?}"
            );
            assert_eq!(more.settlement.as_ref(), Some(&settled));
        }
        // Nor without a body.
        let bare = shop.send(reqwest::Method::POST, "/gen", "", &payment).await;
        assert_eq!(bare.status, 409, "{ledger:?}: {bare:?}");

        assert_eq!(
            shop.runs(),
            [r#"/gen {"prompt":"A"}"#],
            "{ledger:?}: the handler ran once, for the body paid for"
        );
        assert_eq!(shop.sandbox.settle_calls(), 1, "{ledger:?}");
        assert_eq!(shop.sandbox.verify_calls(), 1, "{ledger:?}");
    }
}

#[tokio::test]
async fn a_paid_post_through_a_hook_is_bound_to_its_body_too() {
    let shop = shop(Ledger::Memory).await;
    let payment = pay(&shop.generate);
    let post = |body: &'static str| shop.send(reqwest::Method::POST, "/gen-hooked", body, &payment);

    assert_eq!(post("A").await.status, 200);
    assert_eq!(post("B").await.status, 409);
    assert_eq!(post("A").await.status, 200, "the same body again");
    assert_eq!(shop.runs(), ["/gen-hooked A", "/gen-hooked A"]);
    assert_eq!(shop.sandbox.settle_calls(), 1);
}

#[tokio::test]
async fn a_paid_post_is_delivered_again_for_the_same_body_and_settled_once() {
    let shop = shop(Ledger::Memory).await;
    let payment = pay(&shop.generate);
    let body = r#"{"prompt":"a lighthouse at dusk"}"#;

    let first = shop
        .send(reqwest::Method::POST, "/gen", body, &payment)
        .await;
    assert_eq!(first.status, 200, "{first:?}");
    let settled = first.settlement.clone().unwrap();

    // The answer was lost: the same payment with the same body fetches it again.
    let again = shop
        .send(reqwest::Method::POST, "/gen", body, &payment)
        .await;
    assert_eq!(again.status, 200, "{again:?}");
    assert_eq!(again.body, first.body);
    assert_eq!(again.settlement.as_ref(), Some(&settled));

    assert_eq!(shop.runs().len(), 2, "delivered twice, for the same body");
    assert_eq!(shop.sandbox.settle_calls(), 1, "settled once");
    assert_eq!(shop.sandbox.verify_calls(), 1);
}

#[tokio::test]
async fn a_paid_body_declared_over_the_bound_is_delivered_once_and_its_repeat_refused() {
    let shop = shop(Ledger::Memory).await;
    let payment = pay(&shop.upload);
    let large = "x".repeat(UPLOAD_BOUND + 1);

    let first = shop
        .send(reqwest::Method::PUT, "/upload", &large, &payment)
        .await;
    assert_eq!(first.status, 200, "{first:?}");
    assert_eq!(first.body, format!("stored {} bytes", UPLOAD_BOUND + 1));
    let settled = first.settlement.clone().unwrap();

    // Not read, so not comparable: never delivered again, not even for the same bytes.
    for body in [large.clone(), "y".repeat(UPLOAD_BOUND + 1)] {
        let again = shop
            .send(reqwest::Method::PUT, "/upload", &body, &payment)
            .await;
        assert_eq!(again.status, 409, "{again:?}");
        assert_eq!(again.json()["error"], "payment_already_delivered");
        assert_eq!(again.settlement.as_ref(), Some(&settled));
    }
    assert_eq!(shop.runs().len(), 1, "the handler ran once");
    assert_eq!(shop.sandbox.settle_calls(), 1);
}

#[tokio::test]
async fn a_paid_body_of_unknown_length_past_the_bound_is_refused_before_verify() {
    let shop = shop(Ledger::Memory).await;
    let payment = header::encode(&pay(&shop.upload)).unwrap();
    let payment = payment.to_str().unwrap();
    let chunk = "z".repeat(UPLOAD_BOUND + 10);

    // HTTP/1.1, chunked: no Content-Length to go by.
    let addr = shop.base.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "PUT /upload HTTP/1.1\r\nhost: {addr}\r\n{PAYMENT_SIGNATURE}: {payment}\r\n\
         transfer-encoding: chunked\r\nconnection: close\r\n\r\n\
         {:x}\r\n{chunk}\r\n0\r\n\r\n",
        chunk.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();

    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(
        answer.contains("content-type: application/json"),
        "{answer}"
    );
    let body: Value = serde_json::from_str(answer.split("\r\n\r\n").nth(1).unwrap()).unwrap();
    assert!(
        body["error"].as_str().unwrap().contains("Content-Length"),
        "{body}"
    );
    assert_eq!(shop.sandbox.verify_calls(), 0, "nothing verified");
    assert_eq!(shop.sandbox.settle_calls(), 0);
    assert!(shop.runs().is_empty());
}

#[tokio::test]
async fn a_metered_post_is_served_once_for_its_body() {
    let shop = shop(Ledger::Memory).await;
    let payment = pay(&shop.summarize);

    let first = shop
        .send(
            reqwest::Method::POST,
            "/summarize",
            "twelve bytes",
            &payment,
        )
        .await;
    assert_eq!(first.status, 200, "{first:?}");
    assert_eq!(first.body, "summary of 12 bytes");
    let settled = first.settlement.clone().unwrap();
    assert_eq!(settled.amount, Some(AtomicAmount(120_000)));

    let again = shop
        .send(
            reqwest::Method::POST,
            "/summarize",
            "twelve bytes",
            &payment,
        )
        .await;
    assert_eq!(again.status, 409, "{again:?}");
    assert_eq!(again.json()["error"], "payment_already_delivered");
    let other = shop
        .send(
            reqwest::Method::POST,
            "/summarize",
            "thirteen byte",
            &payment,
        )
        .await;
    assert_eq!(other.status, 409, "{other:?}");
    assert_eq!(other.json()["error"], "payment_used_for_another_request");

    assert_eq!(shop.runs(), ["/summarize twelve bytes"]);
    assert_eq!(shop.sandbox.settle_calls(), 1);
}
