//! Settlement records and where they are kept: one payment, one settlement.
//!
//! Every payment gets a [`PaymentKey`]. After a successful settlement the layer saves a
//! [`SettlementRecord`] under that key in its [`SettlementStore`]; a later request carrying the
//! same payment is answered from the record (the inner service runs again and sees the recorded
//! settlement) without calling the facilitator. Concurrent requests with the same key are
//! single-flighted inside one process: the first does the work, the others wait for its outcome.

use std::sync::Arc;

use crate::{BoxError, BoxFuture};

mod memory;
mod record;

pub use memory::MemorySettlementStore;
pub(crate) use record::fingerprint;
pub use record::{PaymentKey, SettlementRecord};

/// The record store could not be read or written.
#[derive(Debug, thiserror::Error)]
#[error("settlement store: {0}")]
pub struct StoreError(#[source] pub BoxError);

/// Where settlement records live. The default, [`MemorySettlementStore`], forgets on restart; an
/// application that must remember (a shop issuing receipts) implements this over its database.
pub trait SettlementStore: Send + Sync + 'static {
    /// The record saved under `key`, if any.
    fn find<'a>(
        &'a self,
        key: &'a PaymentKey,
    ) -> BoxFuture<'a, Result<Option<SettlementRecord>, StoreError>>;

    /// Saves `record`. Saving a key that exists keeps the first record.
    fn save<'a>(&'a self, record: &'a SettlementRecord) -> BoxFuture<'a, Result<(), StoreError>>;
}

impl<T: SettlementStore + ?Sized> SettlementStore for Arc<T> {
    fn find<'a>(
        &'a self,
        key: &'a PaymentKey,
    ) -> BoxFuture<'a, Result<Option<SettlementRecord>, StoreError>> {
        (**self).find(key)
    }

    fn save<'a>(&'a self, record: &'a SettlementRecord) -> BoxFuture<'a, Result<(), StoreError>> {
        (**self).save(record)
    }
}
