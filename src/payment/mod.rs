//! The payment core: everything between a decoded payment and the work it pays for, with no
//! HTTP in it.
//!
//! [`Payments`] takes a decoded [`PaymentPayload`], the [`Offer`] it pays and the accept it
//! matched ([`Payments::accepted`]), and answers with an [`Outcome`]: single-flight per payment,
//! the ledger claim in its [`SettlementStore`], the replay of a payment that already settled,
//! the recovery of payments in doubt, verification, and settlement — before the work in
//! [`SettlementMode::Before`], after it ([`Cleared::settle`]) in [`SettlementMode::After`].
//! [`X402Layer`](crate::X402Layer) is its HTTP adapter: it reads the headers, calls the core,
//! and writes the responses. Another adapter (an MCP tool dispatcher, a message consumer) drives
//! the same core and gets the same guarantees: a payment settles once, whatever retries,
//! crashes or lost answers happen, and every refusal is a [`Refusal`] to answer in its own
//! terms. Give it the layer's [`Payments`] ([`X402Layer::payments`](crate::X402Layer::payments))
//! and both share one ledger.
//!
//! # Example
//!
//! A paid tool call, driven without HTTP (the facilitator here approves and settles everything):
//!
//! ```
//! use std::sync::Arc;
//! use tower_x402::facilitator::Facilitator;
//! use tower_x402::payment::{Outcome, Payments};
//! use tower_x402::proto::{
//!     FacilitatorRequest, PaymentPayload, ResourceInfo, SettleResponse, UsdcDeployment,
//!     VerifyResponse,
//! };
//! use tower_x402::{BoxFuture, FacilitatorError, Offer, SettlementMode};
//!
//! struct Approve;
//! impl Facilitator for Approve {
//!     fn verify<'a>(&'a self, _: &'a FacilitatorRequest)
//!         -> BoxFuture<'a, Result<VerifyResponse, FacilitatorError>> {
//!         Box::pin(async { Ok(VerifyResponse { is_valid: true, ..Default::default() }) })
//!     }
//!     fn settle<'a>(&'a self, request: &'a FacilitatorRequest)
//!         -> BoxFuture<'a, Result<SettleResponse, FacilitatorError>> {
//!         let network = request.payment_requirements().network.clone();
//!         Box::pin(async move {
//!             let mut settled = SettleResponse::failure(network, "");
//!             (settled.success, settled.error_reason, settled.transaction) = (true, None, "0xabc".into());
//!             Ok(settled)
//!         })
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let offer = Offer::builder(ResourceInfo::new("https://tools.example.com/report"))
//!     .usdc(&UsdcDeployment::BASE, "0.10".parse()?, "0x209693Bc6afc0C5328bA36FaF03C514EF312287C")
//!     .settlement(SettlementMode::Before)
//!     .build()
//!     .map(Arc::new)?;
//! let payments = Arc::new(Payments::new(Approve));
//!
//! // The payment a tool call carried, as the adapter decoded it.
//! let payload: PaymentPayload = serde_json::from_value(serde_json::json!({
//!     "x402Version": 2,
//!     "accepted": offer.accepts()[0],
//!     "payload": { "signature": "0x01" },
//! }))?;
//! let requirement = Payments::accepted(&offer, &payload)?.clone();
//! let first = payments.authorize(&offer, payload.clone(), requirement.clone()).await;
//! assert!(matches!(first, Outcome::Settled(ref paid) if paid.payment().settlement.is_some()));
//! drop(first);
//!
//! // The same payment again is answered from the ledger: no second settlement.
//! let again = payments.authorize(&offer, payload, requirement).await;
//! assert!(matches!(again, Outcome::Replayed(_)));
//! # Ok(())
//! # }
//! ```

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tracing::Instrument as _;

use self::ledger::{Claim, Hold};
use self::refusals::RefusedPayments;
use self::settle::Attempt;
use self::single_flight::{Inflight, InflightGuard};
use crate::facilitator::{DEFAULT_LABEL, Facilitator, Facilitators};
use crate::pricing::Offer;
#[cfg(doc)]
use crate::pricing::SettlementMode;
use crate::proto::{
    AtomicAmount, FacilitatorRequest, PaymentPayload, PaymentRequirements, SettleResponse,
};
use crate::settlement::{
    Fingerprint, MemorySettlementStore, PaymentKey, PaymentState, Reconciler, SettlementIntent,
    SettlementRecord, SettlementStore,
};

