//! Settlement through the facilitator, recorded in the ledger so that it happens once: the
//! write-ahead intent, the re-send on `settlement_pending`, the reconciler, and *in doubt*.

use tracing::Instrument as _;

use super::ledger::{Hold, lease_until, now_ms, release};
use super::{PaymentEvent, Payments, Refusal};
use crate::facilitator::FacilitatorError;
use crate::pricing::Offer;
use crate::proto::{FacilitatorRequest, SettleResponse};
use crate::settlement::{PaymentState, Reconciliation, SettlementIntent, SettlementRecord};

/// `success: false` reasons that do not prove nothing moved: the transaction may be on its way
/// (`settlement_pending`), or the authorization was used — possibly by this very payment.
const UNCERTAIN_REASONS: [&str; 5] = [
    "settlement_pending",
    "invalid_exact_evm_nonce_already_used",
    "unexpected_settle_error",
    "invalid_transaction_state",
    "duplicate_settlement",
];

/// Whose `/settle` this is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Attempt {
    /// The payment's first: a definite refusal releases it (402).
    First,
    /// A recovery of a payment in doubt, already marked *settling* by this layer: only a
    /// success or the reconciler's proof settles it.
    Recovery,
}

/// What `/settle` answered, after the one re-send `settlement_pending` calls for.
enum SettleAnswer {
    Settled(SettleResponse),
    Refused(SettleResponse),
    Failed(FacilitatorError),
}

/// Settles the payment held by `hold` and records the outcome. In [`Attempt::First`] the
/// *settling* intent is written first (nothing is sent if that fails). `Err` is the response.
pub(super) async fn settle(
    config: &Payments,
    offer: &Offer,
    mut hold: Hold,
    intent: SettlementIntent,
    attempt: Attempt,
) -> Result<SettleResponse, Refusal> {
    let intent = if attempt == Attempt::First {
        // The intent moves into the state written and back out: no copy of the payment.
        let settling = PaymentState::Settling {
            owner: config.owner.to_string(),
            lease_until: lease_until(config),
            intent,
        };
        match config
            .store
            .replace(&hold.key, hold.version, &settling)
            .await
        {
            Ok(true) => hold.version += 1,
            // Taken over while this layer verified (its lease ran out): nothing was sent.
            Ok(false) => return Err(refuse(config, offer, Refusal::PaymentInProgress)),
            Err(error) => {
                tracing::warn!(%error, key = %hold.key, "settling intent could not be written; nothing sent");
                return Err(refuse(config, offer, Refusal::RecordsUnavailable(error)));
            }
        }
        let PaymentState::Settling { intent, .. } = settling else {
            // Built as `Settling` just above; answered like a busy payment, never panicking.
            return Err(refuse(config, offer, Refusal::PaymentInProgress));
        };
        intent
    } else {
        intent
    };
    let intent = &intent;
    let answer = send(config, &intent.request).await;
    let reason = match answer {
        SettleAnswer::Settled(settlement) => {
            return Ok(settled(config, offer, &hold, intent, settlement, attempt).await);
        }
        SettleAnswer::Refused(settlement)
            if attempt == Attempt::First && !is_uncertain(&settlement) =>
        {
            release(config, &hold).await;
            return Err(refuse(
                config,
                offer,
                Refusal::SettlementRefused(settlement),
            ));
        }
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
            return Err(in_doubt(config, offer, &hold, intent, failure.to_string()).await);
        }
        SettleAnswer::Failed(failure) => failure.to_string(),
    };
    reconcile(config, offer, hold, intent, reason, attempt).await
}

/// `/settle`, re-sent once (identically, after a pause) when it answers `settlement_pending`.
async fn send(config: &Payments, request: &FacilitatorRequest) -> SettleAnswer {
    let first = settle_once(config, request).await;
    match first {
        SettleAnswer::Refused(ref settlement)
            if settlement.error_reason.as_deref() == Some("settlement_pending") =>
        {
            tokio::time::sleep(config.pending_pause).await;
            settle_once(config, request).await
        }
        other => other,
    }
}

