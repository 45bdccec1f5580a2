//! [`EntitlementStore`]: who bought which resource, and which sign-in nonces were used.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use tower_x402::BoxFuture;
use tower_x402::settlement::StoreError;

/// Where sign-in-with-x keeps what it needs across requests and instances: one *entitlement*
/// per (resource, address) — the last time that address paid for that resource — and the
/// *consumed nonces*, so that a sign-in proof is accepted once.
///
/// The resource is the key of what was bought, [`entitlement_key`](super::entitlement_key):
/// the offer's resource URL (as in
/// [`SettlementRecord::resource`](tower_x402::settlement::SettlementRecord::resource)) and the amount
/// of the accept the buyer signed, `https://shop.example/report#amount=100000` — or, for an
/// entitlement recorded before they were keyed by price, the URL alone; the address is the
/// payer as settled, lower-cased when it is an EVM `0x` address and kept as is otherwise
/// (Solana's base58 is case-sensitive).
///
/// The contract, which `check_conformance` (feature `test-util`) tests:
///
/// - [`record_purchase`](Self::record_purchase) keeps the latest time per (resource, address):
///   an older time never replaces a newer one;
/// - [`last_purchase`](Self::last_purchase) answers that time, or `None`; resources and
///   addresses are compared exactly;
/// - [`consume_nonce`](Self::consume_nonce) is atomic: of any number of calls with one nonce,
///   on any instance sharing the store, exactly one answers `true` until the nonce's expiry has
///   passed; a store may forget a nonce after its expiry (a proof carrying it is refused as too
///   old by then);
/// - an `Err` means the operation may or may not have happened: the sign-in is refused (the
///   buyer may pay, or try again).
pub trait EntitlementStore: Send + Sync + 'static {
    /// Records that `address` paid for `resource` at `at` (unix seconds).
    fn record_purchase<'a>(
        &'a self,
        resource: &'a str,
        address: &'a str,
        at: u64,
    ) -> BoxFuture<'a, Result<(), StoreError>>;

    /// When `address` last paid for `resource` (unix seconds), if ever.
    fn last_purchase<'a>(
        &'a self,
        resource: &'a str,
        address: &'a str,
    ) -> BoxFuture<'a, Result<Option<u64>, StoreError>>;

    /// Marks `nonce` used until `expires` (unix seconds). `Ok(true)`: it was not used before;
    /// `Ok(false)`: it was, and the proof carrying it must be refused.
    fn consume_nonce<'a>(
        &'a self,
        nonce: &'a str,
        expires: u64,
    ) -> BoxFuture<'a, Result<bool, StoreError>>;
}

impl<T: EntitlementStore + ?Sized> EntitlementStore for Arc<T> {
    fn record_purchase<'a>(
        &'a self,
        resource: &'a str,
        address: &'a str,
        at: u64,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        (**self).record_purchase(resource, address, at)
    }

    fn last_purchase<'a>(
        &'a self,
        resource: &'a str,
        address: &'a str,
    ) -> BoxFuture<'a, Result<Option<u64>, StoreError>> {
        (**self).last_purchase(resource, address)
    }

    fn consume_nonce<'a>(
        &'a self,
        nonce: &'a str,
        expires: u64,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        (**self).consume_nonce(nonce, expires)
    }
}

/// An [`EntitlementStore`] in this process's memory: the default. It forgets on restart and is
/// private to one process, so a buyer signs in only where (and while) the purchase was
/// recorded; several instances share a database store instead
/// (`PostgresEntitlementStore` in the `tower-x402-postgres` crate, its feature `siwx`).
///
/// Consumed nonces are dropped once expired (checked on each new one).
#[derive(Clone, Debug, Default)]
pub struct MemoryEntitlementStore {
    inner: Arc<Mutex<Inner>>,
}

#[derive(Debug, Default)]
struct Inner {
    purchases: HashMap<(String, String), u64>,
    nonces: HashMap<String, u64>,
}

impl MemoryEntitlementStore {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl EntitlementStore for MemoryEntitlementStore {
    fn record_purchase<'a>(
        &'a self,
        resource: &'a str,
        address: &'a str,
        at: u64,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        let mut inner = self.lock();
        let last = inner
            .purchases
            .entry((resource.to_owned(), address.to_owned()))
            .or_insert(at);
        *last = (*last).max(at);
        Box::pin(async { Ok(()) })
    }

    fn last_purchase<'a>(
        &'a self,
        resource: &'a str,
        address: &'a str,
    ) -> BoxFuture<'a, Result<Option<u64>, StoreError>> {
        let found = self
            .lock()
            .purchases
            .get(&(resource.to_owned(), address.to_owned()))
            .copied();
        Box::pin(async move { Ok(found) })
    }

    fn consume_nonce<'a>(
        &'a self,
        nonce: &'a str,
        expires: u64,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        let now = crate::support::unix_now();
        let mut inner = self.lock();
        inner.nonces.retain(|_, until| *until >= now);
        let fresh = !inner.nonces.contains_key(nonce);
        if fresh {
            inner.nonces.insert(nonce.to_owned(), expires);
        }
        Box::pin(async move { Ok(fresh) })
    }
}
