//! The states a payment goes through in the ledger, and the entry a store keeps per key.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use x402_wire::FacilitatorRequest;

use super::SettlementRecord;

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
#[serde(tag = "phase", rename_all = "snake_case", try_from = "StoredState")]
#[non_exhaustive]
// The settled record is stored by value (a public shape); the other states share their payment.
#[allow(clippy::large_enum_variant)]
pub enum PaymentState {
    /// A process is verifying the payment (or, after settlement, waiting for its handler).
    /// Nothing has been sent to `/settle`.
    InProgress {
        /// The layer instance holding the payment.
        owner: Arc<str>,
        /// Until when the hold is valid; an expired hold may be taken over.
        lease_until: u64,
        /// [`SettlementRecord::fingerprint`] of the payment held.
        fingerprint: Arc<str>,
    },
    /// Written **before** `/settle` is sent: the intent that makes a crash recoverable. Once the
    /// lease has expired the payment is treated as [`InDoubt`](Self::InDoubt).
    Settling {
        /// The layer instance settling.
        owner: Arc<str>,
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

/// [`PaymentState`] as it is read back: the same JSON, its fields read straight from the text.
///
/// An internally tagged enum buffers its fields before it reads them, and a payment's proof
/// (kept as raw JSON) cannot be read from that buffer; this flat shape can, and is then checked
/// to hold exactly the fields its `phase` needs.
#[derive(Deserialize)]
struct StoredState {
    phase: Phase,
    owner: Option<Arc<str>>,
    lease_until: Option<u64>,
    fingerprint: Option<Arc<str>>,
    intent: Option<SettlementIntent>,
    since: Option<u64>,
    reason: Option<String>,
    record: Option<SettlementRecord>,
}

#[derive(Clone, Copy, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Phase {
    InProgress,
    Settling,
    InDoubt,
    Settled,
}

impl TryFrom<StoredState> for PaymentState {
    type Error = String;

    fn try_from(stored: StoredState) -> Result<Self, String> {
        fn field<T>(value: Option<T>, name: &str) -> Result<T, String> {
            value.ok_or_else(|| format!("missing field `{name}`"))
        }
        Ok(match stored.phase {
            Phase::InProgress => Self::InProgress {
                owner: field(stored.owner, "owner")?,
                lease_until: field(stored.lease_until, "lease_until")?,
                fingerprint: field(stored.fingerprint, "fingerprint")?,
            },
            Phase::Settling => Self::Settling {
                owner: field(stored.owner, "owner")?,
                lease_until: field(stored.lease_until, "lease_until")?,
                intent: field(stored.intent, "intent")?,
            },
            Phase::InDoubt => Self::InDoubt {
                intent: field(stored.intent, "intent")?,
                since: field(stored.since, "since")?,
                reason: field(stored.reason, "reason")?,
            },
            Phase::Settled => Self::Settled {
                record: field(stored.record, "record")?,
            },
        })
    }
}

/// What a process is about to send (or sent) to `/settle`: everything needed to send it again
/// identically, from any process.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct SettlementIntent {
    /// [`SettlementRecord::fingerprint`] of the payment.
    pub fingerprint: Arc<str>,
    /// URL of the resource being bought.
    pub resource: Arc<str>,
    /// The exact `/settle` request body, shared (not copied) by every state and answer that
    /// carries it.
    pub request: Arc<FacilitatorRequest>,
    /// The label of the facilitator `/settle` goes to (see
    /// [`Facilitators`](crate::facilitator::Facilitators)); every retry of the payment goes
    /// there alone. `None` (an intent written before labels existed) means the first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub facilitator: Option<Arc<str>>,
    /// The request the payment came with
    /// ([`RequestDigest`](crate::payment::RequestDigest)): a payment in doubt is recovered only
    /// by that request. `None` (an intent written before requests were recorded) means any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_digest: Option<Arc<str>>,
}

impl SettlementIntent {
    /// The intent to send `request` for `resource`.
    pub fn new(resource: impl Into<Arc<str>>, request: FacilitatorRequest) -> Self {
        Self {
            fingerprint: super::Fingerprint::of(request.payment_payload()).into_shared(),
            resource: resource.into(),
            request: Arc::new(request),
            facilitator: None,
            request_digest: None,
        }
    }

    /// The same intent, bound for the facilitator labelled `label`.
    pub fn at_facilitator(mut self, label: impl Into<Arc<str>>) -> Self {
        self.facilitator = Some(label.into());
        self
    }

    /// The same intent, for the request whose digest is `digest`
    /// ([`RequestDigest::as_str`](crate::payment::RequestDigest::as_str)).
    pub fn for_request(mut self, digest: impl Into<Arc<str>>) -> Self {
        self.request_digest = Some(digest.into());
        self
    }

    /// The intent to send `request`, whose payment's fingerprint the layer already computed,
    /// for the request whose digest is `digest`.
    pub(crate) fn with_fingerprint(
        fingerprint: super::Fingerprint,
        resource: Arc<str>,
        request: Arc<FacilitatorRequest>,
        digest: Arc<str>,
    ) -> Self {
        Self {
            fingerprint: fingerprint.into_shared(),
            resource,
            request,
            facilitator: None,
            request_digest: Some(digest),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stored_state_reads_back_as_it_was_written_and_must_be_whole() {
        let held = PaymentState::InProgress {
            owner: "a".into(),
            lease_until: 7,
            fingerprint: "f".into(),
        };
        let text = serde_json::to_string(&held).unwrap();
        assert_eq!(
            text,
            r#"{"phase":"in_progress","owner":"a","lease_until":7,"fingerprint":"f"}"#
        );
        assert_eq!(serde_json::from_str::<PaymentState>(&text).unwrap(), held);

        let missing =
            serde_json::from_str::<PaymentState>(r#"{"phase":"in_progress","owner":"a"}"#)
                .unwrap_err();
        assert!(
            missing.to_string().contains("missing field `lease_until`"),
            "{missing}"
        );
        let unknown = serde_json::from_str::<PaymentState>(r#"{"phase":"paid"}"#).unwrap_err();
        assert!(
            unknown.to_string().contains("unknown variant `paid`"),
            "{unknown}"
        );
    }
}
