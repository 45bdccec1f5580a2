//! The storage layer: transactions, idempotent orders, settlement records.

use std::sync::Arc;

use tower_x402::settlement::{
    LedgerEntry, PaymentKey, PaymentState, SettlementIntent, SettlementRecord,
    SettlementStore as _, check_conformance,
};
use x402_wire::FacilitatorRequest;
use x402_wire::{
    AtomicAmount, Network, PaymentPayload, PaymentRequirements, SettleResponse, X402Version,
};

use x402_store::storage::{NewOrder, Order, Recorded, Referral, Store};

use super::support::{TestDatabase, database_at};

/// A fresh store on the test's backend (a SQLite file two missing directories deep).
async fn temp_store() -> (TestDatabase, Store, String) {
    let database = database_at(&["nested", "deeper", "store.db"]).await;
    let store = Store::open(&database.url).await.unwrap();
    let url = database.url.clone();
    (database, store, url)
}

fn order(passport: &str, payment_key: &str) -> Order {
    Order {
        passport: passport.to_owned(),
        sku: "store-rail-receipt".to_owned(),
        resource: "http://127.0.0.1:4020/api/x402/store-rail-receipt".to_owned(),
        payer: Some("0xAbC0000000000000000000000000000000000001".to_owned()),
        network: "eip155:8453".to_owned(),
        transaction: "0x01".to_owned(),
        amount: "1.00".parse().unwrap(),
        payment_key: payment_key.to_owned(),
        demo: false,
        issued: 1_788_868_800,
        referral: Some(Referral {
            cited: "pp_AAAAAAAAAAAAAAAAAAAAAA".to_owned(),
            counted: false,
            reason: "unknown_passport".to_owned(),
        }),
    }
}

async fn a_failure_midway_leaves_no_partial_rows() {
    let (_dir, store, _) = temp_store().await;
    let first = NewOrder {
        order: order("pp_first", "key-1"),
        secret_hash: "hash-1".to_owned(),
    };
    assert!(matches!(
        store.record_order(&first).await.unwrap(),
        Recorded::Created(_)
    ));
    let before = store.row_counts().await.unwrap();
    assert_eq!(
        (
            before["orders"],
            before["fulfillment_grants"],
            before["referrals"]
        ),
        (1, 1, 1)
    );

    // The order row goes in, then the grant collides with the first order's: all rolled back.
    let clash = NewOrder {
        order: order("pp_second", "key-2"),
        secret_hash: "hash-1".to_owned(),
    };
    let error = store.record_order(&clash).await.unwrap_err();
    assert!(error.is_unique_violation(), "{error}");
    assert_eq!(store.row_counts().await.unwrap(), before);
    assert_eq!(store.order_by_passport("pp_second").await.unwrap(), None);
    assert_eq!(store.order_by_payment_key("key-2").await.unwrap(), None);
}

/// Two copies of one payment that both found no order, generated their own Passports and
/// reached the write one after the other (the interleaving of copies on several instances):
/// the second writes nothing, and the key derived for its Passport, which is never issued,
/// is filed nowhere.
async fn one_payment_makes_one_order() {
    let (_dir, store, _) = temp_store().await;
    let first = NewOrder {
        order: order("pp_first", "key-1"),
        secret_hash: "hash-1".to_owned(),
    };
    let created = store.record_order(&first).await.unwrap();
    let before = store.row_counts().await.unwrap();
    let mut loser = order("pp_other", "key-1");
    loser.referral = None;
    let again = NewOrder {
        order: loser,
        secret_hash: "hash-2".to_owned(),
    };
    let existing = store.record_order(&again).await.unwrap();
    assert_eq!(existing, Recorded::Existing(created.into_order()));
    let rows = store.row_counts().await.unwrap();
    assert_eq!(rows, before, "the second copy wrote nothing");
    assert_eq!(
        (
            rows["orders"],
            rows["fulfillment_grants"],
            rows["referrals"]
        ),
        (1, 1, 1)
    );
    assert!(store.grant_matches("pp_first", "hash-1").await.unwrap());
    assert!(!store.grant_matches("pp_first", "hash-2").await.unwrap());
    assert!(!store.grant_matches("pp_other", "hash-2").await.unwrap());
    assert_eq!(store.order_by_passport("pp_other").await.unwrap(), None);
}

/// A key the order's Passport derives under another secret is added to that order once; a
/// hash already granted to another order is refused and changes nothing.
async fn a_grant_is_added_once_and_only_to_its_order() {
    let (_dir, store, _) = temp_store().await;
    for (passport, key, hash) in [
        ("pp_first", "key-1", "hash-1"),
        ("pp_second", "key-2", "hash-2"),
    ] {
        let new = NewOrder {
            order: order(passport, key),
            secret_hash: hash.to_owned(),
        };
        store.record_order(&new).await.unwrap();
    }
    store.add_grant("pp_first", "hash-rotated").await.unwrap();
    store.add_grant("pp_first", "hash-rotated").await.unwrap();
    store.add_grant("pp_first", "hash-1").await.unwrap();
    assert_eq!(store.row_counts().await.unwrap()["fulfillment_grants"], 3);
    assert!(
        store
            .grant_matches("pp_first", "hash-rotated")
            .await
            .unwrap()
    );

    let before = store.row_counts().await.unwrap();
    let error = store.add_grant("pp_first", "hash-2").await.unwrap_err();
    assert!(error.to_string().contains("another order"), "{error}");
    assert_eq!(store.row_counts().await.unwrap(), before);
    assert!(!store.grant_matches("pp_first", "hash-2").await.unwrap());
    assert!(store.grant_matches("pp_second", "hash-2").await.unwrap());
}