pub(crate) mod charge;
mod events;
#[cfg(feature = "metrics")]
mod instruments;
pub(crate) mod ledger;
mod refusal;
mod refusals;
mod settle;
mod single_flight;
mod uncancellable;
mod verified;

pub use charge::{Charge, ChargeError};
pub use events::{PaymentEvent, PaymentEvents};
pub use refusal::{Refusal, RefusalKind};
pub use verified::{SettledPayment, VerifiedPayment};

/// How many settlements the core remembers in memory beside a custom
/// [`SettlementStore`](Payments::settlement_store).
const RECENT_SETTLEMENTS: usize = 4096;

/// How long a process holds a payment before another may take it over (default).
const DEFAULT_LEASE: Duration = Duration::from_secs(120);

/// How long a payment the facilitator found invalid is refused from memory (default).
const DEFAULT_REFUSAL_MEMORY: Duration = Duration::from_secs(10);

/// The payment core: a facilitator, a ledger and the rules that make each payment settle once.
/// See the [module docs](self).
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
    /// Where each settled payment records its payer's entitlement (sign-in-with-x).
    #[cfg(feature = "siwx")]
    pub(crate) entitlements: Option<Arc<dyn crate::siwx::EntitlementStore>>,
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
            inflight: Arc::default(),
            owner: ledger::new_owner_id(),
            lease: DEFAULT_LEASE,
            reconciler: None,
            pending_pause: Duration::from_secs(1),
            held_wait: Duration::from_secs(5),
            refused: Arc::new(RefusedPayments::new(DEFAULT_REFUSAL_MEMORY)),
            #[cfg(feature = "siwx")]
            entitlements: None,
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

    /// The accept of `offer` that `payload` pays, or why none: the payment names another
    /// resource ([`Refusal::OtherResource`]) or matches none of the accepts
    /// ([`Refusal::NoMatchingRequirement`], naming the first field that differs).
    // A `Refusal` is large, but this one is built on the refusal path only and answered at once.
    #[allow(clippy::result_large_err)]
    pub fn accepted<'o>(
        offer: &'o Offer,
        payload: &PaymentPayload,
    ) -> Result<&'o Arc<PaymentRequirements>, Refusal> {
        if payload
            .resource
            .as_ref()
            .is_some_and(|resource| resource.url != offer.resource().url)
        {
            return Err(Refusal::OtherResource);
        }
        offer.find_accept(&payload.accepted).ok_or_else(|| {
            let accepted = &payload.accepted;
            let closest = offer
                .accepts()
                .iter()
                .find(|own| own.network == accepted.network && own.scheme == accepted.scheme)
                .or_else(|| offer.accepts().first());
            Refusal::NoMatchingRequirement {
                field: closest.and_then(|own| own.mismatch(accepted)),
            }
        })
    }

    /// Single-flights the payment, claims it in the ledger, answers repeats from their record,
    /// recovers payments in doubt, verifies new payments and, in [`SettlementMode::Before`],
    /// settles them. `requirement` is the offer's accept the payment matched
    /// ([`accepted`](Self::accepted)). Refusals are reported to the event hook before they are
    /// returned.
    pub async fn authorize(
        self: &Arc<Self>,
        offer: &Arc<Offer>,
        payload: PaymentPayload,
        requirement: Arc<PaymentRequirements>,
    ) -> Outcome {
        let fingerprint = Fingerprint::of(&payload);
        let key = PaymentKey::with_fingerprint(&payload, &fingerprint);
        let guard = Arc::clone(&self.inflight).acquire(key.clone()).await;

        if let Some(reason) = self.refused.get(&fingerprint, &payload.payload) {
            return self.refuse(offer, Refusal::InvalidPayment { reason });
        }

        if let Some(record) = self
            .recent_settlements
            .as_ref()
            .and_then(|recent| recent.get(&key))
        {
            return self.replay(offer, payload, &fingerprint, record, guard);
        }
        let hold = match ledger::claim(self, &key, &fingerprint).await {
            Claim::Fresh(hold) => hold,
            Claim::Settled(record) => {
                return self.replay(offer, payload, &fingerprint, *record, guard);
            }
            Claim::Recover(hold, intent) => {
                return self.recover(offer, hold, *intent, guard).await;
            }
            Claim::Refuse(refusal) => return self.refuse(offer, *refusal),
        };

        let request = Arc::new(FacilitatorRequest::new(payload, Arc::clone(&requirement)));
        let span = tracing::info_span!("x402.verify", network = %requirement.network, scheme = %requirement.scheme);
        let (verifier, verified) = self.facilitators.verify(&request).instrument(span).await;
        let verified = match verified {
            Ok(verified) => verified,
            Err(failure) => {
                tracing::warn!(error = %failure, "facilitator verify failed");
                ledger::release(self, &hold).await;
                return self.refuse(offer, Refusal::Facilitator(failure));
            }
        };
        if !verified.is_valid {
            ledger::release(self, &hold).await;
            let reason = verified
                .invalid_reason
                .unwrap_or_else(|| "invalid_payment".to_owned());
            self.refused
                .remember(&fingerprint, &request.payment_payload().payload, &reason);
            return self.refuse(offer, Refusal::InvalidPayment { reason });
        }
        self.emit(|| PaymentEvent::Verified {
            offer,
            payer: verified.payer.as_deref(),
        });

        let mut payment = VerifiedPayment {
            key,
            payer: verified.payer,
            requirement,
            payload: Arc::clone(request.payment_payload()),
            settlement: None,
            replayed: false,
            offer: Arc::clone(offer),
        };
        // The facilitator that verified the payment settles it.
        let intent = SettlementIntent::with_fingerprint(
            fingerprint,
            Arc::clone(offer.resource_url()),
            request,
        )
        .at_facilitator(verifier);
        if offer.settlement_mode().settles_after_work() {
            return Outcome::Cleared(Cleared(Box::new(ClearedParts {
                payments: Arc::clone(self),
                payment,
                hold,
                intent,
                _guard: guard,
            })));
        }
        let (outcome, guard) =
            settle::settle(self, offer, hold, intent, Attempt::First, guard).await;
        match outcome {
            Ok(settlement) => {
                payment.payer = payment.payer.or_else(|| settlement.payer.clone());
                payment.settlement = Some(settlement);
            }
            Err(refusal) => return refused(refusal),
        }
        Outcome::Settled(Paid::new(payment, guard))
    }

    /// Reports `refusal` and returns it as the outcome.
    fn refuse(&self, offer: &Offer, refusal: Refusal) -> Outcome {
        self.report_refusal(offer, &refusal);
        refused(refusal)
    }

    /// Recovers a payment in doubt (or one whose settling process died): re-sends the identical
    /// `/settle`, then asks the reconciler. Delivered only once the settlement is proven.
    async fn recover(
        self: &Arc<Self>,
        offer: &Arc<Offer>,
        hold: Hold,
        intent: SettlementIntent,
        guard: InflightGuard,
    ) -> Outcome {
        let settling = PaymentState::Settling {
            owner: Arc::clone(&self.owner),
            lease_until: ledger::lease_until(self),
            intent: intent.clone(),
        };
        let hold = match self.store.replace(&hold.key, hold.version, &settling).await {
            Ok(true) => Hold {
                version: hold.version + 1,
                ..hold
            },
            // Another process got there first; its outcome is the retry's answer.
            Ok(false) => return self.refuse(offer, Refusal::PaymentInProgress),
            Err(error) => return self.refuse(offer, Refusal::RecordsUnavailable(error)),
        };
        tracing::info!(key = %hold.key, "recovering a payment in doubt: re-sending the identical /settle");
        let key = hold.key.clone();
        let attempt = Attempt::Recovery;
        let (outcome, guard) =
            settle::settle(self, offer, hold, intent.clone(), attempt, guard).await;
        let settlement = match outcome {
            Ok(settlement) => settlement,
            Err(refusal) => return refused(refusal),
        };
        if intent.resource != *offer.resource_url() {
            // Settled for the resource it was signed for; a retry there delivers it.
            return self.refuse(offer, Refusal::SettledForAnotherResource);
        }
        let payment = VerifiedPayment {
            key,
            payer: settlement.payer.clone(),
            requirement: Arc::clone(intent.request.payment_requirements()),
            payload: Arc::clone(intent.request.payment_payload()),
            settlement: Some(settlement),
            replayed: false,
            offer: Arc::clone(offer),
        };
        Outcome::Settled(Paid::new(payment, guard))
    }

    /// Answers a payment that has a settlement record: the same resource gets the recorded
    /// settlement again; anything else is refused.
    fn replay(
        &self,
        offer: &Arc<Offer>,
        payload: PaymentPayload,
        fingerprint: &Fingerprint,
        record: SettlementRecord,
        guard: InflightGuard,
    ) -> Outcome {
        if *fingerprint != *record.fingerprint {
            return self.refuse(offer, Refusal::IdentifierReused);
        }
        if record.resource != *offer.resource_url() {
            return self.refuse(offer, Refusal::SettledForAnotherResource);
        }
        self.emit(|| PaymentEvent::Replayed {
            offer,
            record: &record,
        });
        let payment = VerifiedPayment {
            key: record.key,
            payer: record.settlement.payer.clone(),
            requirement: record.requirement,
            payload: Arc::new(payload),
            settlement: Some(record.settlement),
            replayed: true,
            offer: Arc::clone(offer),
        };
        Outcome::Replayed(Paid::new(payment, Some(guard)))
    }
}

