//! Everything the store remembers: the payment ledger, orders, fulfillment grants, referrals,
//! downloads, funnel counters and sign-in-with-x entitlements.
//!
//! Handlers speak to [`Store`] in domain terms. The engine is chosen by [`Store::open`] from the
//! URL scheme: `sqlite` (the zero-setup default, one process) or `postgres` (a server that
//! several instances of the store share). The store's own statements are written once, for
//! both (in `tables.rs`); each backend file holds what only its engine has (opening, the payment
//! ledger, sign-in entitlements) and its embedded migrations (`migrations/` and
//! `migrations-postgres/`), run at startup.
//!
//! Every request that writes more than one row does so in one transaction: an order, its
//! fulfillment grant and its referral are committed together or not at all.

mod postgres;
mod sqlite;
mod tables;

use std::sync::Arc;

use tower_x402::BoxFuture;
use tower_x402::settlement::{LedgerEntry, PaymentKey, PaymentState, SettlementStore, StoreError};
use tower_x402_siwx::EntitlementStore;
use x402_wire::UsdAmount;

use self::postgres::PostgresBackend;
use self::sqlite::SqliteBackend;
use self::tables::OrderLookup;

/// The store's database. Cheap to clone (a connection pool inside).
#[derive(Clone, Debug)]
pub struct Store {
    backend: Backend,
}

/// The database engine behind a [`Store`].
#[derive(Clone, Debug)]
enum Backend {
    Sqlite(SqliteBackend),
    Postgres(PostgresBackend),
}

/// Runs one of the shared statements of [`tables`] on whichever engine the store has.
macro_rules! dispatch {
    ($store:expr, $method:ident($($argument:expr),*)) => {
        match &$store.backend {
            Backend::Sqlite(backend) => backend.tables().$method($($argument),*).await,
            Backend::Postgres(backend) => backend.tables().$method($($argument),*).await,
        }
    };
}

/// The store's tables, for [`Store::row_counts`]; `payment_ledger` names the layer's payment
/// ledger, whatever its table is called on the backend.
const TABLES: [&str; 6] = [
    "payment_ledger",
    "orders",
    "fulfillment_grants",
    "referrals",
    "downloads",
    "counters",
];

/// The lock a store process holds on its SQLite file for as long as it runs (released by the
/// operating system when the process ends, however it ends). See [`lock_sqlite_file`].
#[derive(Debug)]
pub struct SqliteOwner {
    _lock: std::fs::File,
}

/// Makes this process the one owner of the SQLite file `database_url` names: an exclusive lock
/// on `FILE.lock` beside it, held as long as the returned value lives. `None` for PostgreSQL
/// and in-memory databases, which need no owner.
///
/// SQLite itself would let a second process open the file, but the store keeps state in
/// memory that only one process can hold (the funnel counts pending a write, payments held
/// while they settle), so a second process is refused instead: several instances share
/// PostgreSQL.
///
/// # Errors
///
/// Another process holds the lock, or the lock file cannot be created.
pub fn lock_sqlite_file(database_url: &str) -> Result<Option<SqliteOwner>, StorageError> {
    if Engine::of(database_url) != Some(Engine::Sqlite) {
        return Ok(None);
    }
    sqlite::lock_file(database_url).map(|lock| lock.map(|lock| SqliteOwner { _lock: lock }))
}

/// How long a request waits for the database by default (`STORE_DATABASE_TIMEOUT_SECS`): well
/// under the 5 to 10 s after which common HTTP clients give up.
pub const DEFAULT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// The database could not be opened, migrated, read or written.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// The database URL names a backend this build does not have.
    #[error(
        "unsupported database URL `{0}`: expected sqlite://PATH, sqlite::memory: or postgres://…"
    )]
    UnsupportedUrl(String),
    /// The directory for the database file could not be created.
    #[error("cannot create the database directory {path}: {source}")]
    Directory {
        /// The directory.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The embedded migrations failed.
    #[error("database migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// A query failed.
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    /// Another store process owns the SQLite file.
    #[error(
        "another store process is using {path} (it holds {path}.lock): one process owns a SQLite file; run several instances on PostgreSQL"
    )]
    Owned {
        /// The database file.
        path: String,
    },
    /// The lock file beside the SQLite file could not be created or locked.
    #[error("cannot lock {path}: {source}")]
    Lock {
        /// The lock file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A stored value could not be read back.
    #[error("stored data is unreadable: {0}")]
    Corrupt(String),
    /// The payment ledger could not be read or written.
    #[error("{0}")]
    Ledger(#[from] StoreError),
}

impl StorageError {
    /// Whether a write was refused because a unique key already exists.
    pub fn is_unique_violation(&self) -> bool {
        match self {
            Self::Database(error) => error
                .as_database_error()
                .is_some_and(|database| database.is_unique_violation()),
            _ => false,
        }
    }
}

/// A purchase as recorded: the facts a Passport cites plus the settlement behind it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Order {
    /// The Passport identifier (`pp_…`).
    pub passport: String,
    /// The SKU slug bought.
    pub sku: String,
    /// The x402 resource URL paid for.
    pub resource: String,
    /// The payer address, as the facilitator reported it.
    pub payer: Option<String>,
    /// CAIP-2 network of the settlement.
    pub network: String,
    /// Settlement transaction.
    pub transaction: String,
    /// Amount paid in USD (USDC).
    pub amount: UsdAmount,
    /// The payment's [`PaymentKey`] text; one payment, one order.
    pub payment_key: String,
    /// Whether the order was paid through the in-process sandbox.
    pub demo: bool,
    /// Issue time, unix seconds.
    pub issued: i64,
    /// The Passport this order cited, if the request carried one.
    pub referral: Option<Referral>,
}

