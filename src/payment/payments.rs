//! [`Payments`], the payment core's configuration: its facilitators, its ledger, its hooks and
//! the rules' settings, and the builder methods that set them.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::charge::Charge;
use super::dispatch::Hooks;
use super::hooks::PaymentHooks;
use super::notes::HeldNotes;
use super::refusal::Refusal;
use super::refusals::RefusedPayments;
use super::scheme::{Scheme, Schemes};
use super::single_flight::Inflight;
use super::stages::HookStages;
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
/// Every adapter is built from one: [`X402Layer::with_payments`](crate::X402Layer::with_payments)
/// for HTTP, `PaidTools::new` (feature `mcp`) for MCP tools, [`Payments::pay`] for your own.
/// Configure it here, then hand it over; adapters given the same `Arc<Payments>` share one
/// ledger and one single-flight.
///
/// ```
/// use std::time::Duration;
/// use tower_x402::payment::Payments;
/// use tower_x402::{HttpFacilitator, MemorySettlementStore, Price, X402Layer};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let payments = Payments::new(HttpFacilitator::new("https://x402.org/facilitator")?)
///     .settlement_store(MemorySettlementStore::default())
///     .settlement_lease(Duration::from_secs(60));
/// let layer = X402Layer::with_payments(payments, |_: &http::request::Parts| Price::Free);
/// # let _ = layer;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
#[must_use]
pub struct Payments {
    pub(super) facilitators: Facilitators,
    pub(super) store: Arc<dyn SettlementStore>,
    /// Recent settlements kept in memory beside an application's own store, so a payment that
    /// settled is still recognised when that store fails to save or to answer.
    pub(super) recent_settlements: Option<MemorySettlementStore>,
    /// The lifecycle hooks, asked in order.
    pub(super) hooks: Hooks,
    /// The payment schemes, `exact` and `upto` and those registered.
    pub(super) schemes: Schemes,
    pub(super) inflight: Arc<Inflight>,
    /// Who this core is in the ledger's leases.
    pub(super) owner: Arc<str>,
    /// How long a hold on a payment lasts before another process may take it over.
    pub(super) lease: Duration,
    /// Asked about payments in doubt that re-sending `/settle` did not settle.
    pub(super) reconciler: Option<Arc<dyn Reconciler>>,
    /// The pause before re-sending a `/settle` that answered `settlement_pending`.
    pub(super) pending_pause: Duration,
    /// How long a request waits for the outcome of a payment another process holds.
    pub(super) held_wait: Duration,
    /// Payments the facilitator recently found invalid.
    pub(super) refused: Arc<RefusedPayments>,
    /// How many recent settlements are kept beside a custom store (none when 0).
    recent_capacity: usize,
    /// Whether a settlement goes on in a task of its own when its request is dropped
    /// ([`settlement_outlives_request`](Self::settlement_outlives_request)).
    pub(super) settlement_outlives_request: bool,
    /// The scheme's notes of payments in doubt, for their recovery.
    pub(super) held_notes: Arc<HeldNotes>,
    /// Whether `/verify` is sent before `/settle` in [`SettlementMode::Before`] too.
    pub(super) verify_before_settling: bool,
}

impl Payments {
    /// A core that has `facilitator` verify and settle, with settlement records in a
    /// [`MemorySettlementStore`], no reconciler and no hooks.
    pub fn new(facilitator: impl Facilitator) -> Self {
        Self::with_facilitators(Facilitators::new(DEFAULT_LABEL, Arc::new(facilitator)))
    }

    /// A core like [`new`](Self::new) that verifies at the first healthy facilitator of
    /// `facilitators` and settles each payment at the one its intent names.
    pub fn with_facilitators(facilitators: Facilitators) -> Self {
        Self {
            facilitators,
            store: Arc::new(MemorySettlementStore::default()),
            recent_settlements: None,
            hooks: Hooks::default(),
            schemes: Schemes::default(),
            inflight: Arc::default(),
            owner: new_owner_id(),
            lease: DEFAULT_LEASE,
            reconciler: None,
            pending_pause: Duration::from_secs(1),
            held_wait: Duration::from_secs(5),
            refused: Arc::new(RefusedPayments::new(DEFAULT_REFUSAL_MEMORY)),
            recent_capacity: RECENT_SETTLEMENTS,
            settlement_outlives_request: true,
            held_notes: Arc::default(),
            verify_before_settling: false,
        }
    }

