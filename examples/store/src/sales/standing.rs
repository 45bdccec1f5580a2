//! The store's standing: the eight funnel stages (spec 2.7), persisted so they survive restarts.
//!
//! | stage | counts | source |
//! |---|---|---|
//! | indexed | discovery channels that list the store | [`Standing::set_indexed`] (the discovery probe) |
//! | retrieved | catalog documents served | [`Standing::record_retrieved`] |
//! | considered | 402 challenges served | the layer's `ChallengeServed` event |
//! | selected | paid attempts received | the layer's `PaymentReceived` event |
//! | purchased | orders | the `orders` table |
//! | used | fulfillment downloads | the `downloads` table |
//! | returned | orders by a payer who had bought before | the `orders` table |
//! | referred | orders whose citation counted | the `referrals` table |
//!
//! `retrieved`, `considered` and `selected` count requests anyone can send for free (an invalid
//! `PAYMENT-SIGNATURE` counts as selected), so they can be inflated; the doctrine says so. The
//! order-derived stages rest on settled payments.
//!
//! Live and demo are reported separately: traffic counts under the store's mode, orders under
//! their own `demo` flag, so a sandbox purchase never inflates a live number. `indexed` is a
//! fact about third parties and is reported under live only.
//!
//! The layer's event hook is synchronous, so traffic counters are bumped in memory and written
//! by a background task, at most once every [`WRITE_EVERY`]: a busy store writes one increment a
//! period rather than one per 402; [`Standing::flush`] writes what is pending and waits for it
//! (call it at shutdown), and [`Standing::snapshot`] flushes before reading, so no report ever
//! misses a count still waiting for its write.
//!
//! The free routes that show the funnel (`/api/bazaar`, MCP `get_standing`) read it with
//! [`Standing::latest`], which never holds a request up on a database that is away: the read
//! runs in the background, the route waits for it at most [`FRESH_WAIT`] while the database
//! answered the last read, and not at all while it did not, answering with the last counts read.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use serde::Serialize;
use tokio::sync::{Mutex, Notify, watch};
use tower_x402::payment::{PaymentEvent, PaymentHooks, Refusal};

use crate::storage::{Mode, OrderFunnel, StorageError, Store};

/// The funnel stages, in order.
pub const STAGES: [&str; 8] = [
    "indexed",
    "retrieved",
    "considered",
    "selected",
    "purchased",
    "used",
    "returned",
    "referred",
];

/// The longest a free route waits for fresh funnel counts while the database is answering.
pub const FRESH_WAIT: Duration = Duration::from_secs(1);

/// The shortest time between two writes of the traffic counters by the background task: the
/// counts of a period are written together, once, after it.
pub const WRITE_EVERY: Duration = Duration::from_secs(1);

/// The gauge stage, set from the discovery probe rather than counted.
const INDEXED: &str = STAGES[0];

/// What each stage counts, in [`STAGES`] order.
const MEANINGS: [&str; 8] = [
    "discovery channels that list the store, as last probed",
    "catalog documents served (any request counts: can be inflated)",
    "402 payment challenges served (any request counts: can be inflated)",
    "paid attempts received: requests carrying PAYMENT-SIGNATURE, valid or not (can be inflated)",
    "orders (Passports issued)",
    "fulfillment files downloaded",
    "orders by a payer who had bought before",
    "orders whose X-REFERRER-PASSPORT citation of another buyer's live Passport counted",
];

/// Traffic counters kept in memory until flushed.
#[derive(Clone, Copy, Debug)]
enum Traffic {
    Retrieved = 0,
    Considered = 1,
    Selected = 2,
}

impl Traffic {
    const ALL: [Traffic; 3] = [Self::Retrieved, Self::Considered, Self::Selected];

    /// The stage's name: the traffic stages follow `indexed` in [`STAGES`].
    fn stage(self) -> &'static str {
        STAGES[self as usize + 1]
    }
}

