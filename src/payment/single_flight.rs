//! Single-flighting of requests that carry the same payment.

use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::{Mutex as AsyncMutex, Notify, OwnedMutexGuard};

use crate::settlement::{KeyMap, PaymentKey};

/// Payments being processed right now, one lock per payment key.
#[derive(Debug, Default)]
pub(crate) struct Inflight {
    locks: Mutex<KeyMap<Arc<AsyncMutex<()>>>>,
    /// Woken when the last payment in progress is done.
    idle: Notify,
}

impl Inflight {
    /// Waits until no other request is processing `key`, then holds it until the guard drops.
    pub(crate) async fn acquire(self: Arc<Self>, key: PaymentKey) -> InflightGuard {
        let lock = {
            let mut locks = self.locks.lock().unwrap_or_else(PoisonError::into_inner);
            Arc::clone(locks.entry(key.clone()).or_default())
        };
        let guard = Arc::clone(&lock).lock_owned().await;
        InflightGuard {
            inflight: self,
            key,
            lock,
            guard: Some(guard),
        }
    }

    /// Resolves once no payment is in progress (none held, none waiting).
    pub(crate) async fn until_idle(&self) {
        loop {
            let woken = self.idle.notified();
            let mut woken = std::pin::pin!(woken);
            woken.as_mut().enable();
            if self
                .locks
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .is_empty()
            {
                return;
            }
            woken.await;
        }
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.locks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

/// Holds a payment key; dropping it lets the next request with the same payment proceed.
pub(crate) struct InflightGuard {
    inflight: Arc<Inflight>,
    key: PaymentKey,
    lock: Arc<AsyncMutex<()>>,
    guard: Option<OwnedMutexGuard<()>>,
}

impl std::fmt::Debug for InflightGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("InflightGuard").field(&self.key).finish()
    }
}

impl Drop for InflightGuard {
    fn drop(&mut self) {
        let mut locks = self
            .inflight
            .locks
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        self.guard.take();
        // The map and `self.lock` hold the only references: nobody else waits, so forget the key.
        // New waiters clone the lock under the map mutex held here, so the count is exact.
        if Arc::strong_count(&self.lock) == 2 {
            locks.remove(&self.key);
            if locks.is_empty() {
                self.inflight.idle.notify_waiters();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn second_holder_waits_and_map_is_cleaned_up() {
        let inflight = Arc::new(Inflight::default());
        let key = PaymentKey::from_stored("k");
        let first = Arc::clone(&inflight).acquire(key.clone()).await;
        let waiter = tokio::spawn(Arc::clone(&inflight).acquire(key.clone()));
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        drop(first);
        let second = waiter.await.unwrap();
        assert_eq!(inflight.len(), 1);
        let idle = tokio::spawn({
            let inflight = Arc::clone(&inflight);
            async move { inflight.until_idle().await }
        });
        tokio::task::yield_now().await;
        assert!(!idle.is_finished(), "idle while a payment is held");
        drop(second);
        assert_eq!(inflight.len(), 0);
        tokio::time::timeout(std::time::Duration::from_secs(1), idle)
            .await
            .expect("idle once the last payment is done")
            .unwrap();
    }
}
