//! The PostgreSQL backend: the store's tables on a server several instances share.
//!
//! The store's own statements are the ones SQLite runs ([`tables`](super::tables)); the schema
//! is `migrations-postgres/`.
//!
//! The payment ledger is tower-x402-postgres's [`PostgresSettlementStore`] over the same pool,
//! and sign-in entitlements its [`PostgresEntitlementStore`]: their tables
//! (`x402_payment_ledger`, `x402_entitlements`, `x402_siwx_nonces`) are created by
//! [`tower_x402_postgres::migrate`] before the store's migrations, one of which fills the
//! entitlements from orders placed before them.

use std::time::Duration;

use sqlx::postgres::PgPoolOptions;
use tower_x402::settlement::PaymentState;
use tower_x402_postgres::{PostgresEntitlementStore, PostgresSettlementStore};

use super::StorageError;
use super::tables::Tables;

/// Connections per instance; the server's `max_connections` bounds the sum over instances.
const MAX_CONNECTIONS: u32 = 16;

/// A pool of PostgreSQL connections with the store's schema.
#[derive(Clone, Debug)]
pub(super) struct PostgresBackend {
    tables: Tables<sqlx::Postgres>,
    ledger: PostgresSettlementStore,
}

impl PostgresBackend {
    /// Connects to `database_url` (`postgres://…` or `postgresql://…`) and runs the migrations.
    /// Several instances may start at once: sqlx serialises their migrations with an advisory
    /// lock.
    /// `timeout` bounds a request's wait for a connection (the server down, or every
    /// connection busy): it then fails, as a 503, instead of hanging.
    pub(super) async fn open(database_url: &str, timeout: Duration) -> Result<Self, StorageError> {
        let pool = PgPoolOptions::new()
            .max_connections(MAX_CONNECTIONS)
            .acquire_timeout(timeout)
            .connect(database_url)
            .await?;
        // The layer's tables first: a store migration fills `x402_entitlements` from the orders.
        tower_x402_postgres::migrate(&pool).await?;
        let ledger = PostgresSettlementStore::new(pool.clone());
        sqlx::migrate!("./migrations-postgres").run(&pool).await?;
        let tables = Tables::new(pool);
        Ok(Self { tables, ledger })
    }

    /// The store's tables, in this database.
    pub(super) fn tables(&self) -> &Tables<sqlx::Postgres> {
        &self.tables
    }

    /// Entitlements and consumed sign-in nonces, in this database.
    pub(super) fn entitlements(&self) -> PostgresEntitlementStore {
        PostgresEntitlementStore::new(self.tables.pool().clone())
    }

    /// The layer's payment ledger, in this database.
    pub(super) fn ledger(&self) -> &PostgresSettlementStore {
        &self.ledger
    }

    /// Payments whose settlement outcome is unknown, oldest first.
    pub(super) async fn payments_in_doubt(
        &self,
    ) -> Result<Vec<(String, PaymentState)>, StorageError> {
        let unsettled = self.ledger.unsettled().await?;
        Ok(unsettled
            .into_iter()
            .map(|(key, state)| (key.as_str().to_owned(), state))
            .collect())
    }
}
