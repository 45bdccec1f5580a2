//! Sign-in-with-x on SQLite: entitlements and consumed nonces in the store's database file, so
//! they survive a restart.

use sqlx::sqlite::SqlitePool;
use tower_x402::BoxFuture;
use tower_x402::settlement::StoreError;
use tower_x402_siwx::EntitlementStore;

use super::super::{StorageError, corrupt, store_error, unix_now};

/// The tables `entitlements` and `siwx_nonces` (migration `0004_entitlements.sql`). Every write
/// is one statement, so each takes SQLite's write lock once and waits for another writer no
/// longer than the store's busy timeout. A nonce is consumed by one `INSERT … ON CONFLICT DO
/// NOTHING`: of two requests carrying the same proof, SQLite lets exactly one insert.
#[derive(Clone, Debug)]
pub(in crate::storage) struct SqliteEntitlementStore {
    pool: SqlitePool,
}

impl SqliteEntitlementStore {
    pub(super) fn new(pool: SqlitePool) -> Self {
        Self { pool }
    }

    async fn record(&self, resource: &str, address: &str, at: u64) -> Result<(), StorageError> {
        let at = i64::try_from(at).map_err(|e| corrupt("purchase time", e))?;
        sqlx::query(
            "INSERT INTO entitlements (resource, address, purchased) VALUES ($1, $2, $3) \
             ON CONFLICT (resource, address) \
             DO UPDATE SET purchased = MAX(purchased, excluded.purchased)",
        )
        .bind(resource)
        .bind(address)
        .bind(at)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn last(&self, resource: &str, address: &str) -> Result<Option<u64>, StorageError> {
        let purchased: Option<i64> = sqlx::query_scalar(
            "SELECT purchased FROM entitlements WHERE resource = $1 AND address = $2",
        )
        .bind(resource)
        .bind(address)
        .fetch_optional(&self.pool)
        .await?;
        purchased
            .map(|at| u64::try_from(at).map_err(|e| corrupt("purchase time", e)))
            .transpose()
    }

    async fn consume(&self, nonce: &str, expires: u64) -> Result<bool, StorageError> {
        let expires = i64::try_from(expires).map_err(|e| corrupt("nonce expiry", e))?;
        // Nonces past their expiry go first: a proof carrying one is refused as too old anyway.
        sqlx::query("DELETE FROM siwx_nonces WHERE expires < $1")
            .bind(unix_now())
            .execute(&self.pool)
            .await?;
        let done = sqlx::query(
            "INSERT INTO siwx_nonces (nonce, expires) VALUES ($1, $2) ON CONFLICT (nonce) DO NOTHING",
        )
        .bind(nonce)
        .bind(expires)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }
}

impl EntitlementStore for SqliteEntitlementStore {
    fn record_purchase<'a>(
        &'a self,
        resource: &'a str,
        address: &'a str,
        at: u64,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            self.record(resource, address, at)
                .await
                .map_err(store_error)
        })
    }

    fn last_purchase<'a>(
        &'a self,
        resource: &'a str,
        address: &'a str,
    ) -> BoxFuture<'a, Result<Option<u64>, StoreError>> {
        Box::pin(async move { self.last(resource, address).await.map_err(store_error) })
    }

    fn consume_nonce<'a>(
        &'a self,
        nonce: &'a str,
        expires: u64,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move { self.consume(nonce, expires).await.map_err(store_error) })
    }
}
