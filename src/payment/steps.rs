//! What the core gives a [scheme's steps](super::Scheme): its facilitators, reached through the
//! payment's [`PaymentContext`], the notes of payments in doubt kept for their recovery, and
//! the release step asked for a payment that ends unsettled.
//!
//! # How a scheme owns its payments
//!
//! The core runs every payment through the same walk — single-flight, the ledger's claim,
//! verification, the write-ahead *settling* intent, settlement, the record, and *in doubt*
//! when an answer is lost — and asks the payment's [`Scheme`](super::Scheme) at each step
//! that is the scheme's to decide: only the scheme its requirement names, never another's.
//!
//! | step | the scheme's method | the default (`exact`, `upto`) |
//! |---|---|---|
//! | verify | [`verify`](super::Scheme::verify) | the core's facilitators' `/verify` |
//! | the request settled | [`settle_request`](super::Scheme::settle_request) | the charge set as the amount |
//! | the request written ahead | [`completed_request`](super::Scheme::completed_request) | as it is |
//! | settle, once the intent is written | [`settle`](super::Scheme::settle) | `/settle` at the facilitator that verified |
//! | a `success: false` | [`may_have_moved`](super::Scheme::may_have_moved) | in doubt for the uncertain reasons, else released |
//! | a settlement the reconciler proved | [`proven`](super::Scheme::proven) | nothing to do |
//! | the settlement's `extra` | [`settlement_extra`](super::Scheme::settlement_extra) | nothing added |
//! | ended unsettled | [`release`](super::Scheme::release) | nothing held |
//!
//! A step that needs the facilitator calls it through the core, on the payment's
//! [`PaymentContext`]: [`verify_at_facilitator`](PaymentContext::verify_at_facilitator) and
//! [`settle_at_facilitator`](PaymentContext::settle_at_facilitator) go through the core's pool
//! (its order, circuit breakers, failover and deadlines), and the settlement is the request the
//! ledger's intent holds, sent to the facilitator the intent names — so a lost answer leaves the
//! payment *in doubt* in the ledger and the log, recovered by a retry or the reconciler, as any
//! `exact` payment is. What a scheme learns of a payment it keeps on the payment, in its notes
//! ([`VerifiedPayment::notes`](super::VerifiedPayment::notes)): written by the verify step,
//! read by the settlement, the `extra` and the release; held in memory by the core while the
//! payment settles or is in doubt (not carried by the settlement's future, so a payment of
//! `exact` or `upto` pays nothing for them), and handed back to the step that settles its
//! recovery.
//!
//! A payment channel, for one, is a scheme on these steps: a deposit verified and settled
//! through the core (its notes: the channel held and the voucher to commit once the deposit
//! moved), a voucher accepted locally or sent to `/verify` through the core, and settled by
//! committing it to the channel's store (a settlement with no transaction), a refund settled
//! through the core; the channel's state in the settlement's `extra`, and its hold released
//! by the release step. A deposit whose `/settle` answer was lost and that the reconciler
//! proved settled reaches the scheme through its `proven` step, which commits its voucher.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use http::Extensions;
use tracing::Instrument as _;
use x402_wire::{SettleResponse, VerifyResponse};

use super::decision::PaymentContext;
use super::payments::Payments;
use super::refusal::{Refusal, RefusalKind};
use super::settle::{self, SettleAnswer};
use super::verified::VerifiedPayment;
use crate::settlement::PaymentKey;

/// How many payments in doubt keep their notes in memory, at most.
const DOUBTFUL_NOTES: usize = 4096;

/// What a scheme's step reaches the core through: its facilitators, the facilitator the
/// payment's intent names while it settles, and the one that verified it.
pub(super) struct CoreHandle<'a> {
    core: &'a Payments,
    facilitator: Option<&'a str>,
    verifier: OnceLock<Arc<str>>,
}

impl<'a> CoreHandle<'a> {
    pub(super) fn new(core: &'a Payments, facilitator: Option<&'a str>) -> Self {
        Self {
            core,
            facilitator,
            verifier: OnceLock::new(),
        }
    }

    /// The facilitator that verified the payment through this handle, if one did.
    pub(super) fn verifier(&self) -> Option<Arc<str>> {
        self.verifier.get().cloned()
    }
}

impl fmt::Debug for CoreHandle<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CoreHandle")
            .field("facilitator", &self.facilitator)
            .finish_non_exhaustive()
    }
}

/// Asked of a context a hook was given: only a scheme's steps reach the facilitators.
fn not_a_step() -> Refusal {
    Refusal::Hook {
        kind: RefusalKind::ServerFault,
        reason: "the facilitators are reached through the core only from a scheme's steps"
            .to_owned(),
    }
}

impl PaymentContext<'_> {
    /// `/verify` for this payment at the core's facilitators: the first admitting one, moving
    /// on while they give no answer. The facilitator that answered is the one the payment's
    /// `/settle` is sent to. For a [scheme's verify step](super::Scheme::verify) (a hook's
    /// context answers a [`RefusalKind::ServerFault`]).
    pub async fn verify_at_facilitator(&self) -> Result<VerifyResponse, Refusal> {
        let core = self.core.ok_or_else(not_a_step)?;
        let requirement = self.request.payment_requirements();
        let span = tracing::info_span!("x402.verify", network = %requirement.network, scheme = %requirement.scheme);
        let (verifier, verified) = core
            .core
            .facilitators
            .verify(self.request)
            .instrument(span)
            .await;
        // Only the first facilitator's label is kept: a payment is verified once.
        let _ = core.verifier.set(verifier);
        verified.map_err(Refusal::Facilitator)
    }

    /// `/settle` for this payment: the request its *settling* intent holds in the ledger, sent
    /// to the facilitator the intent names (re-sent once on `settlement_pending`). A settlement
    /// with `success: true` is `Ok`; `success: false` is [`Refusal::SettlementRefused`]; a lost
    /// answer is [`Refusal::Facilitator`]. For a [scheme's settle step](super::Scheme::settle),
    /// which answers the core with it.
    pub async fn settle_at_facilitator(&self) -> Result<SettleResponse, Refusal> {
        let core = self.core.ok_or_else(not_a_step)?;
        match settle::send_to(core.core, core.facilitator, self.request).await {
            SettleAnswer::Settled(settlement) => Ok(settlement),
            SettleAnswer::Refused(settlement) => {
                Err(Refusal::SettlementRefused(Box::new(settlement)))
            }
            SettleAnswer::Failed(failure) => Err(Refusal::Facilitator(failure)),
            SettleAnswer::Declined(refusal) => Err(*refusal),
        }
    }
}

