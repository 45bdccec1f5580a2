//! Exactly-once settlement under faults: a fault-injecting facilitator over loopback HTTP in
//! front of the sandbox, whose ledger is the chain the reconciler looks at.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::routing::get;
use http::{Request, StatusCode};
use http_body_util::BodyExt as _;
use serde_json::{Value, json};
use tower::ServiceExt as _;
use tower_x402::payment::{PaymentEvent, PaymentHooks, Payments};
use tower_x402::settlement::{
    LedgerEntry, MemorySettlementStore, PaymentKey, PaymentState, SettlementStore, StoreError,
};
use tower_x402::{BoxFuture, HttpFacilitator, Offer, SettlementMode, VerifiedPayment, X402Layer};
use tower_x402_evm::EvmRpcReconciler;
use tower_x402_sandbox::{SandboxFacilitator, SandboxWallet, Step};
use x402_wire::{Network, PaymentPayload, ResourceInfo, SettleResponse, UsdcDeployment, header};

const URL: &str = "https://shop.example/report";
const PAY_TO: &str = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";
const MODES: [SettlementMode; 2] = [SettlementMode::Before, SettlementMode::After];

/// One shop in front of a faulty facilitator, and everything the tests count.
struct Shop {
    app: Router,
    facilitator_url: String,
    faulty: SandboxFacilitator,
    store: MemorySettlementStore,
    offer: Arc<Offer>,
    inner_calls: Arc<AtomicUsize>,
    events: Arc<Mutex<Vec<&'static str>>>,
}

/// The facilitator's clock: 0 follows the system clock.
type Clock = Arc<std::sync::atomic::AtomicU64>;

/// Who tells whether a payment in doubt settled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Chain {
    /// Nobody.
    Blind,
    /// The sandbox's own ledger.
    Sandbox,
    /// `EvmRpcReconciler` against the ledger's chain view over JSON-RPC on loopback.
    JsonRpc,
}

async fn shop(mode: SettlementMode, chain: Chain, clock: Option<Clock>) -> Shop {
    let mut sandbox = SandboxFacilitator::new();
    if let Some(clock) = clock {
        sandbox = sandbox.with_clock(move || match clock.load(Ordering::SeqCst) {
            0 => std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs(),
            fixed => fixed,
        });
    }
    let faulty = sandbox.clone();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(faulty.clone().serve(listener));
    let client = HttpFacilitator::builder(url.clone())
        .settle_timeout(Duration::from_millis(800))
        .build()
        .unwrap();
    let offer = Arc::new(
        Offer::builder(ResourceInfo::new(URL))
            .usdc(
                &UsdcDeployment::BASE_SEPOLIA,
                "0.25".parse().unwrap(),
                PAY_TO,
            )
            .settlement(mode)
            .build()
            .unwrap(),
    );
    let store = MemorySettlementStore::default();
    let events = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&events);
    let mut payments = Payments::new(client)
        .settlement_store(store.clone())
        .pending_settlement_pause(Duration::from_millis(50))
        .hook(DoubtLog(log));
    match chain {
        Chain::Blind => {}
        Chain::Sandbox => payments = payments.reconciler(sandbox),
        Chain::JsonRpc => {
            let url = serve_chain(&sandbox).await;
            payments = payments.reconciler(EvmRpcReconciler::new(&url).unwrap().chunk_blocks(2));
        }
    }
    let layer = X402Layer::with_payments(payments, Arc::clone(&offer));
    let inner_calls = Arc::new(AtomicUsize::new(0));
    let calls = Arc::clone(&inner_calls);
    let handler = move |request: Request<Body>| {
        let calls = Arc::clone(&calls);
        async move {
            calls.fetch_add(1, Ordering::SeqCst);
            let payment = request.extensions().get::<VerifiedPayment>().cloned();
            axum::Json(json!({ "delivered": true, "replayed": payment.map(|p| p.replayed) }))
        }
    };
    let app = Router::new().route("/report", get(handler).layer(layer));
    Shop {
        app,
        facilitator_url: url,
        faulty,
        store,
        offer,
        inner_calls,
        events,
    }
}

