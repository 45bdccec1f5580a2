//! Two stores on one database, as two instances behind one origin would run: what one sells,
//! the other honours (a later retry of the payment included), and both report the same
//! standing. Copies of one payment presented to several instances at the same moment are in
//! `multi_instance` (real processes).

use std::sync::Arc;

use axum::http::StatusCode;
use tower_x402_sandbox::{SandboxFacilitator, SandboxWallet};
use x402_store::storage::{Mode, NewOrder, Order, Recorded, Store};

use super::support::{RECEIPT, Shop, TAX, database, first_file_path, passport_of};

async fn a_passport_sold_by_one_store_works_on_the_other_and_both_report_one_standing() {
    let shared = Arc::new(database().await);
    let facilitator = SandboxFacilitator::new();
    let first = Shop::open_in(shared.clone(), facilitator.clone(), false, None).await;
    let second = Shop::open_in(shared, facilitator.clone(), false, None).await;

    let wallet = SandboxWallet::random();
    let signature = first.sign(&wallet, TAX).await;
    let bought = first.present(TAX, &signature, None).await;
    assert_eq!(bought.status, StatusCode::OK, "{}", bought.text);
    let id = passport_of(&bought);

    // The buyer's retry reaches the other instance: answered from the shared settlement record.
    let retry = second.present(TAX, &signature, None).await;
    assert_eq!(retry.status, StatusCode::OK, "{}", retry.text);
    assert_eq!(retry.json["replayed"], true);
    assert_eq!(retry.json["passport"], bought.json["passport"]);
    assert_eq!(facilitator.settlement_count(), 1);

    let verified = second.get(&format!("/api/passport/{id}"), &[]).await;
    assert_eq!(verified.status, StatusCode::OK, "{}", verified.text);
    assert_eq!(verified.json["passport"], bought.json["passport"]);
    let download = second.get(&first_file_path(&bought), &[]).await;
    assert_eq!(download.status, StatusCode::OK, "{}", download.text);

    // Traffic on both; each flushes its own increments, neither overwrites the other's.
    second.buy(&wallet, RECEIPT, None).await;
    first.state.standing.record_retrieved();
    second.state.standing.record_retrieved();
    second.state.standing.record_retrieved();
    // Each instance flushes on its own schedule; once both have, either one reads it all.
    first.state.standing.flush().await.unwrap();
    second.state.standing.flush().await.unwrap();
    let from_first = first.state.standing.snapshot().await.unwrap();
    let from_second = second.state.standing.snapshot().await.unwrap();
    assert_eq!(from_first, from_second);
    assert_eq!(from_first.live("retrieved"), Some(3));
    // Two challenges served (one per signed purchase), three paid attempts (two sales, one retry).
    assert_eq!(from_first.live("considered"), Some(2));
    assert_eq!(from_first.live("selected"), Some(3));
    assert_eq!(from_first.live("purchased"), Some(2));
    assert_eq!(from_first.live("used"), Some(1));
    assert_eq!(from_first.live("returned"), Some(1));
}

fn order(passport: &str, payment_key: &str) -> Order {
    Order {
        passport: passport.to_owned(),
        sku: RECEIPT.to_owned(),
        resource: format!("http://127.0.0.1:4020/api/x402/{RECEIPT}"),
        payer: None,
        network: "eip155:8453".to_owned(),
        transaction: "0x01".to_owned(),
        amount: "1.00".parse().unwrap(),
        payment_key: payment_key.to_owned(),
        demo: false,
        issued: 1_788_868_800,
        referral: None,
    }
}

async fn concurrent_writers_on_one_database_add_up_and_make_one_order() {
    let database = database().await;
    let handles = [
        Store::open(&database.url).await.unwrap(),
        Store::open(&database.url).await.unwrap(),
    ];

    // 2 handles × 25 flushes of (+1 retrieved, +2 considered), all at once.
    let mut flushes = tokio::task::JoinSet::new();
    for round in 0..50 {
        let store = handles[round % 2].clone();
        flushes.spawn(async move {
            store
                .add_to_counters(&[("retrieved", Mode::Live, 1), ("considered", Mode::Live, 2)])
                .await
        });
    }
    while let Some(flushed) = flushes.join_next().await {
        flushed.unwrap().unwrap();
    }
    let counters = handles[1].counters().await.unwrap();
    let value = |stage: &str| {
        counters
            .iter()
            .find(|counter| counter.stage == stage && counter.mode == Mode::Live)
            .map(|counter| counter.value)
    };
    assert_eq!(
        (value("retrieved"), value("considered")),
        (Some(50), Some(100))
    );

    // The same payment recorded through both handles at once, each copy under its own Passport:
    // one order, and only its own grant (the other copies' Passports are never issued).
    let orders = (0..8).map(|n| {
        let store = handles[n % 2].clone();
        let new = NewOrder {
            order: order(&format!("pp_{n}"), "one-payment"),
            secret_hash: format!("hash-{n}"),
        };
        tokio::spawn(async move { store.record_order(&new).await })
    });
    let mut created = Vec::new();
    let mut answered = std::collections::BTreeSet::new();
    for recorded in all_recorded(orders).await {
        if let Recorded::Created(order) = &recorded {
            created.push(order.passport.clone());
        }
        answered.insert(recorded.into_order().passport);
    }
    assert_eq!(created.len(), 1, "{created:?}");
    assert_eq!(
        answered,
        [created[0].clone()].into(),
        "every copy got the one order"
    );
    let rows = handles[0].row_counts().await.unwrap();
    assert_eq!((rows["orders"], rows["fulfillment_grants"]), (1, 1));
    let winner: usize = created[0]["pp_".len()..].parse().unwrap();
    for n in 0..8 {
        assert_eq!(
            handles[0]
                .grant_matches(&created[0], &format!("hash-{n}"))
                .await
                .unwrap(),
            n == winner,
            "hash-{n}"
        );
    }
}

/// Awaits every spawned write and unwraps it.
async fn all_recorded(
    tasks: impl Iterator<
        Item = tokio::task::JoinHandle<Result<Recorded, x402_store::storage::StorageError>>,
    >,
) -> Vec<Recorded> {
    let mut recorded = Vec::new();
    for task in tasks.collect::<Vec<_>>() {
        recorded.push(task.await.unwrap().unwrap());
    }
    recorded
}

super::support::on_both_backends!(
    a_passport_sold_by_one_store_works_on_the_other_and_both_report_one_standing,
    concurrent_writers_on_one_database_add_up_and_make_one_order,
);
