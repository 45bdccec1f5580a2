//! The flow of one payment through the core: the accept it pays, the single-flight, the ledger
//! claim, the replay of a settled payment, the recovery of one in doubt, verification, and
//! settlement before the work.

use std::sync::Arc;

use http::Extensions;
use tracing::Instrument as _;
use x402_wire::{FacilitatorRequest, PaymentPayload, PaymentRequirements, VerifyResponse};

use super::context::PaymentContext;
use super::decision::{Considering, Decision, Opening, Prelude};
use super::delivery::{self, RequestDigest};
use super::event::PaymentEvent;
use super::ledger::{self, Claim, Hold};
use super::outcome::{Cleared, Outcome, Paid, refused};
use super::payments::Payments;
use super::record::Attempt;
use super::refusal::Refusal;
use super::request::ProtectedRequest;
use super::settle;
use super::single_flight::InflightGuard;
use super::stages::HookStages;
use super::steps::{VerifyFailed, scheme_checks, scheme_verifies};
use super::verified::VerifiedPayment;
use crate::pricing::Offer;
#[cfg(doc)]
use crate::pricing::SettlementMode;
use crate::settlement::{
    Fingerprint, PaymentKey, PaymentState, SettlementIntent, SettlementRecord,
};

impl Payments {
    /// The hooks' part of a priced request that needs no waiting, before its payment is read
    /// (the adapters ask it only when [`has_hooks`](Self::has_hooks)): the offer with the
    /// hooks' challenge extensions, and whether a hook must still [decide](Self::decide)
    /// about the request.
    pub(crate) fn open(&self, request: &ProtectedRequest<'_>) -> Opening {
        self.hooks.open(request)
    }

    /// The decision of the hooks that consider `request` (priced with the offer
    /// [`open`](Self::open) gave): serve it without payment, refuse it (reported here), or go
    /// on.
    pub(crate) async fn decide(
        &self,
        request: &ProtectedRequest<'_>,
        considering: Considering,
    ) -> Prelude {
        let prelude = self.hooks.decide(request, considering).await;
        if let Prelude::Refused(offer, refusal) = &prelude {
            self.report_refusal(offer, refusal);
        }
        prelude
    }

