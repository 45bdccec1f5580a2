//! The instruments: wrappers of the payment core's public traits ([`Facilitator`],
//! [`SettlementStore`], [`Reconciler`]) and a [lifecycle hook](PaymentHooks), each reporting
//! through the `metrics` facade.

use std::sync::{Arc, PoisonError};
use std::time::Instant;

use metrics::{SharedString, counter, gauge};
use x402_wire::{FacilitatorRequest, SettleResponse, SupportedResponse, VerifyResponse};

use super::{
    CHALLENGES, FACILITATOR_CIRCUIT_OPEN, FACILITATOR_DURATION, LEDGER_ERRORS, PAYMENTS,
    RECONCILIATIONS, in_doubt, publish,
};
use tower_x402::BoxFuture;
use tower_x402::facilitator::{Facilitator, FacilitatorError, Facilitators};
use tower_x402::payment::{HookStages, PaymentContext, PaymentEvent, PaymentHooks, Refusal};
use tower_x402::settlement::{
    LedgerEntry, PaymentKey, PaymentState, Reconciler, Reconciliation, SettlementStore, StoreError,
};

/// The payment core's lifecycle as metrics: `x402_challenges_total`, `x402_payments_total` and
/// the in-doubt gauges. A [hook](PaymentHooks): register it with
/// [`Payments::hook`](tower_x402::payment::Payments::hook).
///
/// ```
/// use tower_x402_metrics::PaymentMetrics;
/// use tower_x402::payment::Payments;
/// # fn demo(payments: Payments) -> Payments {
/// payments.hook(PaymentMetrics)
/// # }
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct PaymentMetrics;

impl PaymentHooks for PaymentMetrics {
    /// Counts settlements; the rest in [`observe`](PaymentHooks::observe).
    fn stages(&self) -> HookStages {
        HookStages::AFTER_SETTLE
    }

    fn after_settle<'a>(
        &'a self,
        _: &'a PaymentContext<'a>,
        _: &'a SettleResponse,
    ) -> BoxFuture<'a, ()> {
        payment("settled", "none");
        Box::pin(std::future::ready(()))
    }

    fn observe(&self, event: &PaymentEvent<'_>) {
        match *event {
            PaymentEvent::Replayed { .. } => payment("replayed", "none"),
            PaymentEvent::Refused { refusal, .. } => match refusal {
                Refusal::PaymentMissing => counter!(CHALLENGES).increment(1),
                Refusal::SettlementInDoubt { .. } => payment("in_doubt", "none"),
                refusal => payment("refused", refusal_kind(refusal)),
            },
            PaymentEvent::InDoubt { key, .. } => {
                let mut doubts = in_doubt().lock().unwrap_or_else(PoisonError::into_inner);
                doubts.entry(key.clone()).or_insert_with(Instant::now);
                publish(&doubts);
            }
            PaymentEvent::DoubtResolved { key, .. } => {
                let mut doubts = in_doubt().lock().unwrap_or_else(PoisonError::into_inner);
                doubts.remove(key);
                publish(&doubts);
            }
            _ => {}
        }
    }
}

fn payment(outcome: &'static str, refusal: &'static str) {
    counter!(PAYMENTS, "outcome" => outcome, "refusal" => refusal).increment(1);
}

/// The `refusal` label of a refusal.
fn refusal_kind(refusal: &Refusal) -> &'static str {
    match refusal {
        Refusal::PaymentMissing => "payment_missing",
        Refusal::InvalidHeader(_) => "invalid_header",
        Refusal::OtherResource => "other_resource",
        Refusal::NoMatchingRequirement { .. } => "no_matching_requirement",
        Refusal::InvalidPayment { .. } => "invalid_payment",
        Refusal::IdentifierReused => "identifier_reused",
        Refusal::SettledForAnotherResource => "settled_for_another_resource",
        Refusal::UsedForAnotherRequest { .. } => "used_for_another_request",
        Refusal::AlreadyDelivered { .. } => "already_delivered",
        Refusal::PermitAmountMismatch => "permit_amount_mismatch",
        Refusal::Facilitator(failure) if failure.is_unavailable() => "facilitator_unavailable",
        Refusal::Facilitator(_) => "facilitator_error",
        Refusal::SettlementRefused(_) => "settlement_refused",
        Refusal::RecordsUnavailable(_) => "records_unavailable",
        Refusal::SettlementInDoubt { .. } => "settlement_in_doubt",
        Refusal::PaymentInProgress => "payment_in_progress",
        Refusal::AuthorizationExpired => "authorization_expired",
        Refusal::ChargeAboveMaximum { .. } => "charge_above_maximum",
        Refusal::InvalidSettlementOverride { .. } => "invalid_settlement_override",
        Refusal::Corrected { .. } => "corrected",
        Refusal::Hook { .. } => "hook",
        // A refusal added to tower-x402 after this list.
        _ => "other",
    }
}

