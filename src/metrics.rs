//! Metrics through the [`metrics`](https://docs.rs/metrics) facade (feature `metrics`).
//!
//! With the feature on, every [`Payments`](crate::payment::Payments) core (and so every
//! [`X402Layer`](crate::X402Layer)) reports what it does to the recorder the application
//! installs (a Prometheus exporter, StatsD, …); the library installs none. Without a recorder the
//! calls cost a load and a branch; without the feature they are not compiled.
//!
//! | name | type | labels | what |
//! |---|---|---|---|
//! | `x402_challenges_total` | counter | — | 402 challenges sent for requests without payment |
//! | `x402_payments_total` | counter | `outcome`, `refusal` | paid requests by outcome: `settled`, `replayed` (answered from the record), `in_doubt`, `refused` (with `refusal` its kind, below; `none` for the rest) |
//! | `x402_facilitator_request_duration_seconds` | histogram | `endpoint`, `outcome` | facilitator calls: `endpoint` `verify`, `settle` or `supported`; `outcome` `ok`, `rejected` (`isValid: false`, `success: false`), `unavailable` (unreachable, timed out, overloaded) or `error` (any other failure) |
//! | `x402_payments_in_doubt` | gauge | — | payments this process put in doubt and has not seen resolved |
//! | `x402_payments_in_doubt_oldest_age_seconds` | gauge | — | how long the oldest of them has been in doubt (0 when none); refreshed on every payment event and by [`refresh`] |
//! | `x402_reconciliations_total` | counter | `result` | answers of the [`Reconciler`]: `settled`, `not_settled`, `unknown` |
//! | `x402_ledger_errors_total` | counter | `operation` | failed [`SettlementStore`] calls: `load`, `insert`, `replace`, `remove` |
//!
//! Refusal kinds (`refusal` label): `invalid_header`, `other_resource`,
//! `no_matching_requirement`, `invalid_payment`, `identifier_reused`,
//! `settled_for_another_resource`, `facilitator_unavailable`, `facilitator_error`,
//! `settlement_refused`, `records_unavailable`, `payment_in_progress`, `authorization_expired`,
//! `charge_above_maximum`, `charge_missing`, `invalid_settlement_override`.
//!
//! Every label value comes from these fixed lists: no address, nonce, URL or facilitator reason
//! ever becomes a label, so the number of series stays bounded.
//!
//! ```
//! // Before rendering a scrape, bring the in-doubt age up to date.
//! tower_x402::metrics::describe();
//! tower_x402::metrics::refresh();
//! ```

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use metrics::{Unit, counter, describe_counter, describe_gauge, describe_histogram, gauge};

use crate::boxed::BoxFuture;
use crate::facilitator::{Facilitator, FacilitatorError};
use crate::payment::{PaymentEvent, Refusal};
use crate::proto::{FacilitatorRequest, SettleResponse, SupportedResponse, VerifyResponse};
use crate::settlement::{
    LedgerEntry, PaymentKey, PaymentState, Reconciler, Reconciliation, SettlementStore, StoreError,
};

/// `x402_challenges_total`.
pub const CHALLENGES: &str = "x402_challenges_total";
/// `x402_payments_total`.
pub const PAYMENTS: &str = "x402_payments_total";
/// `x402_facilitator_request_duration_seconds`.
pub const FACILITATOR_DURATION: &str = "x402_facilitator_request_duration_seconds";
/// `x402_payments_in_doubt`.
pub const IN_DOUBT: &str = "x402_payments_in_doubt";
/// `x402_payments_in_doubt_oldest_age_seconds`.
pub const IN_DOUBT_OLDEST_AGE: &str = "x402_payments_in_doubt_oldest_age_seconds";
/// `x402_reconciliations_total`.
pub const RECONCILIATIONS: &str = "x402_reconciliations_total";
/// `x402_ledger_errors_total`.
pub const LEDGER_ERRORS: &str = "x402_ledger_errors_total";

/// Describes every metric (help text and unit) to the installed recorder. Call it once after
/// installing one; exporters that print help lines (Prometheus) use it.
pub fn describe() {
    describe_counter!(
        CHALLENGES,
        "402 challenges sent for requests without payment"
    );
    describe_counter!(PAYMENTS, "Paid requests by outcome (and refusal kind)");
    describe_histogram!(
        FACILITATOR_DURATION,
        Unit::Seconds,
        "Facilitator calls by endpoint and outcome"
    );
    describe_gauge!(
        IN_DOUBT,
        "Payments this process put in doubt and has not seen resolved"
    );
    describe_gauge!(
        IN_DOUBT_OLDEST_AGE,
        Unit::Seconds,
        "Age of the oldest payment in doubt (0 when none)"
    );
    describe_counter!(RECONCILIATIONS, "Reconciler answers by result");
    describe_counter!(LEDGER_ERRORS, "Failed settlement store calls by operation");
}

/// Brings `x402_payments_in_doubt` and its oldest age up to date; call it before rendering a
/// scrape.
pub fn refresh() {
    let doubts = in_doubt().lock().unwrap_or_else(PoisonError::into_inner);
    publish(&doubts);
}

/// The payments this process put in doubt, and since when.
fn in_doubt() -> &'static Mutex<HashMap<PaymentKey, Instant>> {
    static IN_DOUBT_NOW: std::sync::OnceLock<Mutex<HashMap<PaymentKey, Instant>>> =
        std::sync::OnceLock::new();
    IN_DOUBT_NOW.get_or_init(Mutex::default)
}

