//! [`PostgresSettlementStore`]: the payment ledger in one PostgreSQL table, shared by every
//! instance of an application.

use sqlx::postgres::PgPool;
use sqlx::{Executor as _, Row as _};

use super::{LedgerEntry, PaymentKey, PaymentState, SettlementStore, StoreError};
use crate::boxed::BoxFuture;

/// The table, created by [`PostgresSettlementStore::migrate`].
const CREATE_TABLE: &str = "\
CREATE TABLE IF NOT EXISTS x402_payment_ledger (
    payment_key TEXT PRIMARY KEY NOT NULL,
    version     BIGINT NOT NULL CHECK (version >= 1),
    phase       TEXT NOT NULL,
    state       TEXT NOT NULL, -- the PaymentState as JSON
    updated     TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS x402_payment_ledger_by_phase ON x402_payment_ledger (phase, updated);";

/// The label of the facilitator that received a payment's `/settle` (also in the state's JSON),
/// for operators' queries; NULL (rows written before it) means the first facilitator.
const ADD_FACILITATOR_COLUMN: &str =
    "ALTER TABLE x402_payment_ledger ADD COLUMN IF NOT EXISTS facilitator TEXT";

/// The request a payment came with or bought (its
/// [`RequestDigest`](crate::payment::RequestDigest), also in the state's JSON), for operators'
/// queries; NULL for a payment being verified, and for rows written before it.
const ADD_REQUEST_DIGEST_COLUMN: &str =
    "ALTER TABLE x402_payment_ledger ADD COLUMN IF NOT EXISTS request_digest TEXT";

/// Serialises concurrent `migrate` calls (`CREATE … IF NOT EXISTS` alone can still collide).
const MIGRATION_LOCK: i64 = 0x7834_3032_6c65_6467; // "x402ledg"

/// A [`SettlementStore`] in PostgreSQL (feature `postgres`): one row per payment in the table
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
/// use tower_x402::settlement::PostgresSettlementStore;
/// # use tower_x402::{Offer, X402Layer, payment::Payments};
/// # let (facilitator, offer): (tower_x402::HttpFacilitator, std::sync::Arc<Offer>) = todo!();
///
/// let pool = sqlx::PgPool::connect("postgres://app@db/shop").await?;
/// let ledger = PostgresSettlementStore::new(pool);
/// ledger.migrate().await?;
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
    /// A store over `pool`. Run [`migrate`](Self::migrate) once before use (or create the table
    /// with the same definition by your own migrations).
    pub fn new(pool: PgPool) -> Self {
        Self { pool }
    }

    /// Creates the `x402_payment_ledger` table and its index if they do not exist, and adds the
    /// columns added since (`facilitator`, `request_digest`) to a table created before
    /// them. Safe to call from several instances starting at once.
    pub async fn migrate(&self) -> Result<(), StoreError> {
        let mut transaction = self.pool.begin().await.map_err(store_error)?;
        sqlx::query("SELECT pg_advisory_xact_lock($1)")
            .bind(MIGRATION_LOCK)
            .execute(&mut *transaction)
            .await
            .map_err(store_error)?;
        let exists: bool =
            sqlx::query_scalar("SELECT to_regclass('x402_payment_ledger') IS NOT NULL")
                .fetch_one(&mut *transaction)
                .await
                .map_err(store_error)?;
        if !exists {
            transaction
                .execute(CREATE_TABLE)
                .await
                .map_err(store_error)?;
        }
        for column in [ADD_FACILITATOR_COLUMN, ADD_REQUEST_DIGEST_COLUMN] {
            transaction.execute(column).await.map_err(store_error)?;
        }
        transaction.commit().await.map_err(store_error)
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

fn store_error(error: impl std::error::Error + Send + Sync + 'static) -> StoreError {
    StoreError(Box::new(error))
}

/// The facilitator label of the intent `state` carries, if any.
fn facilitator_of(state: &PaymentState) -> Option<&str> {
    match state {
        PaymentState::Settling { intent, .. } | PaymentState::InDoubt { intent, .. } => {
            intent.facilitator.as_deref()
        }
        PaymentState::InProgress { .. } | PaymentState::Settled { .. } => None,
    }
}

/// The request digest `state` records, if any.
fn request_digest_of(state: &PaymentState) -> Option<&str> {
    match state {
        PaymentState::Settling { intent, .. } | PaymentState::InDoubt { intent, .. } => {
            intent.request_digest.as_deref()
        }
        PaymentState::Settled { record } => record.request_digest.as_deref(),
        PaymentState::InProgress { .. } => None,
    }
}
