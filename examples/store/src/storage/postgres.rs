//! The PostgreSQL backend: the store's tables on a server several instances share.
//!
//! The statements mirror the SQLite backend's with PostgreSQL's placeholders (`$1`) and types
//! (`BOOLEAN`, `BIGINT`); the schema is `migrations-postgres/`. Where SQLite serialises writers
//! with `BEGIN IMMEDIATE`, PostgreSQL relies on its unique indexes: two instances inserting an
//! order for the same payment at once both pass the lookup, the second insert waits for the
//! first to commit and then fails as a unique violation, and [`Store::record_order`] retries it
//! as an existing order.
//!
//! The payment ledger is the crate's own [`PostgresSettlementStore`] over the same pool, and
//! sign-in entitlements its [`PostgresEntitlementStore`]: their tables (`x402_payment_ledger`,
//! `x402_entitlements`, `x402_siwx_nonces`) are created by their own `migrate` before the
//! store's migrations, one of which fills the entitlements from orders placed before them.
//!
//! [`Store::record_order`]: super::Store::record_order

use std::time::Duration;

use sqlx::Row as _;
use sqlx::postgres::{PgPool, PgPoolOptions};
use tower_x402::settlement::{PaymentState, PostgresSettlementStore};
use tower_x402::siwx::PostgresEntitlementStore;

use super::{
    Counter, Mode, NewOrder, Order, OrderFunnel, Recorded, StorageError, corrupt, count,
    order_from_row,
};

/// Connections per instance; the server's `max_connections` bounds the sum over instances.
const MAX_CONNECTIONS: u32 = 16;

/// A pool of PostgreSQL connections with the store's schema.
#[derive(Clone, Debug)]
pub(super) struct PostgresBackend {
    pool: PgPool,
    ledger: PostgresSettlementStore,
}

const ORDER_COLUMNS: &str = "SELECT o.passport, o.sku, o.resource, o.payer, o.network, o.tx, o.amount_micros, \
     o.payment_key, o.demo, o.issued, r.cited, r.counted, r.reason \
     FROM orders o LEFT JOIN referrals r ON r.passport = o.passport";

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
        let ledger = PostgresSettlementStore::new(pool.clone());
        ledger.migrate().await?;
        PostgresEntitlementStore::new(pool.clone())
            .migrate()
            .await?;
        sqlx::migrate!("./migrations-postgres").run(&pool).await?;
        Ok(Self { pool, ledger })
    }

    /// The layer's payment ledger, in this database.
    /// Entitlements and consumed sign-in nonces, in this database.
    pub(super) fn entitlements(&self) -> PostgresEntitlementStore {
        PostgresEntitlementStore::new(self.pool.clone())
    }

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

    pub(super) async fn order_by(
        &self,
        lookup: super::OrderLookup<'_>,
    ) -> Result<Option<Order>, StorageError> {
        let (sql, values) = match lookup {
            super::OrderLookup::PaymentKey(key) => (
                format!("{ORDER_COLUMNS} WHERE o.payment_key = $1"),
                vec![key],
            ),
            super::OrderLookup::Passport(passport) => (
                format!("{ORDER_COLUMNS} WHERE o.passport = $1"),
                vec![passport],
            ),
            super::OrderLookup::Buyer { sku, payer_norm } => (
                format!(
                    "{ORDER_COLUMNS} WHERE o.sku = $1 AND o.payer_norm = $2 ORDER BY o.issued, o.passport LIMIT 1"
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
        let mut tx = self.pool.begin().await?;
        let existing = sqlx::query(&format!("{ORDER_COLUMNS} WHERE o.payment_key = $1"))
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
             payment_key, demo, issued) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
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
                "INSERT INTO referrals (passport, cited, counted, reason) VALUES ($1, $2, $3, $4)",
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
            "INSERT INTO store_secrets (name, value) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING",
        )
        .bind(name)
        .bind(candidate)
        .execute(&self.pool)
        .await?;
        Ok(
            sqlx::query_scalar("SELECT value FROM store_secrets WHERE name = $1")
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
        let found = sqlx::query(
            "SELECT 1 FROM fulfillment_grants WHERE passport = $1 AND secret_hash = $2",
        )
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
        sqlx::query("INSERT INTO downloads (passport, file, at) VALUES ($1, $2, $3)")
            .bind(passport)
            .bind(file)
            .bind(at)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Adds each delta to the stored value in the database (`value = value + delta`), so the
    /// increments of every instance add up; deltas are applied in key order so two instances
    /// flushing the same counters cannot deadlock.
    pub(super) async fn add_to_counters(
        &self,
        deltas: &[(&str, Mode, u64)],
    ) -> Result<(), StorageError> {
        let mut ordered = deltas.to_vec();
        ordered.sort_by(|a, b| (a.0, a.1.as_str()).cmp(&(b.0, b.1.as_str())));
        let mut tx = self.pool.begin().await?;
        for (stage, mode, delta) in ordered {
            let delta = i64::try_from(delta).map_err(|e| corrupt("counter delta", e))?;
            sqlx::query(
                "INSERT INTO counters (stage, mode, value) VALUES ($1, $2, $3) \
                 ON CONFLICT (stage, mode) DO UPDATE SET value = counters.value + excluded.value",
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
            "INSERT INTO counters (stage, mode, value) VALUES ($1, $2, $3) \
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
               (SELECT COUNT(*) FROM orders WHERE demo = $1) AS purchased, \
               (SELECT COUNT(*) FROM downloads d JOIN orders o ON o.passport = d.passport WHERE o.demo = $1) AS used, \
               (SELECT COUNT(*) FROM orders o WHERE o.demo = $1 AND o.payer_norm IS NOT NULL AND EXISTS \
                  (SELECT 1 FROM orders p WHERE p.payer_norm = o.payer_norm AND p.demo = o.demo AND p.seq < o.seq)) \
                  AS returned, \
               (SELECT COUNT(*) FROM referrals r JOIN orders o ON o.passport = r.passport \
                  WHERE r.counted AND o.demo = $1) AS referred",
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
            let stored = match table {
                "payment_ledger" => "x402_payment_ledger",
                other => other,
            };
            let value: i64 = sqlx::query_scalar(&format!("SELECT COUNT(*) FROM {stored}"))
                .fetch_one(&self.pool)
                .await?;
            counts.insert(table, count(value)?);
        }
        Ok(counts)
    }
}

async fn insert_grant(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    passport: &str,
    secret_hash: &str,
) -> Result<(), StorageError> {
    sqlx::query("INSERT INTO fulfillment_grants (secret_hash, passport) VALUES ($1, $2)")
        .bind(secret_hash)
        .bind(passport)
        .execute(&mut **tx)
        .await?;
    Ok(())
}