/// The sandbox ledger's chain view on a loopback port.
async fn serve_chain(sandbox: &SandboxFacilitator) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let router = sandbox.rpc_router(Network::BASE_SEPOLIA);
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    url
}

impl Shop {
    fn pay(&self) -> PaymentPayload {
        SandboxWallet::random()
            .pay(self.offer.payment_required())
            .unwrap()
    }

    async fn buy(&self, payment: &PaymentPayload) -> (StatusCode, http::HeaderMap, Value) {
        let request = Request::get("/report")
            .header("payment-signature", header::encode(payment).unwrap())
            .body(Body::empty())
            .unwrap();
        let response = self.app.clone().oneshot(request).await.unwrap();
        let (parts, body) = response.into_parts();
        let bytes = body.collect().await.unwrap().to_bytes();
        let json = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        (parts.status, parts.headers, json)
    }

    fn transfers(&self) -> usize {
        self.faulty.settlement_count()
    }

    fn events(&self) -> Vec<&'static str> {
        self.events.lock().unwrap().clone()
    }
}

fn settlement_of(headers: &http::HeaderMap) -> SettleResponse {
    header::decode(headers["payment-response"].as_bytes()).unwrap()
}

/// A 503 that asks for the same payment again and promises no second charge.
fn assert_in_doubt(status: StatusCode, headers: &http::HeaderMap, body: &Value, case: &str) {
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{case}: {body}");
    assert!(headers.contains_key("retry-after"), "{case}");
    assert!(
        !headers.contains_key("payment-response"),
        "{case}: nothing delivered"
    );
    let error = body["error"].as_str().unwrap_or_default();
    assert!(error.contains("same PAYMENT-SIGNATURE"), "{case}: {error}");
    assert!(error.contains("not be charged twice"), "{case}: {error}");
}

#[tokio::test]
async fn lost_answer_after_the_money_moved_is_delivered_on_retry_with_one_transfer() {
    let faults = [
        ("504 from a proxy", Step::AnswerLost),
        (
            "connection reset after the request was read",
            Step::ConnectionReset,
        ),
        ("no answer within the settle timeout", Step::NoAnswer),
    ];
    for (name, fault) in faults {
        for (mode, chain) in MODES.into_iter().zip([Chain::Sandbox, Chain::JsonRpc]) {
            let case = format!("{name}, {mode:?}, {chain:?}");
            let shop = shop(mode, chain, None).await;
            let payment = shop.pay();
            shop.faulty.queue_settle(fault.clone());
            let (status, headers, body) = shop.buy(&payment).await;
            assert_in_doubt(status, &headers, &body, &case);
            assert_eq!(shop.transfers(), 1, "{case}: the money moved");
            let ran_first = shop.inner_calls.load(Ordering::SeqCst);
            assert_eq!(
                ran_first,
                usize::from(mode == SettlementMode::After),
                "{case}"
            );

            let (status, headers, body) = shop.buy(&payment).await;
            assert_eq!(status, StatusCode::OK, "{case}: {body}");
            assert_eq!(body["delivered"], true, "{case}");
            let settlement = settlement_of(&headers);
            assert!(settlement.success, "{case}");
            assert_eq!(
                settlement.transaction,
                shop.faulty.settlements()[0].transaction,
                "{case}: the real transaction"
            );
            assert_eq!(shop.transfers(), 1, "{case}: one transfer");
            assert_eq!(shop.faulty.settle_calls(), 2, "{case}: one re-send");
            assert_eq!(shop.events(), ["in doubt", "resolved: settled"], "{case}");

            // A third request is answered from the record.
            let (status, _, body) = shop.buy(&payment).await;
            assert_eq!(
                (status, &body["replayed"]),
                (StatusCode::OK, &json!(true)),
                "{case}"
            );
            assert_eq!(
                (shop.transfers(), shop.faulty.settle_calls()),
                (1, 2),
                "{case}"
            );
        }
    }
}