impl fmt::Debug for Payments {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Payments")
            .field("events", &self.events.is_some())
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

/// What [`Payments::authorize`] decided about a payment.
#[derive(Debug)]
#[non_exhaustive]
pub enum Outcome {
    /// Verified and held, not settled yet ([`SettlementMode::After`]): do the work, then
    /// [`Cleared::settle`] — or [`Cleared::release`] when the work failed.
    Cleared(Cleared),
    /// Settled ([`SettlementMode::Before`], or a payment in doubt whose settlement was proven):
    /// deliver.
    Settled(Paid),
    /// Settled earlier and answered from its record, with no facilitator call: deliver again.
    Replayed(Paid),
    /// `/settle` was sent but its outcome is unknown: the payment is kept *in doubt*
    /// ([`Refusal::SettlementInDoubt`]); the same payment presented again recovers it.
    InDoubt(Refusal),
    /// Refused; nothing settled.
    Refused(Refusal),
}

/// The outcome of a refusal: in doubt when settlement's outcome is unknown.
fn refused(refusal: Refusal) -> Outcome {
    match refusal {
        Refusal::SettlementInDoubt { .. } => Outcome::InDoubt(refusal),
        _ => Outcome::Refused(refusal),
    }
}

/// A payment that settled (or was answered from its record): the work may run. Holds the
/// payment's single-flight lock until dropped, so a duplicate waits for this one to finish.
#[derive(Debug)]
pub struct Paid(Box<PaidParts>);

#[derive(Debug)]
struct PaidParts {
    payment: VerifiedPayment,
    _guard: Option<InflightGuard>,
}

impl Paid {
    fn new(payment: VerifiedPayment, guard: Option<InflightGuard>) -> Self {
        Self(Box::new(PaidParts {
            payment,
            _guard: guard,
        }))
    }

