//! The payment ledger: where each payment stands, kept so that it settles once, even when a
//! facilitator's answer is lost or the process dies mid-way.
//!
//! Every payment gets a [`PaymentKey`]. The layer records the payment's [`PaymentState`] under
//! that key in its [`SettlementStore`]: *in progress* while it verifies, *settling* (the
//! write-ahead intent) before it sends `/settle`, then *settled* with the
//! [`SettlementRecord`], or *in doubt* when the outcome is unknown. A later request carrying a
//! settled payment is answered from the record; one carrying an in-doubt payment re-sends the
//! identical `/settle`, and when that does not tell, asks a [`Reconciler`] that looks at the
//! chain. Concurrent requests with the same key are single-flighted inside one process; across
//! processes sharing one store, the store's compare-and-set operations and leases decide.
//!
//! `check_conformance` (feature `test-util`) tests any store against the contract below.

use std::sync::Arc;

use crate::boxed::{BoxError, BoxFuture};

#[cfg(any(test, feature = "test-util"))]
mod conformance;
mod key_map;
mod memory;
mod reconciler;
mod record;
mod state;

#[cfg(any(test, feature = "test-util"))]
#[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
pub use conformance::check as check_conformance;
pub(crate) use key_map::KeyMap;
pub use memory::MemorySettlementStore;
pub use reconciler::{Reconciler, Reconciliation};
pub(crate) use record::Fingerprint;
pub use record::{PaymentKey, SettlementRecord};
pub use state::{LedgerEntry, PaymentState, SettlementIntent};

/// The store could not be read or written.
#[derive(Debug, thiserror::Error)]
#[error("settlement store: {0}")]
pub struct StoreError(#[source] pub BoxError);

/// The payment ledger's storage: one versioned [`PaymentState`] per [`PaymentKey`], changed only
/// by atomic per-key compare-and-set.
///
/// The default, [`MemorySettlementStore`], forgets on restart and is private to one process; an
/// application that must remember, or runs several instances, implements this over a shared
/// database (a table with a primary key, a version column and the state as JSON; a Redis hash
/// with a Lua script or `WATCH`; a DynamoDB item with condition expressions).
///
/// The contract, which `check_conformance` (feature `test-util`) tests:
///
/// - each operation is atomic for its key: of two concurrent operations naming the same
///   version, at most one succeeds;
/// - `insert` stores version 1; every successful `replace` stores the version it was given
///   plus one; a removed key is absent, and may be inserted again at version 1;
/// - the state handed back by [`load`](Self::load) is equal to the one stored (the layer
///   compares fingerprints and reads every field);
/// - an `Err` means the operation may or may not have happened; the layer then refuses with a
///   503 rather than guess, and leases make any half-done step recoverable;
/// - a successful write is durable to the extent the application needs: a store that loses
///   writes on a crash loses the crash recovery with them;
/// - the store never drops an entry that is not [`PaymentState::Settled`] on its own (a bounded
///   store may evict settled entries, and then forgets that the payment settled).
pub trait SettlementStore: Send + Sync + 'static {
    /// The entry under `key`, if any.
    fn load<'a>(
        &'a self,
        key: &'a PaymentKey,
    ) -> BoxFuture<'a, Result<Option<LedgerEntry>, StoreError>>;

    /// Stores `state` at version 1 if `key` is absent. `Ok(false)`: the key exists, nothing
    /// changed.
    fn insert<'a>(
        &'a self,
        key: &'a PaymentKey,
        state: &'a PaymentState,
    ) -> BoxFuture<'a, Result<bool, StoreError>>;

    /// Replaces the state under `key` with `state` at version `version + 1` if its version is
    /// `version`. `Ok(false)`: absent or another version, nothing changed.
    fn replace<'a>(
        &'a self,
        key: &'a PaymentKey,
        version: u64,
        state: &'a PaymentState,
    ) -> BoxFuture<'a, Result<bool, StoreError>>;

    /// Removes `key` if its version is `version`. `Ok(false)`: absent or another version,
    /// nothing changed.
    fn remove<'a>(
        &'a self,
        key: &'a PaymentKey,
        version: u64,
    ) -> BoxFuture<'a, Result<bool, StoreError>>;
}

impl<T: SettlementStore + ?Sized> SettlementStore for Arc<T> {
    fn load<'a>(
        &'a self,
        key: &'a PaymentKey,
    ) -> BoxFuture<'a, Result<Option<LedgerEntry>, StoreError>> {
        (**self).load(key)
    }

    fn insert<'a>(
        &'a self,
        key: &'a PaymentKey,
        state: &'a PaymentState,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        (**self).insert(key, state)
    }

    fn replace<'a>(
        &'a self,
        key: &'a PaymentKey,
        version: u64,
        state: &'a PaymentState,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        (**self).replace(key, version, state)
    }

    fn remove<'a>(
        &'a self,
        key: &'a PaymentKey,
        version: u64,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        (**self).remove(key, version)
    }
}