async fn orders_read_back_exactly() {
    let (_dir, store, url) = temp_store().await;
    let new = NewOrder {
        order: order("pp_first", "key-1"),
        secret_hash: "hash-1".to_owned(),
    };
    store.record_order(&new).await.unwrap();
    drop(store);
    let reopened = Store::open(&url).await.unwrap();
    assert_eq!(
        reopened.order_by_passport("pp_first").await.unwrap(),
        Some(new.order.clone())
    );
    let mut plain = new.order.clone();
    plain.passport = "pp_plain".to_owned();
    plain.payment_key = "key-plain".to_owned();
    plain.referral = None;
    plain.payer = None;
    let recorded = reopened
        .record_order(&NewOrder {
            order: plain.clone(),
            secret_hash: "hash-plain".to_owned(),
        })
        .await
        .unwrap();
    assert_eq!(recorded, Recorded::Created(plain.clone()));
    assert_eq!(
        reopened.order_by_payment_key("key-plain").await.unwrap(),
        Some(plain)
    );
}

fn settlement_record(nonce: &str, resource: &str, transaction: &str) -> SettlementRecord {
    let payload = payment(nonce);
    let requirement = payload.accepted.clone();
    let settlement = SettleResponse {
        success: true,
        error_reason: None,
        error_message: None,
        payer: Some("0x857b06519E91e3A54538791bDbb0E22373e36b66".to_owned()),
        transaction: transaction.to_owned(),
        network: Network::BASE,
        amount: Some(AtomicAmount(1_000_000)),
        extensions: None,
        extra: None,
    };
    SettlementRecord::new(&payload, resource, requirement, settlement)
}

fn payment(nonce: &str) -> PaymentPayload {
    let requirement = PaymentRequirements {
        scheme: "exact".to_owned(),
        network: Network::BASE,
        amount: AtomicAmount(1_000_000),
        asset: "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913".to_owned(),
        pay_to: "0x209693Bc6afc0C5328bA36FaF03C514EF312287C".to_owned(),
        max_timeout_seconds: 300,
        extra: None,
    };
    PaymentPayload {
        x402_version: X402Version::V2,
        resource: None,
        accepted: requirement.clone(),
        payload: serde_json::value::to_raw_value(&serde_json::json!({
            "signature": "0x00",
            "authorization": {
                "from": "0x857b06519E91e3A54538791bDbb0E22373e36b66",
                "to": requirement.pay_to,
                "value": "1000000",
                "validAfter": "0",
                "validBefore": "9999999999",
                "nonce": nonce,
            }
        }))
        .expect("a JSON payload"),
        extensions: None,
    }
}

async fn the_ledger_meets_the_settlement_store_contract() {
    let (_dir, store, url) = temp_store().await;
    check_conformance(Arc::new(store)).await;
    // Twice on the same database, as a second instance would.
    check_conformance(Arc::new(Store::open(&url).await.unwrap())).await;
}

async fn ledger_entries_survive_reopening_and_in_doubt_payments_are_listed() {
    let (_dir, store, url) = temp_store().await;
    let record = settlement_record("0xaa", "http://127.0.0.1:4020/api/x402/a", "0x01");
    let settled = PaymentState::Settled {
        record: record.clone(),
    };
    assert_eq!(store.load(&record.key).await.unwrap(), None);
    assert!(store.insert(&record.key, &settled).await.unwrap());
    let other = settlement_record("0xbb", "http://127.0.0.1:4020/api/x402/b", "0x02");
    let request = FacilitatorRequest::new(payment("0xbb"), other.requirement.clone());
    let doubt = PaymentState::InDoubt {
        intent: SettlementIntent::new(other.resource.clone(), request),
        since: 1,
        reason: "facilitator /settle answered HTTP 504".to_owned(),
    };
    assert!(store.insert(&other.key, &doubt).await.unwrap());
    drop(store);

    let reopened = Store::open(&url).await.unwrap();
    assert_eq!(
        reopened.load(&record.key).await.unwrap(),
        Some(LedgerEntry::new(settled, 1))
    );
    assert_eq!(
        reopened.payments_in_doubt().await.unwrap(),
        [(other.key.as_str().to_owned(), doubt)]
    );
    assert_eq!(
        reopened
            .load(&PaymentKey::from_stored("id:nothing"))
            .await
            .unwrap(),
        None
    );
}

