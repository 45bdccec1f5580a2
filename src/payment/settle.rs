//! Settlement through the facilitator, recorded in the ledger so that it happens once: the
//! write-ahead intent, the re-send on `settlement_pending`, the reconciler, and *in doubt*.

use std::sync::Arc;

use http::Extensions;
use serde_json::Map;
use x402_wire::SettleResponse;

use super::context::{CoreHandle, PaymentContext, SettleAnswer, send_to};
use super::decision::Decision;
use super::doubt::{in_doubt, reconcile};
use super::ledger::{Hold, lease_until, release};
use super::payments::{Payments, refuse};
use super::record::{Attempt, settled};
use super::refusal::Refusal;
use super::single_flight::InflightGuard;
use super::stages::HookStages;
use super::uncancellable::{Panicked, Uncancellable};
use crate::pricing::Offer;
use crate::settlement::{PaymentState, SettlementIntent};

/// `isValid: false` reasons that say the payment's authorization (its nonce) was used already:
/// for a payment the ledger does not know, it may have been used by this very payment.
const NONCE_USED_REASONS: [&str; 3] = [
    "invalid_exact_evm_nonce_already_used",
    "permit2_invalid_nonce",
    "invalid_permit2_nonce_already_used",
];

/// Whether `/verify` refused a payment because its nonce was used already.
pub(super) fn is_nonce_used(reason: Option<&str>) -> bool {
    reason.is_some_and(|reason| NONCE_USED_REASONS.contains(&reason))
}

/// Settles the payment held by `hold` and records the outcome. In [`Attempt::First`] the
/// *settling* intent is written first (nothing is sent if that fails).
///
/// Once the intent stands, `/settle` and the recording of its outcome run as work the request
/// cannot cancel, holding the payment's single-flight `guard`: polled in place while the request
/// waits for it, and spawned as a task of its own if the request is dropped meanwhile (the
/// client hung up), so a retry of the same payment waits for that outcome and is answered from
/// it. The guard comes back with the outcome (`None` only if the settlement panicked).
// An `async` block, not an `async fn`: an `async fn` would keep a second copy of the arguments
// it takes by value.
#[allow(clippy::manual_async_fn)]
pub(super) fn settle<'a>(
    config: &'a Arc<Payments>,
    offer: &'a Arc<Offer>,
    mut hold: Hold,
    intent: SettlementIntent,
    attempt: Attempt,
    guard: InflightGuard,
) -> impl Future<Output = (Result<SettleResponse, Refusal>, Option<InflightGuard>)> + Send + 'a {
    async move {
        let intent = if attempt == Attempt::First {
            match write_intent(config, offer, &mut hold, intent).await {
                Ok(intent) => intent,
                Err(answer) => return (answer, Some(guard)),
            }
        } else {
            intent
        };
        // Boxed where it is made, and only the box moves on: whoever awaits this carries a pointer,
        // not the settlement's state.
        let completion = {
            let (config, offer) = (Arc::clone(config), Arc::clone(offer));
            Box::pin(async move {
                let outcome = complete(&config, &offer, hold, &intent, attempt).await;
                (outcome, guard)
            })
        };
        let runtime = match tokio::runtime::Handle::try_current() {
            Ok(runtime) if config.settlement_outlives_request => Some(runtime),
            _ => None,
        };
        match runtime {
            Some(runtime) => match Uncancellable::new(completion, runtime).await {
                Ok((outcome, guard)) => (outcome, Some(guard)),
                Err(Panicked(error)) => {
                    // The settlement panicked: the intent stands, and a retry recovers the payment.
                    tracing::error!(%error, "settlement panicked; the payment is left to recovery");
                    let reason = format!("settlement panicked: {error}");
                    let refusal = refuse(config, offer, Refusal::SettlementInDoubt { reason });
                    (Err(refusal), None)
                }
            },
            // No runtime to outlive the request on (or told not to): settle in place.
            None => {
                let (outcome, guard) = completion.await;
                (outcome, Some(guard))
            }
        }
    }
}

