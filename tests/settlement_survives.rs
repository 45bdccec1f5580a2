//! What no client and no database outage can undo: a settlement whose client hung up runs to its
//! end and is recorded; an outcome the store could not take is written once it is back; and an
//! invalid payment presented again is refused from memory, not sent to `/verify` again.
//!
//! Everything runs over loopback HTTP: a real client, the layer served by axum, and a scripted
//! facilitator served over HTTP and reached through `HttpFacilitator`.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::routing::get;
use common::{Step, accepting, offer, payment, payment_header, scripted};
use tower_x402::facilitator::Facilitator;
use tower_x402::payment::Payments;
use tower_x402::settlement::{
    LedgerEntry, PaymentKey, PaymentState, Reconciliation, SettlementStore, StoreError,
};
use tower_x402::{
    BoxFuture, FacilitatorError, HttpFacilitator, MemorySettlementStore, Reconciler,
    SettlementMode, X402Layer,
};
use x402_wire::{
    FacilitatorRequest, PAYMENT_SIGNATURE, PaymentPayload, SettleResponse, VerifyResponse,
};

const URL: &str = "https://api.example.com/report";

/// Serves `layer` in front of a handler at `/report` on loopback; returns the route's URL.
async fn serve(layer: X402Layer) -> String {
    let app = Router::new().route("/report", get(|| async { "the report" }).layer(layer));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}/report")
}

async fn pay(
    client: &reqwest::Client,
    url: &str,
    payload: &PaymentPayload,
) -> reqwest::Result<reqwest::Response> {
    client
        .get(url)
        .header(
            PAYMENT_SIGNATURE.as_str(),
            payment_header(payload).to_str().unwrap(),
        )
        .send()
        .await
}

/// A reconciler that counts the questions it was asked and cannot tell.
#[derive(Clone, Default)]
struct CountingReconciler(Arc<AtomicUsize>);

impl Reconciler for CountingReconciler {
    fn reconcile<'a>(&'a self, _request: &'a FacilitatorRequest) -> BoxFuture<'a, Reconciliation> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Box::pin(async {
            Reconciliation::Unknown {
                reason: "not asked in this test".into(),
            }
        })
    }
}

async fn state_of(store: &MemorySettlementStore, payload: &PaymentPayload) -> Option<&'static str> {
    store
        .load(&PaymentKey::of(payload))
        .await
        .unwrap()
        .map(|entry| entry.state.phase())
}

/// A client whose timeout is shorter than `/settle` hangs up mid-settlement; its retry of the
/// same payment joins the settlement still running and is delivered. One `/settle`, nothing in
/// doubt, with or without a reconciler, in both settlement modes.
#[tokio::test]
async fn a_client_that_hangs_up_mid_settlement_is_delivered_on_its_retry() {
    for mode in [SettlementMode::Before, SettlementMode::After] {
        for with_reconciler in [false, true] {
            let facilitator = scripted(
                Step::Trust,
                Step::Delayed {
                    delay: Duration::from_millis(800),
                    then: Box::new(Step::Trust),
                },
            );
            let facilitator_url = common::serve(&facilitator).await;
            let store = Arc::new(MemorySettlementStore::default());
            let reconciler = CountingReconciler::default();
            let offer = offer(URL, mode);
            let mut payments = Payments::new(HttpFacilitator::new(facilitator_url).unwrap())
                .settlement_store(Arc::clone(&store));
            if with_reconciler {
                payments = payments.reconciler(reconciler.clone());
            }
            let url = serve(X402Layer::with_payments(payments, Arc::clone(&offer))).await;
            let payload = payment(&offer, 1);

            let impatient = reqwest::Client::builder()
                .timeout(Duration::from_millis(250))
                .build()
                .unwrap();
            let hung_up = pay(&impatient, &url, &payload).await;
            assert!(
                hung_up.as_ref().is_err_and(reqwest::Error::is_timeout),
                "{mode:?}: the first client must give up mid-settlement: {hung_up:?}"
            );
            assert_eq!(facilitator.settle_calls(), 1, "{mode:?}: /settle was sent");

            let retry = pay(&reqwest::Client::new(), &url, &payload).await.unwrap();
            assert_eq!(
                retry.status(),
                200,
                "{mode:?}, reconciler {with_reconciler}"
            );
            assert!(retry.headers().contains_key("payment-response"));
            assert_eq!(retry.text().await.unwrap(), "the report");
            assert_eq!(
                facilitator.settle_calls(),
                1,
                "{mode:?}, reconciler {with_reconciler}: one /settle for one payment"
            );
            assert_eq!(state_of(&store, &payload).await, Some("settled"));
            assert_eq!(
                reconciler.0.load(Ordering::SeqCst),
                0,
                "nothing was in doubt"
            );
        }
    }
}

