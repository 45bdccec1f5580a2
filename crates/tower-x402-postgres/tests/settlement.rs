//! The payment ledger in PostgreSQL against the `SettlementStore` contract
//! (`tower_x402::settlement::check_conformance`), on a throwaway PostgreSQL server, and
//! `migrate` run by several instances at once.

#[path = "../../../examples/store/tests/store/postgres_server.rs"]
#[allow(dead_code)]
mod postgres_server;

use std::sync::Arc;

use tower_x402::settlement::{PaymentKey, SettlementStore as _, check_conformance};
use tower_x402_postgres::PostgresSettlementStore;

#[tokio::test]
async fn the_ledger_conforms_and_reads_a_table_created_before_its_newer_columns() {
    postgres_server::require();
    let database = postgres_server::fresh_database().await;
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(8)
        .connect(&database)
        .await
        .unwrap();
    // A ledger created before the facilitator column: its rows stay readable.
    sqlx::raw_sql(
        "CREATE TABLE x402_payment_ledger (
            payment_key TEXT PRIMARY KEY NOT NULL,
            version     BIGINT NOT NULL CHECK (version >= 1),
            phase       TEXT NOT NULL,
            state       TEXT NOT NULL,
            updated     TIMESTAMPTZ NOT NULL DEFAULT now()
        );
        INSERT INTO x402_payment_ledger (payment_key, version, phase, state)
        VALUES ('old', 1, 'in_progress',
                '{\"phase\":\"in_progress\",\"owner\":\"o\",\"lease_until\":1,\"fingerprint\":\"f\"}');",
    )
    .execute(&pool)
    .await
    .unwrap();
    tower_x402_postgres::migrate(&pool).await.unwrap();
    tower_x402_postgres::migrate(&pool).await.unwrap();
    let store = PostgresSettlementStore::new(pool.clone());
    let old = store.load(&PaymentKey::from_stored("old")).await.unwrap();
    assert_eq!(
        old.map(|entry| entry.version),
        Some(1),
        "the old row is still read"
    );
    check_conformance(Arc::new(store)).await;
    // The request a payment came with has its own column, beside the state's JSON: NULL for the
    // row written before it and for payments being verified, the digest for the others.
    let rows: Vec<(String, Option<String>, String)> =
        sqlx::query_as("SELECT phase, request_digest, state FROM x402_payment_ledger")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert!(
        rows.iter().any(|(phase, ..)| phase == "in_doubt"),
        "{rows:?}"
    );
    for (phase, digest, state) in &rows {
        match phase.as_str() {
            "in_progress" => assert_eq!(digest, &None, "{state}"),
            _ => {
                let digest = digest
                    .as_deref()
                    .unwrap_or_else(|| panic!("{phase}: {state}"));
                assert!(digest.starts_with("http GET /"), "{digest}");
                assert!(
                    state.contains(&format!("\"request_digest\":{}", serde_json::json!(digest))),
                    "{state}"
                );
            }
        }
    }
}

#[tokio::test]
async fn instances_starting_at_once_migrate_one_schema() {
    postgres_server::require();
    let database = postgres_server::fresh_database().await;
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(8)
        .connect(&database)
        .await
        .unwrap();
    let starts: Vec<_> = (0..6)
        .map(|_| {
            let pool = pool.clone();
            tokio::spawn(async move { tower_x402_postgres::migrate(&pool).await })
        })
        .collect();
    for start in starts {
        start.await.unwrap().unwrap();
    }
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT table_name::text FROM information_schema.tables \
         WHERE table_schema = 'public' ORDER BY table_name",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(
        tables,
        [
            "x402_channels",
            "x402_entitlements",
            "x402_payment_ledger",
            "x402_siwx_nonces"
        ],
        "the ledger's, sign-in's and the channels' tables, whatever the features"
    );
    let columns: Vec<String> = sqlx::query_scalar(
        "SELECT column_name::text FROM information_schema.columns \
         WHERE table_name = 'x402_payment_ledger' ORDER BY ordinal_position",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(
        columns,
        [
            "payment_key",
            "version",
            "phase",
            "state",
            "updated",
            "facilitator",
            "request_digest"
        ]
    );
}