/// Before a first `/settle`: the hooks, then the *settling* intent written (nothing is sent if
/// that fails). The intent to send, `hold` now at the version written; or the answer without a
/// `/settle` (a hook settled or refused the payment, or the intent could not be written).
// An `async` block, not an `async fn`, which would keep a second copy of `intent`.
#[allow(clippy::manual_async_fn)]
fn write_intent<'a>(
    config: &'a Arc<Payments>,
    offer: &'a Arc<Offer>,
    hold: &'a mut Hold,
    intent: SettlementIntent,
) -> impl Future<Output = Result<SettlementIntent, Result<SettleResponse, Refusal>>> + Send + 'a {
    async move {
        let mut intent = if !config.hooks.take_part(HookStages::BEFORE_SETTLE) {
            intent
        } else {
            // Boxed: a path only hooks take, kept out of the size of every settlement.
            Box::pin(hooked(config, offer, hold, intent)).await?
        };
        if let Some(scheme) = config
            .schemes
            .registered(intent.request.payment_requirements())
        {
            complete_request(config, scheme, hold, &mut intent);
        }
        // A new settlement goes to the facilitator that verified it (else the preferred one);
        // every retry of it goes to the same one.
        let intent = match intent.facilitator {
            Some(_) => intent,
            None => {
                let label = Arc::clone(&config.facilitators.preferred().label);
                intent.at_facilitator(label)
            }
        };
        // The intent moves into the state written and back out: no copy of the payment.
        let settling = PaymentState::Settling {
            owner: Arc::clone(&config.owner),
            lease_until: lease_until(config),
            intent,
        };
        let written = match config
            .store
            .replace(&hold.key, hold.version, &settling)
            .await
        {
            Ok(true) => Ok(()),
            // Taken over while this layer verified (its lease ran out): nothing was sent.
            Ok(false) => Err(Refusal::PaymentInProgress),
            Err(error) => {
                tracing::warn!(%error, key = %hold.key, "settling intent could not be written; nothing sent");
                Err(Refusal::RecordsUnavailable(error))
            }
        };
        let PaymentState::Settling { intent, .. } = settling else {
            // Built as `Settling` just above; answered like a busy payment, never panicking.
            return Err(Err(refuse(config, offer, Refusal::PaymentInProgress)));
        };
        if let Err(refusal) = written {
            return Err(Err(refuse(config, offer, refusal)));
        }
        hold.version += 1;
        Ok(intent)
    }
}

/// The request a scheme registered from outside completes from the payment's notes (a payment
/// channel's refund), written ahead with the intent so that a re-sent `/settle` carries it.
#[inline(never)]
fn complete_request(
    config: &Payments,
    scheme: &dyn super::Scheme,
    hold: &Hold,
    intent: &mut SettlementIntent,
) {
    let completed = config.held_notes.read(&hold.key, |notes| {
        scheme.completed_request(&intent.request, notes)
    });
    if let Some(request) = completed {
        intent.request = Arc::new(request);
    }
}

/// The hooks before a first `/settle`: the intent to send, or the answer without one (a hook
/// refused the payment, or settled it: recorded here).
async fn hooked(
    config: &Arc<Payments>,
    offer: &Offer,
    hold: &Hold,
    intent: SettlementIntent,
) -> Result<SettlementIntent, Result<SettleResponse, Refusal>> {
    // The scheme's notes, held by the core while the payment settles.
    let mut notes = config.held_notes.take(&hold.key);
    match before_settle(config, offer, hold, intent, &mut notes).await {
        Ok(intent) => {
            config.held_notes.keep(&hold.key, notes);
            Ok(intent)
        }
        Err(Skipped::Refused(refusal)) => Err(Err(refusal)),
        Err(Skipped::Settled(settlement, intent)) => {
            let attempt = Attempt::First;
            config.held_notes.keep(&hold.key, notes);
            Err(Ok(settled(
                config, offer, hold, &intent, settlement, attempt,
            )
            .await))
        }
    }
}

/// A payment the hooks kept from `/settle`.
// Built only on the hooks' path, inside its boxed future, and matched at once.
#[allow(clippy::large_enum_variant)]
enum Skipped {
    /// Refused by a hook, and released.
    Refused(Refusal),
    /// Settled by a hook, with the intent to record it under.
    Settled(SettleResponse, SettlementIntent),
}

/// Asks the hooks before a first settlement: abort (the payment is released), skip (a hook
/// settled it), or go on.
async fn before_settle(
    config: &Payments,
    offer: &Offer,
    hold: &Hold,
    intent: SettlementIntent,
    notes: &mut Extensions,
) -> Result<SettlementIntent, Skipped> {
    let context = PaymentContext::new(offer, &intent.resource, &hold.key, &intent.request);
    match config.hooks.before_settle(&context).await {
        Decision::Continue => {}
        Decision::Handled(settlement) => return Err(Skipped::Settled(settlement, intent)),
        Decision::Abort(refusal) => {
            release(config, hold).await;
            config
                .release_step(
                    intent.request.payment_requirements(),
                    &hold.key,
                    std::mem::take(notes),
                )
                .await;
            return Err(Skipped::Refused(refuse(config, offer, refusal)));
        }
    }
    Ok(intent)
}