fn publish(doubts: &HashMap<PaymentKey, Instant>) {
    let oldest = doubts
        .values()
        .min()
        .map_or(Duration::ZERO, Instant::elapsed);
    // Counts this small are exact in an f64.
    #[allow(clippy::cast_precision_loss)]
    gauge!(IN_DOUBT).set(doubts.len() as f64);
    gauge!(IN_DOUBT_OLDEST_AGE).set(oldest.as_secs_f64());
}

/// Records what `event` says.
pub(crate) fn record(event: &PaymentEvent<'_>) {
    match event {
        PaymentEvent::ChallengeServed { .. } => counter!(CHALLENGES).increment(1),
        PaymentEvent::Settled { .. } => payment("settled", "none"),
        PaymentEvent::Replayed { .. } => payment("replayed", "none"),
        PaymentEvent::Failed { refusal, .. } => match refusal {
            Refusal::SettlementInDoubt { .. } => payment("in_doubt", "none"),
            refusal => payment("refused", refusal_kind(refusal)),
        },
        PaymentEvent::InDoubt { key, .. } => {
            let mut doubts = in_doubt().lock().unwrap_or_else(PoisonError::into_inner);
            doubts.entry((*key).clone()).or_insert_with(Instant::now);
            publish(&doubts);
        }
        PaymentEvent::DoubtResolved { key, .. } => {
            let mut doubts = in_doubt().lock().unwrap_or_else(PoisonError::into_inner);
            doubts.remove(*key);
            publish(&doubts);
        }
        _ => {}
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
        Refusal::Facilitator(failure) if failure.is_unavailable() => "facilitator_unavailable",
        Refusal::Facilitator(_) => "facilitator_error",
        Refusal::SettlementRefused(_) => "settlement_refused",
        Refusal::RecordsUnavailable(_) => "records_unavailable",
        Refusal::SettlementInDoubt { .. } => "settlement_in_doubt",
        Refusal::PaymentInProgress => "payment_in_progress",
        Refusal::AuthorizationExpired => "authorization_expired",
        Refusal::ChargeAboveMaximum { .. } => "charge_above_maximum",
        Refusal::ChargeMissing => "charge_missing",
        Refusal::InvalidSettlementOverride { .. } => "invalid_settlement_override",
    }
}

/// A facilitator whose calls are timed into `x402_facilitator_request_duration_seconds`.
pub(crate) struct Metered<T: ?Sized>(pub(crate) Arc<T>);

fn timed(endpoint: &'static str, started: Instant, outcome: &'static str) {
    metrics::histogram!(FACILITATOR_DURATION, "endpoint" => endpoint, "outcome" => outcome)
        .record(started.elapsed().as_secs_f64());
}

fn failure_outcome(failure: &FacilitatorError) -> &'static str {
    if failure.is_unavailable() {
        "unavailable"
    } else {
        "error"
    }
}

impl Facilitator for Metered<dyn Facilitator> {
    fn verify<'a>(
        &'a self,
        request: &'a FacilitatorRequest,
    ) -> BoxFuture<'a, Result<VerifyResponse, FacilitatorError>> {
        Box::pin(async move {
            let started = Instant::now();
            let answer = self.0.verify(request).await;
            let outcome = match &answer {
                Ok(verified) if verified.is_valid => "ok",
                Ok(_) => "rejected",
                Err(failure) => failure_outcome(failure),
            };
            timed("verify", started, outcome);
            answer
        })
    }

    fn settle<'a>(
        &'a self,
        request: &'a FacilitatorRequest,
    ) -> BoxFuture<'a, Result<SettleResponse, FacilitatorError>> {
        Box::pin(async move {
            let started = Instant::now();
            let answer = self.0.settle(request).await;
            let outcome = match &answer {
                Ok(settled) if settled.success => "ok",
                Ok(_) => "rejected",
                Err(failure) => failure_outcome(failure),
            };
            timed("settle", started, outcome);
            answer
        })
    }

    fn supported(&self) -> BoxFuture<'_, Result<Arc<SupportedResponse>, FacilitatorError>> {
        Box::pin(async move {
            let started = Instant::now();
            let answer = self.0.supported().await;
            let outcome = match &answer {
                Ok(_) => "ok",
                Err(failure) => failure_outcome(failure),
            };
            timed("supported", started, outcome);
            answer
        })
    }
}

impl Reconciler for Metered<dyn Reconciler> {
    fn reconcile<'a>(&'a self, request: &'a FacilitatorRequest) -> BoxFuture<'a, Reconciliation> {
        Box::pin(async move {
            let answer = self.0.reconcile(request).await;
            let result = match &answer {
                Reconciliation::Settled { .. } => "settled",
                Reconciliation::NotSettled => "not_settled",
                Reconciliation::Unknown { .. } => "unknown",
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

impl SettlementStore for Metered<dyn SettlementStore> {
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

/// Times `facilitator`'s calls.
pub(crate) fn facilitator(facilitator: Arc<dyn Facilitator>) -> Arc<dyn Facilitator> {
    Arc::new(Metered(facilitator))
}

/// Counts `reconciler`'s answers.
pub(crate) fn reconciler(reconciler: Arc<dyn Reconciler>) -> Arc<dyn Reconciler> {
    Arc::new(Metered(reconciler))
}

/// Counts `store`'s failures.
pub(crate) fn store(store: Arc<dyn SettlementStore>) -> Arc<dyn SettlementStore> {
    Arc::new(Metered(store))
}
