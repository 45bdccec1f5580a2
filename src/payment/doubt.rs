//! A payment whose settlement's outcome is unknown: the reconciler asked, the payment released
//! once proven never settled and expired, else marked *in doubt* (503) for a retry to recover.

use std::sync::Arc;

use tracing::Instrument as _;
use x402_wire::{FacilitatorRequest, SettleResponse};

use super::context::PaymentContext;
use super::event::PaymentEvent;
use super::ledger::{Hold, now_ms, release};
use super::payments::{Payments, refuse};
use super::record::{Attempt, reconciled_settlement, settled};
use super::refusal::Refusal;
use crate::pricing::Offer;
use crate::settlement::{PaymentState, Reconciliation, SettlementIntent};

/// Asks the reconciler; without one, or when it cannot tell, the payment stays in doubt.
pub(super) async fn reconcile(
    config: &Arc<Payments>,
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
            let mut settlement = reconciled_settlement(&intent.request, transaction);
            if config
                .schemes
                .registered(intent.request.payment_requirements())
                .is_some()
            {
                Box::pin(proven(config, offer, &hold, intent, &mut settlement)).await;
            }
            Ok(settled(config, offer, &hold, intent, settlement, attempt).await)
        }
        Reconciliation::NotSettled if authorization_expired(&intent.request) => {
            release(config, &hold).await;
            config
                .release_held(intent.request.payment_requirements(), &hold.key)
                .await;
            tracing::warn!(key = %hold.key, "payment never settled and its authorization expired; released");
            config.hooks.observe(&PaymentEvent::DoubtResolved {
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

/// Tells the payment's scheme (one registered from outside) of the settlement the reconciler
/// proved, with the notes the core held for the payment (kept for its end).
async fn proven(
    config: &Payments,
    offer: &Offer,
    hold: &Hold,
    intent: &SettlementIntent,
    settlement: &mut SettleResponse,
) {
    let context = PaymentContext::new(offer, &intent.resource, &hold.key, &intent.request);
    let scheme = config.schemes.get(intent.request.payment_requirements());
    let mut notes = config.held_notes.take(&hold.key);
    if let Some(step) = scheme.proven(&context, &mut notes, settlement) {
        step.await;
    }
    config.held_notes.keep(&hold.key, notes);
}

/// Whether the payment's authorization can no longer be used (EIP-3009 `validBefore` or the
/// Permit2 `deadline` of an `exact` or `upto` permit passed). Payments of other schemes never count as
/// expired, so they are never released on a reconciler's word alone.
fn authorization_expired(request: &FacilitatorRequest) -> bool {
    let payload = request.payment_payload();
    let last_second = match payload.exact_evm() {
        Ok(evm) => evm.authorization.valid_before.parse::<u64>().ok(),
        // Permit2 accepts the permit while `block.timestamp <= deadline`.
        Err(_) => payload.exact_permit2().ok().and_then(|permit| {
            let deadline = permit.permit2_authorization.deadline.parse::<u64>().ok()?;
            deadline.checked_add(1)
        }),
    };
    last_second.is_some_and(|end| end.saturating_mul(1000) <= now_ms())
}

/// Marks the payment *in doubt*, logs everything an operator needs to settle it by hand, and
/// answers 503 (retry the same payment).
pub(super) async fn in_doubt(
    config: &Payments,
    offer: &Offer,
    hold: &Hold,
    intent: &SettlementIntent,
    reason: String,
) -> Refusal {
    // The scheme's notes stay held by the core, for the payment's recovery by it.
    let request = &intent.request;
    let requirement = request.payment_requirements();
    let authorization = request
        .payment_payload()
        .exact_evm()
        .ok()
        .map(|evm| evm.authorization)
        .or_else(|| {
            // A Permit2 permit, in the same terms: its deadline is the authorization's end.
            let upto = request
                .payment_payload()
                .exact_permit2()
                .ok()?
                .permit2_authorization;
            Some(x402_wire::Eip3009Authorization {
                from: upto.from,
                to: upto.witness.to,
                value: upto.permitted.amount,
                valid_after: upto.witness.valid_after,
                valid_before: upto.deadline,
                nonce: upto.nonce,
            })
        });
    // A scheme that knows its payments better names their payer and transfer itself.
    let named = config
        .schemes
        .get(requirement)
        .payer_and_transfer(request.payment_payload());
    let (payer, nonce) = match (&named, &authorization) {
        (Some((payer, transfer)), _) => (payer.as_str(), transfer.as_str()),
        (None, Some(authorization)) => (authorization.from.as_str(), authorization.nonce.as_str()),
        (None, None) => ("", ""),
    };
    tracing::error!(
        key = %hold.key,
        resource = %intent.resource,
        network = %requirement.network,
        asset = %requirement.asset,
        pay_to = %requirement.pay_to,
        amount = %requirement.amount,
        payer,
        nonce,
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
    config.hooks.observe(&PaymentEvent::InDoubt {
        offer,
        key: &hold.key,
        reason: &reason,
    });
    refuse(config, offer, Refusal::SettlementInDoubt { reason })
}

#[cfg(test)]
mod expiry_tests {
    use serde_json::json;

    use super::*;

    fn request(payload: serde_json::Value, scheme: &str) -> FacilitatorRequest {
        let requirements: x402_wire::PaymentRequirements = serde_json::from_value(json!({
            "scheme": scheme, "network": "eip155:8453", "amount": "1000",
            "asset": "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913",
            "payTo": "0x209693Bc6afc0C5328bA36FaF03C514EF312287C", "maxTimeoutSeconds": 60
        }))
        .unwrap();
        let payment = x402_wire::PaymentPayload {
            x402_version: x402_wire::X402Version::V2,
            resource: None,
            accepted: requirements.clone(),
            payload: serde_json::value::to_raw_value(&payload).unwrap(),
            extensions: None,
        };
        FacilitatorRequest::new(payment, requirements)
    }

    fn permit(deadline: u64) -> FacilitatorRequest {
        request(
            json!({"signature": "0x", "permit2Authorization": {
                "from": "0x857b06519E91e3A54538791bDbb0E22373e36b66",
                "permitted": {"token": "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913", "amount": "1000"},
                "spender": x402_wire::UPTO_PROXY_ADDRESS, "nonce": "1",
                "deadline": deadline.to_string(),
                "witness": {"to": "0x209693Bc6afc0C5328bA36FaF03C514EF312287C",
                            "facilitator": "0x1111111111111111111111111111111111111111", "validAfter": "0"}
            }}),
            "upto",
        )
    }

    #[test]
    fn a_permit_expires_after_its_deadline() {
        let now = now_ms() / 1000;
        assert!(authorization_expired(&permit(now - 2)));
        assert!(!authorization_expired(&permit(now + 60)));
        let settled = reconciled_settlement(&permit(now), "0xab".into());
        assert_eq!(
            settled.payer.as_deref(),
            Some("0x857b06519E91e3A54538791bDbb0E22373e36b66")
        );
        assert!(!authorization_expired(&request(json!({}), "upto")));
    }
}