/// A citation carried by a purchase and the verdict on it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Referral {
    /// The cited Passport id, or the raw header value when it was malformed (truncated).
    pub cited: String,
    /// Whether the order counts in the funnel's `referred` stage.
    pub counted: bool,
    /// Machine-readable reason (`counted`, `self_citation`, …).
    pub reason: String,
}

/// A new order and the hash of the secret that will unlock its files.
#[derive(Clone, Debug)]
pub struct NewOrder {
    /// The order.
    pub order: Order,
    /// SHA-256 (hex) of the fulfillment key derived for `order.passport`.
    pub secret_hash: String,
}

/// The outcome of [`Store::record_order`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Recorded {
    /// The order was written.
    Created(Order),
    /// The payment already had an order (returned as recorded); nothing was written.
    Existing(Order),
}

impl Recorded {
    /// The order, new or existing.
    pub fn into_order(self) -> Order {
        match self {
            Self::Created(order) | Self::Existing(order) => order,
        }
    }
}

/// Whether a counter belongs to live or demo traffic.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Real settlements.
    Live,
    /// The in-process sandbox.
    Demo,
}

impl Mode {
    /// `live` or `demo`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Live => "live",
            Self::Demo => "demo",
        }
    }

    /// The mode of a store that is (or is not) in demo mode.
    pub fn of(demo: bool) -> Self {
        if demo { Self::Demo } else { Self::Live }
    }
}

/// One stored funnel counter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Counter {
    /// Stage name.
    pub stage: String,
    /// Live or demo.
    pub mode: Mode,
    /// Value.
    pub value: u64,
}

/// The funnel stages derived from orders and downloads, for one mode.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OrderFunnel {
    /// Orders.
    pub purchased: u64,
    /// Files downloaded under those orders.
    pub used: u64,
    /// Orders whose payer had an earlier order of the same mode.
    pub returned: u64,
    /// Orders whose citation counted.
    pub referred: u64,
}

impl Store {
    /// Opens and migrates the database at `database_url`: `sqlite://PATH` (the file and its
    /// directory are created if needed), `sqlite::memory:`, or `postgres://…` /
    /// `postgresql://…` (an existing database on a running server).
    ///
    /// # Errors
    ///
    /// An unsupported URL, an uncreatable directory, or a connection or migration failure.
    pub async fn open(database_url: &str) -> Result<Self, StorageError> {
        Self::open_with_timeout(database_url, DEFAULT_TIMEOUT).await
    }

    /// [`Store::open`], with every later wait for the database bounded by `timeout`: for a
    /// pooled connection (PostgreSQL down, or every connection busy) and, on SQLite, for
    /// another writer. A request that runs out of it fails (a 503) instead of hanging.
    ///
    /// # Errors
    ///
    /// As [`Store::open`].
    pub async fn open_with_timeout(
        database_url: &str,
        timeout: std::time::Duration,
    ) -> Result<Self, StorageError> {
        let backend = match Engine::of(database_url) {
            Some(Engine::Sqlite) => {
                Backend::Sqlite(SqliteBackend::open(database_url, timeout).await?)
            }
            Some(Engine::Postgres) => {
                Backend::Postgres(PostgresBackend::open(database_url, timeout).await?)
            }
            None => return Err(StorageError::UnsupportedUrl(without_password(database_url))),
        };
        Ok(Self { backend })
    }

    /// The order a payment bought, if any.
    pub async fn order_by_payment_key(&self, key: &str) -> Result<Option<Order>, StorageError> {
        dispatch!(self, order_by(OrderLookup::PaymentKey(key)))
    }