#[tokio::test]
async fn lost_answer_without_a_reconciler_stays_in_doubt_never_402() {
    for mode in MODES {
        let shop = shop(mode, Chain::Blind, None).await;
        let payment = shop.pay();
        shop.faulty.queue_settle(Step::AnswerLost);
        for attempt in 0..3 {
            let (status, headers, body) = shop.buy(&payment).await;
            assert_in_doubt(
                status,
                &headers,
                &body,
                &format!("{mode:?}, attempt {attempt}"),
            );
        }
        assert_eq!(shop.transfers(), 1, "{mode:?}");
        let key = PaymentKey::of(&payment);
        assert_eq!(shop.store.entry(&key).unwrap().state.phase(), "in_doubt");
        assert_eq!(shop.events(), ["in doubt"; 3], "{mode:?}");
    }
}

#[tokio::test]
async fn settlement_pending_then_success_on_the_resent_payload_delivers_in_one_request() {
    for mode in MODES {
        let shop = shop(mode, Chain::Blind, None).await;
        let payment = shop.pay();
        shop.faulty.queue_settle(Step::PendingThenSettled);
        let (status, headers, body) = shop.buy(&payment).await;
        assert_eq!(status, StatusCode::OK, "{mode:?}: {body}");
        assert_eq!(
            settlement_of(&headers).transaction,
            shop.faulty.settlements()[0].transaction
        );
        assert_eq!(
            (shop.transfers(), shop.faulty.settle_calls()),
            (1, 2),
            "{mode:?}"
        );
        assert_eq!(shop.inner_calls.load(Ordering::SeqCst), 1, "{mode:?}");
        assert!(shop.events().is_empty(), "{mode:?}: never in doubt");
    }
}

#[tokio::test]
async fn settlement_pending_that_stays_pending_without_a_reconciler_is_503_every_time() {
    for mode in MODES {
        let shop = shop(mode, Chain::Blind, None).await;
        let payment = shop.pay();
        for _ in 0..6 {
            shop.faulty.queue_settle(Step::Pending);
        }
        for attempt in 0..3 {
            let (status, headers, body) = shop.buy(&payment).await;
            assert_in_doubt(
                status,
                &headers,
                &body,
                &format!("{mode:?}, attempt {attempt}"),
            );
        }
        assert_eq!(shop.transfers(), 0, "{mode:?}");
        assert_eq!(
            shop.faulty.settle_calls(),
            6,
            "{mode:?}: each request sends and re-sends once"
        );
        let delivered_before = if mode == SettlementMode::Before { 0 } else { 1 };
        assert_eq!(
            shop.inner_calls.load(Ordering::SeqCst),
            delivered_before,
            "{mode:?}: the handler's answer is never sent"
        );
    }
}

#[tokio::test]
async fn not_settled_and_authorization_expired_is_released_with_402() {
    for (mode, chain) in MODES.into_iter().zip([Chain::JsonRpc, Chain::Sandbox]) {
        let clock: Clock = Arc::default();
        let shop = shop(mode, chain, Some(Arc::clone(&clock))).await;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        // Signed long ago: valid then, expired now.
        let signed_at = now - 3600;
        clock.store(signed_at + 1, Ordering::SeqCst);
        let payment = SandboxWallet::random()
            .pay_at(shop.offer.payment_required(), signed_at)
            .unwrap();
        shop.faulty.queue_settle(Step::Status(504));
        let (status, headers, body) = shop.buy(&payment).await;
        assert_in_doubt(status, &headers, &body, &format!("{mode:?}"));

        clock.store(0, Ordering::SeqCst);
        let (status, headers, body) = shop.buy(&payment).await;
        assert_eq!(status, StatusCode::PAYMENT_REQUIRED, "{mode:?}: {body}");
        assert!(headers.contains_key("payment-required"));
        assert!(
            body["error"]
                .as_str()
                .unwrap()
                .contains("nothing was charged"),
            "{body}"
        );
        assert_eq!(shop.transfers(), 0);
        assert_eq!(
            shop.store.entry(&PaymentKey::of(&payment)),
            None,
            "{mode:?}: the key is released"
        );
        assert_eq!(shop.events(), ["in doubt", "resolved: released"]);
    }
}