    /// The payment; its [`settlement`](VerifiedPayment::settlement) is set.
    pub fn payment(&self) -> &VerifiedPayment {
        &self.0.payment
    }
}

/// A verified payment held in the ledger, to settle after the work ([`SettlementMode::After`]).
/// Holds the payment's single-flight lock until settled, released or dropped.
///
/// Dropping it without [`settle`](Self::settle) or [`release`](Self::release) leaves the hold to
/// expire after the [lease](Payments::settlement_lease).
pub struct Cleared(Box<ClearedParts>);

struct ClearedParts {
    payments: Arc<Payments>,
    payment: VerifiedPayment,
    hold: Hold,
    intent: SettlementIntent,
    _guard: InflightGuard,
}

impl Cleared {
    /// The verified payment (no settlement yet).
    pub fn payment(&self) -> &VerifiedPayment {
        &self.0.payment
    }

    /// Settles the payment and records the outcome: [`Paid`] once settled, or the refusal
    /// ([`Refusal::SettlementInDoubt`] when the outcome is unknown).
    ///
    /// Once the *settling* intent is written, `/settle` and the recording of its outcome run on
    /// a task of their own: dropping this future (a client that hung up) cancels neither, and
    /// the same payment presented again waits for that outcome and is answered from it.
    pub async fn settle(self) -> Result<Paid, Refusal> {
        let ClearedParts {
            payments,
            mut payment,
            hold,
            intent,
            _guard: guard,
        } = *self.0;
        let offer = &payment.offer;
        let (outcome, guard) =
            settle::settle(&payments, offer, hold, intent, Attempt::First, guard).await;
        payment.settlement = Some(outcome?);
        Ok(Paid::new(payment, guard))
    }

