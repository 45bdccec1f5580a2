//! The store's own tables (orders, fulfillment grants, referrals, downloads, counters, secrets),
//! read and written by one set of statements on either engine.
//!
//! Every statement is one SQL text with `$N` placeholders: PostgreSQL's own syntax, which sqlx
//! also binds on SQLite (a numbered parameter there), so the text and its bind chain exist once.
//! The two schemas (`migrations/`, `migrations-postgres/`) keep the same tables and columns
//! and differ only in types — `INTEGER` 0/1 on SQLite, `BOOLEAN` and `BIGINT` on PostgreSQL —
//! which sqlx's `bool` and `i64` bind and read on both; a flag is tested as `WHERE r.counted`,
//! true on both. What still differs is in [`Dialect`]: how a write transaction starts, and
//! where the layer's payment ledger lives.

use sqlx::{ColumnIndex, Database, Decode, Encode, Executor, IntoArguments, Pool, Row as _, Type};
use x402_wire::UsdAmount;

use super::{
    Counter, Mode, NewOrder, Order, OrderFunnel, Recorded, Referral, StorageError, corrupt, count,
};

/// What the engines do differently around the shared statements.
pub(super) trait Dialect: Database {
    /// The statement that opens a transaction which reads and then writes. On SQLite,
    /// `BEGIN IMMEDIATE` takes the write lock up front: a transaction that starts as a reader
    /// could otherwise fail to upgrade while another writer commits. PostgreSQL's plain `BEGIN`
    /// relies on the unique indexes instead: of two instances inserting an order for the same
    /// payment, the second insert waits for the first to commit and fails as a unique
    /// violation, which [`Store::record_order`](super::Store::record_order) retries as an
    /// existing order.
    const BEGIN_WRITE: &'static str;
    /// The table of the layer's payment ledger: the store's own on SQLite, the one
    /// [`PostgresSettlementStore`](tower_x402_postgres::PostgresSettlementStore) creates on
    /// PostgreSQL.
    const LEDGER_TABLE: &'static str;
}

impl Dialect for sqlx::Sqlite {
    const BEGIN_WRITE: &'static str = "BEGIN IMMEDIATE";
    const LEDGER_TABLE: &'static str = "payment_ledger";
}

impl Dialect for sqlx::Postgres {
    const BEGIN_WRITE: &'static str = "BEGIN";
    const LEDGER_TABLE: &'static str = "x402_payment_ledger";
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

/// The columns [`order_from_row`] reads (an order and its referral), then `$condition`.
macro_rules! select_order {
    ($condition:literal) => {
        concat!(
            "SELECT o.passport, o.sku, o.resource, o.payer, o.network, o.tx, o.amount_micros, \
             o.payment_key, o.demo, o.issued, r.cited, r.counted, r.reason \
             FROM orders o LEFT JOIN referrals r ON r.passport = o.passport ",
            $condition
        )
    };
}

const ORDER_BY_PAYMENT_KEY: &str = select_order!("WHERE o.payment_key = $1");
const ORDER_BY_PASSPORT: &str = select_order!("WHERE o.passport = $1");
const ORDER_OF_BUYER: &str =
    select_order!("WHERE o.sku = $1 AND o.payer_norm = $2 ORDER BY o.issued, o.passport LIMIT 1");

/// The store's tables in the database behind `pool`.
#[derive(Debug)]
pub(super) struct Tables<DB: Database> {
    pool: Pool<DB>,
}

// Derived, it would ask `DB: Clone` too.
impl<DB: Database> Clone for Tables<DB> {
    fn clone(&self) -> Self {
        Self::new(self.pool.clone())
    }
}

impl<DB: Database> Tables<DB> {
    pub(super) fn new(pool: Pool<DB>) -> Self {
        Self { pool }
    }