impl PaymentContext<'_> {
    /// `/settle` for another `request` than the payment's that a [scheme's settle
    /// step](super::Scheme::settle) sends beside it (a payment channel's sweep of what its
    /// refund claimed), at the facilitator the payment's intent names, through the core's pool
    /// (its breaker and deadlines). Not written ahead: nothing the ledger recovers, so only for
    /// a request that is safe to lose and send again later. Answered as
    /// [`settle_at_facilitator`](Self::settle_at_facilitator) is.
    pub async fn settle_beside_at_facilitator(
        &self,
        request: &x402_wire::FacilitatorRequest,
    ) -> Result<SettleResponse, Refusal> {
        let core = self.core.ok_or_else(not_a_step)?;
        match settle::send_to(core.core, core.facilitator, request).await {
            SettleAnswer::Settled(settlement) => Ok(settlement),
            SettleAnswer::Refused(settlement) => {
                Err(Refusal::SettlementRefused(Box::new(settlement)))
            }
            SettleAnswer::Failed(failure) => Err(Refusal::Facilitator(failure)),
            SettleAnswer::Declined(refusal) => Err(*refusal),
        }
    }
}

impl Payments {
    /// Asks the scheme named `scheme` to let go of what it holds for the payment `key`, ended
    /// unsettled with `notes` (asked only when it has some).
    pub(super) async fn release_step(&self, scheme: &str, key: &PaymentKey, notes: Extensions) {
        if notes.is_empty() {
            return;
        }
        let scheme = self.schemes.get(scheme);
        if let Some(release) = scheme.release(key, notes) {
            release.await;
        }
    }
}

impl Payments {
    /// Has the scheme named `scheme` release the notes held for the payment `key`, if any.
    pub(super) async fn release_held(&self, scheme: &str, key: &PaymentKey) {
        if self.schemes.registered(scheme).is_none() {
            return;
        }
        let notes = self.held_notes.take(key);
        self.release_step(scheme, key, notes).await;
    }

    /// Has `payment`'s scheme release it with its notes (taken from it).
    pub(super) async fn release_notes(&self, payment: &mut VerifiedPayment) {
        let notes = std::mem::take(&mut payment.notes);
        self.release_step(&payment.requirement.scheme, &payment.key, notes)
            .await;
    }

    /// Holds `payment`'s notes while it settles; whether it had any.
    pub(super) fn hold_notes(&self, payment: &mut VerifiedPayment) -> bool {
        if payment.notes.is_empty() {
            return false;
        }
        let notes = std::mem::take(&mut payment.notes);
        self.held_notes.keep(&payment.key, notes);
        true
    }

    /// After `payment`'s settlement: its notes back on it when it settled, left held when it is
    /// in doubt (for its recovery), else released — a settlement that never reached the
    /// scheme's step (its intent not written) settled nothing.
    pub(super) async fn notes_back(
        &self,
        payment: &mut VerifiedPayment,
        outcome: &Result<SettleResponse, Refusal>,
    ) {
        match outcome {
            Ok(_) => payment.notes = self.held_notes.take(&payment.key),
            Err(Refusal::SettlementInDoubt { .. }) => {}
            Err(_) => {
                let notes = self.held_notes.take(&payment.key);
                self.release_step(&payment.requirement.scheme, &payment.key, notes)
                    .await;
            }
        }
    }
}

/// The notes of payments being settled or in doubt, held by the core: handed to the scheme's
/// settle step (that of a recovery too), and back to the payment once it settled.
#[derive(Default)]
pub(super) struct HeldNotes(Mutex<HashMap<PaymentKey, Extensions>>);

impl HeldNotes {
    /// Keeps `notes` for the payment `key` (nothing when there are none).
    pub(super) fn keep(&self, key: &PaymentKey, notes: Extensions) {
        if notes.is_empty() {
            return;
        }
        let mut kept = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if kept.len() >= DOUBTFUL_NOTES {
            tracing::warn!(%key, "too many payments in doubt to keep their scheme's notes; this one's are dropped");
            return;
        }
        kept.insert(key.clone(), notes);
    }

    /// `read` asked with the notes kept for the payment `key` (empty when none were), left kept.
    pub(super) fn read<T>(&self, key: &PaymentKey, read: impl FnOnce(&Extensions) -> T) -> T {
        let kept = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        match kept.get(key) {
            Some(notes) => read(notes),
            None => {
                drop(kept);
                read(&Extensions::new())
            }
        }
    }

    /// The notes kept for the payment `key`, taken (empty when none were).
    pub(super) fn take(&self, key: &PaymentKey) -> Extensions {
        let mut kept = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if kept.is_empty() {
            return Extensions::new();
        }
        kept.remove(key).unwrap_or_default()
    }
}