#[tokio::test]
async fn fifty_concurrent_duplicates_in_doubt_settle_once() {
    for mode in MODES {
        let shop = Arc::new(shop(mode, Chain::Sandbox, None).await);
        let payment = shop.pay();
        shop.faulty.queue_settle(Step::AnswerLost);
        let (status, _, _) = shop.buy(&payment).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);

        let tasks: Vec<_> = (0..50)
            .map(|_| {
                let (shop, payment) = (Arc::clone(&shop), payment.clone());
                tokio::spawn(async move { shop.buy(&payment).await })
            })
            .collect();
        let mut transactions = Vec::new();
        for task in tasks {
            let (status, headers, _) = task.await.unwrap();
            assert_eq!(status, StatusCode::OK, "{mode:?}");
            transactions.push(settlement_of(&headers).transaction);
        }
        transactions.dedup();
        assert_eq!(
            transactions.len(),
            1,
            "{mode:?}: every answer names one transaction"
        );
        assert_eq!(shop.transfers(), 1, "{mode:?}");
        assert_eq!(shop.faulty.settle_calls(), 2, "{mode:?}: one re-settle");
        assert_eq!(shop.events(), ["in doubt", "resolved: settled"]);
    }
}

#[path = "reliability/mod.rs"]
mod reliability;

/// Every fault and bad input tried against the layer, as RELIABILITY.md tabulates it.
#[derive(Clone, Copy, Debug)]
enum Case {
    NoPayment,
    NotBase64,
    TooLarge,
    OtherResource,
    WrongAmount,
    InvalidPayment,
    FacilitatorDown,
    Verify500,
    VerifyGarbage,
    SettleRefused,
    AnswerLost,
    ConnectionReset,
    NoAnswer,
    AnswerLostNoReconciler,
    ExpiredNeverSettled,
    PendingThenSettled,
    StaysPending,
    Replay,
    ConcurrentDuplicates,
    ConcurrentDuplicatesInDoubt,
    StoreUnavailable,
    HandlerFails,
    PathVariants,
}

impl Case {
    const ALL: [Case; 23] = [
        Case::NoPayment,
        Case::NotBase64,
        Case::TooLarge,
        Case::OtherResource,
        Case::WrongAmount,
        Case::InvalidPayment,
        Case::FacilitatorDown,
        Case::Verify500,
        Case::VerifyGarbage,
        Case::SettleRefused,
        Case::AnswerLost,
        Case::ConnectionReset,
        Case::NoAnswer,
        Case::AnswerLostNoReconciler,
        Case::ExpiredNeverSettled,
        Case::PendingThenSettled,
        Case::StaysPending,
        Case::Replay,
        Case::ConcurrentDuplicates,
        Case::ConcurrentDuplicatesInDoubt,
        Case::StoreUnavailable,
        Case::HandlerFails,
        Case::PathVariants,
    ];

    fn describe(self) -> &'static str {
        match self {
            Case::NoPayment => "no `PAYMENT-SIGNATURE`",
            Case::NotBase64 => "`PAYMENT-SIGNATURE` not base64",
            Case::TooLarge => "`PAYMENT-SIGNATURE` larger than 16 KiB",
            Case::OtherResource => "payment signed for another resource",
            Case::WrongAmount => "payment for a lower amount",
            Case::InvalidPayment => "facilitator `isValid: false` (payer cannot cover it)",
            Case::FacilitatorDown => "facilitator down (connection refused)",
            Case::Verify500 => "facilitator `/verify` answers 500 (every attempt)",
            Case::VerifyGarbage => "facilitator `/verify` answers garbage",
            Case::SettleRefused => "facilitator `/settle` answers `success: false`",
            Case::AnswerLost => "money moved, `/settle` answer lost: 504 from a proxy; retried",
            Case::ConnectionReset => {
                "money moved, connection reset after `/settle` was read; retried"
            }
            Case::NoAnswer => "money moved, no `/settle` answer within the timeout; retried",
            Case::AnswerLostNoReconciler => "money moved, answer lost, no reconciler; retried",
            Case::ExpiredNeverSettled => {
                "`/settle` lost before settling, authorization expired; retried"
            }
            Case::PendingThenSettled => "`settlement_pending`, then settled on the re-send",
            Case::StaysPending => "`settlement_pending` for good, no reconciler; retried",
            Case::Replay => "the same payment again after it settled",
            Case::ConcurrentDuplicates => "50 concurrent requests with one payment",
            Case::ConcurrentDuplicatesInDoubt => {
                "answer lost, then 50 concurrent retries of the payment in doubt"
            }
            Case::StoreUnavailable => "settlement store unreadable",
            Case::HandlerFails => "the inner service answers 500",
            Case::PathVariants => {
                "unpaid path variants (`/report/`, `//report`, `/%72eport`, `/REPORT`, `/report?x`)"
            }
        }
    }
}

