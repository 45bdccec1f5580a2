//! The payment gate: everything between a decoded `PAYMENT-SIGNATURE` and the inner service —
//! single-flight per payment, the replay check, verification, settlement — and the one path by
//! which a [`Refusal`] becomes a response.

use std::sync::Arc;

use bytes::Bytes;
use http::Response;
use tracing::Instrument as _;

use self::single_flight::InflightGuard;
use super::Config;
use super::events::PaymentEvent;
use super::payment::VerifiedPayment;
use super::pricing::{Offer, SettlementMode};
use super::refusal::Refusal;
use super::settlement::{PaymentKey, SettlementRecord, fingerprint};
use crate::proto::{FacilitatorRequest, PaymentPayload, PaymentRequirements};

pub(crate) mod responses;
mod settle;
pub(crate) mod single_flight;

pub(crate) use settle::settle_after;

/// A payment cleared to reach the inner service.
pub(crate) struct Paid {
    pub(crate) config: Arc<Config>,
    pub(crate) payment: VerifiedPayment,
    pub(crate) request: FacilitatorRequest,
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

/// Single-flights the payment, answers repeats from their record, verifies new payments and, in
/// [`SettlementMode::Before`], settles them.
pub(crate) async fn authorize(
    config: Arc<Config>,
    offer: Arc<Offer>,
    payload: PaymentPayload,
    requirement: PaymentRequirements,
) -> Gate {
    let key = PaymentKey::of(&payload);
    let guard = Arc::clone(&config.inflight).acquire(key.clone()).await;

    let remembered = config.recent.as_ref().and_then(|recent| recent.get(&key));
    let found = match remembered {
        Some(record) => Ok(Some(record)),
        None => config.store.find(&key).await,
    };
    match found {
        Ok(Some(record)) => return replay(config, offer, payload, record, guard),
        Ok(None) => {}
        Err(error) => {
            tracing::warn!(%error, "settlement store unavailable; refusing payment rather than risk a second charge");
            return Gate::Refuse(refuse(&config, &offer, &Refusal::RecordsUnavailable(error)));
        }
    }

    let request = FacilitatorRequest::new(payload, requirement.clone());
    let span = tracing::info_span!("x402.verify", network = %requirement.network, scheme = %requirement.scheme);
    let verified = match config.facilitator.verify(&request).instrument(span).await {
        Ok(verified) => verified,
        Err(failure) => {
            tracing::warn!(error = %failure, "facilitator verify failed");
            return Gate::Refuse(refuse(&config, &offer, &Refusal::Facilitator(failure)));
        }
    };
    if !verified.is_valid {
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
    if offer.settlement_mode() == SettlementMode::Before {
        match settle::settle(&config, &offer, &request).await {
            Ok(settlement) => {
                payment.payer = payment.payer.or_else(|| settlement.payer.clone());
                payment.settlement = Some(settlement);
            }
            Err(response) => return Gate::Refuse(response),
        }
    }
    Gate::Proceed(Box::new(Paid {
        config,
        payment,
        request,
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
    let request = FacilitatorRequest::new(payload, record.requirement.clone());
    let payment = VerifiedPayment {
        key: record.key,
        payer: record.settlement.payer.clone(),
        requirement: record.requirement,
        payload: Arc::new(request.payment_payload.clone()),
        settlement: Some(record.settlement),
        replayed: true,
        offer,
    };
    Gate::Proceed(Box::new(Paid {
        config,
        payment,
        request,
        _guard: guard,
    }))
}