    /// The first order of `sku` paid by `payer` (any case of an EVM address), if any: what a
    /// buyer signing in gets again.
    pub async fn order_of_buyer(
        &self,
        sku: &str,
        payer: &str,
    ) -> Result<Option<Order>, StorageError> {
        let payer_norm = payer.to_ascii_lowercase();
        dispatch!(
            self,
            order_by(OrderLookup::Buyer {
                sku,
                payer_norm: &payer_norm
            })
        )
    }

    /// Where sign-in-with-x keeps entitlements and consumed nonces: tables in the store's
    /// database on either backend, so a buyer still signs in after a restart and a used proof
    /// stays used. On PostgreSQL every instance shares them; a SQLite file has one owner
    /// process, whose restarts all see them.
    pub fn entitlements(&self) -> Arc<dyn EntitlementStore> {
        match &self.backend {
            Backend::Sqlite(backend) => Arc::new(backend.entitlements()),
            Backend::Postgres(backend) => Arc::new(backend.entitlements()),
        }
    }

    /// The order behind a Passport, if any.
    pub async fn order_by_passport(&self, passport: &str) -> Result<Option<Order>, StorageError> {
        dispatch!(self, order_by(OrderLookup::Passport(passport)))
    }

    /// Writes an order, its fulfillment grant and its referral in one transaction. When the
    /// payment already bought an order, writes nothing and returns that order: the new order's
    /// Passport is never issued, so a key derived for it would unlock nothing anyone holds.
    /// The caller answers with the existing order's Passport and, if that order has no grant
    /// for the key it derives now, adds one with [`Store::add_grant`].
    pub async fn record_order(&self, new: &NewOrder) -> Result<Recorded, StorageError> {
        match dispatch!(self, insert_order(new)) {
            // Another request for the same payment committed first (on PostgreSQL, between this
            // transaction's read and its insert): the retry finds that order.
            Err(error) if error.is_unique_violation() => dispatch!(self, insert_order(new)),
            outcome => outcome,
        }
    }

    /// The store's fulfillment secret: generated (32 random bytes, hex) by the first process
    /// that asks and kept in the database, so every instance, and every restart, derives the
    /// same fulfillment keys.
    pub async fn fulfillment_secret(&self) -> Result<String, StorageError> {
        let candidate: String = rand::random::<[u8; 32]>()
            .iter()
            .map(|byte| format!("{byte:02x}"))
            .collect();
        dispatch!(self, secret("fulfillment", &candidate))
    }

    /// Adds `secret_hash` to the fulfillment grants of the recorded order `passport`: the key
    /// that order's Passport derives under a fulfillment secret it has no grant for yet (after
    /// a rotation, or on an instance configured with another secret). Adding a grant the order
    /// already has writes nothing.
    ///
    /// # Errors
    ///
    /// The database fails, or `secret_hash` is already granted to another order.
    pub async fn add_grant(&self, passport: &str, secret_hash: &str) -> Result<(), StorageError> {
        dispatch!(self, add_grant(passport, secret_hash))
    }

    /// Whether `secret_hash` is one of the fulfillment grants of `passport`.
    pub async fn grant_matches(
        &self,
        passport: &str,
        secret_hash: &str,
    ) -> Result<bool, StorageError> {
        dispatch!(self, grant_matches(passport, secret_hash))
    }

    /// Records that `file` of `passport` was served at `at` (unix seconds).
    pub async fn record_download(
        &self,
        passport: &str,
        file: &str,
        at: i64,
    ) -> Result<(), StorageError> {
        dispatch!(self, record_download(passport, file, at))
    }

    /// Adds the deltas to their counters in one transaction.
    pub async fn add_to_counters(&self, deltas: &[(&str, Mode, u64)]) -> Result<(), StorageError> {
        dispatch!(self, add_to_counters(deltas))
    }

    /// Sets a counter to `value` (a gauge, such as `indexed`).
    pub async fn set_counter(
        &self,
        stage: &str,
        mode: Mode,
        value: u64,
    ) -> Result<(), StorageError> {
        dispatch!(self, set_counter(stage, mode, value))
    }

    /// Every stored counter.
    pub async fn counters(&self) -> Result<Vec<Counter>, StorageError> {
        dispatch!(self, counters())
    }

    /// The order-derived funnel stages for `mode`.
    pub async fn order_funnel(&self, mode: Mode) -> Result<OrderFunnel, StorageError> {
        dispatch!(self, order_funnel(mode == Mode::Demo))
    }

    /// Payments whose settlement outcome is unknown (in doubt, or settling), oldest first: what
    /// an operator looks at when the layer reports payments stuck in doubt.
    pub async fn payments_in_doubt(&self) -> Result<Vec<(String, PaymentState)>, StorageError> {
        match &self.backend {
            Backend::Sqlite(backend) => backend.payments_in_doubt().await,
            Backend::Postgres(backend) => backend.payments_in_doubt().await,
        }
    }

