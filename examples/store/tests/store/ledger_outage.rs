//! The payment ledger's database goes down while `/settle` is in flight, and comes back: the
//! outcome the facilitator returned is written once PostgreSQL is reachable again, so another
//! instance with no reconciler delivers the payment from the record, with no second `/settle`,
//! and the payer's sign-in entitlement is written too.
//! The library's layer over a real PostgreSQL server of its own, stopped and started again.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::routing::get;
use serde_json::json;
use sqlx::postgres::PgPoolOptions;
use tower_x402::facilitator::Facilitator;
use tower_x402::payment::Payments;
use tower_x402::settlement::{PaymentKey, SettlementStore as _};
use tower_x402::{BoxFuture, FacilitatorError, Offer, SettlementMode, X402Layer};
use tower_x402_postgres::{PostgresEntitlementStore, PostgresSettlementStore};
use tower_x402_siwx::{self as siwx, EntitlementStore as _, SignInWithX};
use x402_wire::{
    FacilitatorRequest, PAYMENT_SIGNATURE, PaymentPayload, ResourceInfo, SettleResponse,
    UsdcDeployment, VerifyResponse, header,
};

use super::postgres_server::PgServer;

const PAY_TO: &str = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";
const PAYER: &str = "0x857b06519E91e3A54538791bDbb0E22373e36b66";

/// Approves every payment and settles it; with `server`, stops that database during `/settle`.
#[derive(Clone)]
struct Approving {
    settles: Arc<AtomicUsize>,
    server: Option<Arc<PgServer>>,
}

impl Facilitator for Approving {
    fn verify<'a>(
        &'a self,
        _request: &'a FacilitatorRequest,
    ) -> BoxFuture<'a, Result<VerifyResponse, FacilitatorError>> {
        Box::pin(async {
            Ok(VerifyResponse {
                is_valid: true,
                payer: Some(PAYER.to_owned()),
                ..VerifyResponse::default()
            })
        })
    }

    fn settle<'a>(
        &'a self,
        request: &'a FacilitatorRequest,
    ) -> BoxFuture<'a, Result<SettleResponse, FacilitatorError>> {
        Box::pin(async move {
            self.settles.fetch_add(1, Ordering::SeqCst);
            if let Some(server) = self.server.clone() {
                tokio::task::spawn_blocking(move || server.stop_now())
                    .await
                    .unwrap();
            }
            let mut settled =
                SettleResponse::failure(request.payment_requirements().network.clone(), "");
            settled.success = true;
            settled.error_reason = None;
            settled.transaction = format!("0x{}", "12".repeat(32));
            settled.payer = Some(PAYER.to_owned());
            Ok(settled)
        })
    }
}

async fn pool(url: &str) -> sqlx::PgPool {
    PgPoolOptions::new()
        .acquire_timeout(Duration::from_secs(1))
        .connect(url)
        .await
        .unwrap()
}

async fn ledger(url: &str) -> PostgresSettlementStore {
    PostgresSettlementStore::new(pool(url).await)
}

async fn serve(layer: X402Layer) -> String {
    let app = Router::new().route("/report", get(|| async { "the report" }).layer(layer));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}/report")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outcome_received_while_postgres_is_down_is_written_once_it_is_back() {
    let server = Arc::new(PgServer::start().unwrap_or_else(|why| {
        panic!("this test needs PostgreSQL (apt-get install postgresql, or set PG_BIN): {why}")
    }));
    let url = server.url("postgres");
    tower_x402_postgres::migrate(&pool(&url).await)
        .await
        .unwrap();
    let first_ledger = ledger(&url).await;
    let entitlements = PostgresEntitlementStore::new(pool(&url).await);

    let offer = Arc::new(
        Offer::builder(ResourceInfo::new("https://api.example.com/report"))
            .usdc(&UsdcDeployment::BASE, "1.00".parse().unwrap(), PAY_TO)
            .settlement(SettlementMode::Before)
            .build()
            .unwrap(),
    );
    let accepted = offer.accepts()[0].clone();
    let payload: PaymentPayload = serde_json::from_value(json!({
        "x402Version": 2,
        "resource": offer.resource(),
        "accepted": accepted,
        "payload": {
            "signature": format!("0x{}", "ab".repeat(65)),
            "authorization": {
                "from": PAYER, "to": PAY_TO, "value": accepted.amount,
                "validAfter": "0", "validBefore": "99999999999",
                "nonce": format!("0x{}", "07".repeat(32)),
            }
        },
    }))
    .unwrap();
    let signature = header::encode(&payload).unwrap();
    let settles = Arc::new(AtomicUsize::new(0));
    let client = reqwest::Client::new();

    // Instance A: PostgreSQL stops while its /settle is in flight.
    let first = X402Layer::with_payments(
        Payments::new(Approving {
            settles: Arc::clone(&settles),
            server: Some(Arc::clone(&server)),
        })
        .settlement_store(first_ledger)
        .hook(
            SignInWithX::new("https://api.example.com", [7; 32])
                .unwrap()
                .entitlement_store(entitlements),
        ),
        Arc::clone(&offer),
    );
    let first = serve(first).await;
    let answer = client
        .get(&first)
        .header(PAYMENT_SIGNATURE.as_str(), signature.to_str().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200, "the money moved: the buyer is served");

    // PostgreSQL comes back; the settlement is recorded without anyone asking.
    let restart = Arc::clone(&server);
    tokio::task::spawn_blocking(move || restart.start_again())
        .await
        .unwrap()
        .unwrap();
    let reader = ledger(&url).await;
    let key = PaymentKey::of(&payload);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let phase = reader
            .load(&key)
            .await
            .ok()
            .flatten()
            .map(|entry| entry.state.phase());
        if phase == Some("settled") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "still {phase:?} after the database came back"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // The payer's entitlement, which the database could not take either, lands too.
    let entitlements = PostgresEntitlementStore::new(pool(&url).await);
    let payer = PAYER.to_ascii_lowercase();
    // Entitlements are keyed by the resource and the price paid (1.00 USDC).
    let entitlement_key = siwx::entitlement_key(
        "https://api.example.com/report",
        &"1000000".parse().unwrap(),
    );
    loop {
        let bought = entitlements
            .last_purchase(&entitlement_key, &payer)
            .await
            .ok()
            .flatten();
        if bought.is_some() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no entitlement recorded after the database came back"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Instance B: the same database, no reconciler, no memory of its own.
    let second = X402Layer::with_payments(
        Payments::new(Approving {
            settles: Arc::clone(&settles),
            server: None,
        })
        .settlement_store(ledger(&url).await),
        Arc::clone(&offer),
    );
    let second = serve(second).await;
    let answer = client
        .get(&second)
        .header(PAYMENT_SIGNATURE.as_str(), signature.to_str().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    assert!(answer.headers().contains_key("payment-response"));
    assert_eq!(answer.text().await.unwrap(), "the report");
    assert_eq!(
        settles.load(Ordering::SeqCst),
        1,
        "one /settle for one payment"
    );
}
