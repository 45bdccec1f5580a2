//! [`Payments`], the payment core's configuration: its facilitators, its ledger, its hooks and
//! the rules' settings, and the builder methods that set them.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::events::{PaymentEvent, PaymentEvents};
use super::hooks::{Hooks, PaymentHooks};
#[cfg(feature = "metrics")]
use super::instruments;
use super::refusal::Refusal;
use super::refusals::RefusedPayments;
use super::single_flight::Inflight;
use crate::facilitator::{DEFAULT_LABEL, Facilitator, Facilitators};
use crate::pricing::Offer;
#[cfg(doc)]
use crate::pricing::SettlementMode;
use crate::settlement::{MemorySettlementStore, Reconciler, SettlementStore};

/// How many settlements the core remembers in memory beside a custom
/// [`SettlementStore`](Payments::settlement_store).
const RECENT_SETTLEMENTS: usize = 4096;

/// How long a process holds a payment before another may take it over (default).
const DEFAULT_LEASE: Duration = Duration::from_secs(120);

/// How long a payment the facilitator found invalid is refused from memory (default).
const DEFAULT_REFUSAL_MEMORY: Duration = Duration::from_secs(10);

/// The payment core: a facilitator, a ledger and the rules that make each payment settle once.
/// See the [module docs](crate::payment).
///
/// [`X402Layer`](crate::X402Layer) builds one from its own settings; build one yourself to
/// drive payments without HTTP.
#[derive(Clone)]
#[must_use]
pub struct Payments {
    pub(crate) facilitators: Facilitators,
    pub(crate) store: Arc<dyn SettlementStore>,
    /// Recent settlements kept in memory beside an application's own store, so a payment that
    /// settled is still recognised when that store fails to save or to answer.
    pub(crate) recent_settlements: Option<MemorySettlementStore>,
    pub(crate) events: Option<Arc<dyn PaymentEvents>>,
    /// The lifecycle hooks, asked in order.
    pub(crate) hooks: Hooks,
    pub(crate) inflight: Arc<Inflight>,
    /// Who this core is in the ledger's leases.
    pub(crate) owner: Arc<str>,
    /// How long a hold on a payment lasts before another process may take it over.
    pub(crate) lease: Duration,
    /// Asked about payments in doubt that re-sending `/settle` did not settle.
    pub(crate) reconciler: Option<Arc<dyn Reconciler>>,
    /// The pause before re-sending a `/settle` that answered `settlement_pending`.
    pub(crate) pending_pause: Duration,
    /// How long a request waits for the outcome of a payment another process holds.
    pub(crate) held_wait: Duration,
    /// Payments the facilitator recently found invalid.
    pub(crate) refused: Arc<RefusedPayments>,
}

impl Payments {
    /// A core that has `facilitator` verify and settle, with settlement records in a
    /// [`MemorySettlementStore`], no reconciler and no event hook.
    pub fn new(facilitator: impl Facilitator) -> Self {
        Self::with_facilitators(Facilitators::new(DEFAULT_LABEL, Arc::new(facilitator)))
    }

    /// A core like [`new`](Self::new) that verifies at the first healthy facilitator of
    /// `facilitators` and settles each payment at the one its intent names.
    pub fn with_facilitators(facilitators: Facilitators) -> Self {
        Self {
            facilitators: facilitators.map(metered_facilitator),
            store: metered_store(Arc::new(MemorySettlementStore::default())),
            recent_settlements: None,
            events: None,
            hooks: Hooks::default(),
            inflight: Arc::default(),
            owner: new_owner_id(),
            lease: DEFAULT_LEASE,
            reconciler: None,
            pending_pause: Duration::from_secs(1),
            held_wait: Duration::from_secs(5),
            refused: Arc::new(RefusedPayments::new(DEFAULT_REFUSAL_MEMORY)),
        }
    }

    /// Keeps settlement records in `store` (e.g. the application's database) instead of memory.
    ///
    /// The core also remembers the last 4096 settlements in memory and checks them first, so
    /// that a settled payment is recognised even if `store` failed to save it or cannot be read
    /// for a moment: the buyer's retry is answered, never charged again.
    pub fn settlement_store(mut self, store: impl SettlementStore) -> Self {
        self.set_settlement_store(Arc::new(store));
        self
    }

    pub(crate) fn set_settlement_store(&mut self, store: Arc<dyn SettlementStore>) {
        self.store = metered_store(store);
        self.recent_settlements = Some(MemorySettlementStore::new(RECENT_SETTLEMENTS));
    }

    /// Asks `reconciler` about payments in doubt that re-sending the identical `/settle` did not
    /// settle: delivered when it finds the transfer, released (402) when it proves nothing moved
    /// and the authorization expired, kept in doubt (503) otherwise. Without one, in-doubt
    /// payments stay in doubt until the facilitator settles them on a retry.
    pub fn reconciler(mut self, reconciler: impl Reconciler) -> Self {
        self.set_reconciler(Arc::new(reconciler));
        self
    }

    pub(crate) fn set_reconciler(&mut self, reconciler: Arc<dyn Reconciler>) {
        #[cfg(feature = "metrics")]
        let reconciler = instruments::reconciler(reconciler);
        self.reconciler = Some(reconciler);
    }