async fn settle_once(config: &Payments, request: &FacilitatorRequest) -> SettleAnswer {
    let requirement = &request.payment_requirements;
    let span = tracing::info_span!("x402.settle", network = %requirement.network, scheme = %requirement.scheme);
    match config.facilitator.settle(request).instrument(span).await {
        Ok(settlement) if settlement.success => SettleAnswer::Settled(settlement),
        Ok(settlement) => SettleAnswer::Refused(settlement),
        Err(failure) => SettleAnswer::Failed(failure),
    }
}

fn is_uncertain(settlement: &SettleResponse) -> bool {
    settlement
        .error_reason
        .as_deref()
        .is_some_and(|reason| UNCERTAIN_REASONS.contains(&reason))
}

/// Asks the reconciler; without one, or when it cannot tell, the payment stays in doubt.
async fn reconcile(
    config: &Payments,
    offer: &Offer,
    hold: Hold,
    intent: &SettlementIntent,
    reason: String,
    attempt: Attempt,
) -> Result<SettleResponse, Refusal> {
    let Some(reconciler) = &config.reconciler else {
        let reason = format!("{reason}; no reconciler to ask the chain");
        return Err(in_doubt(config, offer, &hold, intent, reason).await);
    };
    let span = tracing::info_span!("x402.reconcile", key = %hold.key);
    match reconciler.reconcile(&intent.request).instrument(span).await {
        Reconciliation::Settled { transaction } => {
            let settlement = reconciled_settlement(&intent.request, transaction);
            Ok(settled(config, offer, &hold, intent, settlement, attempt).await)
        }
        Reconciliation::NotSettled if authorization_expired(&intent.request) => {
            release(config, &hold).await;
            tracing::warn!(key = %hold.key, "payment never settled and its authorization expired; released");
            config.emit(|| PaymentEvent::DoubtResolved {
                offer,
                key: &hold.key,
                settlement: None,
            });
            Err(refuse(config, offer, Refusal::AuthorizationExpired))
        }
        Reconciliation::NotSettled => {
            let reason = format!("{reason}; not on chain yet and the authorization is still valid");
            Err(in_doubt(config, offer, &hold, intent, reason).await)
        }
        Reconciliation::Unknown { reason: unknown } => {
            let reason = format!("{reason}; reconciler: {unknown}");
            Err(in_doubt(config, offer, &hold, intent, reason).await)
        }
    }
}

/// The settlement the reconciler proved, in the facilitator's terms.
fn reconciled_settlement(request: &FacilitatorRequest, transaction: String) -> SettleResponse {
    let requirement = &request.payment_requirements;
    SettleResponse {
        success: true,
        error_reason: None,
        error_message: None,
        transaction,
        network: requirement.network.clone(),
        payer: request
            .payment_payload
            .exact_evm()
            .ok()
            .map(|evm| evm.authorization.from),
        amount: Some(requirement.amount),
        extensions: None,
    }
}

/// Whether the payment's authorization can no longer be used (EIP-3009 `validBefore` passed).
/// Payments of other schemes never count as expired, so they are never released on a
/// reconciler's word alone.
fn authorization_expired(request: &FacilitatorRequest) -> bool {
    request
        .payment_payload
        .exact_evm()
        .ok()
        .and_then(|evm| evm.authorization.valid_before.parse::<u64>().ok())
        .is_some_and(|valid_before| valid_before.saturating_mul(1000) <= now_ms())
}

