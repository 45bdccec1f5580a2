//! The payment gate: everything between a decoded `PAYMENT-SIGNATURE` and the inner service —
//! single-flight per payment, the ledger claim, the replay check, recovery of payments in doubt,
//! verification, settlement — and the one path by which a [`Refusal`] becomes a response.

use std::sync::Arc;

use bytes::Bytes;
use http::Response;
use tracing::Instrument as _;

use self::ledger::{Claim, Hold};
use self::settle::Attempt;
use self::single_flight::InflightGuard;
use super::Config;
use super::events::PaymentEvent;
use super::payment::VerifiedPayment;
use super::pricing::{Offer, SettlementMode};
use super::refusal::Refusal;
use super::settlement::{
    PaymentKey, PaymentState, SettlementIntent, SettlementRecord, fingerprint,
};
use crate::proto::{FacilitatorRequest, PaymentPayload, PaymentRequirements};

pub(crate) mod ledger;
pub(crate) mod responses;
mod settle;
pub(crate) mod single_flight;

pub(crate) use settle::{release_after, settle_after};

/// A payment cleared to reach the inner service.
pub(crate) struct Paid {
    pub(crate) config: Arc<Config>,
    pub(crate) payment: VerifiedPayment,
    /// What a payment that settles after the handler will send to `/settle`; `None` once
    /// settled.
    pub(crate) intent: Option<SettlementIntent>,
    /// The ledger hold of a payment that settles after the handler; `None` once settled.
    pub(crate) hold: Option<Hold>,
    /// Held until the payment's outcome is final, so duplicates wait for it.
    pub(crate) _guard: InflightGuard,
}

/// The outcome of [`authorize`].
pub(crate) enum Gate {
    Proceed(Box<Paid>),
    Refuse(Response<Bytes>),
}

/// Reports `refusal` and writes its response. Every refusal the layer sends passes here.
pub(crate) fn refuse(config: &Config, offer: &Offer, refusal: &Refusal) -> Response<Bytes> {
    match refusal {
        Refusal::PaymentMissing => config.emit(|| PaymentEvent::ChallengeServed { offer }),
        _ => config.emit(|| PaymentEvent::Failed { offer, refusal }),
    }
    responses::refusal(config, offer, refusal)
}

/// Single-flights the payment, claims it in the ledger, answers repeats from their record,
/// recovers payments in doubt, verifies new payments and, in [`SettlementMode::Before`], settles
/// them.
pub(crate) async fn authorize(
    config: Arc<Config>,
    offer: Arc<Offer>,
    payload: PaymentPayload,
    requirement: PaymentRequirements,
) -> Gate {
    let key = PaymentKey::of(&payload);
    let guard = Arc::clone(&config.inflight).acquire(key.clone()).await;

    if let Some(record) = config.recent.as_ref().and_then(|recent| recent.get(&key)) {
        return replay(config, offer, payload, record, guard);
    }
    let fingerprint = fingerprint(&payload);
    let hold = match ledger::claim(&config, &key, &fingerprint).await {
        Claim::Fresh(hold) => hold,
        Claim::Settled(record) => return replay(config, offer, payload, *record, guard),
        Claim::Recover(hold, intent) => return recover(config, offer, hold, *intent, guard).await,
        Claim::Refuse(refusal) => return Gate::Refuse(refuse(&config, &offer, &refusal)),
    };

    let request = FacilitatorRequest::new(payload, requirement.clone());
    let span = tracing::info_span!("x402.verify", network = %requirement.network, scheme = %requirement.scheme);
    let verified = match config.facilitator.verify(&request).instrument(span).await {
        Ok(verified) => verified,
        Err(failure) => {
            tracing::warn!(error = %failure, "facilitator verify failed");
            ledger::release(&config, &hold).await;
            return Gate::Refuse(refuse(&config, &offer, &Refusal::Facilitator(failure)));
        }
    };
    if !verified.is_valid {
        ledger::release(&config, &hold).await;
        let reason = verified
            .invalid_reason
            .unwrap_or_else(|| "invalid_payment".to_owned());
        let refusal = Refusal::InvalidPayment { reason };
        return Gate::Refuse(refuse(&config, &offer, &refusal));
    }
    config.emit(|| PaymentEvent::Verified {
        offer: &offer,
        payer: verified.payer.as_deref(),
    });

    let mut payment = VerifiedPayment {
        key,
        payer: verified.payer,
        requirement,
        payload: Arc::new(request.payment_payload.clone()),
        settlement: None,
        replayed: false,
        offer: Arc::clone(&offer),
    };
    let intent =
        SettlementIntent::with_fingerprint(fingerprint, offer.resource().url.clone(), request);
    if offer.settlement_mode() == SettlementMode::After {
        return Gate::Proceed(Box::new(Paid {
            config,
            payment,
            intent: Some(intent),
            hold: Some(hold),
            _guard: guard,
        }));
    }
    match settle::settle(&config, &offer, hold, intent, Attempt::First).await {
        Ok(settlement) => {
            payment.payer = payment.payer.or_else(|| settlement.payer.clone());
            payment.settlement = Some(settlement);
        }
        Err(response) => return Gate::Refuse(response),
    }
    Gate::Proceed(Box::new(Paid {
        config,
        payment,
        intent: None,
        hold: None,
        _guard: guard,
    }))
}

