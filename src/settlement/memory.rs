//! The default settlement store: a bounded map in memory.

use std::collections::VecDeque;
use std::collections::hash_map::Entry;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use super::key_map::KeyMap;
use super::{LedgerEntry, PaymentKey, PaymentState, SettlementRecord, SettlementStore, StoreError};
use crate::boxed::BoxFuture;

/// An in-memory [`SettlementStore`] holding at most `capacity` settled payments; payments that
/// are not settled yet are never evicted.
///
/// ```
/// use tower_x402::settlement::MemorySettlementStore;
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
    entries: KeyMap<LedgerEntry>,
    /// Keys in insertion order, for eviction; may name keys removed since.
    order: VecDeque<PaymentKey>,
}

/// Settled payments kept by [`MemorySettlementStore::default`].
const DEFAULT_CAPACITY: usize = 10_000;

impl MemorySettlementStore {
    /// A store keeping at most `capacity` settled payments (at least one), oldest evicted first.
    pub fn new(capacity: usize) -> Self {
        Self {
            inner: Arc::default(),
            capacity: capacity.max(1),
        }
    }

    /// How many payments are held, in any state.
    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    /// Whether no payment is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The entry under `key`, without going through a future.
    pub fn entry(&self, key: &PaymentKey) -> Option<LedgerEntry> {
        self.lock().entries.get(key).cloned()
    }

    /// The settlement record under `key`, if the payment settled.
    pub fn get(&self, key: &PaymentKey) -> Option<SettlementRecord> {
        match self.entry(key)?.state {
            PaymentState::Settled { record } => Some(record),
            _ => None,
        }
    }

    /// Every payment currently in doubt (or settling), for an operator's view.
    pub fn unsettled(&self) -> Vec<(PaymentKey, PaymentState)> {
        let inner = self.lock();
        let mut found: Vec<_> = inner
            .entries
            .iter()
            .filter(|(_, entry)| {
                matches!(
                    entry.state,
                    PaymentState::InDoubt { .. } | PaymentState::Settling { .. }
                )
            })
            .map(|(key, entry)| (key.clone(), entry.state.clone()))
            .collect();
        found.sort_by(|a, b| a.0.cmp(&b.0));
        found
    }

    /// Records `record` as settled unless its key is already held.
    pub fn remember(&self, record: &SettlementRecord) {
        let state = PaymentState::Settled {
            record: record.clone(),
        };
        self.insert_state(&record.key, &state);
    }

    fn insert_state(&self, key: &PaymentKey, state: &PaymentState) -> bool {
        let mut guard = self.lock();
        let inner = &mut *guard;
        if inner.entries.len() >= self.capacity {
            if inner.entries.contains_key(key) {
                return false;
            }
            inner.evict_settled(self.capacity);
        }
        // One lookup: the key is hashed once.
        match inner.entries.entry(key.clone()) {
            Entry::Occupied(_) => false,
            Entry::Vacant(vacant) => {
                vacant.insert(LedgerEntry::new(state.clone(), 1));
                inner.order.push_back(key.clone());
                true
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, MemoryInner> {
        // Every operation leaves the map consistent before anything can panic.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl MemoryInner {
    /// Makes room for one more entry by evicting the oldest settled ones.
    fn evict_settled(&mut self, capacity: usize) {
        let mut looked_at = 0;
        while self.entries.len() >= capacity && looked_at < self.order.len() {
            let Some(oldest) = self.order.pop_front() else {
                break;
            };
            match self.entries.get(&oldest).map(|entry| &entry.state) {
                Some(PaymentState::Settled { .. }) => {
                    self.entries.remove(&oldest);
                }
                // Still in play: keep it, look further.
                Some(_) => {
                    self.order.push_back(oldest);
                    looked_at += 1;
                }
                // Removed since: its place in the queue is stale.
                None => {}
            }
        }
    }
}

impl Default for MemorySettlementStore {
    /// A store keeping the 10,000 most recent settled payments (about 20 MB at most).
    fn default() -> Self {
        Self::new(DEFAULT_CAPACITY)
    }
}

impl SettlementStore for MemorySettlementStore {
    fn load<'a>(
        &'a self,
        key: &'a PaymentKey,
    ) -> BoxFuture<'a, Result<Option<LedgerEntry>, StoreError>> {
        match self.entry(key) {
            // A new payment's: boxed without an allocation.
            None => Box::pin(Absent),
            entry => Box::pin(std::future::ready(Ok(entry))),
        }
    }

    fn insert<'a>(
        &'a self,
        key: &'a PaymentKey,
        state: &'a PaymentState,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        written(self.insert_state(key, state))
    }

    fn replace<'a>(
        &'a self,
        key: &'a PaymentKey,
        version: u64,
        state: &'a PaymentState,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        let mut inner = self.lock();
        let replaced = match inner.entries.get_mut(key) {
            Some(entry) if entry.version == version => {
                *entry = LedgerEntry::new(state.clone(), version + 1);
                true
            }
            _ => false,
        };
        written(replaced)
    }

    fn remove<'a>(
        &'a self,
        key: &'a PaymentKey,
        version: u64,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        let mut inner = self.lock();
        let removed = match inner.entries.entry(key.clone()) {
            Entry::Occupied(entry) if entry.get().version == version => {
                entry.remove();
                true
            }
            _ => false,
        };
        written(removed)
    }
}

/// A write's answer, boxed without an allocation: each answer is a future type of its own and
/// of no size.
fn written<'a>(done: bool) -> BoxFuture<'a, Result<bool, StoreError>> {
    if done {
        Box::pin(Written::<true>)
    } else {
        Box::pin(Written::<false>)
    }
}

/// A future ready with `Ok(None)`: no entry.
struct Absent;

impl Future for Absent {
    type Output = Result<Option<LedgerEntry>, StoreError>;

    fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Self::Output> {
        Poll::Ready(Ok(None))
    }
}

/// A future ready with `Ok(DONE)`.
struct Written<const DONE: bool>;

impl<const DONE: bool> Future for Written<DONE> {
    type Output = Result<bool, StoreError>;

    fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Self::Output> {
        Poll::Ready(Ok(DONE))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn meets_the_store_contract() {
        super::super::check_conformance(Arc::new(MemorySettlementStore::default())).await;
    }

    #[test]
    fn evicts_only_settled_payments() {
        let store = MemorySettlementStore::new(2);
        let doubt = PaymentState::InProgress {
            owner: "a".into(),
            lease_until: 0,
            fingerprint: "f".into(),
        };
        for name in ["k1", "k2", "k3"] {
            assert!(store.insert_state(&PaymentKey::from_stored(name), &doubt));
        }
        assert_eq!(store.len(), 3, "nothing settled, nothing evicted");
    }
}