    /// Settles `amount` (atomic units) of a metered (`upto`) payment: the `/settle` request —
    /// and the *settling* intent written before it — carries the server's requirement with
    /// `amount` set to the charge, so a retry after a lost answer re-sends exactly it, and a
    /// repeat of the settled payment is answered from its record.
    ///
    /// Never settles more than the buyer signed: an `amount` above the requirement's (the
    /// signed maximum) settles nothing, releases the payment and answers
    /// [`Refusal::ChargeAboveMaximum`]. Zero settles nothing either: no `/settle` is sent, the
    /// payment is released (its authorization unused and usable again), and the answer is a
    /// settlement of `amount: "0"` with no transaction. For any other scheme the amount must
    /// be the requirement's.
    pub async fn settle_amount(self, amount: AtomicAmount) -> Result<Paid, Refusal> {
        let maximum = self.0.payment.requirement.amount;
        if amount > maximum
            || (!charge::is_metered(&self.0.payment.requirement) && amount != maximum)
        {
            tracing::error!(key = %self.0.hold.key, %amount, %maximum, "the charge set for this payment is above what the buyer signed; nothing settled");
            let refusal = Refusal::ChargeAboveMaximum {
                charged: amount,
                maximum,
            };
            return Err(self.refuse(refusal).await);
        }
        if amount.get() == 0 {
            let ClearedParts {
                payments,
                mut payment,
                hold,
                _guard: guard,
                ..
            } = *self.0;
            ledger::release(&payments, &hold).await;
            tracing::debug!(key = %hold.key, "metered charge of zero: nothing settled, the authorization stays unused");
            payment.settlement = Some(SettleResponse {
                success: true,
                error_reason: None,
                error_message: None,
                transaction: String::new(),
                network: payment.requirement.network.clone(),
                payer: payment.payer.clone(),
                amount: Some(amount),
                extensions: None,
            });
            return Ok(Paid::new(payment, Some(guard)));
        }
        let mut cleared = self;
        // A new request for the charge: the signed maximum's encoding is not reused for it.
        let request = &cleared.0.intent.request;
        let mut charged = PaymentRequirements::clone(request.payment_requirements());
        charged.amount = amount;
        cleared.0.intent.request = Arc::new(request.with_requirements(charged));
        cleared.settle().await
    }

    /// Releases the payment unsettled and reports `refusal`, a bug in the work: nothing moved.
    pub async fn refuse(self, refusal: Refusal) -> Refusal {
        let payments = Arc::clone(&self.0.payments);
        let offer = Arc::clone(&self.0.payment.offer);
        ledger::release(&payments, &self.0.hold).await;
        payments.report_refusal(&offer, &refusal);
        refusal
    }

    /// Lets go of the payment without settling it (the work failed), so that it can be used
    /// again.
    pub async fn release(self) {
        ledger::release(&self.0.payments, &self.0.hold).await;
    }
}

impl fmt::Debug for Cleared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cleared")
            .field("payment", &self.0.payment)
            .field("hold", &self.0.hold)
            .finish_non_exhaustive()
    }
}
