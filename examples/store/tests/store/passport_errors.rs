//! Malformed ids, keys and headers get clear 4xx JSON errors; nothing leaks.

use axum::http::StatusCode;
use tower_x402_sandbox::SandboxWallet;

use super::support::{RECEIPT, Shop, first_file_path, passport_of};
use x402_store::sales::fulfillment_key::FulfillmentKey;
use x402_store::sales::passport::PassportId;

fn assert_json_error(answer: &super::support::Answer, status: StatusCode) {
    assert_eq!(answer.status, status, "{}", answer.text);
    assert!(
        answer.json["error"].as_str().is_some_and(|e| !e.is_empty()),
        "{}",
        answer.text
    );
    assert!(
        answer.headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("application/json")
    );
}

async fn malformed_passport_ids_are_400_and_unknown_ones_404() {
    let shop = Shop::open(true).await;
    for bad in [
        "nope",
        "pp_short",
        "pp_AAAAAAAAAAAAAAAAAAAAAB",
        "pp_AAAAAAAAAAAAAAAAAAAA%2FA",
        "%00",
    ] {
        let answer = shop.get(&format!("/api/passport/{bad}"), &[]).await;
        assert_json_error(&answer, StatusCode::BAD_REQUEST);
    }
    let unknown = PassportId::generate();
    let answer = shop
        .get(
            &x402_store::sales::passport::verify_path(unknown.as_str()),
            &[],
        )
        .await;
    assert_json_error(&answer, StatusCode::NOT_FOUND);
}

async fn fulfillment_refuses_bad_input_without_telling_unknown_from_wrong() {
    let shop = Shop::open(true).await;
    let bought = shop.buy(&SandboxWallet::random(), RECEIPT, None).await;
    let id = passport_of(&bought);
    let file = first_file_path(&bought);
    let name = bought.json["fulfillment"][0]["name"]
        .as_str()
        .unwrap()
        .to_owned();
    let random_key = FulfillmentKey::generate();

    let malformed_id = shop
        .get(
            &format!("/api/fulfillment/pp_bad/{name}?key={}", random_key.as_str()),
            &[],
        )
        .await;
    assert_json_error(&malformed_id, StatusCode::BAD_REQUEST);

    let malformed_key = shop
        .get(&format!("/api/fulfillment/{id}/{name}?key=short"), &[])
        .await;
    assert_json_error(&malformed_key, StatusCode::BAD_REQUEST);

    let missing_key = shop
        .get(&format!("/api/fulfillment/{id}/{name}"), &[])
        .await;
    assert_json_error(&missing_key, StatusCode::FORBIDDEN);

    let wrong_key = shop
        .get(
            &format!("/api/fulfillment/{id}/{name}?key={}", random_key.as_str()),
            &[],
        )
        .await;
    assert_json_error(&wrong_key, StatusCode::FORBIDDEN);
    let unknown = PassportId::generate();
    let unknown_passport = shop
        .get(
            &format!(
                "/api/fulfillment/{}/{name}?key={}",
                unknown.as_str(),
                random_key.as_str()
            ),
            &[],
        )
        .await;
    assert_json_error(&unknown_passport, StatusCode::FORBIDDEN);
    assert_eq!(wrong_key.bytes, unknown_passport.bytes);

    // The right key on another Passport's id unlocks nothing either.
    let other = shop.buy(&SandboxWallet::random(), RECEIPT, None).await;
    let borrowed = file.replace(&id, &passport_of(&other));
    assert_json_error(&shop.get(&borrowed, &[]).await, StatusCode::FORBIDDEN);

    let missing_file = file.replace(&name, "nothing-here.md");
    assert_json_error(&shop.get(&missing_file, &[]).await, StatusCode::NOT_FOUND);

    // Nothing refused was counted as a download.
    assert_eq!(shop.state.store.row_counts().await.unwrap()["downloads"], 0);
}

async fn a_malformed_referrer_header_never_loses_the_sale() {
    let shop = Shop::open(false).await;
    for bad in [
        "not-a-passport",
        "pp_short",
        "/api/passport/",
        "https://elsewhere.example/",
    ] {
        let bought = shop.buy(&SandboxWallet::random(), RECEIPT, Some(bad)).await;
        let referral = &bought.json["referral"];
        assert_eq!(referral["counted"], false);
        assert_eq!(referral["reason"], "malformed", "{bad}");
        assert_eq!(referral["cited"], bad);
        assert!(
            referral["detail"]
                .as_str()
                .unwrap()
                .contains("not a Passport id")
        );
    }
    let report = shop.state.standing.snapshot().await.unwrap();
    assert_eq!(report.live("purchased"), Some(4));
    assert_eq!(report.live("referred"), Some(0));
}

async fn a_malformed_payment_signature_is_a_402_json_error_with_the_challenge() {
    let shop = Shop::open(true).await;
    for bad in ["%%%", "bm90IGpzb24=", "e30="] {
        let answer = shop.present(RECEIPT, bad, None).await;
        assert_json_error(&answer, StatusCode::PAYMENT_REQUIRED);
        assert!(answer.headers.contains_key("payment-required"), "{bad}");
    }
    assert_eq!(shop.facilitator.settlement_count(), 0);
    assert_eq!(shop.state.store.row_counts().await.unwrap()["orders"], 0);
}

super::support::on_both_backends!(
    malformed_passport_ids_are_400_and_unknown_ones_404,
    fulfillment_refuses_bad_input_without_telling_unknown_from_wrong,
    a_malformed_referrer_header_never_loses_the_sale,
    a_malformed_payment_signature_is_a_402_json_error_with_the_challenge,
);