/// The settlement also completes and is recorded when nobody retries.
#[tokio::test]
async fn a_settlement_whose_client_hung_up_is_recorded_without_a_retry() {
    let facilitator = scripted(
        Step::Trust,
        Step::Delayed {
            delay: Duration::from_millis(500),
            then: Box::new(Step::Trust),
        },
    );
    let facilitator_url = common::serve(&facilitator).await;
    let store = Arc::new(MemorySettlementStore::default());
    let offer = offer(URL, SettlementMode::Before);
    let payments = Payments::new(HttpFacilitator::new(facilitator_url).unwrap())
        .settlement_store(Arc::clone(&store));
    let layer = X402Layer::with_payments(payments, Arc::clone(&offer));
    let url = serve(layer).await;
    let payload = payment(&offer, 2);
    let impatient = reqwest::Client::builder()
        .timeout(Duration::from_millis(150))
        .build()
        .unwrap();
    assert!(pay(&impatient, &url, &payload).await.is_err());
    assert_eq!(state_of(&store, &payload).await, Some("settling"));
    let deadline = Instant::now() + Duration::from_secs(5);
    while state_of(&store, &payload).await != Some("settled") {
        assert!(
            Instant::now() < deadline,
            "the settlement was never recorded"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(facilitator.settle_calls(), 1);
}

/// A settlement store that can be taken down: while down, every operation fails.
#[derive(Clone, Default)]
struct FlakyStore {
    inner: Arc<MemorySettlementStore>,
    down: Arc<AtomicBool>,
    failures: Arc<AtomicUsize>,
}

impl FlakyStore {
    fn check(&self) -> Result<(), StoreError> {
        if self.down.load(Ordering::SeqCst) {
            self.failures.fetch_add(1, Ordering::SeqCst);
            return Err(StoreError("connection refused".into()));
        }
        Ok(())
    }
}

impl SettlementStore for FlakyStore {
    fn load<'a>(
        &'a self,
        key: &'a PaymentKey,
    ) -> BoxFuture<'a, Result<Option<LedgerEntry>, StoreError>> {
        Box::pin(async move {
            self.check()?;
            self.inner.load(key).await
        })
    }

    fn insert<'a>(
        &'a self,
        key: &'a PaymentKey,
        state: &'a PaymentState,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move {
            self.check()?;
            self.inner.insert(key, state).await
        })
    }

    fn replace<'a>(
        &'a self,
        key: &'a PaymentKey,
        version: u64,
        state: &'a PaymentState,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move {
            self.check()?;
            self.inner.replace(key, version, state).await
        })
    }

    fn remove<'a>(
        &'a self,
        key: &'a PaymentKey,
        version: u64,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move {
            self.check()?;
            self.inner.remove(key, version).await
        })
    }
}

/// A facilitator during whose `/settle` the store goes down.
struct StoreDownDuringSettle {
    facilitator: HttpFacilitator,
    store: FlakyStore,
}

impl Facilitator for StoreDownDuringSettle {
    fn verify<'a>(
        &'a self,
        request: &'a FacilitatorRequest,
    ) -> BoxFuture<'a, Result<VerifyResponse, FacilitatorError>> {
        self.facilitator.verify(request)
    }

    fn settle<'a>(
        &'a self,
        request: &'a FacilitatorRequest,
    ) -> BoxFuture<'a, Result<SettleResponse, FacilitatorError>> {
        self.store.down.store(true, Ordering::SeqCst);
        self.facilitator.settle(request)
    }
}