/// Records a settlement and reports it. The money has moved: a failure to record is logged
/// (the in-memory recent settlements still recognise a retry) and the buyer is served anyway.
async fn settled(
    config: &Payments,
    offer: &Offer,
    hold: &Hold,
    intent: &SettlementIntent,
    settlement: SettleResponse,
    attempt: Attempt,
) -> SettleResponse {
    config.emit(|| PaymentEvent::Settled {
        offer,
        settlement: &settlement,
    });
    if attempt == Attempt::Recovery {
        tracing::info!(key = %hold.key, transaction = %settlement.transaction, "payment in doubt settled");
        config.emit(|| PaymentEvent::DoubtResolved {
            offer,
            key: &hold.key,
            settlement: Some(&settlement),
        });
    }
    let record = SettlementRecord::of_intent(hold.key.clone(), intent, settlement.clone());
    if let Some(recent) = &config.recent_settlements {
        recent.remember(&record);
    }
    let state = PaymentState::Settled { record };
    let mut version = hold.version;
    // Proof of settlement wins over whatever another process wrote meanwhile (its lease ran out
    // and it recovered the payment, perhaps into doubt): record it over any unsettled state.
    for _ in 0..3 {
        match config.store.replace(&hold.key, version, &state).await {
            Ok(true) => return settlement,
            Ok(false) => match config.store.load(&hold.key).await {
                Ok(Some(entry)) if !matches!(entry.state, PaymentState::Settled { .. }) => {
                    version = entry.version;
                }
                Ok(Some(_)) => return settlement,
                Ok(None) => {
                    if matches!(config.store.insert(&hold.key, &state).await, Ok(true)) {
                        return settlement;
                    }
                }
                Err(error) => {
                    tracing::error!(%error, key = %hold.key, transaction = %settlement.transaction, "settled payment could not be recorded");
                    return settlement;
                }
            },
            Err(error) => {
                tracing::error!(%error, key = %hold.key, transaction = %settlement.transaction, "settled payment could not be recorded");
                return settlement;
            }
        }
    }
    tracing::error!(key = %hold.key, transaction = %settlement.transaction, "settled payment could not be recorded: its entry kept changing");
    settlement
}

/// Marks the payment *in doubt*, logs everything an operator needs to settle it by hand, and
/// answers 503 (retry the same payment).
async fn in_doubt(
    config: &Payments,
    offer: &Offer,
    hold: &Hold,
    intent: &SettlementIntent,
    reason: String,
) -> Refusal {
    let request = &intent.request;
    let requirement = &request.payment_requirements;
    let authorization = request
        .payment_payload
        .exact_evm()
        .ok()
        .map(|evm| evm.authorization);
    tracing::error!(
        key = %hold.key,
        resource = %intent.resource,
        network = %requirement.network,
        asset = %requirement.asset,
        pay_to = %requirement.pay_to,
        amount = %requirement.amount,
        payer = authorization.as_ref().map_or("", |a| a.from.as_str()),
        nonce = authorization.as_ref().map_or("", |a| a.nonce.as_str()),
        valid_before = authorization.as_ref().map_or("", |a| a.valid_before.as_str()),
        %reason,
        "payment in doubt: /settle may have moved money but its outcome is unknown; a retry of the same payment recovers it"
    );
    let state = PaymentState::InDoubt {
        intent: intent.clone(),
        since: now_ms(),
        reason: reason.clone(),
    };
    match config.store.replace(&hold.key, hold.version, &state).await {
        Ok(true) => {}
        // The *settling* intent stays; once its lease runs out it is recovered the same way.
        Ok(false) => {
            tracing::warn!(key = %hold.key, "payment changed before it could be marked in doubt")
        }
        Err(error) => {
            tracing::error!(%error, key = %hold.key, "payment could not be marked in doubt; its settling intent stands")
        }
    }
    config.emit(|| PaymentEvent::InDoubt {
        offer,
        key: &hold.key,
        reason: &reason,
    });
    refuse(config, offer, Refusal::SettlementInDoubt { reason })
}

/// Reports `refusal` and returns it.
fn refuse(config: &Payments, offer: &Offer, refusal: Refusal) -> Refusal {
    config.report_refusal(offer, &refusal);
    refusal
}