/// Statuses in order, runs of one status written `200 ×50`.
fn sequence(statuses: &[StatusCode]) -> String {
    let mut parts: Vec<(u16, usize)> = Vec::new();
    for status in statuses {
        match parts.last_mut() {
            Some((last, count)) if *last == status.as_u16() => *count += 1,
            _ => parts.push((status.as_u16(), 1)),
        }
    }
    parts
        .iter()
        .map(|(status, count)| match count {
            1 => status.to_string(),
            n => format!("{status} ×{n}"),
        })
        .collect::<Vec<_>>()
        .join(" → ")
}

/// An application store that cannot be read.
#[derive(Debug)]
struct Unreadable;

/// What every operation of [`Unreadable`] answers.
fn connection_refused<'a, T: 'a>() -> BoxFuture<'a, Result<T, StoreError>> {
    Box::pin(async { Err(StoreError("connection refused".into())) })
}

impl SettlementStore for Unreadable {
    fn load<'a>(
        &'a self,
        _: &'a PaymentKey,
    ) -> BoxFuture<'a, Result<Option<LedgerEntry>, StoreError>> {
        connection_refused()
    }

    fn insert<'a>(
        &'a self,
        _: &'a PaymentKey,
        _: &'a PaymentState,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        connection_refused()
    }

    fn replace<'a>(
        &'a self,
        _: &'a PaymentKey,
        _: u64,
        _: &'a PaymentState,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        connection_refused()
    }

    fn remove<'a>(&'a self, _: &'a PaymentKey, _: u64) -> BoxFuture<'a, Result<bool, StoreError>> {
        connection_refused()
    }
}

async fn raw_get(app: &Router, path: &str, signature: Option<&str>) -> StatusCode {
    let mut request = Request::get(path);
    if let Some(signature) = signature {
        request = request.header("payment-signature", signature);
    }
    app.clone()
        .oneshot(request.body(Body::empty()).unwrap())
        .await
        .unwrap()
        .status()
}

