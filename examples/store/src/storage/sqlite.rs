//! The SQLite backend: every SQL statement of the store (sign-in-with-x's in
//! [`entitlements`]).

mod entitlements;

use std::str::FromStr;
use std::time::Duration;

use sqlx::Row as _;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions};
use tower_x402::settlement::{LedgerEntry, PaymentState};

use self::entitlements::SqliteEntitlementStore;
use super::{
    Counter, Mode, NewOrder, Order, OrderFunnel, Recorded, StorageError, corrupt, count,
    order_from_row,
};

/// Connections kept for a file database (SQLite serialises writers anyway).
const MAX_CONNECTIONS: u32 = 8;

/// A pool of SQLite connections with the store's schema.
#[derive(Clone, Debug)]
pub(super) struct SqliteBackend {
    pool: SqlitePool,
}

/// Which column identifies the order looked up.
pub(super) enum OrderLookup<'a> {
    /// By the payment that bought it.
    PaymentKey(&'a str),
    /// By its Passport id.
    Passport(&'a str),
    /// The first order of a SKU by a payer (lower-cased address).
    Buyer { sku: &'a str, payer_norm: &'a str },
}

const ORDER_COLUMNS: &str = "SELECT o.passport, o.sku, o.resource, o.payer, o.network, o.tx, o.amount_micros, \
     o.payment_key, o.demo, o.issued, r.cited, r.counted, r.reason \
     FROM orders o LEFT JOIN referrals r ON r.passport = o.passport";

/// An exclusive lock on `FILE.lock` beside the database file of `database_url`; `None` for an
/// in-memory database.
pub(super) fn lock_file(database_url: &str) -> Result<Option<std::fs::File>, StorageError> {
    if is_in_memory(database_url) {
        return Ok(None);
    }
    let options = SqliteConnectOptions::from_str(database_url)?;
    let database = options.get_filename();
    create_parent(database)?;
    let mut name = database.as_os_str().to_owned();
    name.push(".lock");
    let path = std::path::PathBuf::from(name);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|source| StorageError::Lock {
            path: path.display().to_string(),
            source,
        })?;
    match file.try_lock() {
        Ok(()) => Ok(Some(file)),
        Err(std::fs::TryLockError::WouldBlock) => Err(StorageError::Owned {
            path: database.display().to_string(),
        }),
        Err(std::fs::TryLockError::Error(source)) => Err(StorageError::Lock {
            path: path.display().to_string(),
            source,
        }),
    }
}

fn is_in_memory(database_url: &str) -> bool {
    database_url.contains(":memory:") || database_url.contains("mode=memory")
}

/// Creates the directory of the database file if it is missing.
fn create_parent(database: &std::path::Path) -> Result<(), StorageError> {
    if let Some(dir) = database.parent().filter(|dir| !dir.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|source| StorageError::Directory {
            path: dir.display().to_string(),
            source,
        })?;
    }
    Ok(())
}

impl SqliteBackend {
    /// Opens the database; `timeout` bounds both the wait for a pooled connection and a
    /// connection's wait for another writer.
    pub(super) async fn open(database_url: &str, timeout: Duration) -> Result<Self, StorageError> {
        let options = SqliteConnectOptions::from_str(database_url)?
            .create_if_missing(true)
            .foreign_keys(true)
            .busy_timeout(timeout);
        let in_memory = is_in_memory(database_url);
        let pool_options = if in_memory {
            // Every connection to `:memory:` is a separate database: keep exactly one, forever.
            SqlitePoolOptions::new()
                .max_connections(1)
                .min_connections(1)
                .idle_timeout(None)
                .max_lifetime(None)
        } else {
            create_parent(options.get_filename())?;
            SqlitePoolOptions::new().max_connections(MAX_CONNECTIONS)
        }
        .acquire_timeout(timeout);
        let options = if in_memory {
            options
        } else {
            options.journal_mode(SqliteJournalMode::Wal)
        };
        let pool = pool_options.connect_with(options).await?;
        sqlx::migrate!("./migrations").run(&pool).await?;
        Ok(Self { pool })
    }

    /// Entitlements and consumed sign-in nonces, in this database.
    pub(super) fn entitlements(&self) -> SqliteEntitlementStore {
        SqliteEntitlementStore::new(self.pool.clone())
    }

    pub(super) async fn load_payment(
        &self,
        key: &str,
    ) -> Result<Option<LedgerEntry>, StorageError> {
        let row = sqlx::query("SELECT version, state FROM payment_ledger WHERE payment_key = ?")
            .bind(key)
            .fetch_optional(&self.pool)
            .await?;
        let Some(row) = row else { return Ok(None) };
        let version: i64 = row.try_get("version")?;
        let state: String = row.try_get("state")?;
        Ok(Some(LedgerEntry::new(
            serde_json::from_str(&state).map_err(|e| corrupt("payment state", e))?,
            u64::try_from(version).map_err(|e| corrupt("payment version", e))?,
        )))
    }

