//! What the core decided about a payment: [`Outcome`], and the [`Paid`] and [`Cleared`]
//! payments the work runs on.

use std::fmt;
use std::sync::Arc;

use x402_wire::{AtomicAmount, SettleResponse};

use super::charge::Charge;
use super::ledger::{self, Hold};
use super::payments::Payments;
use super::record::Attempt;
use super::refusal::Refusal;
use super::settle;
use super::single_flight::InflightGuard;
use super::verified::VerifiedPayment;
#[cfg(doc)]
use crate::pricing::SettlementMode;
use crate::settlement::SettlementIntent;

/// What [`Payments::authorize`] decided about a payment.
#[derive(Debug)]
#[non_exhaustive]
pub enum Outcome {
    /// Verified and held, not settled yet ([`SettlementMode::After`]): do the work, then
    /// [`Cleared::conclude`] — or [`Cleared::release`] when the work failed.
    Cleared(Cleared),
    /// Settled ([`SettlementMode::Before`], or a payment in doubt whose settlement was proven):
    /// deliver.
    Settled(Paid),
    /// Settled earlier and answered from its record, with no facilitator call: deliver again.
    Replayed(Paid),
    /// Settled, and not a payment for the work (its scheme
    /// [settles it without the work](super::Scheme::settles_without_work), as a payment
    /// channel's refund): answer with the settlement; the work is not run.
    Answered(Paid),
    /// `/settle` was sent but its outcome is unknown: the payment is kept *in doubt*
    /// ([`Refusal::SettlementInDoubt`]); the same payment presented again recovers it.
    InDoubt(Refusal),
    /// Refused; nothing settled.
    Refused(Refusal),
}

impl Outcome {
    /// The payment the work may run on, or the refusal to answer (in doubt or refused).
    // The refusal is answered at once, never passed along: not worth a box.
    #[allow(clippy::result_large_err)]
    pub(crate) fn into_pass(self) -> Result<Pass, Refusal> {
        match self {
            // The core lets a repeat through only for the request it bought, at a fixed price.
            Self::Settled(paid) | Self::Replayed(paid) => Ok(Pass::Paid(paid)),
            Self::Cleared(cleared) => Ok(Pass::Cleared(cleared)),
            Self::Answered(paid) => Ok(Pass::Answered(paid)),
            Self::InDoubt(refusal) | Self::Refused(refusal) => Err(refusal),
        }
    }
}

/// A payment the core let through, in every adapter's hands: settled already, or held to settle
/// once the work answered.
#[derive(Debug)]
pub(crate) enum Pass {
    /// Settled already (before the work, recovered, or a repeat answered from its record).
    Paid(Paid),
    /// Verified and held: settle once the work succeeded, release it when it failed.
    Cleared(Cleared),
    /// Settled, with no work to run: answer with the settlement.
    Answered(Paid),
}

impl Pass {
    /// The payment the work runs on.
    pub(crate) fn payment(&self) -> &VerifiedPayment {
        match self {
            Self::Paid(paid) | Self::Answered(paid) => paid.payment(),
            Self::Cleared(cleared) => cleared.payment(),
        }
    }
}

/// The outcome of a refusal: in doubt when settlement's outcome is unknown.
pub(super) fn refused(refusal: Refusal) -> Outcome {
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
    pub(super) fn new(payment: VerifiedPayment, guard: Option<InflightGuard>) -> Self {
        Self(Box::new(PaidParts {
            payment,
            _guard: guard,
        }))
    }

    /// The payment; its [`settlement`](VerifiedPayment::settlement) is set.
    pub fn payment(&self) -> &VerifiedPayment {
        &self.0.payment
    }

    /// Made before its settlement (so that the settlement's future carries a pointer to the
    /// payment, not the payment), then given it here with the single-flight `guard`.
    pub(super) fn settled(&mut self, settlement: SettleResponse, guard: Option<InflightGuard>) {
        self.0.payment.settlement = Some(settlement);
        self.0._guard = guard;
    }

    /// The payment, to complete before the work sees it.
    pub(super) fn payment_mut(&mut self) -> &mut VerifiedPayment {
        &mut self.0.payment
    }
}

/// A verified payment held in the ledger, to settle after the work ([`SettlementMode::After`]).
/// Holds the payment's single-flight lock until settled, released or dropped.
///
/// It ends one way, once the work answered: [`conclude`](Self::conclude) (settled for what the
/// work charged, or released when it failed), or [`release`](Self::release) /
/// [`refuse`](Self::refuse) without the work's answer. Dropping it without either leaves the
/// hold to expire after the [lease](Payments::settlement_lease), and has the hooks and the
/// payment's scheme hear it was cancelled.
pub struct Cleared(Box<ClearedParts>);

struct ClearedParts {
    payments: Arc<Payments>,
    payment: VerifiedPayment,
    hold: Hold,
    intent: SettlementIntent,
    /// Tells the hooks when the payment is dropped unsettled.
    cancel: Cancel,
    _guard: InflightGuard,
}