async fn observe(case: Case, mode: SettlementMode) -> reliability::Row {
    let chain = match case {
        Case::AnswerLostNoReconciler | Case::StaysPending => Chain::Blind,
        _ => Chain::JsonRpc,
    };
    let clock: Clock = Arc::default();
    let mut shop = shop(mode, chain, Some(Arc::clone(&clock))).await;
    let payment = shop.pay();
    let mut statuses = Vec::new();
    let buy = |shop: &Shop, payment: &PaymentPayload| {
        let (shop_app, payment) = (shop.app.clone(), payment.clone());
        async move {
            let request = Request::get("/report")
                .header("payment-signature", header::encode(&payment).unwrap())
                .body(Body::empty())
                .unwrap();
            shop_app.oneshot(request).await.unwrap().status()
        }
    };
    match case {
        Case::NoPayment => statuses.push(raw_get(&shop.app, "/report", None).await),
        Case::NotBase64 => statuses.push(raw_get(&shop.app, "/report", Some("%%%")).await),
        Case::TooLarge => {
            let huge = "A".repeat(17 * 1024);
            statuses.push(raw_get(&shop.app, "/report", Some(&huge)).await);
        }
        Case::OtherResource => {
            let mut other = payment.clone();
            other.resource = Some(ResourceInfo::new("https://shop.example/other"));
            statuses.push(buy(&shop, &other).await);
        }
        Case::WrongAmount => {
            let mut cheap = payment.clone();
            cheap.accepted.amount = 1u128.into();
            statuses.push(buy(&shop, &cheap).await);
        }
        Case::InvalidPayment => {
            let wallet = SandboxWallet::random();
            shop.faulty
                .set_balance(&wallet.address(), 0u128.into())
                .unwrap();
            let broke = wallet.pay(shop.offer.payment_required()).unwrap();
            statuses.push(buy(&shop, &broke).await);
        }
        Case::FacilitatorDown => {
            let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let url = format!("http://{}", closed.local_addr().unwrap());
            drop(closed);
            let layer = X402Layer::new(HttpFacilitator::new(url).unwrap(), Arc::clone(&shop.offer));
            shop.app = counted_app(layer, &shop.inner_calls);
            statuses.push(buy(&shop, &payment).await);
        }
        Case::Verify500 | Case::VerifyGarbage => {
            // Every attempt: the client retries `/verify` a bounded number of times.
            for _ in 0..5 {
                shop.faulty.queue_verify(match case {
                    Case::Verify500 => Step::Status(500),
                    _ => Step::Garbage,
                });
            }
            statuses.push(buy(&shop, &payment).await);
        }
        Case::SettleRefused => {
            shop.faulty
                .queue_settle(Step::Refuse("insufficient_funds".into()));
            statuses.push(buy(&shop, &payment).await);
        }
        Case::AnswerLost
        | Case::ConnectionReset
        | Case::NoAnswer
        | Case::AnswerLostNoReconciler => {
            shop.faulty.queue_settle(match case {
                Case::ConnectionReset => Step::ConnectionReset,
                Case::NoAnswer => Step::NoAnswer,
                _ => Step::AnswerLost,
            });
            statuses.push(buy(&shop, &payment).await);
            statuses.push(buy(&shop, &payment).await);
        }
        Case::ExpiredNeverSettled => {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs();
            clock.store(now - 3599, Ordering::SeqCst);
            let old = SandboxWallet::random()
                .pay_at(shop.offer.payment_required(), now - 3600)
                .unwrap();
            shop.faulty.queue_settle(Step::Status(504));
            statuses.push(buy(&shop, &old).await);
            clock.store(0, Ordering::SeqCst);
            statuses.push(buy(&shop, &old).await);
        }
        Case::PendingThenSettled => {
            shop.faulty.queue_settle(Step::PendingThenSettled);
            statuses.push(buy(&shop, &payment).await);
        }
        Case::StaysPending => {
            for _ in 0..4 {
                shop.faulty.queue_settle(Step::Pending);
            }
            statuses.push(buy(&shop, &payment).await);
            statuses.push(buy(&shop, &payment).await);
        }
        Case::Replay => {
            statuses.push(buy(&shop, &payment).await);
            statuses.push(buy(&shop, &payment).await);
        }
        Case::ConcurrentDuplicates | Case::ConcurrentDuplicatesInDoubt => {
            if let Case::ConcurrentDuplicatesInDoubt = case {
                shop.faulty.queue_settle(Step::AnswerLost);
                statuses.push(buy(&shop, &payment).await);
            }
            let tasks: Vec<_> = (0..50)
                .map(|_| tokio::spawn(buy(&shop, &payment)))
                .collect();
            for task in tasks {
                statuses.push(task.await.unwrap());
            }
        }
        Case::StoreUnavailable => {
            let layer = X402Layer::with_payments(
                Payments::new(shop.faulty.clone()).settlement_store(Unreadable),
                Arc::clone(&shop.offer),
            );
            shop.app = counted_app(layer, &shop.inner_calls);
            statuses.push(buy(&shop, &payment).await);
        }
        Case::HandlerFails => {
            let layer = X402Layer::new(shop.faulty.clone(), Arc::clone(&shop.offer));
            let calls = Arc::clone(&shop.inner_calls);
            let failing = move || {
                let calls = Arc::clone(&calls);
                async move {
                    calls.fetch_add(1, Ordering::SeqCst);
                    StatusCode::INTERNAL_SERVER_ERROR
                }
            };
            shop.app = Router::new().route("/report", get(failing).layer(layer));
            statuses.push(buy(&shop, &payment).await);
        }
        Case::PathVariants => {
            for path in [
                "/report/",
                "//report",
                "/%72eport",
                "/REPORT",
                "/report?x=1",
            ] {
                statuses.push(raw_get(&shop.app, path, None).await);
            }
        }
    }
    let transfers = shop.transfers();
    let inner_ran = shop.inner_calls.load(Ordering::SeqCst);
    let delivered_unpaid = transfers == 0 && statuses.iter().any(StatusCode::is_success);
    reliability::Row {
        fault: case.describe().to_owned(),
        mode: match mode {
            SettlementMode::Before => "before",
            _ => "after",
        },
        client_sees: sequence(&statuses),
        inner_ran,
        transfers,
        delivered_unpaid,
    }
}