    pub(super) async fn insert_payment(
        &self,
        key: &str,
        state: &PaymentState,
        now: i64,
    ) -> Result<bool, StorageError> {
        let json = serde_json::to_string(state).map_err(|e| corrupt("payment state", e))?;
        let done = sqlx::query(
            "INSERT INTO payment_ledger (payment_key, version, phase, state, updated) \
             VALUES (?, 1, ?, ?, ?) ON CONFLICT (payment_key) DO NOTHING",
        )
        .bind(key)
        .bind(state.phase())
        .bind(json)
        .bind(now)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    pub(super) async fn replace_payment(
        &self,
        key: &str,
        version: u64,
        state: &PaymentState,
        now: i64,
    ) -> Result<bool, StorageError> {
        let json = serde_json::to_string(state).map_err(|e| corrupt("payment state", e))?;
        let version = i64::try_from(version).map_err(|e| corrupt("payment version", e))?;
        let done = sqlx::query(
            "UPDATE payment_ledger SET version = version + 1, phase = ?, state = ?, updated = ? \
             WHERE payment_key = ? AND version = ?",
        )
        .bind(state.phase())
        .bind(json)
        .bind(now)
        .bind(key)
        .bind(version)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    pub(super) async fn remove_payment(
        &self,
        key: &str,
        version: u64,
    ) -> Result<bool, StorageError> {
        let version = i64::try_from(version).map_err(|e| corrupt("payment version", e))?;
        let done = sqlx::query("DELETE FROM payment_ledger WHERE payment_key = ? AND version = ?")
            .bind(key)
            .bind(version)
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Payments whose settlement outcome is unknown, oldest first.
    pub(super) async fn payments_in_doubt(
        &self,
    ) -> Result<Vec<(String, PaymentState)>, StorageError> {
        let rows = sqlx::query(
            "SELECT payment_key, state FROM payment_ledger WHERE phase IN ('in_doubt', 'settling') \
             ORDER BY updated, payment_key",
        )
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                let state: String = row.try_get("state")?;
                Ok((
                    row.try_get("payment_key")?,
                    serde_json::from_str(&state).map_err(|e| corrupt("payment state", e))?,
                ))
            })
            .collect()
    }

    pub(super) async fn order_by(
        &self,
        lookup: OrderLookup<'_>,
    ) -> Result<Option<Order>, StorageError> {
        let (sql, values) = match lookup {
            OrderLookup::PaymentKey(key) => (
                format!("{ORDER_COLUMNS} WHERE o.payment_key = ?"),
                vec![key],
            ),
            OrderLookup::Passport(passport) => (
                format!("{ORDER_COLUMNS} WHERE o.passport = ?"),
                vec![passport],
            ),
            OrderLookup::Buyer { sku, payer_norm } => (
                format!(
                    "{ORDER_COLUMNS} WHERE o.sku = ? AND o.payer_norm = ? ORDER BY o.issued, o.passport LIMIT 1"
                ),
                vec![sku, payer_norm],
            ),
        };
        let mut query = sqlx::query(&sql);
        for value in values {
            query = query.bind(value);
        }
        let row = query.fetch_optional(&self.pool).await?;
        row.map(|row| order_from_row(&row)).transpose()
    }

    pub(super) async fn insert_order(&self, new: &NewOrder) -> Result<Recorded, StorageError> {
        let order = &new.order;
        // Take the write lock up front: a read-then-write transaction that started as a reader
        // could otherwise fail to upgrade while another writer commits.
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;
        let existing = sqlx::query(&format!("{ORDER_COLUMNS} WHERE o.payment_key = ?"))
            .bind(&order.payment_key)
            .fetch_optional(&mut *tx)
            .await?;
        if let Some(row) = existing {
            // The payment already bought this order: only the new fulfillment key is added.
            let order = order_from_row(&row)?;
            insert_grant(&mut tx, &order.passport, &new.secret_hash).await?;
            tx.commit().await?;
            return Ok(Recorded::Existing(order));
        }
        let amount = i64::try_from(order.amount.micros()).map_err(|e| corrupt("amount", e))?;
        sqlx::query(
            "INSERT INTO orders (passport, sku, resource, payer, payer_norm, network, tx, amount_micros, \
             payment_key, demo, issued) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(&order.passport)
        .bind(&order.sku)
        .bind(&order.resource)
        .bind(&order.payer)
        .bind(order.payer.as_deref().map(str::to_ascii_lowercase))
        .bind(&order.network)
        .bind(&order.transaction)
        .bind(amount)
        .bind(&order.payment_key)
        .bind(order.demo)
        .bind(order.issued)
        .execute(&mut *tx)
        .await?;
        insert_grant(&mut tx, &order.passport, &new.secret_hash).await?;
        if let Some(referral) = &order.referral {
            sqlx::query(
                "INSERT INTO referrals (passport, cited, counted, reason) VALUES (?, ?, ?, ?)",
            )
            .bind(&order.passport)
            .bind(&referral.cited)
            .bind(referral.counted)
            .bind(&referral.reason)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(Recorded::Created(order.clone()))
    }

    /// The secret named `name`, stored as `candidate` if there was none yet: the first writer
    /// wins and every later call, from any process, reads its value.
    pub(super) async fn secret(&self, name: &str, candidate: &str) -> Result<String, StorageError> {
        sqlx::query(
            "INSERT INTO store_secrets (name, value) VALUES (?, ?) ON CONFLICT (name) DO NOTHING",
        )
        .bind(name)
        .bind(candidate)
        .execute(&self.pool)
        .await?;
        Ok(
            sqlx::query_scalar("SELECT value FROM store_secrets WHERE name = ?")
                .bind(name)
                .fetch_one(&self.pool)
                .await?,
        )
    }

    pub(super) async fn grant_matches(
        &self,
        passport: &str,
        secret_hash: &str,
    ) -> Result<bool, StorageError> {
        let found =
            sqlx::query("SELECT 1 FROM fulfillment_grants WHERE passport = ? AND secret_hash = ?")
                .bind(passport)
                .bind(secret_hash)
                .fetch_optional(&self.pool)
                .await?;
        Ok(found.is_some())
    }

    pub(super) async fn record_download(
        &self,
        passport: &str,
        file: &str,
        at: i64,
    ) -> Result<(), StorageError> {
        sqlx::query("INSERT INTO downloads (passport, file, at) VALUES (?, ?, ?)")
            .bind(passport)
            .bind(file)
            .bind(at)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    pub(super) async fn add_to_counters(
        &self,
        deltas: &[(&str, Mode, u64)],
    ) -> Result<(), StorageError> {
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;
        for &(stage, mode, delta) in deltas {
            let delta = i64::try_from(delta).map_err(|e| corrupt("counter delta", e))?;
            sqlx::query(
                "INSERT INTO counters (stage, mode, value) VALUES (?, ?, ?) \
                 ON CONFLICT (stage, mode) DO UPDATE SET value = value + excluded.value",
            )
            .bind(stage)
            .bind(mode.as_str())
            .bind(delta)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    pub(super) async fn set_counter(
        &self,
        stage: &str,
        mode: Mode,
        value: u64,
    ) -> Result<(), StorageError> {
        let value = i64::try_from(value).map_err(|e| corrupt("counter value", e))?;
        sqlx::query(
            "INSERT INTO counters (stage, mode, value) VALUES (?, ?, ?) \
             ON CONFLICT (stage, mode) DO UPDATE SET value = excluded.value",
        )
        .bind(stage)
        .bind(mode.as_str())
        .bind(value)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    pub(super) async fn counters(&self) -> Result<Vec<Counter>, StorageError> {
        let rows = sqlx::query("SELECT stage, mode, value FROM counters ORDER BY stage, mode")
            .fetch_all(&self.pool)
            .await?;
        rows.iter()
            .map(|row| {
                let mode = match row.try_get::<String, _>("mode")?.as_str() {
                    "demo" => Mode::Demo,
                    _ => Mode::Live,
                };
                Ok(Counter {
                    stage: row.try_get("stage")?,
                    mode,
                    value: count(row.try_get("value")?)?,
                })
            })
            .collect()
    }

    pub(super) async fn order_funnel(&self, demo: bool) -> Result<OrderFunnel, StorageError> {
        let row = sqlx::query(
            "SELECT \
               (SELECT COUNT(*) FROM orders WHERE demo = ?1) AS purchased, \
               (SELECT COUNT(*) FROM downloads d JOIN orders o ON o.passport = d.passport WHERE o.demo = ?1) AS used, \
               (SELECT COUNT(*) FROM orders o WHERE o.demo = ?1 AND o.payer_norm IS NOT NULL AND EXISTS \
                  (SELECT 1 FROM orders p WHERE p.payer_norm = o.payer_norm AND p.demo = o.demo AND p.seq < o.seq)) \
                  AS returned, \
               (SELECT COUNT(*) FROM referrals r JOIN orders o ON o.passport = r.passport \
                  WHERE r.counted = 1 AND o.demo = ?1) AS referred",
        )
        .bind(demo)
        .fetch_one(&self.pool)
        .await?;
        Ok(OrderFunnel {
            purchased: count(row.try_get("purchased")?)?,
            used: count(row.try_get("used")?)?,
            returned: count(row.try_get("returned")?)?,
            referred: count(row.try_get("referred")?)?,
        })
    }

    pub(super) async fn row_counts(
        &self,
    ) -> Result<std::collections::BTreeMap<&'static str, u64>, StorageError> {
        let mut counts = std::collections::BTreeMap::new();
        for table in super::TABLES {
            let value: i64 = sqlx::query_scalar(&format!("SELECT COUNT(*) FROM {table}"))
                .fetch_one(&self.pool)
                .await?;
            counts.insert(table, count(value)?);
        }
        Ok(counts)
    }
}

async fn insert_grant(
    tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>,
    passport: &str,
    secret_hash: &str,
) -> Result<(), StorageError> {
    sqlx::query("INSERT INTO fulfillment_grants (secret_hash, passport) VALUES (?, ?)")
        .bind(secret_hash)
        .bind(passport)
        .execute(&mut **tx)
        .await?;
    Ok(())
}