    /// The accept of `offer` that `payload` pays, as its [scheme](super::Scheme) matches it, or
    /// why none: the payment names another resource ([`Refusal::OtherResource`]) or matches
    /// none of the accepts ([`Refusal::NoMatchingRequirement`], naming the first field that
    /// differs).
    // A `Refusal` is large, but this one is built on the refusal path only and answered at once.
    #[allow(clippy::result_large_err)]
    pub fn accepted<'o>(
        &self,
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
        let accepted = &payload.accepted;
        let mismatch = |own: &PaymentRequirements| self.schemes.get(own).mismatch(own, accepted);
        offer
            .find_accept(|own| mismatch(own).is_none())
            .ok_or_else(|| {
                let closest = offer
                    .accepts()
                    .iter()
                    .find(|own| own.network == accepted.network && own.scheme == accepted.scheme)
                    .or_else(|| offer.accepts().first());
                Refusal::NoMatchingRequirement {
                    field: closest.and_then(mismatch),
                }
            })
    }

    /// The adapters' entry for a decoded payment: reports it received, finds the accept of
    /// `offer` it pays ([`accepted`](Self::accepted)) and [`authorize`](Self::authorize)s it for
    /// `request`, the request it comes with. Every refusal is reported before it is returned.
    ///
    /// The payload is taken shared (a [`PaymentPayload`] is made an `Arc` once, here): it is
    /// kept by the payment, the facilitator's request and the ledger's intent, never copied.
    pub fn pay<'a>(
        self: &'a Arc<Self>,
        offer: &'a Arc<Offer>,
        payload: impl Into<Arc<PaymentPayload>>,
        request: RequestDigest,
    ) -> impl Future<Output = Outcome> + Send + 'a {
        self.pay_shared(offer, payload.into(), request)
    }

    /// [`pay`](Self::pay), the payload shared: the future holds a pointer to it, not the
    /// payload.
    // An `async` block, not an `async fn`, which would keep a second copy of its arguments.
    #[allow(clippy::manual_async_fn)]
    fn pay_shared<'a>(
        self: &'a Arc<Self>,
        offer: &'a Arc<Offer>,
        payload: Arc<PaymentPayload>,
        request: RequestDigest,
    ) -> impl Future<Output = Outcome> + Send + 'a {
        async move {
            self.hooks.observe(&PaymentEvent::Received {
                offer,
                payload: &payload,
            });
            let requirement = match self.accepted(offer, &payload) {
                Ok(requirement) => Arc::clone(requirement),
                Err(refusal) => return self.refuse(offer, refusal),
            };
            self.authorize_shared(offer, payload, requirement, request)
                .await
        }
    }

    /// Single-flights the payment, claims it in the ledger, answers repeats from their record,
    /// recovers payments in doubt, verifies new payments and, in [`SettlementMode::Before`],
    /// settles them. `requirement` is the offer's accept the payment matched
    /// ([`accepted`](Self::accepted)); `request` is the request the payment comes with, recorded
    /// with it: a payment buys one delivery of one request (see [`RequestDigest`] for what a
    /// repeat is answered). Refusals are reported to the hooks ([`PaymentHooks::observe`](super::PaymentHooks::observe)) before they are returned.
    ///
    /// The payload is taken shared, as by [`pay`](Self::pay).
    pub fn authorize<'a>(
        self: &'a Arc<Self>,
        offer: &'a Arc<Offer>,
        payload: impl Into<Arc<PaymentPayload>>,
        requirement: Arc<PaymentRequirements>,
        request: RequestDigest,
    ) -> impl Future<Output = Outcome> + Send + 'a {
        self.authorize_shared(offer, payload.into(), requirement, request)
    }

    /// [`authorize`](Self::authorize), the payload shared.
    // An `async` block, not an `async fn`, which would keep a second copy of its arguments.
    #[allow(clippy::manual_async_fn)]
    fn authorize_shared<'a>(
        self: &'a Arc<Self>,
        offer: &'a Arc<Offer>,
        payload: Arc<PaymentPayload>,
        requirement: Arc<PaymentRequirements>,
        request: RequestDigest,
    ) -> impl Future<Output = Outcome> + Send + 'a {
        async move {
            let fingerprint = match self.schemes.get(&requirement).identify(&payload) {
                Ok(text) => Fingerprint::from_text(text),
                Err(refusal) => return self.refuse(offer, refusal),
            };
            let key = PaymentKey::with_fingerprint(&payload, &fingerprint);
            let without_work = self
                .schemes
                .get(&requirement)
                .settles_without_work(&payload);
            let guard = Arc::clone(&self.inflight).acquire(key.clone()).await;

            if let Some(reason) = self.refused.get(&fingerprint, &payload.payload) {
                return self.refuse(offer, Refusal::InvalidPayment { reason });
            }

            if let Some(record) = self
                .recent_settlements
                .as_ref()
                .and_then(|recent| recent.get(&key))
            {
                return self.replay(offer, payload, &fingerprint, record, &request, guard);
            }
            let hold = match ledger::claim(self, &key, &fingerprint).await {
                Claim::Fresh(hold) => hold,
                Claim::Settled(record) => {
                    return self.replay(offer, payload, &fingerprint, *record, &request, guard);
                }
                Claim::Recover(_, intent)
                    if !delivery::same_request(intent.request_digest.as_deref(), &request) =>
                {
                    // Recovered only by the request it was sent with; left in doubt.
                    let refusal = Refusal::UsedForAnotherRequest { settlement: None };
                    return self.refuse(offer, refusal);
                }
                Claim::Recover(hold, intent) => {
                    // Boxed, as below: recovery is rare, and kept out of every payment's future.
                    return Box::pin(self.recover(offer, hold, *intent, guard)).await;
                }
                Claim::Refuse(refusal) => return self.refuse(offer, *refusal),
            };

            let digest = request.into_shared();
            let request = Arc::new(FacilitatorRequest::new(payload, Arc::clone(&requirement)));
            // Only the payer is kept of the facilitator's answer: the rest is not carried on.
            let (verifier, payer) = match self.verify(offer, &key, &request).await {
                Ok((verifier, verified)) => (verifier, verified.payer),
                // Boxed: the failure's answer is not kept in every payment's future.
                Err(failure) => {
                    let failed = Failed {
                        fingerprint,
                        request,
                        digest,
                        hold,
                        guard,
                    };
                    return Box::pin(self.unverified(offer, failure, failed)).await;
                }
            };

            // What a registered scheme's verify step noted, held by the core until now.
            let notes = match self.schemes.registered(&requirement) {
                Some(_) => self.held_notes.take(&key),
                None => Extensions::new(),
            };
            let payment = VerifiedPayment {
                key,
                payer,
                requirement,
                payload: Arc::clone(request.payment_payload()),
                settlement: None,
                replayed: false,
                offer: Arc::clone(offer),
                notes,
            };
            // The payment moves into the hooks' boxed future and back out: this future does not
            // carry it across their await.
            let payment = if !self.hooks.take_part(HookStages::AFTER_VERIFY) {
                payment
            } else {
                match Box::pin(self.after_verify(payment, &hold)).await {
                    Ok(payment) => payment,
                    Err(refusal) => return self.refuse(offer, refusal),
                }
            };
            let intent = SettlementIntent::with_fingerprint(
                fingerprint,
                Arc::clone(offer.resource_url()),
                request,
                digest,
            );
            // The facilitator that verified the payment settles it (a payment a hook verified, the
            // preferred one).
            let intent = match verifier {
                Some(verifier) => intent.at_facilitator(verifier),
                None => intent,
            };
            if offer.settlement_mode().settles_after_work() && !without_work {
                return Outcome::Cleared(Cleared::new(
                    Arc::clone(self),
                    payment,
                    hold,
                    intent,
                    guard,
                ));
            }
            // The payment goes into its `Paid` now: this future carries a pointer to it across the
            // settlement, not the payment. The settlement is boxed: a payment settled after the work
            // (the default) does not carry its size in this future.
            let mut paid = Paid::new(payment, None);
            let noted = self.hold_notes(paid.payment_mut());
            let (outcome, guard) = Box::pin(settle::settle(
                self,
                offer,
                hold,
                intent,
                Attempt::First,
                guard,
            ))
            .await;
            if noted {
                Box::pin(self.notes_back(paid.payment_mut(), &outcome)).await;
            }
            match outcome {
                Ok(settlement) => {
                    let payment = paid.payment_mut();
                    payment.payer = payment.payer.take().or_else(|| settlement.payer.clone());
                    paid.settled(settlement, guard);
                }
                Err(refusal) => {
                    self.remember_settle_refusal(offer, paid.payment(), &refusal);
                    return refused(refusal);
                }
            }
            if without_work {
                return Outcome::Answered(paid);
            }
            Outcome::Settled(paid)
        }
    }

    /// A new payment that did not verify: recovered when its nonce is used (money may have
    /// moved), else released and refused.
    async fn unverified(
        self: &Arc<Self>,
        offer: &Arc<Offer>,
        failure: VerifyFailed,
        failed: Failed,
    ) -> Outcome {
        let Failed {
            fingerprint,
            request,
            digest,
            hold,
            guard,
        } = failed;
        match failure {
            VerifyFailed::NonceUsed(verifier) => {
                // The authorization was used, and this ledger does not know by whom: possibly
                // by this very payment, settled by a process that stopped before recording it.
                // Money may have moved, so it is in doubt (503), never 402: recovered like one.
                let intent = SettlementIntent::with_fingerprint(
                    fingerprint,
                    Arc::clone(offer.resource_url()),
                    request,
                    digest,
                )
                .at_facilitator(verifier);
                Box::pin(self.recover(offer, hold, intent, guard)).await
            }
            failure => {
                ledger::release(self, &hold).await;
                self.refuse(offer, failure.into_refusal(&fingerprint, &request, self))
            }
        }
    }

    /// Verifies a new payment: at the facilitator, unless a hook verified it or `/settle` will
    /// ([`settles_unverified`](Self::settles_unverified)); a failure a hook recovers from goes on
    /// as verified. Returns the label of the facilitator that verified it.
    async fn verify(
        &self,
        offer: &Offer,
        key: &PaymentKey,
        request: &FacilitatorRequest,
    ) -> Result<(Option<Arc<str>>, VerifyResponse), VerifyFailed> {
        // Made for each step that asks for it: not carried across `/verify`.
        let context = || PaymentContext::new(offer, offer.resource_url(), key, request);
        // What only the time tells (a permit past its deadline), before anyone verifies it.
        if let Some(refusal) = self.refuse_new(request) {
            return Err(VerifyFailed::Hook(refusal));
        }
        let requirement = request.payment_requirements();
        // A flag, not the scheme: holding the scheme's reference across the awaits below cost
        // every paid request about 1,500 instructions (measured); the steps look it up.
        let registered = self.schemes.registered(requirement).is_some();
        if registered {
            // Boxed: only a scheme registered from outside takes this path. Before anyone is
            // asked, `/verify` or the `/settle` sent without it.
            if let Some(failed) = Box::pin(scheme_checks(self, context())).await {
                return Err(failed);
            }
        }
        if self.hooks.take_part(HookStages::BEFORE_VERIFY) {
            match Box::pin(self.hooks.before_verify(&context())).await {
                Decision::Continue => {}
                Decision::Handled(verified) if verified.is_valid => return Ok((None, verified)),
                Decision::Handled(verified) => return Err(VerifyFailed::Invalid(verified)),
                Decision::Abort(refusal) => return Err(VerifyFailed::Hook(refusal)),
            }
        }
        if registered {
            // Boxed: only a scheme registered from outside takes this path.
            if let Some(verified) = Box::pin(scheme_verifies(self, context())).await {
                return verified;
            }
        }
        if self.settles_unverified(offer) {
            // `/settle` verifies it: one round trip, at the preferred facilitator.
            let valid = VerifyResponse {
                is_valid: true,
                ..VerifyResponse::default()
            };
            return Ok((None, valid));
        }
        let span = self.facilitators.verify_span(request);
        let (verifier, verified) = self.facilitators.verify(request).instrument(span).await;
        let failed = match verified {
            Ok(verified) if verified.is_valid => return Ok((Some(verifier), verified)),
            Ok(verified) if settle::is_nonce_used(verified.invalid_reason.as_deref()) => {
                tracing::warn!(%key, reason = ?verified.invalid_reason, "verify says the payment's nonce is used; treating it as in doubt");
                return Err(VerifyFailed::NonceUsed(verifier));
            }
            Ok(verified) => VerifyFailed::Invalid(verified),
            Err(failure) => {
                tracing::warn!(error = %failure, "facilitator verify failed");
                VerifyFailed::Facilitator(failure)
            }
        };
        if !self.hooks.take_part(HookStages::VERIFY_FAILURE) {
            return Err(failed);
        }
        // Boxed: the failure and the hooks' answer are not carried in every payment's future.
        Box::pin(self.verify_failed(&context(), verifier, failed)).await
    }

    /// Asks the hooks to recover a verification that failed (a hook that verifies the
    /// payment itself); `failed` stands when none does.
    async fn verify_failed(
        &self,
        context: &PaymentContext<'_>,
        verifier: Arc<str>,
        failed: VerifyFailed,
    ) -> Result<(Option<Arc<str>>, VerifyResponse), VerifyFailed> {
        let failure = match &failed {
            VerifyFailed::Invalid(verified) => Ok(verified),
            VerifyFailed::Facilitator(failure) => Err(failure),
            VerifyFailed::Hook(_) | VerifyFailed::NonceUsed(_) => return Err(failed),
        };
        match self.hooks.on_verify_failure(context, failure).await {
            Some(verified) => Ok((Some(verifier), verified)),
            None => Err(failed),
        }
    }

    /// Reports `refusal` and returns it as the outcome.
    /// Asks the hooks whether a verified payment goes on to the work. A refusal releases the
    /// payment, never settled, and its scheme releases what it held for it. One future, boxed by the caller, so a payment
    /// with no hooks carries none of it; the payment goes in and, let pass, comes back out.
    async fn after_verify(
        &self,
        payment: VerifiedPayment,
        hold: &Hold,
    ) -> Result<VerifiedPayment, Refusal> {
        let mut payment = payment;
        let refusal = match self.hooks.after_verify(&payment).await {
            Ok(()) => return Ok(payment),
            Err(refusal) => refusal,
        };
        ledger::release(self, hold).await;
        let notes = std::mem::take(&mut payment.notes);
        self.release_step(&payment.requirement, &payment.key, notes)
            .await;
        Err(refusal)
    }

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
        // What this core's scheme noted before the payment went in doubt (nothing after a
        // restart).
        // What this core's scheme noted before the doubt stays held for the settle step.
        let (outcome, guard) =
            settle::settle(self, offer, hold, intent.clone(), attempt, guard).await;
        let notes = self.held_notes.take(&key);
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
            notes,
        };
        if self
            .schemes
            .get(&payment.requirement)
            .settles_without_work(&payment.payload)
        {
            return Outcome::Answered(Paid::new(payment, guard));
        }
        Outcome::Settled(Paid::new(payment, guard))
    }

    /// Answers a payment that has a settlement record: the same resource gets the recorded
    /// settlement again; anything else is refused.
    fn replay(
        &self,
        offer: &Arc<Offer>,
        payload: Arc<PaymentPayload>,
        fingerprint: &Fingerprint,
        record: SettlementRecord,
        request: &RequestDigest,
        guard: InflightGuard,
    ) -> Outcome {
        if *fingerprint != *record.fingerprint {
            return self.refuse(offer, Refusal::IdentifierReused);
        }
        if record.resource != *offer.resource_url() {
            return self.refuse(offer, Refusal::SettledForAnotherResource);
        }
        let metered = self.schemes.metered(&record.requirement);
        if let Err(refusal) = delivery::redelivery(&record, request, metered) {
            return self.refuse(offer, refusal);
        }
        self.hooks.observe(&PaymentEvent::Replayed {
            offer,
            record: &record,
        });
        let payment = VerifiedPayment {
            key: record.key,
            payer: record.settlement.payer.clone(),
            requirement: record.requirement,
            payload,
            settlement: Some(record.settlement),
            replayed: true,
            offer: Arc::clone(offer),
            notes: Extensions::new(),
        };
        Outcome::Replayed(Paid::new(payment, Some(guard)))
    }
}

/// What a payment that did not verify still holds: what its recovery needs, its hold in the
/// ledger and its single-flight guard.
struct Failed {
    fingerprint: Fingerprint,
    request: Arc<FacilitatorRequest>,
    digest: Arc<str>,
    hold: Hold,
    guard: InflightGuard,
}
