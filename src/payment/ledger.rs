//! The gate's side of the payment ledger: claiming a payment, leases, and the small
//! compare-and-set steps every path shares.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::payments::Payments;
use super::refusal::Refusal;
use crate::boxed::BoxFuture;
use crate::settlement::{
    Fingerprint, LedgerEntry, PaymentKey, PaymentState, SettlementIntent, SettlementRecord,
    StoreError,
};

/// How often a claim re-reads an entry that changed under it before giving up with a 503.
const CLAIM_ATTEMPTS: usize = 4;
/// The first pause before re-reading a payment another process holds; doubled up to
/// [`HELD_POLL_MAX`].
const HELD_POLL_FIRST: Duration = Duration::from_millis(25);
const HELD_POLL_MAX: Duration = Duration::from_millis(250);

/// A payment this layer holds in the ledger, at `version`.
#[derive(Clone, Debug)]
pub(super) struct Hold {
    pub(super) key: PaymentKey,
    pub(super) version: u64,
}

/// What the ledger says to do with a payment.
pub(super) enum Claim {
    /// New (or abandoned before `/settle`): now held *in progress*; verify it.
    Fresh(Hold),
    /// Settled: answer from the record.
    Settled(Box<SettlementRecord>),
    /// In doubt, or settling under an expired lease (or this layer's own, abandoned): recover.
    Recover(Hold, Box<SettlementIntent>),
    /// Refuse without touching the facilitator.
    Refuse(Box<Refusal>),
}

/// Unix milliseconds ([`x402_wire::unix_time`]).
pub(super) fn now_ms() -> u64 {
    u64::try_from(x402_wire::unix_time().as_millis()).unwrap_or(u64::MAX)
}

/// When a lease taken now runs out.
pub(super) fn lease_until(config: &Payments) -> u64 {
    now_ms().saturating_add(u64::try_from(config.lease.as_millis()).unwrap_or(u64::MAX))
}

/// Whether a lease held by `owner` until `until` may be taken over by this layer: it ran out,
/// or it is this layer's own (the request that held it is gone, since this one holds the
/// in-process single-flight lock for the key).
fn takeable(config: &Payments, owner: &str, until: u64) -> bool {
    owner == &*config.owner || until <= now_ms()
}

/// Reads the payment's entry and claims it when it is new. A payment another process holds is
/// re-read, with growing pauses, until it settles, falls into doubt, is let go, or
/// [`Payments::held_payment_wait`] runs out (then 503).
pub(super) async fn claim(config: &Payments, key: &PaymentKey, fingerprint: &Fingerprint) -> Claim {
    let mut deadline = None;
    let mut pause = HELD_POLL_FIRST;
    let mut lost_races = 0;
    let in_progress = || PaymentState::InProgress {
        owner: Arc::clone(&config.owner),
        lease_until: lease_until(config),
        fingerprint: fingerprint.shared(),
    };
    while lost_races < CLAIM_ATTEMPTS {
        // The entry is read into what it means before anything else is awaited: the claim's
        // future keeps a few words across its awaits, not the entry.
        let seen = match config.store.load(key).await {
            Ok(entry) => seen(config, key, fingerprint, entry),
            Err(error) => {
                tracing::warn!(%error, %key, "settlement store unavailable; refusing payment rather than risk a second charge");
                return Claim::Refuse(Box::new(Refusal::RecordsUnavailable(error)));
            }
        };
        let written = match seen {
            Seen::Decided(claim) => return claim,
            Seen::Absent => match hold_written(config, key, None, in_progress()).await {
                Ok(true) => return Claim::Fresh(hold(key, 1)),
                written => written,
            },
            Seen::Abandoned(version) => {
                match hold_written(config, key, Some(version), in_progress()).await {
                    Ok(true) => return Claim::Fresh(hold(key, version + 1)),
                    written => written,
                }
            }
            Seen::Held => {
                let now = Instant::now();
                let deadline = *deadline.get_or_insert(now + config.held_wait);
                if now >= deadline {
                    return Claim::Refuse(Box::new(Refusal::PaymentInProgress));
                }
                tokio::time::sleep(pause.min(deadline - now)).await;
                pause = (pause * 2).min(HELD_POLL_MAX);
                continue;
            }
        };
        match written {
            Ok(_) => lost_races += 1,
            Err(error) => return Claim::Refuse(Box::new(Refusal::RecordsUnavailable(error))),
        }
    }
    Claim::Refuse(Box::new(Refusal::PaymentInProgress))
}

/// Writes `state` (*in progress*) under `key`: inserted when `version` is `None`, else in place
/// of that version. Boxed with the state, so that the claim's future does not carry a whole
/// [`PaymentState`] (sized for a settlement record) beside every payment's verification.
fn hold_written<'a>(
    config: &'a Payments,
    key: &'a PaymentKey,
    version: Option<u64>,
    state: PaymentState,
) -> BoxFuture<'a, Result<bool, StoreError>> {
    Box::pin(async move {
        match version {
            None => config.store.insert(key, &state).await,
            Some(version) => config.store.replace(key, version, &state).await,
        }
    })
}

/// What a payment's entry in the ledger means for a claim of it.
enum Seen {
    /// No entry: insert one.
    Absent,
    /// Answered without writing.
    Decided(Claim),
    /// Held *in progress* under a lease that is takeable, at this version: take it over.
    Abandoned(u64),
    /// Held by another process: wait and read it again.
    Held,
}

fn seen(
    config: &Payments,
    key: &PaymentKey,
    fingerprint: &Fingerprint,
    entry: Option<LedgerEntry>,
) -> Seen {
    let Some(entry) = entry else {
        return Seen::Absent;
    };
    if *fingerprint != *entry.state.fingerprint() {
        return Seen::Decided(Claim::Refuse(Box::new(Refusal::IdentifierReused)));
    }
    match entry.state {
        PaymentState::Settled { record } => Seen::Decided(Claim::Settled(Box::new(record))),
        PaymentState::InDoubt { intent, .. } => {
            Seen::Decided(Claim::Recover(hold(key, entry.version), Box::new(intent)))
        }
        PaymentState::Settling {
            owner,
            lease_until,
            intent,
        } if takeable(config, &owner, lease_until) => {
            Seen::Decided(Claim::Recover(hold(key, entry.version), Box::new(intent)))
        }
        PaymentState::InProgress {
            owner, lease_until, ..
        } if takeable(config, &owner, lease_until) => Seen::Abandoned(entry.version),
        PaymentState::Settling { .. } | PaymentState::InProgress { .. } => Seen::Held,
    }
}

fn hold(key: &PaymentKey, version: u64) -> Hold {
    Hold {
        key: key.clone(),
        version,
    }
}

/// Lets go of a payment that never reached `/settle` (or that the chain proved unsettled), so
/// the buyer may pay again. A failure only leaves the hold to expire.
pub(super) async fn release(config: &Payments, hold: &Hold) {
    match config.store.remove(&hold.key, hold.version).await {
        Ok(true) => {}
        Ok(false) => {
            tracing::debug!(key = %hold.key, "payment changed before its release; left as it is")
        }
        Err(error) => {
            tracing::warn!(%error, key = %hold.key, "payment could not be released; its hold will expire")
        }
    }
}