    /// How long this core holds a payment it is verifying or settling before another process
    /// sharing the store may take it over (default 120 s). Choose it longer than the
    /// facilitator's settle timeout plus the work's run time in [`SettlementMode::After`];
    /// after a crash, the payment is recovered by the first retry once the lease has run out.
    pub fn settlement_lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// The pause before re-sending a `/settle` that answered `settlement_pending` (default 1 s).
    pub fn pending_settlement_pause(mut self, pause: Duration) -> Self {
        self.pending_pause = pause;
        self
    }

    /// How long a payment that another process sharing the store is verifying or settling waits
    /// for that outcome, re-reading the store, before it is refused with
    /// [`Refusal::PaymentInProgress`] (default 5 s; zero answers at once).
    pub fn held_payment_wait(mut self, wait: Duration) -> Self {
        self.held_wait = wait;
        self
    }

    /// How long a payment the facilitator found invalid (`isValid: false`) is refused from
    /// memory, with the facilitator's reason, instead of being sent to `/verify` again
    /// (default 10 s; zero turns the memory off). Only the exact payment refused is answered
    /// from it — a payment with another signature is verified — and at most 4096 are kept.
    pub fn refusal_memory(mut self, lifetime: Duration) -> Self {
        self.refused = Arc::new(RefusedPayments::new(lifetime));
        self
    }

    /// Adds `hook` to the [lifecycle hooks](PaymentHooks), after those added before.
    pub fn hook(mut self, hook: impl PaymentHooks) -> Self {
        self.hooks.push(Arc::new(hook));
        self
    }

    /// Resolves once no payment is being verified, settled or served by this core — including
    /// settlements that go on after their client hung up, and metered bodies still streaming.
    /// For a graceful shutdown: stop taking requests, let the open ones finish, then wait for
    /// this before the process exits, so that no delivered work is left unsettled.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// # struct Never;
    /// # impl tower_x402::facilitator::Facilitator for Never {
    /// #     fn verify<'a>(&'a self, _: &'a tower_x402::proto::FacilitatorRequest)
    /// #         -> tower_x402::BoxFuture<'a, Result<tower_x402::proto::VerifyResponse, tower_x402::FacilitatorError>> { unreachable!() }
    /// #     fn settle<'a>(&'a self, _: &'a tower_x402::proto::FacilitatorRequest)
    /// #         -> tower_x402::BoxFuture<'a, Result<tower_x402::proto::SettleResponse, tower_x402::FacilitatorError>> { unreachable!() }
    /// # }
    /// let payments = tower_x402::payment::Payments::new(Never);
    /// // Nothing in progress: resolves at once.
    /// payments.until_idle().await;
    /// # }
    /// ```
    pub async fn until_idle(&self) {
        self.inflight.until_idle().await;
    }

    /// Reports every [`PaymentEvent`] to `events`.
    pub fn events(mut self, events: impl PaymentEvents) -> Self {
        self.events = Some(Arc::new(events));
        self
    }

    /// Reports an event to the hook, building it only when there is one (or, with the feature
    /// `metrics`, always, for the metrics).
    #[inline]
    pub(crate) fn emit<'a>(&self, event: impl FnOnce() -> PaymentEvent<'a>) {
        #[cfg(feature = "metrics")]
        {
            let event = event();
            instruments::record(&event);
            if let Some(events) = &self.events {
                events.on_event(&event);
            }
        }
        #[cfg(not(feature = "metrics"))]
        if let Some(events) = &self.events {
            events.on_event(&event());
        }
    }

    /// Reports `refusal` to the hook ([`PaymentEvent::ChallengeServed`] for a missing payment,
    /// [`PaymentEvent::Failed`] for the rest). Every refusal an adapter answers passes here.
    pub fn report_refusal(&self, offer: &Offer, refusal: &Refusal) {
        match refusal {
            Refusal::PaymentMissing => self.emit(|| PaymentEvent::ChallengeServed { offer }),
            _ => self.emit(|| PaymentEvent::Failed { offer, refusal }),
        }
    }
}

impl fmt::Debug for Payments {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Payments")
            .field("events", &self.events.is_some())
            .field("hooks", &self.hooks.len())
            .field("owner", &self.owner)
            .field("lease", &self.lease)
            .field("held_wait", &self.held_wait)
            .field("reconciler", &self.reconciler.is_some())
            .finish_non_exhaustive()
    }
}

/// `facilitator`, labelled `label`, timed into the metrics when the feature `metrics` is on.
#[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
fn metered_facilitator(label: &str, facilitator: Arc<dyn Facilitator>) -> Arc<dyn Facilitator> {
    #[cfg(feature = "metrics")]
    let facilitator = instruments::facilitator(label, facilitator);
    facilitator
}

/// `store`, its failures counted in the metrics when the feature `metrics` is on.
fn metered_store(store: Arc<dyn SettlementStore>) -> Arc<dyn SettlementStore> {
    #[cfg(feature = "metrics")]
    let store = instruments::store(store);
    store
}

/// A lease owner id for one core: the process id, the start time and a counter.
fn new_owner_id() -> Arc<str> {
    static CORES: AtomicU64 = AtomicU64::new(0);
    format!(
        "pid{}-{:x}-{}",
        std::process::id(),
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.as_nanos()),
        CORES.fetch_add(1, Ordering::Relaxed)
    )
    .into()
}