    /// Rows in each table, for tests that check nothing was half-written.
    pub async fn row_counts(
        &self,
    ) -> Result<std::collections::BTreeMap<&'static str, u64>, StorageError> {
        dispatch!(self, row_counts())
    }
}

/// The layer's payment ledger: on SQLite the `payment_ledger` table, compare-and-set on a
/// version column with the state as JSON; on PostgreSQL the crate's own
/// [`PostgresSettlementStore`](tower_x402_postgres::PostgresSettlementStore), shared by
/// every instance. Both pass [`check_conformance`](tower_x402::settlement::check_conformance).
impl SettlementStore for Store {
    fn load<'a>(
        &'a self,
        key: &'a PaymentKey,
    ) -> BoxFuture<'a, Result<Option<LedgerEntry>, StoreError>> {
        match &self.backend {
            Backend::Sqlite(backend) => Box::pin(async move {
                backend
                    .load_payment(key.as_str())
                    .await
                    .map_err(store_error)
            }),
            Backend::Postgres(backend) => backend.ledger().load(key),
        }
    }

    fn insert<'a>(
        &'a self,
        key: &'a PaymentKey,
        state: &'a PaymentState,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        match &self.backend {
            Backend::Sqlite(backend) => Box::pin(async move {
                backend
                    .insert_payment(key.as_str(), state, unix_now())
                    .await
                    .map_err(store_error)
            }),
            Backend::Postgres(backend) => backend.ledger().insert(key, state),
        }
    }

    fn replace<'a>(
        &'a self,
        key: &'a PaymentKey,
        version: u64,
        state: &'a PaymentState,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        match &self.backend {
            Backend::Sqlite(backend) => Box::pin(async move {
                backend
                    .replace_payment(key.as_str(), version, state, unix_now())
                    .await
                    .map_err(store_error)
            }),
            Backend::Postgres(backend) => backend.ledger().replace(key, version, state),
        }
    }

    fn remove<'a>(
        &'a self,
        key: &'a PaymentKey,
        version: u64,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        match &self.backend {
            Backend::Sqlite(backend) => Box::pin(async move {
                backend
                    .remove_payment(key.as_str(), version)
                    .await
                    .map_err(store_error)
            }),
            Backend::Postgres(backend) => backend.ledger().remove(key, version),
        }
    }
}

fn store_error(error: StorageError) -> StoreError {
    StoreError(Box::new(error))
}

/// The database engines a URL can name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Engine {
    /// `sqlite:` — an embedded file (or memory), one process.
    Sqlite,
    /// `postgres:` or `postgresql:` — a server that several instances can share.
    Postgres,
}

impl Engine {
    /// The engine `database_url` names by its scheme, if it is one this build has.
    ///
    /// ```
    /// use x402_store::storage::Engine;
    ///
    /// assert_eq!(Engine::of("sqlite://data/store.db"), Some(Engine::Sqlite));
    /// assert_eq!(Engine::of("postgres://store@127.0.0.1/store"), Some(Engine::Postgres));
    /// assert_eq!(Engine::of("mysql://127.0.0.1/store"), None);
    /// ```
    pub fn of(database_url: &str) -> Option<Self> {
        if database_url.starts_with("sqlite:") {
            Some(Self::Sqlite)
        } else if database_url.starts_with("postgres://")
            || database_url.starts_with("postgresql://")
        {
            Some(Self::Postgres)
        } else {
            None
        }
    }
}

/// `database_url` with any password replaced by `***`, for logs and error messages.
///
/// ```
/// use x402_store::storage::without_password;
///
/// assert_eq!(
///     without_password("postgres://store:s3cret@127.0.0.1:5432/store"),
///     "postgres://store:***@127.0.0.1:5432/store"
/// );
/// assert_eq!(without_password("sqlite://data/store.db"), "sqlite://data/store.db");
/// ```
pub fn without_password(database_url: &str) -> String {
    let Some((scheme, rest)) = database_url.split_once("://") else {
        return database_url.to_owned();
    };
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(authority_end);
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _password)) => format!("{scheme}://{user}:***@{host}{path}"),
            None => database_url.to_owned(),
        },
        None => database_url.to_owned(),
    }
}

/// Seconds since the Unix epoch (0 if the clock is before it).
pub fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| {
            i64::try_from(elapsed.as_secs()).unwrap_or(i64::MAX)
        })
}

/// A stored count or amount, which is never negative.
fn count(value: i64) -> Result<u64, StorageError> {
    u64::try_from(value).map_err(|e| corrupt("count", e))
}

fn corrupt(what: &str, error: impl std::fmt::Display) -> StorageError {
    StorageError::Corrupt(format!("{what}: {error}"))
}
