//! A settlement recorded in the ledger: the scheme's and the hooks' additions, then the record,
//! written again in the background until the store takes it.

use std::sync::Arc;
use std::time::Duration;

use x402_wire::{FacilitatorRequest, SettleResponse};

use super::context::PaymentContext;
use super::event::PaymentEvent;
use super::ledger::Hold;
use super::payments::Payments;
use super::stages::HookStages;
use crate::pricing::Offer;
use crate::settlement::{PaymentState, SettlementIntent, SettlementRecord};

/// Whose `/settle` this is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Attempt {
    /// The payment's first: a definite refusal releases it (402).
    First,
    /// A recovery of a payment in doubt, already marked *settling* by this layer: only a
    /// success or the reconciler's proof settles it.
    Recovery,
}

/// The settlement the reconciler proved, in the facilitator's terms.
pub(super) fn reconciled_settlement(
    request: &FacilitatorRequest,
    transaction: String,
) -> SettleResponse {
    let requirement = request.payment_requirements();
    SettleResponse {
        success: true,
        error_reason: None,
        error_message: None,
        transaction,
        network: requirement.network.clone(),
        payer: request.payment_payload().payer(),
        amount: Some(requirement.amount),
        extensions: None,
        extra: None,
    }
}

/// Records a settlement and reports it. The money has moved: the buyer is served whatever the
/// store says. When the record cannot be written (the store is down, its pool exhausted), the
/// in-memory recent settlements recognise a retry here, and a background task keeps writing the
/// record, with pauses growing to a second, until the store takes it — so that every process sharing the
/// store, and this one after a restart, reads the payment as settled. The hooks hear of the
/// settlement (and may add to its extensions) before it is recorded.
pub(super) fn settled<'a>(
    config: &'a Arc<Payments>,
    offer: &'a Offer,
    hold: &'a Hold,
    intent: &'a SettlementIntent,
    mut settlement: SettleResponse,
    attempt: Attempt,
) -> impl Future<Output = SettleResponse> + Send + 'a {
    let requirement = intent.request.payment_requirements();
    let scheme = config.schemes.get(requirement);
    if settlement.amount.is_none() && !settlement.transaction.is_empty() && scheme.metered() {
        // The amount sent is the amount settled; recorded so that a repeat is answered with it.
        // A settlement without a transaction (a payment-channel voucher) moved nothing on chain
        // and keeps the amount its plug-in gave.
        settlement.amount = Some(requirement.amount);
    }
    // The settlement moves into its record (the hooks see it there) before the future that
    // records it is made, and back out once recorded: not copied. An `async` block, not an
    // `async fn`, so that the future holds the record once (an `async fn` keeps a second copy
    // of an argument moved into its body).
    let mut state = PaymentState::Settled {
        record: SettlementRecord::of_intent(hold.key.clone(), intent, settlement),
    };
    async move {
        let PaymentState::Settled { record } = &mut state else {
            // Never taken (built as settled just above); answered without panicking.
            return reconciled_settlement(&intent.request, String::new());
        };
        if !config.hooks.is_empty() {
            let context = PaymentContext::new(offer, &intent.resource, &hold.key, &intent.request);
            config.hooks.enrich(&context, &mut record.settlement);
            if config.hooks.take_part(HookStages::AFTER_SETTLE) {
                Box::pin(config.hooks.after_settle(&context, &record.settlement)).await;
            }
        }
        if attempt == Attempt::Recovery {
            tracing::info!(key = %hold.key, transaction = %record.settlement.transaction, "payment in doubt settled");
            config.hooks.observe(&PaymentEvent::DoubtResolved {
                offer,
                key: &hold.key,
                settlement: Some(&record.settlement),
            });
        }
        if let Some(recent) = &config.recent_settlements {
            recent.remember(record);
        }
        let recorded = record_settled(config, &hold.key, Some(hold.version), &state).await;
        let PaymentState::Settled { record } = state else {
            // Never taken (built as settled just above); answered without panicking.
            return reconciled_settlement(&intent.request, String::new());
        };
        if let Err(error) = recorded {
            let settlement = record.settlement.clone();
            tracing::error!(%error, key = %hold.key, transaction = %settlement.transaction, "settled payment could not be recorded yet; writing it again in the background until the store takes it");
            keep_recording(config, hold.key.clone(), PaymentState::Settled { record });
            return settlement;
        }
        record.settlement
    }
}

/// The first pause before writing a settlement record again, doubled up to
/// [`RECORD_RETRY_MAX`].
const RECORD_RETRY_FIRST: Duration = Duration::from_millis(100);
/// Short: until the record is written, every other process sharing the store finds the payment
/// *settling* under this one's lease and answers it 503, so the record must land within a second
/// of the store coming back, however long it was away. One row per unrecorded settlement, and
/// each attempt already waits for the store's own connection timeout.
const RECORD_RETRY_MAX: Duration = Duration::from_secs(1);

/// Writes `state` (a *settled* record) under `key`, at `version` when known. Proof of settlement
/// wins over whatever another process wrote meanwhile (its lease ran out and it recovered the
/// payment, perhaps into doubt): it is recorded over any unsettled state.
async fn record_settled(
    config: &Payments,
    key: &crate::settlement::PaymentKey,
    version: Option<u64>,
    state: &PaymentState,
) -> Result<(), String> {
    let Some(version) = version else {
        return Box::pin(record_settled_as_read(config, key, state, 3)).await;
    };
    // The common case, at the version this layer holds; an entry that changed meanwhile is read
    // again (the write counted as the first of three), boxed out of every settlement's size.
    match config.store.replace(key, version, state).await {
        Ok(true) => Ok(()),
        Ok(false) => Box::pin(record_settled_as_read(config, key, state, 2)).await,
        Err(error) => Err(error.to_string()),
    }
}

/// [`record_settled`] at the version read each time: up to `attempts` writes.
async fn record_settled_as_read(
    config: &Payments,
    key: &crate::settlement::PaymentKey,
    state: &PaymentState,
    attempts: usize,
) -> Result<(), String> {
    for _ in 0..attempts {
        let current = match config.store.load(key).await {
            Ok(Some(entry)) if matches!(entry.state, PaymentState::Settled { .. }) => {
                return Ok(());
            }
            Ok(Some(entry)) => entry.version,
            Ok(None) => match config.store.insert(key, state).await {
                Ok(true) => return Ok(()),
                Ok(false) => continue,
                Err(error) => return Err(error.to_string()),
            },
            Err(error) => return Err(error.to_string()),
        };
        match config.store.replace(key, current, state).await {
            Ok(true) => return Ok(()),
            Ok(false) => {}
            Err(error) => return Err(error.to_string()),
        }
    }
    Err("its entry kept changing".to_owned())
}

/// Writes a settlement record in the background until the store takes it.
fn keep_recording(config: &Arc<Payments>, key: crate::settlement::PaymentKey, state: PaymentState) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        tracing::error!(%key, "no runtime to keep writing the settlement record on; it is kept in memory only");
        return;
    };
    let config = Arc::clone(config);
    runtime.spawn(async move {
        let mut pause = RECORD_RETRY_FIRST;
        let mut attempts = 1_u32;
        loop {
            tokio::time::sleep(pause).await;
            attempts += 1;
            match record_settled(&config, &key, None, &state).await {
                Ok(()) => {
                    tracing::info!(%key, attempts, "settled payment recorded");
                    return;
                }
                Err(error) => {
                    tracing::warn!(%error, %key, attempts, "settled payment still not recorded; trying again");
                }
            }
            pause = (pause * 2).min(RECORD_RETRY_MAX);
        }
    });
}
