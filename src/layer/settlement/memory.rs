//! The default settlement store: a bounded map in memory.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};

use super::{PaymentKey, SettlementRecord, SettlementStore, StoreError};
use crate::BoxFuture;

/// An in-memory [`SettlementStore`] holding the most recent `capacity` records.
///
/// ```
/// use tower_x402::layer::settlement::MemorySettlementStore;
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
const DEFAULT_CAPACITY: usize = 10_000;

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
    /// A store keeping the 10,000 most recent records (about 20 MB at most).
    fn default() -> Self {
        Self::new(DEFAULT_CAPACITY)
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
