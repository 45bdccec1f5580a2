//! The `/supported` cache: one fetch at a time, stale-while-revalidate, and remembered failures.
//!
//! * Fresh (younger than the TTL): served from memory.
//! * Expired: the stale copy is served at once and one background task refreshes it; if that
//!   fails, the stale copy keeps being served and no refresh is tried for the failure backoff.
//! * Missing: the first caller fetches while later ones wait for its result instead of sending
//!   their own request. A failure is remembered for the backoff, and callers in that window get
//!   the same error without asking the facilitator again.

use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use crate::facilitator::FacilitatorError;

/// A single-flight cache of one value; generic so that it can be tested without HTTP.
pub(super) struct SupportedCache<T> {
    ttl: Duration,
    failure_backoff: Duration,
    state: Mutex<State<T>>,
    /// Held by whoever is fetching, so that there is never more than one fetch at a time.
    fetching: tokio::sync::Mutex<()>,
}

struct State<T> {
    value: Option<(Arc<T>, Instant)>,
    failure: Option<(FacilitatorError, Instant)>,
    refreshing: bool,
}

/// What the cache can answer without fetching.
enum Lookup<T> {
    Hit(Arc<T>),
    Stale { value: Arc<T>, refresh: bool },
    Failed(FacilitatorError),
    Miss,
}

impl<T: Send + Sync + 'static> SupportedCache<T> {
    pub(super) fn new(ttl: Duration, failure_backoff: Duration) -> Self {
        Self {
            ttl,
            failure_backoff,
            state: Mutex::new(State {
                value: None,
                failure: None,
                refreshing: false,
            }),
            fetching: tokio::sync::Mutex::new(()),
        }
    }

    /// The cached value, fetching it with `fetch` when needed (see the module docs).
    pub(super) async fn get<F, Fut>(self: &Arc<Self>, fetch: F) -> Result<Arc<T>, FacilitatorError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, FacilitatorError>> + Send + 'static,
    {
        match self.lookup(true) {
            Lookup::Hit(value) => return Ok(value),
            Lookup::Stale { value, refresh } => {
                if refresh {
                    self.refresh_in_background(fetch()).await;
                }
                return Ok(value);
            }
            Lookup::Failed(error) => return Err(error),
            Lookup::Miss => {}
        }
        let _fetching = self.fetching.lock().await;
        // Whoever held the lock before may have just stored a value or a failure.
        match self.lookup(false) {
            Lookup::Hit(value) | Lookup::Stale { value, .. } => Ok(value),
            Lookup::Failed(error) => Err(error),
            Lookup::Miss => self.store(fetch().await),
        }
    }

    /// What the cache holds; with `may_refresh`, an expired value claims the one background
    /// refresh unless it is already running or a recent failure says to wait.
    fn lookup(&self, may_refresh: bool) -> Lookup<T> {
        let now = Instant::now();
        let mut guard = self.state();
        let state = &mut *guard;
        let recent_failure = state
            .failure
            .as_ref()
            .filter(|(_, at)| now.duration_since(*at) < self.failure_backoff)
            .map(|(error, _)| error);
        if let Some((value, at)) = &state.value {
            let value = Arc::clone(value);
            if now.duration_since(*at) < self.ttl {
                return Lookup::Hit(value);
            }
            let refresh = may_refresh && !state.refreshing && recent_failure.is_none();
            state.refreshing |= refresh;
            return Lookup::Stale { value, refresh };
        }
        match recent_failure {
            Some(error) => Lookup::Failed(error.clone()),
            None => Lookup::Miss,
        }
    }

    /// Runs `fetch` on a background task and stores its result. Without a tokio runtime (which
    /// the HTTP client needs anyway) it runs in place instead.
    async fn refresh_in_background<Fut>(self: &Arc<Self>, fetch: Fut)
    where
        Fut: Future<Output = Result<T, FacilitatorError>> + Send + 'static,
    {
        let cache = Arc::clone(self);
        let refresh = async move {
            let _claim = RefreshClaim(&cache);
            let _fetching = cache.fetching.lock().await;
            if let Err(error) = cache.store(fetch.await) {
                tracing::warn!(%error, "refreshing the facilitator's /supported failed; serving the stale copy");
            }
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn(refresh)),
            Err(_) => refresh.await,
        }
    }

    fn store(&self, result: Result<T, FacilitatorError>) -> Result<Arc<T>, FacilitatorError> {
        let now = Instant::now();
        let mut state = self.state();
        match result {
            Ok(value) => {
                let value = Arc::new(value);
                state.value = Some((Arc::clone(&value), now));
                state.failure = None;
                Ok(value)
            }
            Err(error) => {
                state.failure = Some((error.clone(), now));
                Err(error)
            }
        }
    }

    fn state(&self) -> MutexGuard<'_, State<T>> {
        // The lock is never held across anything that can panic; recover from poisoning anyway.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<T> fmt::Debug for SupportedCache<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SupportedCache")
            .field("ttl", &self.ttl)
            .field("failure_backoff", &self.failure_backoff)
            .finish_non_exhaustive()
    }
}

