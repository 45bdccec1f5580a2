//! The paid path taken apart: which of its parts the app of `x402-load app --part` replaces,
//! one at a time, so that `run.sh --parts` can measure what each costs on the clock against the
//! full path and the peers. Only parts an application can choose through tower-x402's public
//! API are here.

use std::sync::atomic::{AtomicU64, Ordering};

use tower_x402::BoxFuture;
use tower_x402::payment::{PaymentContext, PaymentHooks, Payments};
use tower_x402::pricing::Offer;
use tower_x402::settlement::{
    LedgerEntry, MemorySettlementStore, PaymentKey, PaymentState, SettlementStore, StoreError,
};
use x402_wire::{PaymentPayload, SettleResponse};

/// One variant of the paid path.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Part {
    /// The path as an application gets it: the memory ledger (10,000 settled payments kept),
    /// no event observer, HTTP/1.1 to the facilitator.
    Full,
    /// A ledger that keeps nothing: every read finds nothing, every write succeeds. What the
    /// ledger's three writes per payment cost (never for production: it forgets every payment).
    LedgerNoop,
    /// The memory ledger keeping one settled payment instead of 10,000: its map stays a few
    /// entries, which fit in cache.
    LedgerSmall,
    /// A hook observing every payment received and settled, as metrics do (the path with a
    /// hook registered).
    Events,
    /// HTTP/2 (prior knowledge) to the facilitator: one multiplexed connection.
    Http2,
    /// No facilitator client: the stub's facilitator (the sandbox, trusting the signatures) in
    /// the app's own process, so neither HTTP call nor its deadline timer is on the path (what
    /// the client and the two round trips cost). The facilitator's work moves from the stub's
    /// CPU into the app's; the app serves the stub's `/stats` itself.
    FacilitatorInProcess,
}

impl Part {
    /// Whether the facilitator client speaks HTTP/2.
    pub(crate) fn http2(self) -> bool {
        self == Part::Http2
    }

    /// Whether the facilitator is in process rather than reached over HTTP.
    pub(crate) fn facilitator_in_process(self) -> bool {
        self == Part::FacilitatorInProcess
    }

    /// `payments` with this variant's ledger and observers.
    pub(crate) fn apply(self, payments: Payments) -> Payments {
        match self {
            Part::Full | Part::Http2 | Part::FacilitatorInProcess => payments,
            Part::LedgerNoop => payments.settlement_store(NoLedger),
            Part::LedgerSmall => payments.settlement_store(MemorySettlementStore::new(1)),
            Part::Events => payments.hook(EventCounter::default()),
        }
    }
}

/// A settlement store that keeps nothing.
struct NoLedger;

impl SettlementStore for NoLedger {
    fn load<'a>(
        &'a self,
        _key: &'a PaymentKey,
    ) -> BoxFuture<'a, Result<Option<LedgerEntry>, StoreError>> {
        Box::pin(std::future::ready(Ok(None)))
    }

    fn insert<'a>(
        &'a self,
        _key: &'a PaymentKey,
        _state: &'a PaymentState,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(std::future::ready(Ok(true)))
    }

    fn replace<'a>(
        &'a self,
        _key: &'a PaymentKey,
        _version: u64,
        _state: &'a PaymentState,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(std::future::ready(Ok(true)))
    }

    fn remove<'a>(
        &'a self,
        _key: &'a PaymentKey,
        _version: u64,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(std::future::ready(Ok(true)))
    }
}

/// Counts payments received and settled, as a metrics hook touches a counter for each.
#[derive(Default)]
struct EventCounter(AtomicU64);

impl PaymentHooks for EventCounter {
    fn on_payment_received(&self, _offer: &Offer, _payload: &PaymentPayload) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }

    fn after_settle<'a>(
        &'a self,
        _payment: &'a PaymentContext<'a>,
        _settlement: &'a SettleResponse,
    ) -> BoxFuture<'a, ()> {
        self.0.fetch_add(1, Ordering::Relaxed);
        Box::pin(std::future::ready(()))
    }
}
