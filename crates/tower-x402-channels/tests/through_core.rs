//! The `batch-settlement` scheme reaches the facilitator only through the payment core: a deposit,
//! a voucher sent to `/verify` and a refund go through the core's facilitator pool (failing over
//! from a facilitator that does not answer), and a refund whose `/settle` answer was lost is *in
//! doubt* in the core's ledger — its completed request written ahead — and reported to the
//! core's hooks (the metrics' and the log's source), like any payment.

mod support;

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use http::StatusCode;
use tower_x402::payment::{PaymentEvent, PaymentHooks};
use tower_x402::proto::{FacilitatorRequest, SettleResponse, VerifyResponse};
use tower_x402::settlement::{MemorySettlementStore, PaymentKey, PaymentState};
use tower_x402::{BoxFuture, Facilitator, FacilitatorError, HttpFacilitator};
use tower_x402_channels::{BatchSettlement, MemoryChannelStore};
use tower_x402_sandbox::Step;

use support::{AMOUNT, Buyer, DEPOSIT, ROW, Server};

/// A facilitator that never answers (nothing listens on its port), counting the calls it got.
#[derive(Clone)]
struct Silent {
    inner: HttpFacilitator,
    calls: Arc<AtomicUsize>,
}

impl Silent {
    fn new() -> Self {
        Self {
            inner: HttpFacilitator::new("http://127.0.0.1:9").unwrap(),
            calls: Arc::default(),
        }
    }
}

impl Facilitator for Silent {
    fn verify<'a>(
        &'a self,
        request: &'a FacilitatorRequest,
    ) -> BoxFuture<'a, Result<VerifyResponse, FacilitatorError>> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.inner.verify(request)
    }

    fn settle<'a>(
        &'a self,
        request: &'a FacilitatorRequest,
    ) -> BoxFuture<'a, Result<SettleResponse, FacilitatorError>> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.inner.settle(request)
    }
}

#[tokio::test]
async fn deposits_vouchers_and_refunds_fail_over_in_the_cores_facilitator_pool() {
    let silent = Silent::new();
    let server = Server::pooled(
        Arc::new(MemoryChannelStore::default()),
        Arc::new(silent.clone()),
    )
    .await;
    let buyer = Buyer::new(&server);

    // The deposit: `/verify` fails over to the sandbox, and `/settle` goes where it verified.
    let deposit = server
        .get("/rows?count=2", &buyer.deposit(&server, 0))
        .await;
    assert_eq!(deposit.status, StatusCode::OK, "{deposit:?}");
    assert_eq!(server.sandbox.settle_calls(), 1, "the deposit settled");
    let tried = silent.calls.load(Ordering::SeqCst);
    assert!(tried >= 1, "the pool's first facilitator was asked first");

    // A voucher checked locally: no facilitator at all.
    let paid = server
        .get("/rows?count=3", &buyer.voucher(&server, 2 * ROW + AMOUNT))
        .await;
    assert_eq!(paid.status, StatusCode::OK, "{paid:?}");
    assert_eq!(silent.calls.load(Ordering::SeqCst), tried);

    // A refund: verified and settled through the pool too.
    let charged = 5 * ROW;
    let refund = server
        .get(
            "/rows?count=1",
            &buyer.refund(&server, charged, Some(100_000)),
        )
        .await;
    assert_eq!(refund.status, StatusCode::OK, "{refund:?}");
    assert_eq!(
        refund.extra()["channelState"]["balance"],
        (DEPOSIT - 100_000).to_string()
    );
    let channel = server.channels.load(&buyer.id).await.unwrap().unwrap();
    assert_eq!((channel.charged, &channel.hold), (charged, &None));
}

/// Hears every payment entering doubt, as the metrics' hook does.
#[derive(Clone, Default)]
struct DoubtLog(Arc<Mutex<Vec<(PaymentKey, String)>>>);

impl PaymentHooks for DoubtLog {
    fn observe(&self, event: &PaymentEvent<'_>) {
        if let PaymentEvent::InDoubt { key, reason, .. } = *event {
            self.0
                .lock()
                .unwrap()
                .push((key.clone(), reason.to_owned()));
        }
    }
}

#[tokio::test]
async fn a_refund_whose_answer_was_lost_is_in_doubt_in_the_cores_ledger_with_its_completed_request()
{
    let ledger = MemorySettlementStore::default();
    let doubts = DoubtLog::default();
    let (kept, heard) = (ledger.clone(), doubts.clone());
    let server = Server::configured_and_extended(
        Arc::new(MemoryChannelStore::default()),
        Box::new(|scheme: BatchSettlement| scheme.hold_lease(Duration::from_millis(500))),
        move |_| Box::new(move |payments| payments.settlement_store(kept).hook(heard)),
    )
    .await;
    let buyer = Buyer::new(&server);
    let deposited = server
        .get("/rows?count=2", &buyer.deposit(&server, 0))
        .await;
    assert_eq!(deposited.status, StatusCode::OK, "{deposited:?}");
    let charged = 2 * ROW;

    server.sandbox.queue_settle(Step::AnswerLost);
    let lost = server
        .get("/rows?count=1", &buyer.refund(&server, charged, None))
        .await;
    assert_eq!(lost.status, StatusCode::SERVICE_UNAVAILABLE, "{lost:?}");

    // The core's hooks heard it enter doubt, once.
    let heard = doubts.0.lock().unwrap().clone();
    assert_eq!(heard.len(), 1, "{heard:?}");
    // The core's ledger holds it in doubt, with the completed refund written ahead: the amount
    // and the channel's refund nonce the buyer's payload did not carry.
    let unsettled = ledger.unsettled();
    let (key, state) = unsettled
        .iter()
        .find(|(key, _)| *key == heard[0].0)
        .expect("the refund is in the ledger");
    let PaymentState::InDoubt { intent, .. } = state else {
        panic!("{key}: {state:?} is not in doubt")
    };
    let sent: serde_json::Value =
        serde_json::from_str(intent.request.payment_payload().payload.get()).unwrap();
    assert_eq!(sent["type"], "refund", "{sent}");
    assert_eq!(sent["amount"], (DEPOSIT - charged).to_string(), "{sent}");
    assert_eq!(sent["refundNonce"], "0", "{sent}");
    assert_eq!(
        server.sandbox.settle_calls(),
        2,
        "the deposit and one refund"
    );
}
