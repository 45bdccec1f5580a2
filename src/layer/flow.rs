//! The asynchronous part of a paid request: replay check, verify, settle.

use std::sync::Arc;

use http::StatusCode;
use tracing::Instrument as _;

use super::config::Config;
use super::events::PaymentEvent;
use super::inflight::InflightGuard;
use super::record::{PaymentKey, SettlementRecord, fingerprint};
use super::respond::{self, Own};
use super::{Offer, SettlementMode, VerifiedPayment};
use crate::proto::{FacilitatorRequest, PaymentPayload, PaymentRequirements, SettleResponse};

/// A payment cleared to reach the inner service.
pub(super) struct Paid {
    pub(super) config: Arc<Config>,
    pub(super) payment: VerifiedPayment,
    pub(super) request: FacilitatorRequest,
    /// Held until the payment's outcome is final, so duplicates wait for it.
    pub(super) _guard: InflightGuard,
}

/// The outcome of [`authorize`].
pub(super) enum Gate {
    Proceed(Box<Paid>),
    Reject(Own),
}

/// Single-flights the payment, answers repeats from their record, verifies new payments and, in
/// [`SettlementMode::Before`], settles them.
pub(super) async fn authorize(
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
            let message = "settlement records are unavailable, retry the same payment later";
            return reject(
                &config,
                &offer,
                StatusCode::SERVICE_UNAVAILABLE,
                message,
                || respond::unavailable(&config, &offer, config.retry_after, message),
            );
        }
    }

    let request = FacilitatorRequest::new(payload, requirement.clone());
    let span = tracing::info_span!("x402.verify", network = %requirement.network, scheme = %requirement.scheme);
    let verified = match config.facilitator.verify(&request).instrument(span).await {
        Ok(verified) => verified,
        Err(failure) => {
            tracing::warn!(error = %failure, "facilitator verify failed");
            let response = respond::facilitator_failed(&config, &offer, &failure);
            return reject(
                &config,
                &offer,
                response.status(),
                &failure.to_string(),
                || response,
            );
        }
    };
    if !verified.is_valid {
        let reason = verified
            .invalid_reason
            .as_deref()
            .unwrap_or("invalid_payment");
        return reject(
            &config,
            &offer,
            StatusCode::PAYMENT_REQUIRED,
            reason,
            || respond::payment_failed(&config, &offer, reason),
        );
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
        match settle(&config, &offer, &request).await {
            Ok(settlement) => {
                payment.payer = payment.payer.or_else(|| settlement.payer.clone());
                payment.settlement = Some(settlement);
            }
            Err(response) => return Gate::Reject(response),
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
        let message = "this payment identifier was already used for a different payment";
        return reject(&config, &offer, StatusCode::CONFLICT, message, || {
            respond::error(&config, &offer, StatusCode::CONFLICT, message)
        });
    }
    if record.resource != offer.resource().url {
        let message = "this payment was already settled for a different resource";
        return reject(
            &config,
            &offer,
            StatusCode::PAYMENT_REQUIRED,
            message,
            || respond::payment_failed(&config, &offer, message),
        );
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

/// Settles through the facilitator and records a success. `Err` is the response to send.
pub(super) async fn settle(
    config: &Config,
    offer: &Offer,
    request: &FacilitatorRequest,
) -> Result<SettleResponse, Own> {
    let requirement = &request.payment_requirements;
    let span = tracing::info_span!("x402.settle", network = %requirement.network, scheme = %requirement.scheme);
    let settlement = match config.facilitator.settle(request).instrument(span).await {
        Ok(settlement) => settlement,
        Err(failure) => {
            tracing::warn!(error = %failure, "facilitator settle failed; the payment may or may not have moved");
            let response = respond::facilitator_failed(config, offer, &failure);
            let status = response.status();
            config.emit(|| PaymentEvent::Failed {
                offer,
                status,
                reason: "settlement_unavailable",
            });
            return Err(response);
        }
    };
    if !settlement.success {
        let reason = settlement
            .error_reason
            .as_deref()
            .unwrap_or("settlement_failed");
        config.emit(|| PaymentEvent::Failed {
            offer,
            status: StatusCode::PAYMENT_REQUIRED,
            reason,
        });
        return Err(respond::settlement_failed(config, offer, &settlement));
    }
    config.emit(|| PaymentEvent::Settled {
        offer,
        settlement: &settlement,
    });
    let record = SettlementRecord::new(
        &request.payment_payload,
        offer.resource().url.clone(),
        requirement.clone(),
        settlement.clone(),
    );
    if let Some(recent) = &config.recent {
        recent.insert(&record);
    }
    if let Err(error) = config.store.save(&record).await {
        // The money has moved: serve the buyer (a retry is still recognised from `recent`),
        // and leave the trail in the logs.
        tracing::error!(%error, key = %record.key, transaction = %settlement.transaction, "settled payment could not be recorded");
    }
    Ok(settlement)
}

/// Settles after the inner service answered; owns everything it needs.
pub(super) async fn settle_after(paid: Box<Paid>) -> (Box<Paid>, Result<SettleResponse, Own>) {
    let outcome = settle(&paid.config, &paid.payment.offer, &paid.request).await;
    (paid, outcome)
}

fn reject(
    config: &Config,
    offer: &Offer,
    status: StatusCode,
    reason: &str,
    response: impl FnOnce() -> Own,
) -> Gate {
    config.emit(|| PaymentEvent::Failed {
        offer,
        status,
        reason,
    });
    Gate::Reject(response())
}