/// The store goes down while `/settle` is in flight: the buyer is served, and the settlement is
/// written once the store is back — so another instance sharing the store, with no reconciler
/// and no memory of its own, delivers the payment from the record with no second `/settle`.
#[tokio::test]
async fn an_outcome_the_store_could_not_take_is_written_once_it_is_back() {
    let facilitator = accepting();
    let facilitator_url = common::serve(&facilitator).await;
    let store = FlakyStore::default();
    let offer = offer(URL, SettlementMode::Before);
    let first = Payments::new(StoreDownDuringSettle {
        facilitator: HttpFacilitator::new(facilitator_url.clone()).unwrap(),
        store: store.clone(),
    })
    .settlement_store(store.clone());
    let first = X402Layer::with_payments(first, Arc::clone(&offer));
    let first = serve(first).await;
    let payload = payment(&offer, 3);
    let client = reqwest::Client::new();

    let answer = pay(&client, &first, &payload).await.unwrap();
    assert_eq!(answer.status(), 200, "the money moved: the buyer is served");
    assert!(
        store.failures.load(Ordering::SeqCst) >= 1,
        "the record was refused"
    );
    assert_eq!(state_of(&store.inner, &payload).await, Some("settling"));

    // The store is back: the record is written in the background.
    tokio::time::sleep(Duration::from_millis(300)).await;
    store.down.store(false, Ordering::SeqCst);
    let deadline = Instant::now() + Duration::from_secs(10);
    while state_of(&store.inner, &payload).await != Some("settled") {
        assert!(
            Instant::now() < deadline,
            "the settlement was never recorded"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Another instance: its own core, the same store, no reconciler.
    let second = Payments::new(HttpFacilitator::new(facilitator_url).unwrap())
        .settlement_store(store.clone());
    let second = X402Layer::with_payments(second, Arc::clone(&offer));
    let second = serve(second).await;
    let answer = pay(&client, &second, &payload).await.unwrap();
    assert_eq!(answer.status(), 200);
    assert_eq!(answer.text().await.unwrap(), "the report");
    assert_eq!(facilitator.settle_calls(), 1, "no second /settle anywhere");
}

/// The same invalid payment presented 50 times costs one `/verify`, and is answered the same 402
/// every time.
#[tokio::test]
async fn the_same_invalid_payment_is_refused_from_memory() {
    let facilitator = scripted(
        Step::Refuse("invalid_exact_evm_payload_signature".to_owned()),
        Step::Trust,
    );
    let facilitator_url = common::serve(&facilitator).await;
    // Settled after the work, so verified first (`settle_first` covers `/settle`'s refusals).
    let offer = offer(URL, SettlementMode::After);
    let layer = X402Layer::new(
        HttpFacilitator::new(facilitator_url).unwrap(),
        Arc::clone(&offer),
    );
    let url = serve(layer).await;
    let payload = payment(&offer, 4);
    let client = reqwest::Client::new();

    let mut first_body = None;
    for _ in 0..50 {
        let answer = pay(&client, &url, &payload).await.unwrap();
        assert_eq!(answer.status(), 402);
        let required = answer.headers()["payment-required"].clone();
        let body = answer.text().await.unwrap();
        assert!(
            body.contains("invalid_exact_evm_payload_signature"),
            "{body}"
        );
        let first = first_body.get_or_insert((required.clone(), body.clone()));
        assert_eq!(
            (&first.0, &first.1),
            (&required, &body),
            "the same 402 every time"
        );
    }
    assert!(
        facilitator.verify_calls() <= 3,
        "{} /verify calls for one invalid payment",
        facilitator.verify_calls()
    );
    assert_eq!(facilitator.settle_calls(), 0);

    // Another payment is verified as usual.
    let other = payment(&offer, 5);
    assert_eq!(pay(&client, &url, &other).await.unwrap().status(), 402);
    assert_eq!(facilitator.verify_calls(), 2);
}

#[tokio::test]
async fn a_payment_whose_nonce_was_used_before_this_ledger_knew_it_is_in_doubt_never_402() {
    // A first process settled the payment, then stopped before its answer was recorded (its
    // ledger was in memory): the facilitator has the transfer, the next process's ledger has
    // nothing.
    let facilitator = accepting();
    let facilitator_url = common::serve(&facilitator).await;
    let offer = offer(URL, SettlementMode::After);
    let payload = payment(&offer, 7);
    let first = serve(X402Layer::new(
        HttpFacilitator::new(&facilitator_url).unwrap(),
        Arc::clone(&offer),
    ))
    .await;
    let paid = pay(&reqwest::Client::new(), &first, &payload)
        .await
        .unwrap();
    assert_eq!(paid.status(), 200);
    assert_eq!(facilitator.settlement_count(), 1);

    // The restarted process, without a reconciler: `/verify` says the nonce is used. Money
    // moved, so this is no 402: it is in doubt, to be retried.
    let restarted = serve(X402Layer::new(
        HttpFacilitator::new(&facilitator_url).unwrap(),
        Arc::clone(&offer),
    ))
    .await;
    for attempt in 1..=2 {
        let answer = pay(&reqwest::Client::new(), &restarted, &payload)
            .await
            .unwrap();
        assert_eq!(answer.status(), 503, "attempt {attempt}");
        assert!(answer.headers().contains_key("retry-after"));
    }

    // With a reconciler that reads the ledger the transfer is found: delivered, not charged
    // again.
    let reconciled = serve(X402Layer::with_payments(
        Payments::new(HttpFacilitator::new(&facilitator_url).unwrap())
            .reconciler(facilitator.clone()),
        Arc::clone(&offer),
    ))
    .await;
    let answer = pay(&reqwest::Client::new(), &reconciled, &payload)
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    assert!(answer.headers().contains_key("payment-response"));
    assert_eq!(answer.text().await.unwrap(), "the report");
    assert_eq!(facilitator.settlement_count(), 1, "one transfer in all");
}
