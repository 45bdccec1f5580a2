//! [`PostgresEntitlementStore`]: entitlements and consumed sign-in nonces in PostgreSQL, shared
//! by every instance of an application.

use sqlx::Row as _;
use sqlx::postgres::PgPool;
use tower_x402::BoxFuture;
use tower_x402::settlement::StoreError;
use tower_x402_siwx::EntitlementStore;

use crate::store_error;

/// An [`EntitlementStore`] in PostgreSQL (feature `siwx`): the tables `x402_entitlements`
/// (one row per resource and address, the latest purchase time) and `x402_siwx_nonces` (one row
/// per consumed nonce until it expires), so a buyer who paid on one instance signs in on any
/// other, and a sign-in proof is accepted once across all of them.
///
/// `consume_nonce` is one `INSERT … ON CONFLICT DO NOTHING`: of two instances racing on one
/// proof, PostgreSQL's unique index lets exactly one insert. Expired nonces are deleted now and
/// then by the same call.
///
/// ```no_run
/// # async fn run() -> Result<(), tower_x402::BoxError> {
/// use tower_x402_postgres::PostgresEntitlementStore;
/// use tower_x402_siwx::SignInWithX;
///
/// let pool = sqlx::PgPool::connect("postgres://app@db/shop").await?;
/// tower_x402_postgres::migrate(&pool).await?;
/// let entitlements = PostgresEntitlementStore::new(pool);
/// let siwx = SignInWithX::new("https://shop.example", b"a secret every instance shares!!")?
///     .entitlement_store(entitlements);
/// # let _ = siwx; Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct PostgresEntitlementStore {
    pool: PgPool,
}

impl PostgresEntitlementStore {
    /// A store over `pool`. Run [`migrate`](crate::migrate) once before use.
    pub fn new(pool: PgPool) -> Self {
        Self { pool }
    }
}

impl EntitlementStore for PostgresEntitlementStore {
    fn record_purchase<'a>(
        &'a self,
        resource: &'a str,
        address: &'a str,
        at: u64,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let at = i64::try_from(at).map_err(store_error)?;
            sqlx::query(
                "INSERT INTO x402_entitlements (resource, address, purchased) VALUES ($1, $2, $3) \
                 ON CONFLICT (resource, address) \
                 DO UPDATE SET purchased = GREATEST(x402_entitlements.purchased, EXCLUDED.purchased)",
            )
            .bind(resource)
            .bind(address)
            .bind(at)
            .execute(&self.pool)
            .await
            .map_err(store_error)?;
            Ok(())
        })
    }

    fn last_purchase<'a>(
        &'a self,
        resource: &'a str,
        address: &'a str,
    ) -> BoxFuture<'a, Result<Option<u64>, StoreError>> {
        Box::pin(async move {
            let row = sqlx::query(
                "SELECT purchased FROM x402_entitlements WHERE resource = $1 AND address = $2",
            )
            .bind(resource)
            .bind(address)
            .fetch_optional(&self.pool)
            .await
            .map_err(store_error)?;
            let Some(row) = row else { return Ok(None) };
            let at: i64 = row.try_get("purchased").map_err(store_error)?;
            Ok(Some(u64::try_from(at).map_err(store_error)?))
        })
    }

    fn consume_nonce<'a>(
        &'a self,
        nonce: &'a str,
        expires: u64,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move {
            let expires = i64::try_from(expires).map_err(store_error)?;
            let now = i64::try_from(unix_now()).map_err(store_error)?;
            // Now and then (one call in 64), clear nonces long past: a proof carrying one is
            // refused as too old anyway.
            if rand::random::<u8>() < 4 {
                sqlx::query("DELETE FROM x402_siwx_nonces WHERE expires < $1")
                    .bind(now)
                    .execute(&self.pool)
                    .await
                    .map_err(store_error)?;
            }
            let done = sqlx::query(
                "INSERT INTO x402_siwx_nonces (nonce, expires) VALUES ($1, $2) \
                 ON CONFLICT (nonce) DO NOTHING",
            )
            .bind(nonce)
            .bind(expires)
            .execute(&self.pool)
            .await
            .map_err(store_error)?;
            Ok(done.rows_affected() == 1)
        })
    }
}

/// Seconds since the Unix epoch.
fn unix_now() -> u64 {
    tower_x402::proto::unix_time().as_secs()
}