/// Releases the background-refresh claim when the refresh ends, however it ends.
struct RefreshClaim<'a, T: Send + Sync + 'static>(&'a SupportedCache<T>);

impl<T: Send + Sync + 'static> Drop for RefreshClaim<'_, T> {
    fn drop(&mut self) {
        self.0.state().refreshing = false;
    }
}

#[cfg(test)]
mod tests {
    use std::error::Error as _;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::facilitator::Endpoint;

    const TTL: Duration = Duration::from_secs(60);
    const BACKOFF: Duration = Duration::from_secs(5);

    /// A fetch that counts its calls, takes `delay`, and yields the call number or a failure.
    fn fetcher(
        calls: &Arc<AtomicUsize>,
        delay: Duration,
        fail: bool,
    ) -> impl FnOnce() -> std::pin::Pin<
        Box<dyn Future<Output = Result<usize, FacilitatorError>> + Send>,
    > + use<> {
        let calls = Arc::clone(calls);
        move || {
            Box::pin(async move {
                let n = calls.fetch_add(1, Ordering::SeqCst) + 1;
                if !delay.is_zero() {
                    tokio::time::sleep(delay).await;
                }
                if fail {
                    Err(FacilitatorError::Unreachable {
                        endpoint: Endpoint::Supported,
                        source: Arc::from(crate::boxed::BoxError::from("connection refused")),
                    })
                } else {
                    Ok(n)
                }
            })
        }
    }

    #[tokio::test(start_paused = true)]
    async fn concurrent_misses_share_one_fetch() {
        let cache = Arc::new(SupportedCache::new(TTL, BACKOFF));
        let calls = Arc::new(AtomicUsize::new(0));
        let waiters: Vec<_> = (0..50)
            .map(|_| {
                let (cache, fetch) = (
                    Arc::clone(&cache),
                    fetcher(&calls, Duration::from_millis(100), false),
                );
                tokio::spawn(async move { *cache.get(fetch).await.unwrap() })
            })
            .collect();
        for waiter in waiters {
            assert_eq!(waiter.await.unwrap(), 1);
        }
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn expired_value_is_served_stale_while_one_refresh_runs() {
        let cache = Arc::new(SupportedCache::new(TTL, BACKOFF));
        let calls = Arc::new(AtomicUsize::new(0));
        let slow = Duration::from_secs(1);
        assert_eq!(*cache.get(fetcher(&calls, slow, false)).await.unwrap(), 1);
        tokio::time::advance(TTL).await;
        for _ in 0..10 {
            assert_eq!(
                *cache.get(fetcher(&calls, slow, false)).await.unwrap(),
                1,
                "stale copy"
            );
        }
        tokio::time::sleep(slow * 2).await;
        assert_eq!(
            *cache.get(fetcher(&calls, slow, false)).await.unwrap(),
            2,
            "refreshed"
        );
        assert_eq!(calls.load(Ordering::SeqCst), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn failures_are_remembered_for_the_backoff() {
        let cache = Arc::new(SupportedCache::<usize>::new(TTL, BACKOFF));
        let calls = Arc::new(AtomicUsize::new(0));
        for _ in 0..5 {
            let error = cache
                .get(fetcher(&calls, Duration::ZERO, true))
                .await
                .unwrap_err();
            assert!(
                matches!(error, FacilitatorError::Unreachable { .. }),
                "{error}"
            );
            assert_eq!(error.source().unwrap().to_string(), "connection refused");
        }
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        tokio::time::advance(BACKOFF).await;
        assert_eq!(
            *cache
                .get(fetcher(&calls, Duration::ZERO, false))
                .await
                .unwrap(),
            2
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_refresh_keeps_the_stale_copy_and_waits_before_retrying() {
        let cache = Arc::new(SupportedCache::new(TTL, BACKOFF));
        let calls = Arc::new(AtomicUsize::new(0));
        cache
            .get(fetcher(&calls, Duration::ZERO, false))
            .await
            .unwrap();
        tokio::time::advance(TTL).await;
        assert_eq!(
            *cache
                .get(fetcher(&calls, Duration::ZERO, true))
                .await
                .unwrap(),
            1
        );
        tokio::task::yield_now().await;
        for _ in 0..5 {
            assert_eq!(
                *cache
                    .get(fetcher(&calls, Duration::ZERO, true))
                    .await
                    .unwrap(),
                1
            );
            tokio::task::yield_now().await;
        }
        assert_eq!(
            calls.load(Ordering::SeqCst),
            2,
            "one failed refresh, then quiet"
        );
        tokio::time::advance(BACKOFF).await;
        cache
            .get(fetcher(&calls, Duration::ZERO, false))
            .await
            .unwrap();
        tokio::task::yield_now().await;
        assert_eq!(
            *cache
                .get(fetcher(&calls, Duration::ZERO, false))
                .await
                .unwrap(),
            3
        );
    }
}
