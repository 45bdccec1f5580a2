//! The PostgreSQL side of the layer's `SettlementStore`: the `settlements` table.
//!
//! Kept apart from the store's own tables so that further settlement operations (reservations,
//! leases, outcomes) sit beside `find` and `save` here.

use sqlx::Row as _;
use tower_x402::layer::settlement::{PaymentKey, SettlementRecord};

use super::{PostgresBackend, corrupt};
use crate::storage::StorageError;

impl PostgresBackend {
    pub(in crate::storage) async fn find_settlement(
        &self,
        key: &str,
    ) -> Result<Option<SettlementRecord>, StorageError> {
        let row = sqlx::query(
            "SELECT payment_key, fingerprint, resource, requirement, settlement \
             FROM settlements WHERE payment_key = $1",
        )
        .bind(key)
        .fetch_optional(&self.pool)
        .await?;
        let Some(row) = row else { return Ok(None) };
        let requirement: String = row.try_get("requirement")?;
        let settlement: String = row.try_get("settlement")?;
        Ok(Some(SettlementRecord::from_parts(
            PaymentKey::from_stored(row.try_get::<String, _>("payment_key")?),
            row.try_get("fingerprint")?,
            row.try_get("resource")?,
            serde_json::from_str(&requirement).map_err(|e| corrupt("settlement requirement", e))?,
            serde_json::from_str(&settlement).map_err(|e| corrupt("settlement", e))?,
        )))
    }

    /// Keeps the first record of a payment: a later save of the same key changes nothing,
    /// whichever instance makes it.
    pub(in crate::storage) async fn save_settlement(
        &self,
        record: &SettlementRecord,
        now: i64,
    ) -> Result<(), StorageError> {
        let requirement =
            serde_json::to_string(&record.requirement).map_err(|e| corrupt("requirement", e))?;
        let settlement =
            serde_json::to_string(&record.settlement).map_err(|e| corrupt("settlement", e))?;
        sqlx::query(
            "INSERT INTO settlements (payment_key, fingerprint, resource, requirement, settlement, created) \
             VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (payment_key) DO NOTHING",
        )
        .bind(record.key.as_str())
        .bind(&record.fingerprint)
        .bind(&record.resource)
        .bind(requirement)
        .bind(settlement)
        .bind(now)
        .execute(&self.pool)
        .await?;
        Ok(())
    }
}