/// The funnel. Cheap to clone; a [`PaymentHooks`] of the paywall's payment core.
#[derive(Clone, Debug)]
pub struct Standing {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    store: Store,
    mode: Mode,
    pending: [AtomicU64; 3],
    indexed: AtomicU64,
    indexed_dirty: AtomicBool,
    wake: Arc<Notify>,
    flushing: Mutex<()>,
    /// The last report read, for [`Standing::latest`].
    latest: std::sync::Mutex<Option<StandingReport>>,
    /// Whether the last background read reached the database.
    reachable: AtomicBool,
    /// Whether a background read is under way.
    reading: AtomicBool,
    /// Bumped after each background read.
    read: watch::Sender<u64>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Let the background writer see that the standing is gone and stop.
        self.wake.notify_one();
    }
}

/// One stage and its count.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct StageCount {
    /// Stage name.
    pub stage: &'static str,
    /// Count.
    pub count: u64,
    /// What the stage counts.
    pub meaning: &'static str,
}

/// The funnel as reported by `get_standing`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct StandingReport {
    /// `live` or `demo`: whether this store currently settles through the sandbox.
    pub mode: &'static str,
    /// Live stages, in order. Demo activity never appears here.
    pub stages: Vec<StageCount>,
    /// Demo (sandbox) activity, the same stages in the same order (`indexed` is always 0 here).
    pub demo: Vec<StageCount>,
}

impl StandingReport {
    /// The live count of `stage`.
    pub fn live(&self, stage: &str) -> Option<u64> {
        self.stages
            .iter()
            .find(|s| s.stage == stage)
            .map(|s| s.count)
    }

    /// The demo count of `stage`.
    pub fn demo(&self, stage: &str) -> Option<u64> {
        self.demo.iter().find(|s| s.stage == stage).map(|s| s.count)
    }
}

impl Standing {
    /// The funnel of a store that is (or is not) in demo mode, persisted in `store`.
    ///
    /// Inside a Tokio runtime a background task writes traffic counters as they change;
    /// elsewhere they are written by [`flush`](Self::flush) and [`snapshot`](Self::snapshot).
    pub fn new(store: Store, demo: bool) -> Self {
        let wake = Arc::new(Notify::new());
        let inner = Arc::new(Inner {
            store,
            mode: Mode::of(demo),
            pending: Default::default(),
            indexed: AtomicU64::new(0),
            indexed_dirty: AtomicBool::new(false),
            wake: Arc::clone(&wake),
            flushing: Mutex::new(()),
            latest: std::sync::Mutex::new(None),
            reachable: AtomicBool::new(true),
            reading: AtomicBool::new(false),
            read: watch::Sender::new(0),
        });
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(write_behind(Arc::downgrade(&inner), wake));
        }
        Self { inner }
    }

    /// Counts a catalog document served.
    pub fn record_retrieved(&self) {
        self.bump(Traffic::Retrieved);
    }

    /// Records how many discovery channels list the store.
    pub fn set_indexed(&self, channels: u64) {
        self.inner.indexed.store(channels, Ordering::Relaxed);
        self.inner.indexed_dirty.store(true, Ordering::Release);
        self.inner.wake.notify_one();
    }

    fn bump(&self, traffic: Traffic) {
        self.inner.pending[traffic as usize].fetch_add(1, Ordering::Relaxed);
        self.inner.wake.notify_one();
    }

    /// Writes every pending count and waits until it is stored.
    ///
    /// # Errors
    ///
    /// The database refused the write; the counts stay pending for the next flush.
    pub async fn flush(&self) -> Result<(), StorageError> {
        self.inner.flush().await
    }

    /// The funnel for a free route, without hanging on the database: starts a read in the
    /// background (one at a time) and waits for it at most [`FRESH_WAIT`] if the database
    /// answered the last read, not at all otherwise; then answers with the latest report read
    /// (`None` if none ever was).
    pub async fn latest(&self) -> Option<StandingReport> {
        let mut read = self.inner.read.subscribe();
        self.read_in_background();
        if self.inner.reachable.load(Ordering::Acquire) {
            let _ = tokio::time::timeout(FRESH_WAIT, read.changed()).await;
        }
        self.inner
            .latest
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    fn read_in_background(&self) {
        if self.inner.reading.swap(true, Ordering::AcqRel) {
            return;
        }
        let standing = self.clone();
        tokio::spawn(async move {
            let inner = &standing.inner;
            match standing.snapshot().await {
                Ok(report) => {
                    *inner
                        .latest
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(report);
                    inner.reachable.store(true, Ordering::Release);
                }
                Err(error) => {
                    tracing::warn!(%error, "the funnel could not be read; showing the last counts read");
                    inner.reachable.store(false, Ordering::Release);
                }
            }
            inner.reading.store(false, Ordering::Release);
            inner
                .read
                .send_modify(|count| *count = count.wrapping_add(1));
        });
    }

    /// The funnel now: flushes, then reads the counters and the order-derived stages.
    ///
    /// # Errors
    ///
    /// The database could not be read or written.
    pub async fn snapshot(&self) -> Result<StandingReport, StorageError> {
        self.flush().await?;
        let store = &self.inner.store;
        let counters = store.counters().await?;
        let traffic = |stage: &str, mode: Mode| {
            counters
                .iter()
                .find(|c| c.stage == stage && c.mode == mode)
                .map_or(0, |c| c.value)
        };
        let stages = |mode: Mode, orders: OrderFunnel| {
            let counts = [
                if mode == Mode::Live {
                    traffic(INDEXED, Mode::Live)
                } else {
                    0
                },
                traffic(Traffic::Retrieved.stage(), mode),
                traffic(Traffic::Considered.stage(), mode),
                traffic(Traffic::Selected.stage(), mode),
                orders.purchased,
                orders.used,
                orders.returned,
                orders.referred,
            ];
            STAGES
                .iter()
                .zip(MEANINGS)
                .zip(counts)
                .map(|((&stage, meaning), count)| StageCount {
                    stage,
                    count,
                    meaning,
                })
                .collect()
        };
        Ok(StandingReport {
            mode: self.inner.mode.as_str(),
            stages: stages(Mode::Live, store.order_funnel(Mode::Live).await?),
            demo: stages(Mode::Demo, store.order_funnel(Mode::Demo).await?),
        })
    }
}