impl Cleared {
    pub(super) fn new(
        payments: Arc<Payments>,
        payment: VerifiedPayment,
        hold: Hold,
        intent: SettlementIntent,
        guard: InflightGuard,
    ) -> Self {
        let cancel = Cancel::new(&payments, &payment);
        Self(Box::new(ClearedParts {
            payments,
            payment,
            hold,
            intent,
            cancel,
            _guard: guard,
        }))
    }

    /// The verified payment (no settlement yet).
    pub fn payment(&self) -> &VerifiedPayment {
        &self.0.payment
    }

    /// Settles the requirement's amount: [`conclude`](Self::conclude) for a served fixed price.
    pub(crate) async fn settle(self) -> Result<Paid, Refusal> {
        let ClearedParts {
            payments,
            payment,
            hold,
            intent,
            mut cancel,
            _guard: guard,
        } = *self.0;
        // From here on the payment settles, or a settlement hook hears of its failure.
        cancel.disarm();
        // The payment goes into its `Paid` now, so that the settlement's future carries a
        // pointer to it rather than the payment.
        let mut paid = Paid::new(payment, None);
        // The scheme's notes are held by the core while the payment settles.
        let noted = payments.hold_notes(&mut paid.0.payment);
        let offer = &paid.payment().offer;
        let (outcome, guard) =
            settle::settle(&payments, offer, hold, intent, Attempt::First, guard).await;
        if noted {
            Box::pin(payments.notes_back(&mut paid.0.payment, &outcome)).await;
        }
        paid.settled(outcome?, guard);
        Ok(paid)
    }

    /// Settles `amount` (atomic units) of a metered (`upto`) payment ([`conclude`](Self::conclude)
    /// for a served charge): the `/settle` request —
    /// and the *settling* intent written before it — is the one its [scheme](super::Scheme)
    /// makes for the charge (for `upto`, the server's requirement with `amount` set to it), so a retry after a lost answer re-sends exactly it, and a
    /// repeat of the settled payment is answered from its record.
    ///
    /// Never settles more than the buyer signed: an `amount` above the requirement's (the
    /// signed maximum) settles nothing, releases the payment and answers
    /// [`Refusal::ChargeAboveMaximum`]. Zero settles nothing either: no `/settle` is sent, the
    /// payment is released (its authorization unused and usable again), and the answer is a
    /// settlement of `amount: "0"` with no transaction — unless the scheme
    /// [settles zero](super::Scheme::settles_zero), which settles it like any other amount. For any other scheme the amount must
    /// be the requirement's.
    pub(crate) async fn settle_amount(self, amount: AtomicAmount) -> Result<Paid, Refusal> {
        let maximum = self.0.payment.requirement.amount;
        let scheme = self.0.payments.schemes.get(&self.0.payment.requirement);
        if amount > maximum || (!scheme.metered() && amount != maximum) {
            tracing::error!(key = %self.0.hold.key, %amount, %maximum, "the charge set for this payment is above what the buyer signed; nothing settled");
            let refusal = Refusal::ChargeAboveMaximum {
                charged: amount,
                maximum,
            };
            // Boxed: a bug in the work, kept out of every settlement's future.
            return Err(Box::pin(self.refuse(refusal)).await);
        }
        if amount.get() == 0 && !scheme.settles_zero() {
            // Boxed: a charge of zero is the rare path, kept out of every settlement's future.
            return Box::pin(self.settle_nothing(amount)).await;
        }
        let mut cleared = self;
        let scheme = cleared
            .0
            .payments
            .schemes
            .get(&cleared.0.payment.requirement);
        if let Some(charged) = scheme.settle_request(&cleared.0.intent.request, amount) {
            cleared.0.intent.request = Arc::new(charged);
        }
        cleared.settle().await
    }

    /// A metered charge of zero, by the work's choice: served, nothing settled, the payment
    /// released (its authorization unused and usable again).
    async fn settle_nothing(self, amount: AtomicAmount) -> Result<Paid, Refusal> {
        let ClearedParts {
            payments,
            payment,
            hold,
            mut cancel,
            _guard: guard,
            ..
        } = *self.0;
        // Charged nothing, by the work's choice: served, not cancelled.
        cancel.disarm();
        // Not carried across the release: the settlement's future stays small.
        let mut paid = Paid::new(payment, Some(guard));
        ledger::release(&payments, &hold).await;
        // Never settled: the scheme lets go of what it held (boxed: only a scheme's payment
        // with notes takes this path).
        if !paid.0.payment.notes.is_empty() {
            Box::pin(payments.release_notes(&mut paid.0.payment)).await;
        }
        tracing::debug!(key = %hold.key, "metered charge of zero: nothing settled, the authorization stays unused");
        let payment = &mut paid.0.payment;
        payment.settlement = Some(SettleResponse {
            success: true,
            error_reason: None,
            error_message: None,
            transaction: String::new(),
            network: payment.requirement.network.clone(),
            payer: payment.payer.clone(),
            amount: Some(amount),
            extensions: None,
            extra: None,
        });
        Ok(paid)
    }

