//! Metrics for [tower-x402](tower_x402) through the [`metrics`](https://docs.rs/metrics) facade.
//!
//! The metrics plug into a [`Payments`](tower_x402::payment::Payments) core through its public
//! API, like any other plug-in: [`facilitators`] times each facilitator's calls and watches
//! its breaker, [`Metered`] wraps the [`SettlementStore`](tower_x402::settlement::SettlementStore) and the
//! [`Reconciler`](tower_x402::settlement::Reconciler), and [`PaymentMetrics`] is a
//! [lifecycle hook](tower_x402::payment::PaymentHooks) of the core. A core wired so (and every adapter built from it)
//! reports to the recorder the application installs (a Prometheus exporter, StatsD, …); the
//! library installs none. Without a recorder the calls cost a load and a branch.
//!
//! ```
//! use std::sync::Arc;
//! use tower_x402::facilitator::{DEFAULT_LABEL, Facilitators};
//! use tower_x402_metrics::{self as metrics, Metered, PaymentMetrics};
//! use tower_x402::payment::Payments;
//! use tower_x402::{HttpFacilitator, MemorySettlementStore, Price, X402Layer};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let facilitator = Arc::new(HttpFacilitator::new("https://x402.org/facilitator")?);
//! let payments = Payments::with_facilitators(metrics::facilitators(Facilitators::new(
//!     DEFAULT_LABEL,
//!     facilitator,
//! )))
//! .settlement_store(Metered(MemorySettlementStore::default()))
//! .hook(PaymentMetrics);
//! let layer = X402Layer::with_payments(payments, |_: &http::request::Parts| Price::Free);
//! # let _ = layer;
//! # Ok(())
//! # }
//! ```
//!
//! | name | type | labels | what |
//! |---|---|---|---|
//! | `x402_challenges_total` | counter | — | 402 challenges sent for requests without payment |
//! | `x402_payments_total` | counter | `outcome`, `refusal` | paid requests by outcome: `settled`, `replayed` (answered from the record), `in_doubt`, `refused` (with `refusal` its kind, below; `none` for the rest) |
//! | `x402_facilitator_request_duration_seconds` | histogram | `facilitator`, `endpoint`, `outcome` | facilitator calls: `facilitator` its label ([`Facilitators`](tower_x402::facilitator::Facilitators); `default` for a lone facilitator); `endpoint` `verify`, `settle` or `supported`; `outcome` `ok`, `rejected` (`isValid: false`, `success: false`), `unavailable` (unreachable, timed out, overloaded) or `error` (any other failure) |
//! | `x402_facilitator_circuit_open` | gauge | `facilitator` | 1 while the circuit breaker of the facilitator with that label (see [`Facilitators`](tower_x402::facilitator::Facilitators)) is open or half-open, 0 while closed |
//! | `x402_payments_in_doubt` | gauge | — | payments this process put in doubt and has not seen resolved |
//! | `x402_payments_in_doubt_oldest_age_seconds` | gauge | — | how long the oldest of them has been in doubt (0 when none); refreshed whenever a payment enters or leaves doubt and by [`refresh`] |
//! | `x402_reconciliations_total` | counter | `result` | answers of the [`Reconciler`](tower_x402::settlement::Reconciler): `settled`, `not_settled`, `unknown` |
//! | `x402_ledger_errors_total` | counter | `operation` | failed [`SettlementStore`](tower_x402::settlement::SettlementStore) calls: `load`, `insert`, `replace`, `remove` |
//!
//! Refusal kinds (`refusal` label): `invalid_header`, `other_resource`,
//! `no_matching_requirement`, `invalid_payment`, `identifier_reused`,
//! `settled_for_another_resource`, `used_for_another_request`, `already_delivered`,
//! `permit_amount_mismatch`, `facilitator_unavailable`, `facilitator_error`,
//! `settlement_refused`, `records_unavailable`, `payment_in_progress`, `authorization_expired`,
//! `charge_above_maximum`, `invalid_settlement_override`, `hook` (a lifecycle hook's refusal),
//! `other` (a refusal tower-x402 added after this list).
//!
//! Every label value comes from these fixed lists: no address, nonce, URL or facilitator reason
//! ever becomes a label, so the number of series stays bounded.
//!
//! ```
//! // Before rendering a scrape, bring the in-doubt age up to date.
//! tower_x402_metrics::describe();
//! tower_x402_metrics::refresh();
//! ```

#![cfg_attr(docsrs, feature(doc_cfg))]

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use metrics::{Unit, describe_counter, describe_gauge, describe_histogram, gauge};

use tower_x402::settlement::PaymentKey;

mod instruments;

pub use instruments::{Metered, PaymentMetrics, facilitators};

/// `x402_challenges_total`.
pub const CHALLENGES: &str = "x402_challenges_total";
/// `x402_payments_total`.
pub const PAYMENTS: &str = "x402_payments_total";
/// `x402_facilitator_request_duration_seconds`.
pub const FACILITATOR_DURATION: &str = "x402_facilitator_request_duration_seconds";
/// Gauge: whether a facilitator's circuit breaker is open (1) or closed (0).
pub const FACILITATOR_CIRCUIT_OPEN: &str = "x402_facilitator_circuit_open";
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
    describe_gauge!(
        FACILITATOR_CIRCUIT_OPEN,
        "Whether a facilitator's circuit breaker is open (1) or closed (0)"
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

/// Sets the in-doubt gauges from `doubts`.
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

/// The README's example, compiled and run as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
