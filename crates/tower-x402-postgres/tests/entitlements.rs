//! Sign-in's entitlements in PostgreSQL against the `EntitlementStore` contract
//! (`tower_x402_siwx::check_conformance`), on a throwaway PostgreSQL server: two stores over two
//! pools stand for two instances sharing the database.

#[path = "../../../examples/store/tests/store/postgres_server.rs"]
#[allow(dead_code)]
mod postgres_server;

use std::sync::Arc;

use tower_x402_postgres::PostgresEntitlementStore;
use tower_x402_siwx::{EntitlementStore as _, check_conformance};

async fn pool(url: &str) -> sqlx::PgPool {
    sqlx::postgres::PgPoolOptions::new()
        .max_connections(8)
        .connect(url)
        .await
        .unwrap()
}

#[tokio::test]
async fn the_entitlement_store_conforms_on_every_instance() {
    postgres_server::require();
    let database = postgres_server::fresh_database().await;
    let (one, other) = (pool(&database).await, pool(&database).await);
    tower_x402_postgres::migrate(&one).await.unwrap();
    let (one, other) = (
        PostgresEntitlementStore::new(one),
        PostgresEntitlementStore::new(other),
    );
    check_conformance(Arc::new(one.clone())).await;
    check_conformance(Arc::new(other.clone())).await;

    // What one instance records and consumes, the other sees.
    let resource = "https://shop.example/report#amount=100000";
    let address = "0x209693bc6afc0c5328ba36faf03c514ef312287c";
    one.record_purchase(resource, address, 1_700_000_000)
        .await
        .unwrap();
    assert_eq!(
        other.last_purchase(resource, address).await.unwrap(),
        Some(1_700_000_000)
    );
    let far = 4_000_000_000;
    assert!(one.consume_nonce("shared-nonce", far).await.unwrap());
    assert!(
        !other.consume_nonce("shared-nonce", far).await.unwrap(),
        "a nonce consumed on one instance is used on every other"
    );
}

#[tokio::test]
async fn without_its_tables_the_store_answers_errors_not_absence() {
    postgres_server::require();
    let database = postgres_server::fresh_database().await;
    let store = PostgresEntitlementStore::new(pool(&database).await);
    assert!(
        store
            .last_purchase("https://shop.example/a", "0xab")
            .await
            .is_err(),
        "a missing table is a store error (sign-in refused with 503), never `not entitled`"
    );
    assert!(store.consume_nonce("n", 1).await.is_err());
}