/// `facilitators` with every call timed into `x402_facilitator_request_duration_seconds`
/// (labelled with each facilitator's label) and each breaker's state in
/// `x402_facilitator_circuit_open`, through the list's public plug-in points
/// ([`Facilitators::map`], [`Facilitators::on_breaker`]).
///
/// ```
/// use std::sync::Arc;
/// use tower_x402::facilitator::{DEFAULT_LABEL, Facilitators};
/// use tower_x402::payment::Payments;
/// use tower_x402::HttpFacilitator;
/// use tower_x402_metrics as metrics;
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let facilitator = Arc::new(HttpFacilitator::new("https://x402.org/facilitator")?);
/// let facilitators = metrics::facilitators(Facilitators::new(DEFAULT_LABEL, facilitator));
/// let payments = Payments::with_facilitators(facilitators);
/// # let _ = payments;
/// # Ok(())
/// # }
/// ```
pub fn facilitators(facilitators: Facilitators) -> Facilitators {
    facilitators
        .map(|label, inner| {
            Arc::new(MeteredFacilitator {
                label: SharedString::from(Arc::<str>::from(label)),
                inner,
            })
        })
        .on_breaker(|label, open| {
            gauge!(FACILITATOR_CIRCUIT_OPEN, "facilitator" => label.to_owned()).set(if open {
                1.0
            } else {
                0.0
            });
        })
}

/// A facilitator whose calls are timed, labelled with its label in the list.
struct MeteredFacilitator {
    /// Shared by every sample's label set (no copy per call).
    label: SharedString,
    inner: Arc<dyn Facilitator>,
}

fn timed(label: &SharedString, endpoint: &'static str, started: Instant, outcome: &'static str) {
    metrics::histogram!(FACILITATOR_DURATION, "facilitator" => label.clone(), "endpoint" => endpoint, "outcome" => outcome)
        .record(started.elapsed().as_secs_f64());
}

fn failure_outcome(failure: &FacilitatorError) -> &'static str {
    if failure.is_unavailable() {
        "unavailable"
    } else {
        "error"
    }
}

impl Facilitator for MeteredFacilitator {
    fn verify<'a>(
        &'a self,
        request: &'a FacilitatorRequest,
    ) -> BoxFuture<'a, Result<VerifyResponse, FacilitatorError>> {
        Box::pin(async move {
            let started = Instant::now();
            let answer = self.inner.verify(request).await;
            let outcome = match &answer {
                Ok(verified) if verified.is_valid => "ok",
                Ok(_) => "rejected",
                Err(failure) => failure_outcome(failure),
            };
            timed(&self.label, "verify", started, outcome);
            answer
        })
    }

    fn settle<'a>(
        &'a self,
        request: &'a FacilitatorRequest,
    ) -> BoxFuture<'a, Result<SettleResponse, FacilitatorError>> {
        Box::pin(async move {
            let started = Instant::now();
            let answer = self.inner.settle(request).await;
            let outcome = match &answer {
                Ok(settled) if settled.success => "ok",
                Ok(_) => "rejected",
                Err(failure) => failure_outcome(failure),
            };
            timed(&self.label, "settle", started, outcome);
            answer
        })
    }

    fn supported(&self) -> BoxFuture<'_, Result<Arc<SupportedResponse>, FacilitatorError>> {
        Box::pin(async move {
            let started = Instant::now();
            let answer = self.inner.supported().await;
            let outcome = match &answer {
                Ok(_) => "ok",
                Err(failure) => failure_outcome(failure),
            };
            timed(&self.label, "supported", started, outcome);
            answer
        })
    }
}

/// A [`SettlementStore`] whose failures are counted in `x402_ledger_errors_total`, or a
/// [`Reconciler`] whose answers are counted in `x402_reconciliations_total`: wrap the one you
/// give [`Payments`](tower_x402::payment::Payments).
///
/// ```
/// use tower_x402_metrics::Metered;
/// use tower_x402::payment::Payments;
/// use tower_x402::MemorySettlementStore;
/// # fn demo(payments: Payments) -> Payments {
/// payments.settlement_store(Metered(MemorySettlementStore::default()))
/// # }
/// ```
#[derive(Clone, Debug, Default)]
pub struct Metered<T>(pub T);

impl<T: Reconciler> Reconciler for Metered<T> {
    fn reconcile<'a>(&'a self, request: &'a FacilitatorRequest) -> BoxFuture<'a, Reconciliation> {
        Box::pin(async move {
            let answer = self.0.reconcile(request).await;
            let result = match &answer {
                Reconciliation::Settled { .. } => "settled",
                Reconciliation::NotSettled => "not_settled",
                // `Unknown`, and any answer added to tower-x402 after this list.
                _ => "unknown",
            };
            counter!(RECONCILIATIONS, "result" => result).increment(1);
            answer
        })
    }
}

fn ledger<T>(operation: &'static str, result: Result<T, StoreError>) -> Result<T, StoreError> {
    if result.is_err() {
        counter!(LEDGER_ERRORS, "operation" => operation).increment(1);
    }
    result
}

impl<T: SettlementStore> SettlementStore for Metered<T> {
    fn load<'a>(
        &'a self,
        key: &'a PaymentKey,
    ) -> BoxFuture<'a, Result<Option<LedgerEntry>, StoreError>> {
        Box::pin(async move { ledger("load", self.0.load(key).await) })
    }

    fn insert<'a>(
        &'a self,
        key: &'a PaymentKey,
        state: &'a PaymentState,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move { ledger("insert", self.0.insert(key, state).await) })
    }

    fn replace<'a>(
        &'a self,
        key: &'a PaymentKey,
        version: u64,
        state: &'a PaymentState,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move { ledger("replace", self.0.replace(key, version, state).await) })
    }

    fn remove<'a>(
        &'a self,
        key: &'a PaymentKey,
        version: u64,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move { ledger("remove", self.0.remove(key, version).await) })
    }
}
