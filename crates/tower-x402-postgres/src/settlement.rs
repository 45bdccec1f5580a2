//! [`PostgresSettlementStore`]: the payment ledger in one PostgreSQL table, shared by every
//! instance of an application.

use sqlx::Row as _;
use sqlx::postgres::PgPool;
use tower_x402::BoxFuture;
use tower_x402::settlement::{LedgerEntry, PaymentKey, PaymentState, SettlementStore, StoreError};

use crate::store_error;

/// A [`SettlementStore`] in PostgreSQL: one row per payment in the table
/// `x402_payment_ledger`, so every instance of an application sharing the database settles a
/// payment once.
///
/// Each operation is a single statement, atomic on its own row: `insert` is
/// `INSERT … ON CONFLICT DO NOTHING`, `replace` and `remove` are `UPDATE`/`DELETE … WHERE
/// payment_key = $1 AND version = $2`. Of two instances racing on one payment, PostgreSQL's row
/// lock lets exactly one statement match; the other sees zero rows affected and the layer
/// re-reads the entry. No explicit transaction or advisory lock is held across a `/settle` call:
/// the *settling* state's lease, not a database lock, is what keeps other instances away while a
/// payment settles, so a crashed instance never leaves a lock behind.
///
/// ```no_run
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// use tower_x402_postgres::PostgresSettlementStore;
/// # use tower_x402::{Offer, X402Layer, payment::Payments};
/// # let (facilitator, offer): (tower_x402::HttpFacilitator, std::sync::Arc<Offer>) = todo!();
///
/// let pool = sqlx::PgPool::connect("postgres://app@db/shop").await?;
/// tower_x402_postgres::migrate(&pool).await?;
/// let ledger = PostgresSettlementStore::new(pool);
/// let paywall = X402Layer::with_payments(Payments::new(facilitator).settlement_store(ledger), offer);
/// # Ok(()) }
/// ```
///
/// TLS to the database comes from sqlx's own features (`sqlx/tls-rustls` in the application).
#[derive(Clone, Debug)]
pub struct PostgresSettlementStore {
    pool: PgPool,
}

impl PostgresSettlementStore {
    /// A store over `pool`. Run [`migrate`](crate::migrate) once before use (or create the
    /// table with the same definition by your own migrations).
    pub fn new(pool: PgPool) -> Self {
        Self { pool }
    }

    /// Payments whose settlement outcome is unknown (*in doubt*, or *settling* perhaps under an
    /// expired lease), oldest first: what an operator watches.
    pub async fn unsettled(&self) -> Result<Vec<(PaymentKey, PaymentState)>, StoreError> {
        let rows = sqlx::query(
            "SELECT payment_key, state FROM x402_payment_ledger \
             WHERE phase IN ('in_doubt', 'settling') ORDER BY updated, payment_key",
        )
        .fetch_all(&self.pool)
        .await
        .map_err(store_error)?;
        rows.iter()
            .map(|row| {
                let key: String = row.try_get("payment_key").map_err(store_error)?;
                let state: String = row.try_get("state").map_err(store_error)?;
                Ok((PaymentKey::from_stored(key), decode(&state)?))
            })
            .collect()
    }

    /// The pool this store uses.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }
}

impl SettlementStore for PostgresSettlementStore {
    fn load<'a>(
        &'a self,
        key: &'a PaymentKey,
    ) -> BoxFuture<'a, Result<Option<LedgerEntry>, StoreError>> {
        Box::pin(async move {
            let row = sqlx::query(
                "SELECT version, state FROM x402_payment_ledger \
                 WHERE payment_key = $1",
            )
            .bind(key.as_str())
            .fetch_optional(&self.pool)
            .await
            .map_err(store_error)?;
            let Some(row) = row else { return Ok(None) };
            let version: i64 = row.try_get("version").map_err(store_error)?;
            let state: String = row.try_get("state").map_err(store_error)?;
            let version = u64::try_from(version).map_err(store_error)?;
            Ok(Some(LedgerEntry::new(decode(&state)?, version)))
        })
    }

    fn insert<'a>(
        &'a self,
        key: &'a PaymentKey,
        state: &'a PaymentState,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move {
            let done = sqlx::query(
                "INSERT INTO x402_payment_ledger \
                 (payment_key, version, phase, state, facilitator, request_digest) \
                 VALUES ($1, 1, $2, $3, $4, $5) ON CONFLICT (payment_key) DO NOTHING",
            )
            .bind(key.as_str())
            .bind(state.phase())
            .bind(encode(state)?)
            .bind(facilitator_of(state))
            .bind(request_digest_of(state))
            .execute(&self.pool)
            .await
            .map_err(store_error)?;
            Ok(done.rows_affected() == 1)
        })
    }

    fn replace<'a>(
        &'a self,
        key: &'a PaymentKey,
        version: u64,
        state: &'a PaymentState,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move {
            let version = i64::try_from(version).map_err(store_error)?;
            let done = sqlx::query(
                "UPDATE x402_payment_ledger \
                 SET version = version + 1, phase = $3, state = $4, facilitator = $5, \
                     request_digest = $6, updated = now() \
                 WHERE payment_key = $1 AND version = $2",
            )
            .bind(key.as_str())
            .bind(version)
            .bind(state.phase())
            .bind(encode(state)?)
            .bind(facilitator_of(state))
            .bind(request_digest_of(state))
            .execute(&self.pool)
            .await
            .map_err(store_error)?;
            Ok(done.rows_affected() == 1)
        })
    }

    fn remove<'a>(
        &'a self,
        key: &'a PaymentKey,
        version: u64,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move {
            let version = i64::try_from(version).map_err(store_error)?;
            let done = sqlx::query(
                "DELETE FROM x402_payment_ledger WHERE payment_key = $1 AND version = $2",
            )
            .bind(key.as_str())
            .bind(version)
            .execute(&self.pool)
            .await
            .map_err(store_error)?;
            Ok(done.rows_affected() == 1)
        })
    }
}

/// The state as stored: JSON text, kept byte for byte (`jsonb` would refuse a `\u0000` a
/// payload may carry, and reorder keys); operators can still query it with `state::jsonb`.
fn encode(state: &PaymentState) -> Result<String, StoreError> {
    serde_json::to_string(state).map_err(store_error)
}

fn decode(text: &str) -> Result<PaymentState, StoreError> {
    serde_json::from_str(text).map_err(store_error)
}

/// The facilitator label of the intent `state` carries, if any.
fn facilitator_of(state: &PaymentState) -> Option<&str> {
    match state {
        PaymentState::Settling { intent, .. } | PaymentState::InDoubt { intent, .. } => {
            intent.facilitator.as_deref()
        }
        // In progress, settled, or a phase added later: no intent.
        _ => None,
    }
}

/// The request digest `state` records, if any.
fn request_digest_of(state: &PaymentState) -> Option<&str> {
    match state {
        PaymentState::Settling { intent, .. } | PaymentState::InDoubt { intent, .. } => {
            intent.request_digest.as_deref()
        }
        PaymentState::Settled { record } => record.request_digest.as_deref(),
        // In progress, or a phase added later: no digest.
        _ => None,
    }
}