    /// Keeps settlement records in `store` (e.g. the application's database) instead of memory.
    ///
    /// The core also remembers the last 4096 settlements in memory and checks them first, so
    /// that a settled payment is recognised even if `store` failed to save it or cannot be read
    /// for a moment: the buyer's retry is answered, never charged again.
    pub fn settlement_store(mut self, store: impl SettlementStore) -> Self {
        self.store = Arc::new(store);
        self.recent_settlements =
            (self.recent_capacity > 0).then(|| MemorySettlementStore::new(self.recent_capacity));
        self
    }

    /// Asks `reconciler` about payments in doubt that re-sending the identical `/settle` did not
    /// settle: delivered when it finds the transfer, released (402) when it proves nothing moved
    /// and the authorization expired, kept in doubt (503) otherwise. Without one, in-doubt
    /// payments stay in doubt until the facilitator settles them on a retry.
    pub fn reconciler(mut self, reconciler: impl Reconciler) -> Self {
        self.reconciler = Some(Arc::new(reconciler));
        self
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

    /// How many recent settlements the core keeps in memory beside a custom
    /// [`settlement_store`](Self::settlement_store) (default 4096; 0 keeps none), so that a
    /// payment that settled is still recognised — and answered from its record — when that
    /// store fails to save or to answer. Called before or after `settlement_store`, alike.
    pub fn recent_settlements(mut self, capacity: usize) -> Self {
        self.recent_capacity = capacity;
        if self.recent_settlements.is_some() {
            self.recent_settlements = (capacity > 0).then(|| MemorySettlementStore::new(capacity));
        }
        self
    }

    /// Whether a settlement started for a request goes on, in a task of its own, when the
    /// request is dropped (its client hung up) — the default — so that a retry of the same
    /// payment waits for that outcome and is answered from it. `false` settles in place only:
    /// dropped with the request, the settlement stops where it was, its *settling* intent left
    /// for a retry or the reconciler to resolve (the payment *in doubt* meanwhile). Only for
    /// measuring what the default costs; a server keeps it.
    pub fn settlement_outlives_request(mut self, outlives: bool) -> Self {
        self.settlement_outlives_request = outlives;
        self
    }

    /// Whether a payment that settles before the work ([`SettlementMode::Before`]) is sent to
    /// `/verify` before `/settle` (default `false`: one round trip, `/settle` alone).
    ///
    /// A conforming facilitator verifies a payment again inside `/settle` and refuses one that
    /// does not verify, so in `Before` the core goes straight to `/settle` — after the ledger's
    /// claim and the write-ahead *settling* intent, as always. How each failure is answered
    /// then:
    ///
    /// | `/settle` answers | the answer | as with `/verify` first |
    /// |---|---|---|
    /// | `success: false`, a definite reason (`invalid_exact_evm_signature`, `insufficient_funds`, …) | 402, the reason as `error`, the failure in `PAYMENT-RESPONSE`; the payment released | 402, the reason as `error` |
    /// | `success: false`, a reason that does not prove nothing moved (a used nonce, `settlement_pending`, …) | 503 with `Retry-After`, *in doubt*: the retry re-sends the identical `/settle` | 503, in doubt |
    /// | no answer (unreachable, timed out, 5xx, malformed) | 503 with `Retry-After`, *in doubt*: the retry re-sends the identical `/settle` | 503, nothing held |
    ///
    /// A payment `/settle` refused for good is remembered as one `/verify` refused: presented
    /// again within the [`refusal_memory`](Self::refusal_memory), it is answered the same 402
    /// (without `PAYMENT-RESPONSE`) from memory, and nothing is sent.
    ///
    /// Set it `true` for a facilitator whose `/settle` does not verify, or to keep an invalid
    /// payment's answer free of `PAYMENT-RESPONSE`. `/verify` is sent anyway when a
    /// [hook](PaymentHooks) takes part in [`HookStages::VERIFY_FAILURE`](super::HookStages::VERIFY_FAILURE)
    /// or [`HookStages::AFTER_VERIFY`](super::HookStages::AFTER_VERIFY), which read its answer,
    /// a [scheme](Scheme) with its own verify step keeps it, and a core with
    /// [several facilitators](Self::with_facilitators) verifies first, so that a facilitator that
    /// is down is passed over before anything is sent to `/settle`. Payments settled after the
    /// work are always verified first.
    ///
    /// ```
    /// use tower_x402::HttpFacilitator;
    /// use tower_x402::payment::Payments;
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// // A facilitator whose `/settle` trusts a payment `/verify` accepted.
    /// let payments = Payments::new(HttpFacilitator::new("https://facilitator.example")?)
    ///     .verify_before_settling(true);
    /// # let _ = payments;
    /// # Ok(())
    /// # }
    /// ```
    pub fn verify_before_settling(mut self, verify: bool) -> Self {
        self.verify_before_settling = verify;
        self
    }

    /// Adds `hook` to the [lifecycle hooks](PaymentHooks), after those added before.
    pub fn hook(mut self, hook: impl PaymentHooks) -> Self {
        let hook = Arc::new(hook);
        self.hooks.push(hook.clone(), hook);
        self
    }

    /// Registers `scheme`, the [payment scheme](Scheme) named [`Scheme::name`] for the networks
    /// of its [`namespace`](Scheme::namespace), in place of one registered before under that
    /// name and namespace (`exact` and `upto` are registered on every core, for every network).
    /// A requirement is answered by the scheme registered under its name for its network's
    /// namespace, else by the one for every network, else by the built-in one: `exact` for
    /// `solana` and `exact` for `eip155` are registered side by side.
    pub fn scheme(mut self, scheme: impl Scheme) -> Self {
        self.schemes.register(Arc::new(scheme));
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

    /// The [`Charge`] the work sets for `payment`, when its scheme is metered (`upto`): bounded
    /// by the maximum the buyer signed.
    pub(crate) fn charge(&self, payment: &super::VerifiedPayment) -> Option<Charge> {
        self.schemes
            .metered(&payment.requirement)
            .then(|| Charge::for_requirement(&payment.requirement))
    }

    /// Whether a payment for `offer` goes to `/settle` without `/verify`: it settles before the
    /// work, `/verify` is not asked for ([`Payments::verify_before_settling`]), and no hook
    /// reads `/verify`'s answer.
    pub(super) fn settles_unverified(&self, offer: &Offer) -> bool {
        !self.verify_before_settling
            && !offer.settlement_mode().settles_after_work()
            // With several facilitators, `/verify` finds one that answers before anything is
            // sent to `/settle`: a facilitator that is down is passed over, no sale held there.
            && self.facilitators.is_single()
            && !self.hooks.take_part(HookStages::VERIFY_FAILURE)
            && !self.hooks.take_part(HookStages::AFTER_VERIFY)
    }

    /// Remembers a payment that `/settle` refused, sent there without `/verify`
    /// ([`settles_unverified`](Self::settles_unverified)), as `/verify`'s refusals are: a
    /// definite refusal (nothing moved) is answered from the refusal memory when presented again.
    pub(super) fn remember_settle_refusal(
        &self,
        offer: &Offer,
        payment: &super::VerifiedPayment,
        refusal: &Refusal,
    ) {
        let Refusal::SettlementRefused(settlement) = refusal else {
            return;
        };
        if !self.settles_unverified(offer) {
            return;
        }
        let scheme = self.schemes.get(&payment.requirement);
        if let Ok(text) = scheme.identify(&payment.payload) {
            let reason = settlement
                .error_reason
                .as_deref()
                .unwrap_or("settlement_failed");
            let fingerprint = crate::settlement::Fingerprint::from_text(text);
            self.refused
                .remember(&fingerprint, &payment.payload.payload, reason);
        }
    }

    /// Whether a [lifecycle hook](PaymentHooks) is registered: the adapters skip the hooks'
    /// part of a request (and copy nothing for it) when none is.
    #[inline]
    pub(crate) fn has_hooks(&self) -> bool {
        !self.hooks.is_empty()
    }

    /// Reports `refusal` to the hooks ([`PaymentHooks::observe`], a
    /// [`PaymentEvent::Refused`](super::PaymentEvent::Refused); a 402 challenge is
    /// [`Refusal::PaymentMissing`]). Every refusal an adapter answers passes here.
    #[inline]
    pub fn report_refusal(&self, offer: &Offer, refusal: &Refusal) {
        self.hooks
            .observe(&super::PaymentEvent::Refused { offer, refusal });
    }
}

impl fmt::Debug for Payments {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Payments")
            .field("hooks", &self.hooks.len())
            .field("schemes", &self.schemes)
            .field("owner", &self.owner)
            .field("lease", &self.lease)
            .field("held_wait", &self.held_wait)
            .field("reconciler", &self.reconciler.is_some())
            .field("verify_before_settling", &self.verify_before_settling)
            .finish_non_exhaustive()
    }
}

/// A lease owner id for one core: the process id, the start time and a counter.
fn new_owner_id() -> Arc<str> {
    static CORES: AtomicU64 = AtomicU64::new(0);
    format!(
        "pid{}-{:x}-{}",
        std::process::id(),
        x402_wire::unix_time().as_nanos(),
        CORES.fetch_add(1, Ordering::Relaxed)
    )
    .into()
}

/// Reports `refusal` and returns it.
pub(super) fn refuse(config: &Payments, offer: &Offer, refusal: Refusal) -> Refusal {
    config.report_refusal(offer, &refusal);
    refusal
}
