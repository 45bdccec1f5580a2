//! Settlement records: one payment, one settlement.
//!
//! Every payment gets a [`PaymentKey`]. After a successful settlement the layer saves a
//! [`SettlementRecord`] under that key; a later request carrying the same payment is answered
//! from the record (the inner service runs again and sees the recorded settlement) without
//! calling the facilitator. Concurrent requests with the same key are single-flighted inside one
//! process: the first does the work, the others wait for its outcome.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use crate::facilitator::{BoxError, BoxFuture};
use crate::proto::{PaymentPayload, PaymentRequirements, SettleResponse};

/// Identifies one payment, whatever request carries it.
///
/// In order of preference: the `payment-identifier` extension id (`id:<id>`); for EIP-3009
/// payments the authorization that the chain itself deduplicates on
/// (`eip3009:<network>:<asset>:<from>:<nonce>`, lowercased); otherwise the scheme, network and
/// the exact payload JSON.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PaymentKey(Arc<str>);

impl PaymentKey {
    /// The key of `payload`.
    pub fn of(payload: &PaymentPayload) -> Self {
        match payload.payment_identifier() {
            Some(id) => Self(format!("id:{id}").into()),
            None => Self(fingerprint(payload).into()),
        }
    }

    /// A key from its stored text (for [`SettlementStore`] implementations).
    pub fn from_stored(text: impl Into<Arc<str>>) -> Self {
        Self(text.into())
    }

    /// The key as text, suitable for a unique database column.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for PaymentKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PaymentKey({})", self.0)
    }
}

impl fmt::Display for PaymentKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What identifies the signed payment itself, independent of any client-chosen id: used as the
/// key when there is no id, and stored to detect one id reused for a different payment.
pub fn fingerprint(payload: &PaymentPayload) -> String {
    let accepted = &payload.accepted;
    match payload.exact_evm() {
        Ok(evm) => format!(
            "eip3009:{}:{}:{}:{}",
            accepted.network,
            accepted.asset.to_ascii_lowercase(),
            evm.authorization.from.to_ascii_lowercase(),
            evm.authorization.nonce.to_ascii_lowercase(),
        ),
        Err(_) => format!(
            "raw:{}:{}:{}",
            accepted.scheme, accepted.network, payload.payload
        ),
    }
}

/// A settled payment, as the layer remembers it.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct SettlementRecord {
    /// The payment's key.
    pub key: PaymentKey,
    /// [`fingerprint`] of the payment that settled.
    pub fingerprint: String,
    /// URL of the resource the payment bought; a payment never buys a second resource.
    pub resource: String,
    /// The server's requirement that was paid.
    pub requirement: PaymentRequirements,
    /// The facilitator's successful settlement.
    pub settlement: SettleResponse,
}

impl SettlementRecord {
    /// A record of `settlement` for `payload` bought at `resource` under `requirement`.
    pub fn new(
        payload: &PaymentPayload,
        resource: impl Into<String>,
        requirement: PaymentRequirements,
        settlement: SettleResponse,
    ) -> Self {
        Self {
            key: PaymentKey::of(payload),
            fingerprint: fingerprint(payload),
            resource: resource.into(),
            requirement,
            settlement,
        }
    }

    /// A record rebuilt from storage.
    pub fn from_parts(
        key: PaymentKey,
        fingerprint: String,
        resource: String,
        requirement: PaymentRequirements,
        settlement: SettleResponse,
    ) -> Self {
        Self {
            key,
            fingerprint,
            resource,
            requirement,
            settlement,
        }
    }
}

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

/// An in-memory [`SettlementStore`] holding the most recent `capacity` records.
///
/// ```
/// use tower_x402::layer::MemorySettlementStore;
///
/// let store = MemorySettlementStore::new(10_000);
/// assert_eq!(store.len(), 0);
/// ```
#[derive(Debug, Clone)]
pub struct MemorySettlementStore {
    inner: Arc<Mutex<MemoryInner>>,
    capacity: usize,
}

#[derive(Debug, Default)]
struct MemoryInner {
    records: HashMap<PaymentKey, SettlementRecord>,
    order: VecDeque<PaymentKey>,
}

/// Records kept by [`MemorySettlementStore::default`].
pub const DEFAULT_MEMORY_CAPACITY: usize = 10_000;

impl MemorySettlementStore {
    /// A store keeping at most `capacity` records (at least one), oldest evicted first.
    pub fn new(capacity: usize) -> Self {
        Self {
            inner: Arc::default(),
            capacity: capacity.max(1),
        }
    }

    /// How many records are held.
    pub fn len(&self) -> usize {
        self.lock().records.len()
    }

    /// Whether no record is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The record under `key`, without going through a future.
    pub fn get(&self, key: &PaymentKey) -> Option<SettlementRecord> {
        self.lock().records.get(key).cloned()
    }

    /// Saves `record` unless its key is already held, evicting the oldest record when full.
    pub fn insert(&self, record: &SettlementRecord) {
        let mut inner = self.lock();
        if inner.records.contains_key(&record.key) {
            return;
        }
        while inner.records.len() >= self.capacity {
            match inner.order.pop_front() {
                Some(oldest) => {
                    inner.records.remove(&oldest);
                }
                None => break,
            }
        }
        inner.order.push_back(record.key.clone());
        inner.records.insert(record.key.clone(), record.clone());
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, MemoryInner> {
        // A panic while holding this lock cannot leave the maps inconsistent in a way that
        // matters (at worst a key in `order` without a record), so keep going.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Default for MemorySettlementStore {
    fn default() -> Self {
        Self::new(DEFAULT_MEMORY_CAPACITY)
    }
}

impl SettlementStore for MemorySettlementStore {
    fn find<'a>(
        &'a self,
        key: &'a PaymentKey,
    ) -> BoxFuture<'a, Result<Option<SettlementRecord>, StoreError>> {
        Box::pin(std::future::ready(Ok(self.get(key))))
    }

    fn save<'a>(&'a self, record: &'a SettlementRecord) -> BoxFuture<'a, Result<(), StoreError>> {
        self.insert(record);
        Box::pin(std::future::ready(Ok(())))
    }
}