/// Recovers a payment in doubt (or one whose settling process died): re-sends the identical
/// `/settle`, then asks the reconciler. Delivered only once the settlement is proven.
async fn recover(
    config: Arc<Config>,
    offer: Arc<Offer>,
    hold: Hold,
    intent: SettlementIntent,
    guard: InflightGuard,
) -> Gate {
    let settling = PaymentState::Settling {
        owner: config.owner.to_string(),
        lease_until: ledger::lease_until(&config),
        intent: intent.clone(),
    };
    let hold = match config
        .store
        .replace(&hold.key, hold.version, &settling)
        .await
    {
        Ok(true) => Hold {
            version: hold.version + 1,
            ..hold
        },
        // Another process got there first; its outcome is the retry's answer.
        Ok(false) => return Gate::Refuse(refuse(&config, &offer, &Refusal::PaymentInProgress)),
        Err(error) => {
            return Gate::Refuse(refuse(&config, &offer, &Refusal::RecordsUnavailable(error)));
        }
    };
    tracing::info!(key = %hold.key, "recovering a payment in doubt: re-sending the identical /settle");
    let key = hold.key.clone();
    let attempt = Attempt::Recovery;
    let settlement = match settle::settle(&config, &offer, hold, intent.clone(), attempt).await {
        Ok(settlement) => settlement,
        Err(response) => return Gate::Refuse(response),
    };
    if intent.resource != offer.resource().url {
        // Settled for the resource it was signed for; a retry there delivers it.
        return Gate::Refuse(refuse(&config, &offer, &Refusal::SettledForAnotherResource));
    }
    let request = intent.request;
    let payment = VerifiedPayment {
        key,
        payer: settlement.payer.clone(),
        requirement: request.payment_requirements,
        payload: Arc::new(request.payment_payload),
        settlement: Some(settlement),
        replayed: false,
        offer,
    };
    Gate::Proceed(Box::new(Paid {
        config,
        payment,
        intent: None,
        hold: None,
        _guard: guard,
    }))
}

/// Answers a payment that has a settlement record: the same resource gets the recorded
/// settlement again; anything else is refused.
fn replay(
    config: Arc<Config>,
    offer: Arc<Offer>,
    payload: PaymentPayload,
    record: SettlementRecord,
    guard: InflightGuard,
) -> Gate {
    if record.fingerprint != fingerprint(&payload) {
        return Gate::Refuse(refuse(&config, &offer, &Refusal::IdentifierReused));
    }
    if record.resource != offer.resource().url {
        let refusal = Refusal::SettledForAnotherResource;
        return Gate::Refuse(refuse(&config, &offer, &refusal));
    }
    config.emit(|| PaymentEvent::Replayed {
        offer: &offer,
        record: &record,
    });
    let payment = VerifiedPayment {
        key: record.key,
        payer: record.settlement.payer.clone(),
        requirement: record.requirement,
        payload: Arc::new(payload),
        settlement: Some(record.settlement),
        replayed: true,
        offer,
    };
    Gate::Proceed(Box::new(Paid {
        config,
        payment,
        intent: None,
        hold: None,
        _guard: guard,
    }))
}