    /// Resolves the payment once the work answered — the one way every adapter ends a cleared
    /// payment (besides [`release`](Self::release) and [`refuse`](Self::refuse)): released when
    /// the work was not `served` (it failed: nothing is charged, and the payment can be used
    /// again; `Ok(None)`), else settled for what it charged, [`Paid`] once settled or the
    /// refusal ([`Refusal::SettlementInDoubt`] when the outcome is unknown):
    ///
    /// - a metered (`upto`) payment settles the amount set on its `charge`, else the amount the
    ///   work `named` another way (an HTTP handler's `Settlement-Overrides`), else zero — an
    ///   untouched charge settles nothing, never the maximum. Never more than the buyer signed:
    ///   an amount above the requirement's settles nothing, releases the payment and answers
    ///   [`Refusal::ChargeAboveMaximum`]. Zero settles nothing either (no `/settle`, the payment
    ///   released, its authorization usable again; the answer a settlement of `amount: "0"`
    ///   with no transaction), unless the scheme [settles zero](super::Scheme::settles_zero).
    ///   The `/settle` request is the one its [scheme](super::Scheme::settle_request) makes for
    ///   the charge, written into the ledger first.
    /// - any other payment settles the requirement's amount.
    ///
    /// Once the *settling* intent is written, `/settle` and the recording of its outcome run on
    /// a task of their own: dropping this future (a client that hung up) cancels neither, and
    /// the same payment presented again waits for that outcome and is answered from it.
    pub async fn conclude(
        self,
        served: bool,
        charge: Option<&Charge>,
        named: Option<AtomicAmount>,
    ) -> Result<Option<Paid>, Refusal> {
        match Conclusion::of(served, charge, named) {
            Conclusion::Release => {
                self.release().await;
                Ok(None)
            }
            Conclusion::Settle => self.settle().await.map(Some),
            Conclusion::SettleAmount(amount) => self.settle_amount(amount).await.map(Some),
        }
    }

    /// Releases the payment unsettled and reports `refusal`, a bug in the work: nothing moved.
    /// The hooks hear it was cancelled.
    pub async fn refuse(mut self, refusal: Refusal) -> Refusal {
        let payments = Arc::clone(&self.0.payments);
        let offer = Arc::clone(&self.0.payment.offer);
        ledger::release(&payments, &self.0.hold).await;
        self.0.cancel.now().await;
        payments.report_refusal(&offer, &refusal);
        refusal
    }

    /// Lets go of the payment without settling it (the work failed), so that it can be used
    /// again. The hooks hear it was cancelled.
    pub async fn release(mut self) {
        ledger::release(&self.0.payments, &self.0.hold).await;
        self.0.cancel.now().await;
    }
}

/// What [`Cleared::conclude`] does with a payment once the work answered, decided before any
/// of it is done: an adapter that keeps one future per step asks this, so that it and
/// `conclude` cannot decide differently.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Conclusion {
    /// The work failed: release the payment, charging nothing.
    Release,
    /// Settle the requirement's amount.
    Settle,
    /// Settle this amount of a metered payment (checked against what the buyer signed).
    SettleAmount(AtomicAmount),
}

impl Conclusion {
    /// For work that `served` or failed, with the payment's `charge` (metered payments only)
    /// and the amount the work `named` another way.
    pub(crate) fn of(served: bool, charge: Option<&Charge>, named: Option<AtomicAmount>) -> Self {
        match charge {
            _ if !served => Conclusion::Release,
            Some(charge) => Conclusion::SettleAmount(charge.settled(named)),
            None => Conclusion::Settle,
        }
    }
}

/// A payment's cancellation, told to its scheme once: when the payment is released, or
/// dropped before it settled. Holds nothing when the scheme noted nothing on the payment (it
/// holds nothing to release), and a pointer when it did, so that a payment of `exact` or `upto`
/// carries one word for it.
struct Cancel(Option<Box<(Arc<Payments>, VerifiedPayment)>>);

impl Cancel {
    fn new(payments: &Arc<Payments>, payment: &VerifiedPayment) -> Self {
        let told = !payment.notes.is_empty();
        Self(told.then(|| Box::new((Arc::clone(payments), payment.clone()))))
    }

    fn disarm(&mut self) {
        self.0 = None;
    }

    /// Tells the payment's scheme now.
    async fn now(&mut self) {
        if let Some(cancelled) = self.0.take() {
            let (payments, payment) = *cancelled;
            cancelled_payment(&payments, payment).await;
        }
    }
}

/// Has the scheme of `payment`, cancelled, release it.
async fn cancelled_payment(payments: &Payments, mut payment: VerifiedPayment) {
    let notes = std::mem::take(&mut payment.notes);
    let requirement = &payment.requirement;
    payments
        .release_step(requirement, &payment.key, notes)
        .await;
}

impl Drop for Cancel {
    fn drop(&mut self) {
        let Some(cancelled) = self.0.take() else {
            return;
        };
        let (payments, payment) = *cancelled;
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move { cancelled_payment(&payments, payment).await });
            }
            Err(_) => {
                tracing::warn!(key = %payment.key, "no runtime to release a cancelled payment's scheme notes on")
            }
        }
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