#[tokio::test]
async fn in_memory_databases_and_bad_urls() {
    let store = Store::open("sqlite::memory:").await.unwrap();
    let new = NewOrder {
        order: order("pp_first", "key-1"),
        secret_hash: "hash-1".to_owned(),
    };
    store.record_order(&new).await.unwrap();
    assert_eq!(store.row_counts().await.unwrap()["orders"], 1);
    check_conformance(Arc::new(store)).await;
    assert!(Store::open("mysql://127.0.0.1/store").await.is_err());
    // A PostgreSQL URL with no server behind it fails to open rather than falling back.
    assert!(
        Store::open("postgres://postgres@127.0.0.1:1/store")
            .await
            .is_err()
    );
}

super::support::on_both_backends!(
    a_failure_midway_leaves_no_partial_rows,
    one_payment_makes_one_order,
    a_grant_is_added_once_and_only_to_its_order,
    orders_read_back_exactly,
    the_ledger_meets_the_settlement_store_contract,
    ledger_entries_survive_reopening_and_in_doubt_payments_are_listed,
);

/// Two instances writing one payment's order at the same moment on PostgreSQL, interleaved
/// deterministically: the first has inserted its order and grant but not committed, so the
/// second reads no order, and its insert waits on the payment's unique key; when the first
/// commits, that insert fails and the retry finds the first order. The retry writes nothing:
/// the second writer's key was derived for a Passport that is never issued.
#[tokio::test]
async fn on_postgres_the_writer_that_waited_for_the_first_files_no_grant() {
    super::postgres_server::require();
    let url = super::postgres_server::fresh_database().await;
    let store = Store::open(&url).await.unwrap();
    let pool = sqlx::PgPool::connect(&url).await.unwrap();
    let winner = order("pp_first", "key-1");

    let mut first = pool.begin().await.unwrap();
    sqlx::query(
        "INSERT INTO orders (passport, sku, resource, payer, payer_norm, network, tx, \
         amount_micros, payment_key, demo, issued) \
         VALUES ($1, $2, $3, $4, lower($4), $5, $6, $7, $8, $9, $10)",
    )
    .bind(&winner.passport)
    .bind(&winner.sku)
    .bind(&winner.resource)
    .bind(&winner.payer)
    .bind(&winner.network)
    .bind(&winner.transaction)
    .bind(i64::try_from(winner.amount.micros()).unwrap())
    .bind(&winner.payment_key)
    .bind(winner.demo)
    .bind(winner.issued)
    .execute(&mut *first)
    .await
    .unwrap();
    sqlx::query("INSERT INTO fulfillment_grants (secret_hash, passport) VALUES ('hash-1', $1)")
        .bind(&winner.passport)
        .execute(&mut *first)
        .await
        .unwrap();

    let second = tokio::spawn({
        let store = store.clone();
        async move {
            store
                .record_order(&NewOrder {
                    order: order("pp_other", "key-1"),
                    secret_hash: "hash-2".to_owned(),
                })
                .await
        }
    });
    // The second writer's insert is waiting on the first's uncommitted row.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let waiting: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM pg_stat_activity \
             WHERE datname = current_database() AND wait_event_type = 'Lock'",
        )
        .fetch_one(&pool)
        .await
        .unwrap();
        if waiting == 1 {
            break;
        }
        assert!(!second.is_finished(), "{:?}", second.await);
        assert!(
            std::time::Instant::now() < deadline,
            "the second insert never waited"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    first.commit().await.unwrap();

    let recorded = second.await.unwrap().unwrap();
    let mut stored = winner.clone();
    stored.referral = None;
    assert_eq!(recorded, Recorded::Existing(stored));
    let rows = store.row_counts().await.unwrap();
    assert_eq!(
        (
            rows["orders"],
            rows["fulfillment_grants"],
            rows["referrals"]
        ),
        (1, 1, 0)
    );
    assert!(store.grant_matches("pp_first", "hash-1").await.unwrap());
    assert!(!store.grant_matches("pp_first", "hash-2").await.unwrap());
    assert_eq!(store.order_by_passport("pp_other").await.unwrap(), None);
}

/// The crate's PostgreSQL ledger on its own, as an application using only the layer would set it
/// up: three instances migrating at once, then the contract.
#[tokio::test]
async fn the_postgres_settlement_store_meets_the_contract() {
    use tower_x402_postgres::PostgresSettlementStore;

    super::postgres_server::require();
    let url = super::postgres_server::fresh_database().await;
    let starting: Vec<_> = (0..3)
        .map(|_| {
            let url = url.clone();
            tokio::spawn(async move {
                let pool = sqlx::PgPool::connect(&url).await.unwrap();
                tower_x402_postgres::migrate(&pool).await.unwrap();
                PostgresSettlementStore::new(pool)
            })
        })
        .collect();
    let mut stores = Vec::new();
    for instance in starting {
        stores.push(instance.await.unwrap());
    }
    for store in &stores {
        check_conformance(Arc::new(store.clone())).await;
    }
    // The contract's sample entries include payments in doubt and settling: listed, nothing else.
    let unsettled = stores[0].unsettled().await.unwrap();
    assert!(!unsettled.is_empty());
    assert!(
        unsettled
            .iter()
            .all(|(_, state)| matches!(state.phase(), "in_doubt" | "settling")),
        "{unsettled:?}"
    );
}