/// Sends `/settle` for a payment whose *settling* intent stands and records what it answered.
// An `async` block, not an `async fn`, which would keep a second copy of `hold`; the answer is
// gone from the future before its recording is awaited (a local once borrowed is kept to the
// end of its scope).
#[allow(clippy::manual_async_fn)]
fn complete<'a>(
    config: &'a Arc<Payments>,
    offer: &'a Offer,
    hold: Hold,
    intent: &'a SettlementIntent,
    attempt: Attempt,
) -> impl Future<Output = Result<SettleResponse, Refusal>> + Send + 'a {
    async move {
        let registered = config
            .schemes
            .registered(intent.request.payment_requirements())
            .is_some();
        let recording = {
            let answer = if registered {
                // Boxed: only a scheme registered from outside takes this path.
                Box::pin(scheme_settles(config, offer, &hold, intent)).await
            } else {
                send(config, intent).await
            };
            match answer {
                SettleAnswer::Settled(settlement) => {
                    settled(config, offer, &hold, intent, settlement, attempt)
                }
                // Boxed: a path only a refused or lost `/settle` takes, kept out of every
                // settlement's size.
                unsettled => {
                    return Box::pin(not_settled(
                        config, offer, &hold, intent, unsettled, attempt,
                    ))
                    .await;
                }
            }
        };
        Ok(recording.await)
    }
}

/// A `/settle` that did not answer a settlement: released when the facilitator refused the
/// payment's first, else recovered or kept in doubt.
async fn not_settled(
    config: &Arc<Payments>,
    offer: &Offer,
    hold: &Hold,
    intent: &SettlementIntent,
    answer: SettleAnswer,
    attempt: Attempt,
) -> Result<SettleResponse, Refusal> {
    let requirement = intent.request.payment_requirements();
    let reason = match answer {
        // Answered before it comes here; recorded like any settlement if it did.
        SettleAnswer::Settled(settlement) => {
            return Ok(settled(config, offer, hold, intent, settlement, attempt).await);
        }
        SettleAnswer::Refused(settlement)
            if attempt == Attempt::First
                && !config.schemes.get(requirement).may_have_moved(&settlement) =>
        {
            release(config, hold).await;
            config.release_held(requirement, &hold.key).await;
            return Err(refuse(
                config,
                offer,
                Refusal::SettlementRefused(Box::new(settlement)),
            ));
        }
        // The scheme settled nothing, and said why.
        SettleAnswer::Declined(refusal) if attempt == Attempt::First => {
            release(config, hold).await;
            config.release_held(requirement, &hold.key).await;
            return Err(refuse(config, offer, *refusal));
        }
        SettleAnswer::Declined(refusal) => format!("the scheme did not settle it: {refusal}"),
        SettleAnswer::Refused(settlement) => {
            let reason = settlement
                .error_reason
                .as_deref()
                .unwrap_or("settlement_failed");
            format!("facilitator /settle answered success: false, {reason}")
        }
        // The answer was lost: the money may be moving right now. The buyer's retry recovers it.
        SettleAnswer::Failed(failure) if attempt == Attempt::First => {
            tracing::warn!(error = %failure, key = %hold.key, "facilitator settle failed; the payment may or may not have moved");
            let reason = failure.to_string();
            return Err(Box::pin(in_doubt(config, offer, hold, intent, reason)).await);
        }
        SettleAnswer::Failed(failure) => failure.to_string(),
    };
    Box::pin(reconcile(
        config,
        offer,
        hold.clone(),
        intent,
        reason,
        attempt,
    ))
    .await
}

/// A payment of a scheme registered from outside: its [settlement step](super::Scheme::settle),
/// else `/settle` as for any payment.
async fn scheme_settles(
    config: &Payments,
    offer: &Offer,
    hold: &Hold,
    intent: &SettlementIntent,
) -> SettleAnswer {
    let mut context = PaymentContext::new(offer, &intent.resource, &hold.key, &intent.request);
    let core = CoreHandle::new(
        &config.facilitators,
        config.pending_pause,
        intent.facilitator.as_deref(),
    );
    context.core = Some(&core);
    let scheme = config.schemes.get(intent.request.payment_requirements());
    // The notes the core held for the payment, back with it once the step answered (kept
    // for its recovery, or its release).
    let mut notes = config.held_notes.take(&hold.key);
    let answer = match scheme.settle(&context, &mut notes) {
        Some(step) => match step.await {
            Ok(settlement) if settlement.success => SettleAnswer::Settled(settlement),
            Ok(settlement) => SettleAnswer::Refused(settlement),
            Err(Refusal::SettlementRefused(settlement)) => SettleAnswer::Refused(*settlement),
            Err(Refusal::Facilitator(failure)) => SettleAnswer::Failed(failure),
            Err(refusal) => SettleAnswer::Declined(Box::new(refusal)),
        },
        None => send(config, intent).await,
    };
    let answer = match answer {
        SettleAnswer::Settled(mut settlement) => {
            if let Some(extra) = scheme.settlement_extra(&context, &notes, &settlement) {
                settlement.extra.get_or_insert_with(Map::new).extend(extra);
            }
            SettleAnswer::Settled(settlement)
        }
        other => other,
    };
    config.held_notes.keep(&hold.key, notes);
    answer
}

/// `/settle`, re-sent once (identically, after a pause) when it answers `settlement_pending`.
async fn send(config: &Payments, intent: &SettlementIntent) -> SettleAnswer {
    send_to(
        &config.facilitators,
        config.pending_pause,
        intent.facilitator.as_deref(),
        &intent.request,
    )
    .await
}
