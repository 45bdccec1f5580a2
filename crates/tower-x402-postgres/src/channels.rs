//! [`PostgresChannelStore`]: payment channels in PostgreSQL, shared by every instance of an
//! application.

use sqlx::postgres::{PgPool, PgRow};
use sqlx::{Postgres, Row as _, Transaction};
use tower_x402::BoxFuture;
use tower_x402_channels::{
    Begin, Channel, ChannelStore, ClaimLease, ClaimResult, Commit, Committed, Hold, OnChain,
    StoreError, normalize_id,
};

/// A [`ChannelStore`] in PostgreSQL (feature `channels`): one row per channel in the table
/// `x402_channels` (the [`Channel`] as JSON, and whether it needs a claim, indexed), so several
/// instances serve one channel a request at a time, count each voucher once and claim it once.
///
/// Every operation is one transaction that locks the rows it names (`SELECT … FOR UPDATE`, in
/// channel id order when it names several), applies the rule of the same name on [`Channel`]
/// and writes the result back: of two instances racing on a channel, the second waits for the
/// first's few milliseconds and then sees its result. No lock is held while a request's handler
/// runs or a claim is sent: the hold and the claim are leases in the row, so a crashed instance
/// leaves nothing locked.
///
/// ```no_run
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// use tower_x402_channels::Claimer;
/// use tower_x402_postgres::PostgresChannelStore;
/// # let facilitator: tower_x402::HttpFacilitator = todo!();
///
/// let pool = sqlx::PgPool::connect("postgres://app@db/shop").await?;
/// tower_x402_postgres::migrate(&pool).await?;
/// let channels = PostgresChannelStore::new(pool);
/// let claimer = Claimer::new(channels, facilitator).spawn();
/// // ... serve; after the server drained:
/// claimer.shutdown().await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct PostgresChannelStore {
    pool: PgPool,
}

impl PostgresChannelStore {
    /// A store over `pool`. Run [`migrate`](crate::migrate) once before use.
    pub fn new(pool: PgPool) -> Self {
        Self { pool }
    }

    /// The pool this store uses.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// Applies `rule` to channel `id` under its row lock, writing the channel back when `rule`
    /// says it changed. `None`: no such channel.
    async fn update<T>(
        &self,
        id: &str,
        rule: impl FnOnce(&mut Channel) -> (T, bool),
    ) -> Result<Option<T>, StoreError> {
        let mut transaction = self.pool.begin().await.map_err(store_error)?;
        let row = sqlx::query("SELECT state FROM x402_channels WHERE channel_id = $1 FOR UPDATE")
            .bind(normalize_id(id))
            .fetch_optional(&mut *transaction)
            .await
            .map_err(store_error)?;
        let Some(row) = row else { return Ok(None) };
        let mut channel = decode(&row)?;
        let (answer, changed) = rule(&mut channel);
        if changed {
            write(&mut transaction, &channel).await?;
        }
        transaction.commit().await.map_err(store_error)?;
        Ok(Some(answer))
    }
}

impl ChannelStore for PostgresChannelStore {
    fn load<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Option<Channel>, StoreError>> {
        Box::pin(async move {
            let row = sqlx::query("SELECT state FROM x402_channels WHERE channel_id = $1")
                .bind(normalize_id(id))
                .fetch_optional(&self.pool)
                .await
                .map_err(store_error)?;
            row.as_ref().map(decode).transpose()
        })
    }