/// `layer` in front of a handler that counts its calls.
fn counted_app(layer: X402Layer, calls: &Arc<AtomicUsize>) -> Router {
    let calls = Arc::clone(calls);
    let handler = move || {
        let calls = Arc::clone(&calls);
        async move {
            calls.fetch_add(1, Ordering::SeqCst);
            "delivered"
        }
    };
    Router::new().route("/report", get(handler).layer(layer))
}

#[tokio::test]
async fn reliability_table_matches_the_faults_tried() {
    let mut rows = Vec::new();
    for case in Case::ALL {
        for mode in MODES {
            rows.push(observe(case, mode).await);
        }
    }
    reliability::check_section(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")),
        "layer",
        &rows,
    );
}

/// Two layers (two processes, as far as the ledger knows) sharing one store: of concurrent
/// requests with one payment, exactly one settles; the others wait (503, retry the same payment)
/// or are answered from the record. Never 402, never a second `/settle`.
#[tokio::test]
async fn two_layers_sharing_one_store_never_both_settle() {
    for mode in MODES {
        let first = shop(mode, Chain::Sandbox, None).await;
        let facilitator = HttpFacilitator::new(first.facilitator_url.clone()).unwrap();
        let second_layer = X402Layer::with_payments(
            Payments::new(facilitator).settlement_store(first.store.clone()),
            Arc::clone(&first.offer),
        );
        let second = counted_app(second_layer, &first.inner_calls);
        let payment = first.pay();
        let signature = header::encode(&payment).unwrap();
        let tasks: Vec<_> = (0..40)
            .map(|i| {
                let app = if i % 2 == 0 {
                    first.app.clone()
                } else {
                    second.clone()
                };
                let signature = signature.clone();
                tokio::spawn(async move {
                    let request = Request::get("/report")
                        .header("payment-signature", signature)
                        .body(Body::empty())
                        .unwrap();
                    app.oneshot(request).await.unwrap().status()
                })
            })
            .collect();
        let mut statuses = Vec::new();
        for task in tasks {
            statuses.push(task.await.unwrap());
        }
        // The layer that does not hold the payment waits for the other's outcome and answers
        // from it (`held_payment_wait`), so no copy is turned away.
        assert!(
            statuses.iter().all(|status| *status == StatusCode::OK),
            "{mode:?}: {statuses:?}"
        );
        assert_eq!(first.transfers(), 1, "{mode:?}");
        assert_eq!(first.faulty.settle_calls(), 1, "{mode:?}: one /settle");
    }
}

/// Logs each payment entering and leaving doubt.
struct DoubtLog(Arc<Mutex<Vec<&'static str>>>);

impl PaymentHooks for DoubtLog {
    fn observe(&self, event: &PaymentEvent<'_>) {
        let name = match event {
            PaymentEvent::InDoubt { .. } => "in doubt",
            PaymentEvent::DoubtResolved {
                settlement: Some(_),
                ..
            } => "resolved: settled",
            PaymentEvent::DoubtResolved {
                settlement: None, ..
            } => "resolved: released",
            _ => return,
        };
        self.0.lock().unwrap().push(name);
    }
}
