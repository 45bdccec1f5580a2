//! A restarted store (new state, same SQLite file) remembers everything.

use axum::http::StatusCode;
use tower_x402_sandbox::SandboxWallet;

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

super::support::on_both_backends!(passports_standing_and_settlements_survive_a_restart,);
