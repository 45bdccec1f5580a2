//! Settlement through the facilitator, and the record that makes it happen once.

use bytes::Bytes;
use http::Response;
use tracing::Instrument as _;

use super::{Paid, refuse};
use crate::layer::Config;
use crate::layer::events::PaymentEvent;
use crate::layer::pricing::Offer;
use crate::layer::refusal::Refusal;
use crate::layer::settlement::SettlementRecord;
use crate::proto::{FacilitatorRequest, SettleResponse};

/// Settles through the facilitator and records a success. `Err` is the response to send.
pub(super) async fn settle(
    config: &Config,
    offer: &Offer,
    request: &FacilitatorRequest,
) -> Result<SettleResponse, Response<Bytes>> {
    let requirement = &request.payment_requirements;
    let span = tracing::info_span!("x402.settle", network = %requirement.network, scheme = %requirement.scheme);
    let settlement = match config.facilitator.settle(request).instrument(span).await {
        Ok(settlement) => settlement,
        Err(failure) => {
            tracing::warn!(error = %failure, "facilitator settle failed; the payment may or may not have moved");
            return Err(refuse(config, offer, &Refusal::Facilitator(failure)));
        }
    };
    if !settlement.success {
        return Err(refuse(
            config,
            offer,
            &Refusal::SettlementRefused(settlement),
        ));
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
pub(crate) async fn settle_after(
    paid: Box<Paid>,
) -> (Box<Paid>, Result<SettleResponse, Response<Bytes>>) {
    let outcome = settle(&paid.config, &paid.payment.offer, &paid.request).await;
    (paid, outcome)
}