    fn open<'a>(&'a self, channel: &'a Channel) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move {
            let mut channel = channel.clone();
            channel.id = normalize_id(&channel.id);
            let done = sqlx::query(
                "INSERT INTO x402_channels (channel_id, state, needs_claim) VALUES ($1, $2, $3) \
                 ON CONFLICT (channel_id) DO NOTHING",
            )
            .bind(&channel.id)
            .bind(encode(&channel)?)
            .bind(channel.needs_claim())
            .execute(&self.pool)
            .await
            .map_err(store_error)?;
            Ok(done.rows_affected() == 1)
        })
    }

    fn begin<'a>(
        &'a self,
        id: &'a str,
        hold: &'a Hold,
        now: u64,
    ) -> BoxFuture<'a, Result<Begin, StoreError>> {
        Box::pin(async move {
            let begun = self
                .update(id, |channel| {
                    let begun = channel.begin(hold, now);
                    let changed = matches!(begun, Begin::Held(_));
                    (begun, changed)
                })
                .await?;
            Ok(begun.unwrap_or(Begin::NotFound))
        })
    }

    fn commit<'a>(
        &'a self,
        id: &'a str,
        hold_id: &'a str,
        commit: &'a Commit,
    ) -> BoxFuture<'a, Result<Committed, StoreError>> {
        Box::pin(async move {
            let committed = self
                .update(id, |channel| {
                    let before = channel.clone();
                    let committed = channel.commit(hold_id, commit);
                    let changed = *channel != before;
                    (committed, changed)
                })
                .await?;
            Ok(committed.unwrap_or(Committed::NotFound))
        })
    }

    fn release<'a>(
        &'a self,
        id: &'a str,
        hold_id: &'a str,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move {
            let released = self
                .update(id, |channel| {
                    let released = channel.release(hold_id);
                    (released, released)
                })
                .await?;
            Ok(released.unwrap_or(false))
        })
    }

    fn mirror<'a>(
        &'a self,
        id: &'a str,
        on_chain: &'a OnChain,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move {
            let mirrored = self
                .update(id, |channel| {
                    let mirrored = channel.mirror(*on_chain);
                    (mirrored, mirrored)
                })
                .await?;
            Ok(mirrored.unwrap_or(false))
        })
    }

    fn unclaimed(&self, limit: usize) -> BoxFuture<'_, Result<Vec<Channel>, StoreError>> {
        Box::pin(async move {
            let limit = i64::try_from(limit).unwrap_or(i64::MAX);
            let rows = sqlx::query(
                "SELECT state FROM x402_channels WHERE needs_claim \
                 ORDER BY channel_id LIMIT $1",
            )
            .bind(limit)
            .fetch_all(&self.pool)
            .await
            .map_err(store_error)?;
            rows.iter().map(decode).collect()
        })
    }

    fn begin_claim<'a>(
        &'a self,
        ids: &'a [String],
        lease: &'a ClaimLease,
    ) -> BoxFuture<'a, Result<Vec<Channel>, StoreError>> {
        Box::pin(async move {
            let ids: Vec<String> = ids.iter().map(|id| normalize_id(id)).collect();
            let mut transaction = self.pool.begin().await.map_err(store_error)?;
            let rows = lock_all(&mut transaction, &ids).await?;
            let mut taken = Vec::new();
            for row in &rows {
                let mut channel = decode(row)?;
                if channel.begin_claim(lease).is_some() {
                    write(&mut transaction, &channel).await?;
                    taken.push(channel);
                }
            }
            transaction.commit().await.map_err(store_error)?;
            Ok(taken)
        })
    }

    fn finish_claim<'a>(
        &'a self,
        claim_id: &'a str,
        results: &'a [(String, ClaimResult)],
    ) -> BoxFuture<'a, Result<usize, StoreError>> {
        Box::pin(async move {
            let ids: Vec<String> = results.iter().map(|(id, _)| normalize_id(id)).collect();
            let mut transaction = self.pool.begin().await.map_err(store_error)?;
            let rows = lock_all(&mut transaction, &ids).await?;
            let mut finished = 0;
            for row in &rows {
                let mut channel = decode(row)?;
                let result = results
                    .iter()
                    .find(|(id, _)| normalize_id(id) == channel.id)
                    .map(|(_, result)| *result);
                if let Some(result) = result
                    && channel.finish_claim(claim_id, result)
                {
                    write(&mut transaction, &channel).await?;
                    finished += 1;
                }
            }
            transaction.commit().await.map_err(store_error)?;
            Ok(finished)
        })
    }

    fn remove<'a>(
        &'a self,
        id: &'a str,
        hold_id: &'a str,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move {
            let mut transaction = self.pool.begin().await.map_err(store_error)?;
            let row =
                sqlx::query("SELECT state FROM x402_channels WHERE channel_id = $1 FOR UPDATE")
                    .bind(normalize_id(id))
                    .fetch_optional(&mut *transaction)
                    .await
                    .map_err(store_error)?;
            let Some(row) = row else { return Ok(false) };
            if !decode(&row)?.removable_by(hold_id) {
                return Ok(false);
            }
            sqlx::query("DELETE FROM x402_channels WHERE channel_id = $1")
                .bind(normalize_id(id))
                .execute(&mut *transaction)
                .await
                .map_err(store_error)?;
            transaction.commit().await.map_err(store_error)?;
            Ok(true)
        })
    }
}

/// Locks the rows of `ids` in channel id order (so two transactions locking several never
/// wait on each other in a cycle).
async fn lock_all(
    transaction: &mut Transaction<'_, Postgres>,
    ids: &[String],
) -> Result<Vec<PgRow>, StoreError> {
    sqlx::query(
        "SELECT state FROM x402_channels WHERE channel_id = ANY($1) \
         ORDER BY channel_id FOR UPDATE",
    )
    .bind(ids)
    .fetch_all(&mut **transaction)
    .await
    .map_err(store_error)
}

async fn write(
    transaction: &mut Transaction<'_, Postgres>,
    channel: &Channel,
) -> Result<(), StoreError> {
    sqlx::query(
        "UPDATE x402_channels SET state = $2, needs_claim = $3, updated = now() \
         WHERE channel_id = $1",
    )
    .bind(&channel.id)
    .bind(encode(channel)?)
    .bind(channel.needs_claim())
    .execute(&mut **transaction)
    .await
    .map_err(store_error)?;
    Ok(())
}

fn encode(channel: &Channel) -> Result<String, StoreError> {
    serde_json::to_string(channel).map_err(store_error)
}

fn decode(row: &PgRow) -> Result<Channel, StoreError> {
    let state: String = row.try_get("state").map_err(store_error)?;
    serde_json::from_str(&state).map_err(store_error)
}

fn store_error(error: impl std::error::Error + Send + Sync + 'static) -> StoreError {
    StoreError(Box::new(error))
}
