//! The SQLite backend: the file and its lock, the pool, and what only SQLite keeps in the
//! store's own tables — the layer's payment ledger (`payment_ledger`) and sign-in-with-x's
//! entitlements ([`entitlements`]). The statements shared with PostgreSQL are in
//! [`tables`](super::tables).

mod entitlements;

use std::str::FromStr;
use std::time::Duration;

use sqlx::Row as _;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions};
use tower_x402::settlement::{LedgerEntry, PaymentState};

use self::entitlements::SqliteEntitlementStore;
use super::tables::Tables;
use super::{StorageError, corrupt};

/// Connections kept for a file database (SQLite serialises writers anyway).
const MAX_CONNECTIONS: u32 = 8;

/// A pool of SQLite connections with the store's schema.
#[derive(Clone, Debug)]
pub(super) struct SqliteBackend {
    tables: Tables<sqlx::Sqlite>,
}

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
        Ok(Self {
            tables: Tables::new(pool),
        })
    }

    /// The store's tables, in this database.
    pub(super) fn tables(&self) -> &Tables<sqlx::Sqlite> {
        &self.tables
    }

    /// Entitlements and consumed sign-in nonces, in this database.
    pub(super) fn entitlements(&self) -> SqliteEntitlementStore {
        SqliteEntitlementStore::new(self.tables.pool().clone())
    }

    pub(super) async fn load_payment(
        &self,
        key: &str,
    ) -> Result<Option<LedgerEntry>, StorageError> {
        let row = sqlx::query("SELECT version, state FROM payment_ledger WHERE payment_key = $1")
            .bind(key)
            .fetch_optional(self.tables.pool())
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
             VALUES ($1, 1, $2, $3, $4) ON CONFLICT (payment_key) DO NOTHING",
        )
        .bind(key)
        .bind(state.phase())
        .bind(json)
        .bind(now)
        .execute(self.tables.pool())
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
            "UPDATE payment_ledger SET version = version + 1, phase = $1, state = $2, updated = $3 \
             WHERE payment_key = $4 AND version = $5",
        )
        .bind(state.phase())
        .bind(json)
        .bind(now)
        .bind(key)
        .bind(version)
        .execute(self.tables.pool())
        .await?;
        Ok(done.rows_affected() == 1)
    }

    pub(super) async fn remove_payment(
        &self,
        key: &str,
        version: u64,
    ) -> Result<bool, StorageError> {
        let version = i64::try_from(version).map_err(|e| corrupt("payment version", e))?;
        let done =
            sqlx::query("DELETE FROM payment_ledger WHERE payment_key = $1 AND version = $2")
                .bind(key)
                .bind(version)
                .execute(self.tables.pool())
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
        .fetch_all(self.tables.pool())
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
}