    pub(super) fn pool(&self) -> &Pool<DB> {
        &self.pool
    }
}

// The bounds say, once, that the engine binds and reads the column types the store uses.
impl<DB> Tables<DB>
where
    DB: Dialect,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> String: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'q> Option<String>: Encode<'q, DB> + Decode<'q, DB>,
    for<'q> i64: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'q> bool: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'q> Option<bool>: Decode<'q, DB>,
    for<'r> &'r str: ColumnIndex<DB::Row>,
{
    pub(super) async fn order_by(
        &self,
        lookup: OrderLookup<'_>,
    ) -> Result<Option<Order>, StorageError> {
        let query = match lookup {
            OrderLookup::PaymentKey(key) => sqlx::query(ORDER_BY_PAYMENT_KEY).bind(key),
            OrderLookup::Passport(passport) => sqlx::query(ORDER_BY_PASSPORT).bind(passport),
            OrderLookup::Buyer { sku, payer_norm } => {
                sqlx::query(ORDER_OF_BUYER).bind(sku).bind(payer_norm)
            }
        };
        let row = query.fetch_optional(&self.pool).await?;
        row.map(|row| order_from_row(&row)).transpose()
    }

    pub(super) async fn insert_order(&self, new: &NewOrder) -> Result<Recorded, StorageError> {
        let order = &new.order;
        let mut tx = self.pool.begin_with(DB::BEGIN_WRITE).await?;
        let existing = sqlx::query(ORDER_BY_PAYMENT_KEY)
            .bind(&order.payment_key)
            .fetch_optional(&mut *tx)
            .await?;
        if let Some(row) = existing {
            // The payment already bought this order. The key brought along was derived for the
            // Passport of this request, which is never recorded: it is filed nowhere.
            tx.rollback().await?;
            return Ok(Recorded::Existing(order_from_row(&row)?));
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
        Self::insert_grant(&mut tx, &order.passport, &new.secret_hash).await?;
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

    async fn insert_grant(
        tx: &mut sqlx::Transaction<'_, DB>,
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

    /// Files `secret_hash` under `passport`, unless it already is; refused when the hash is
    /// another order's.
    pub(super) async fn add_grant(
        &self,
        passport: &str,
        secret_hash: &str,
    ) -> Result<(), StorageError> {
        sqlx::query(
            "INSERT INTO fulfillment_grants (secret_hash, passport) VALUES ($1, $2) \
             ON CONFLICT (secret_hash) DO NOTHING",
        )
        .bind(secret_hash)
        .bind(passport)
        .execute(&self.pool)
        .await?;
        if !self.grant_matches(passport, secret_hash).await? {
            return Err(corrupt(
                "fulfillment grant",
                format!("the key offered for {passport} is already another order's"),
            ));
        }
        Ok(())
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
        let row = sqlx::query("SELECT value FROM store_secrets WHERE name = $1")
            .bind(name)
            .fetch_one(&self.pool)
            .await?;
        Ok(row.try_get("value")?)
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
    /// increments of every instance add up; deltas are applied in key order so two PostgreSQL
    /// instances flushing the same counters cannot deadlock.
    pub(super) async fn add_to_counters(
        &self,
        deltas: &[(&str, Mode, u64)],
    ) -> Result<(), StorageError> {
        let mut ordered = deltas.to_vec();
        ordered.sort_by(|a, b| (a.0, a.1.as_str()).cmp(&(b.0, b.1.as_str())));
        let mut tx = self.pool.begin_with(DB::BEGIN_WRITE).await?;
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
                "payment_ledger" => DB::LEDGER_TABLE,
                other => other,
            };
            let row = sqlx::query(&format!("SELECT COUNT(*) AS n FROM {stored}"))
                .fetch_one(&self.pool)
                .await?;
            counts.insert(table, count(row.try_get("n")?)?);
        }
        Ok(counts)
    }
}

/// An order read back from a row of `select_order!` (the same columns on both engines).
fn order_from_row<'r, R>(row: &'r R) -> Result<Order, StorageError>
where
    R: sqlx::Row,
    &'r str: sqlx::ColumnIndex<R>,
    String: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    Option<String>: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    i64: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    bool: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    Option<bool>: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
{
    let micros: i64 = row.try_get("amount_micros")?;
    let cited: Option<String> = row.try_get("cited")?;
    let referral = match cited {
        Some(cited) => Some(Referral {
            cited,
            counted: row.try_get("counted")?,
            reason: row.try_get("reason")?,
        }),
        None => None,
    };
    Ok(Order {
        passport: row.try_get("passport")?,
        sku: row.try_get("sku")?,
        resource: row.try_get("resource")?,
        payer: row.try_get("payer")?,
        network: row.try_get("network")?,
        transaction: row.try_get("tx")?,
        amount: UsdAmount::from_micros(count(micros)?),
        payment_key: row.try_get("payment_key")?,
        demo: row.try_get("demo")?,
        issued: row.try_get("issued")?,
        referral,
    })
}