impl Inner {
    async fn flush(&self) -> Result<(), StorageError> {
        let _one_at_a_time = self.flushing.lock().await;
        let taken: Vec<(Traffic, u64)> = Traffic::ALL
            .into_iter()
            .map(|traffic| {
                (
                    traffic,
                    self.pending[traffic as usize].swap(0, Ordering::Relaxed),
                )
            })
            .filter(|&(_, delta)| delta > 0)
            .collect();
        if !taken.is_empty() {
            let deltas: Vec<(&str, Mode, u64)> = taken
                .iter()
                .map(|&(traffic, delta)| (traffic.stage(), self.mode, delta))
                .collect();
            if let Err(error) = self.store.add_to_counters(&deltas).await {
                for (traffic, delta) in taken {
                    self.pending[traffic as usize].fetch_add(delta, Ordering::Relaxed);
                }
                return Err(error);
            }
        }
        if self.indexed_dirty.swap(false, Ordering::Acquire) {
            let channels = self.indexed.load(Ordering::Relaxed);
            if let Err(error) = self.store.set_counter(INDEXED, Mode::Live, channels).await {
                self.indexed_dirty.store(true, Ordering::Release);
                return Err(error);
            }
        }
        Ok(())
    }
}

/// Writes counters after they change, at most once every [`WRITE_EVERY`], until the standing is
/// dropped.
async fn write_behind(inner: Weak<Inner>, wake: Arc<Notify>) {
    loop {
        wake.notified().await;
        if inner.strong_count() == 0 {
            return;
        }
        // Let the period's other changes join this write.
        tokio::time::sleep(WRITE_EVERY).await;
        let Some(inner) = inner.upgrade() else { return };
        if let Err(error) = inner.flush().await {
            tracing::warn!(%error, "funnel counters not written yet; will retry on the next change");
        }
    }
}

impl PaymentHooks for Standing {
    /// Counts challenges and payments received: declares no stage, so no stage of a payment
    /// waits for it.
    fn observe(&self, event: &PaymentEvent<'_>) {
        match event {
            PaymentEvent::Refused {
                refusal: Refusal::PaymentMissing,
                ..
            } => self.bump(Traffic::Considered),
            PaymentEvent::Received { .. } => self.bump(Traffic::Selected),
            _ => {}
        }
    }
}
