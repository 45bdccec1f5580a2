//! The states a payment goes through in the ledger, and the entry a store keeps per key.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::SettlementRecord;
use crate::proto::FacilitatorRequest;

/// Where one payment stands. A [`SettlementStore`](super::SettlementStore) keeps one per
/// [`PaymentKey`](super::PaymentKey) and never interprets it: it stores the value (for example
/// as its JSON, which round-trips through serde) and hands it back.
///
/// ```text
///            verify fails / handler fails / settlement refused → removed
///  (absent) → InProgress → Settling → Settled
///                             │  ▲
///                             ▼  │ a retry re-sends the identical /settle
///                           InDoubt ─ reconciler: not settled, authorization expired → removed
/// ```
///
/// Times are unix milliseconds, compared by the layer, never by the store.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "phase", rename_all = "snake_case")]
#[non_exhaustive]
// The settled record is stored by value (a public shape); the other states share their payment.
#[allow(clippy::large_enum_variant)]
pub enum PaymentState {
    /// A process is verifying the payment (or, after settlement, waiting for its handler).
    /// Nothing has been sent to `/settle`.
    InProgress {
        /// The layer instance holding the payment.
        owner: String,
        /// Until when the hold is valid; an expired hold may be taken over.
        lease_until: u64,
        /// [`SettlementRecord::fingerprint`] of the payment held.
        fingerprint: String,
    },
    /// Written **before** `/settle` is sent: the intent that makes a crash recoverable. Once the
    /// lease has expired the payment is treated as [`InDoubt`](Self::InDoubt).
    Settling {
        /// The layer instance settling.
        owner: String,
        /// Until when; after this another process (or a restarted one) recovers the payment.
        lease_until: u64,
        /// What is being sent to `/settle`.
        intent: SettlementIntent,
    },
    /// `/settle` was sent and may have moved money, but the outcome is unknown (transport error,
    /// timeout, facilitator 5xx, `settlement_pending`). A retry of the same payment recovers it.
    InDoubt {
        /// What was sent to `/settle`; recovery re-sends exactly this.
        intent: SettlementIntent,
        /// When the payment entered doubt.
        since: u64,
        /// Why the outcome is unknown, for operators.
        reason: String,
    },
    /// Settled: the record repeats are answered from.
    Settled {
        /// The settlement record.
        record: SettlementRecord,
    },
}

impl PaymentState {
    /// `in_progress`, `settling`, `in_doubt` or `settled`: a short name for an indexed column.
    pub fn phase(&self) -> &'static str {
        match self {
            Self::InProgress { .. } => "in_progress",
            Self::Settling { .. } => "settling",
            Self::InDoubt { .. } => "in_doubt",
            Self::Settled { .. } => "settled",
        }
    }

    /// The fingerprint of the payment this state is about.
    pub fn fingerprint(&self) -> &str {
        match self {
            Self::InProgress { fingerprint, .. } => fingerprint,
            Self::Settling { intent, .. } | Self::InDoubt { intent, .. } => &intent.fingerprint,
            Self::Settled { record } => &record.fingerprint,
        }
    }
}

/// What a process is about to send (or sent) to `/settle`: everything needed to send it again
/// identically, from any process.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct SettlementIntent {
    /// [`SettlementRecord::fingerprint`] of the payment.
    pub fingerprint: String,
    /// URL of the resource being bought.
    pub resource: String,
    /// The exact `/settle` request body, shared (not copied) by every state and answer that
    /// carries it.
    pub request: Arc<FacilitatorRequest>,
    /// The label of the facilitator `/settle` goes to (see
    /// [`Facilitators`](crate::facilitator::Facilitators)); every retry of the payment goes
    /// there alone. `None` (an intent written before labels existed) means the first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub facilitator: Option<String>,
}

impl SettlementIntent {
    /// The intent to send `request` for `resource`.
    pub fn new(resource: impl Into<String>, request: FacilitatorRequest) -> Self {
        Self {
            fingerprint: super::Fingerprint::of(&request.payment_payload).into_string(),
            resource: resource.into(),
            request: Arc::new(request),
            facilitator: None,
        }
    }

    /// The same intent, bound for the facilitator labelled `label`.
    pub fn at_facilitator(mut self, label: impl Into<String>) -> Self {
        self.facilitator = Some(label.into());
        self
    }

    /// The intent to send `request`, whose payment's fingerprint the layer already computed.
    pub(crate) fn with_fingerprint(
        fingerprint: super::Fingerprint,
        resource: String,
        request: Arc<FacilitatorRequest>,
    ) -> Self {
        Self {
            fingerprint: fingerprint.into_string(),
            resource,
            request,
            facilitator: None,
        }
    }
}

/// A state as stored, with the version that compare-and-set operations name.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct LedgerEntry {
    /// The payment's state.
    pub state: PaymentState,
    /// 1 when inserted, plus one for every successful
    /// [`replace`](super::SettlementStore::replace).
    pub version: u64,
}

impl LedgerEntry {
    /// An entry read back from storage.
    pub fn new(state: PaymentState, version: u64) -> Self {
        Self { state, version }
    }
}
