//! A restarted store (new state, same SQLite file) remembers everything.

use axum::http::StatusCode;
use tower_x402_sandbox::SandboxWallet;

use super::reliability;
use super::support::{RECEIPT, STAMPS, Shop, TAX, first_file_path, passport_of};

async fn passports_standing_and_settlements_survive_a_restart() {
    let shop = Shop::open(false).await;
    let wallet = SandboxWallet::random();
    let signature = shop.sign(&wallet, TAX).await;
    let bought = shop.present(TAX, &signature, None).await;
    assert_eq!(bought.status, StatusCode::OK, "{}", bought.text);
    let id = passport_of(&bought);
    shop.get(&first_file_path(&bought), &[]).await;
    shop.state.standing.set_indexed(4);
    shop.state.standing.record_retrieved();
    let before = shop.state.standing.snapshot().await.unwrap();
    let verified_before = shop.get(&format!("/api/passport/{id}"), &[]).await;

    let shop = shop.restart(false).await;

    let verified = shop.get(&format!("/api/passport/{id}"), &[]).await;
    assert_eq!(verified.status, StatusCode::OK);
    assert_eq!(verified.json, verified_before.json);
    assert_eq!(shop.state.standing.snapshot().await.unwrap(), before);

    // The old key still opens the file.
    assert_eq!(
        shop.get(&first_file_path(&bought), &[]).await.status,
        StatusCode::OK
    );

    // The old signature comes back from the settlement record: same Passport, no settlement.
    let retry = shop.present(TAX, &signature, None).await;
    assert_eq!(retry.status, StatusCode::OK, "{}", retry.text);
    assert_eq!(retry.json["passport"], bought.json["passport"]);
    assert_eq!(retry.json["replayed"], true);
    assert_eq!(shop.facilitator.settlement_count(), 1);

    // And it still cannot buy another SKU.
    let elsewhere = shop.present(STAMPS, &signature, None).await;
    assert_eq!(elsewhere.status, StatusCode::PAYMENT_REQUIRED);
    assert_eq!(shop.facilitator.settlement_count(), 1);
    assert_eq!(shop.state.store.row_counts().await.unwrap()["orders"], 1);

    // Counters keep growing from where they were.
    shop.buy(&wallet, RECEIPT, None).await;
    let after = shop.state.standing.snapshot().await.unwrap();
    assert_eq!(after.live("purchased"), Some(2));
    assert_eq!(after.live("returned"), Some(1));
    assert_eq!(after.live("indexed"), Some(4));
    assert_eq!(after.live("retrieved"), Some(1));
    assert!(after.live("considered").unwrap() > before.live("considered").unwrap());
}

/// Without `STORE_FULFILLMENT_SECRET`, the secret is generated once and kept in the database:
/// a re-delivery after a restart, or on another instance, hands out the same key and stores
/// none; an explicit secret takes its place.
async fn redelivery_hands_out_one_key_after_a_restart_and_on_another_instance() {
    let shop = Shop::open(false).await;
    let signature = shop.sign(&SandboxWallet::random(), RECEIPT).await;
    let bought = shop.present(RECEIPT, &signature, None).await;
    assert_eq!(bought.status, StatusCode::OK, "{}", bought.text);
    let file = first_file_path(&bought);

    let shop = shop.restart(false).await;
    let after_restart = shop.present(RECEIPT, &signature, None).await;
    assert_eq!(
        after_restart.status,
        StatusCode::OK,
        "{}",
        after_restart.text
    );
    assert_eq!(first_file_path(&after_restart), file);

    let other = shop.sibling(|_| {}).await;
    let elsewhere = other.present(RECEIPT, &signature, None).await;
    assert_eq!(elsewhere.status, StatusCode::OK, "{}", elsewhere.text);
    assert_eq!(first_file_path(&elsewhere), file);
    assert_eq!(other.get(&file, &[]).await.status, StatusCode::OK);
    let rows = shop.state.store.row_counts().await.unwrap();
    assert_eq!(rows["fulfillment_grants"], 1, "no key stored twice");
    let answers = [&bought, &after_restart, &elsewhere];
    let transfers = shop.facilitator.settlement_count();
    let row = reliability::Row {
        fault: "a settled payment presented again after a restart, then on another instance, \
                no `STORE_FULFILLMENT_SECRET`: the same fulfillment key each time, one stored"
            .to_owned(),
        mode: "before",
        client_sees: answers
            .iter()
            .map(|answer| answer.status.as_u16().to_string())
            .collect::<Vec<_>>()
            .join(" → "),
        inner_ran: answers.len(),
        transfers,
        delivered_unpaid: transfers == 0,
    };
    reliability::check("store-redelivery", &[row]);

    // A store given its own secret derives another key (one more grant); the old one still works.
    let rotated = shop
        .sibling(|config| config.fulfillment_secret = Some(vec![b'k'; 32]))
        .await;
    let after_rotation = rotated.present(RECEIPT, &signature, None).await;
    assert_eq!(after_rotation.status, StatusCode::OK);
    assert_ne!(first_file_path(&after_rotation), file);
    assert_eq!(rotated.get(&file, &[]).await.status, StatusCode::OK);
    let rows = shop.state.store.row_counts().await.unwrap();
    assert_eq!(rows["fulfillment_grants"], 2);
}

super::support::on_both_backends!(
    passports_standing_and_settlements_survive_a_restart,
    redelivery_hands_out_one_key_after_a_restart_and_on_another_instance,
);
