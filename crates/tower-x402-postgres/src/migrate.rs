//! [`migrate`]: every table of this crate's stores, created once.

use sqlx::Executor as _;
use sqlx::postgres::PgPool;
use tower_x402::settlement::StoreError;

use crate::store_error;

/// The payment ledger's table and index ([`PostgresSettlementStore`](crate::PostgresSettlementStore)).
const CREATE_LEDGER: &str = "\
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
/// [`RequestDigest`](tower_x402::payment::RequestDigest), also in the state's JSON), for
/// operators' queries; NULL for a payment being verified, and for rows written before it.
const ADD_REQUEST_DIGEST_COLUMN: &str =
    "ALTER TABLE x402_payment_ledger ADD COLUMN IF NOT EXISTS request_digest TEXT";

/// Sign-in's tables: entitlements and consumed nonces (`PostgresEntitlementStore`, feature
/// `siwx`).
const CREATE_ENTITLEMENTS: &str = "\
CREATE TABLE IF NOT EXISTS x402_entitlements (
    resource  TEXT NOT NULL,
    address   TEXT NOT NULL,
    purchased BIGINT NOT NULL, -- unix seconds of the latest payment
    PRIMARY KEY (resource, address)
);
CREATE TABLE IF NOT EXISTS x402_siwx_nonces (
    nonce   TEXT PRIMARY KEY NOT NULL,
    expires BIGINT NOT NULL -- unix seconds; the row may go once past
);
CREATE INDEX IF NOT EXISTS x402_siwx_nonces_by_expiry ON x402_siwx_nonces (expires);";

/// Payment channels' table (`PostgresChannelStore`, feature `channels`): the channel as JSON,
/// and whether it has unclaimed charges or a claim in flight, for the claimer's query.
const CREATE_CHANNELS: &str = "\
CREATE TABLE IF NOT EXISTS x402_channels (
    channel_id  TEXT PRIMARY KEY NOT NULL,
    state       TEXT NOT NULL, -- the Channel as JSON
    needs_claim BOOLEAN NOT NULL,
    updated     TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS x402_channels_needing_claims ON x402_channels (channel_id) WHERE needs_claim;";

/// Serialises concurrent `migrate` calls (`CREATE … IF NOT EXISTS` alone can still collide);
/// the value the ledger's migration always took, so an instance of an earlier release
/// migrating at the same time waits too.
const MIGRATION_LOCK: i64 = 0x7834_3032_6c65_6467; // "x402ledg"

/// Creates every table and index this crate's stores use, if they do not exist — the payment
/// ledger `x402_payment_ledger`, sign-in's `x402_entitlements` and `x402_siwx_nonces`, and the
/// payment channels' `x402_channels` (whether or not the features `siwx` and `channels` are on,
/// so turning one on later needs no migration) — and
/// adds the ledger's columns added since (`facilitator`, `request_digest`) to a table created
/// before them. One transaction under an advisory lock: safe to call from several instances
/// starting at once, and on every start.
///
/// ```no_run
/// # async fn run() -> Result<(), tower_x402::BoxError> {
/// let pool = sqlx::PgPool::connect("postgres://app@db/shop").await?;
/// tower_x402_postgres::migrate(&pool).await?;
/// let ledger = tower_x402_postgres::PostgresSettlementStore::new(pool);
/// # let _ = ledger; Ok(()) }
/// ```
///
/// # Errors
///
/// The database could not be reached, or refused a statement.
pub async fn migrate(pool: &PgPool) -> Result<(), StoreError> {
    let mut transaction = pool.begin().await.map_err(store_error)?;
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(MIGRATION_LOCK)
        .execute(&mut *transaction)
        .await
        .map_err(store_error)?;
    // `CREATE INDEX IF NOT EXISTS` on a table another instance is creating can still fail, so
    // an existing ledger is left alone but for the columns it may lack.
    let exists: bool = sqlx::query_scalar("SELECT to_regclass('x402_payment_ledger') IS NOT NULL")
        .fetch_one(&mut *transaction)
        .await
        .map_err(store_error)?;
    if !exists {
        transaction
            .execute(CREATE_LEDGER)
            .await
            .map_err(store_error)?;
    }
    for statement in [
        ADD_FACILITATOR_COLUMN,
        ADD_REQUEST_DIGEST_COLUMN,
        CREATE_ENTITLEMENTS,
        CREATE_CHANNELS,
    ] {
        transaction.execute(statement).await.map_err(store_error)?;
    }
    transaction.commit().await.map_err(store_error)
}
