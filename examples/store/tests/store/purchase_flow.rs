//! Buying: Passport, verification, fulfillment, retries and cross-SKU replays.

use axum::http::StatusCode;
use tower_x402_sandbox::SandboxWallet;
use x402_wire::{PAYMENT_RESPONSE, SettleResponse, header};

use super::support::{RECEIPT, STAMPS, Shop, TAX, first_file_path, passport_of};
use x402_store::sales::fulfillment_key::FulfillmentKey;
use x402_store::sales::passport::CITATION_FIELDS;

async fn a_purchase_issues_a_passport_that_verifies_and_unlocks_its_files() {
    let shop = Shop::open(true).await;
    let wallet = SandboxWallet::random();
    let bought = shop.buy(&wallet, RECEIPT, None).await;

    let passport = &bought.json["passport"];
    let fields: Vec<&str> = passport
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(fields, CITATION_FIELDS);
    let id = passport_of(&bought);
    assert!(id.starts_with("pp_") && id.len() == 25, "{id}");
    assert_eq!(passport["sku"], RECEIPT);
    assert_eq!(
        passport["resource"],
        format!("http://127.0.0.1:4020/api/x402/{RECEIPT}")
    );
    assert_eq!(passport["verify"], format!("/api/passport/{id}"));
    assert_eq!(passport["amountUsdc"], "1.00");
    assert_eq!(passport["demo"], true);
    let issued = passport["issued"].as_str().unwrap();
    assert!(
        issued.len() == 20 && issued.ends_with('Z') && issued.as_bytes()[10] == b'T',
        "{issued}"
    );
    assert_eq!(bought.json["status"], "demo");
    assert_eq!(bought.json["replayed"], false);
    assert_eq!(bought.json["referral"]["reason"], "none");
    assert_eq!(bought.json["referral"]["cite"]["value"], id.as_str());
    assert_eq!(bought.headers["cache-control"], "no-store");

    // The settlement in PAYMENT-RESPONSE is the one the Passport cites.
    let settled: SettleResponse =
        header::decode(bought.headers[PAYMENT_RESPONSE].as_bytes()).unwrap();
    assert_eq!(
        bought.json["settlement"]["transaction"],
        settled.transaction.as_str()
    );
    assert_eq!(shop.facilitator.settlement_count(), 1);

    let verified = shop.get(&format!("/api/passport/{id}"), &[]).await;
    assert_eq!(verified.status, StatusCode::OK);
    assert_eq!(verified.json["passport"], *passport);
    assert_eq!(verified.json["status"], "demo");
    // Public verification never links the citation to the payer's transaction.
    assert!(verified.json["settlement"].get("transaction").is_none());
    assert!(!verified.text.contains(settled.transaction.as_str()));
    assert_eq!(
        verified.json["settlement"]["network"],
        settled.network.as_str()
    );

    // The key unlocks the file, and shows its holder the transaction; it never appears in
    // verification.
    let file = first_file_path(&bought);
    let key = file.rsplit_once("key=").unwrap().1.to_owned();
    let holder = shop
        .get(&format!("/api/passport/{id}?key={key}"), &[])
        .await;
    assert_eq!(holder.status, StatusCode::OK);
    assert_eq!(
        holder.json["settlement"]["transaction"],
        settled.transaction.as_str()
    );
    assert_eq!(holder.headers["cache-control"], "private, no-store");
    assert!(!holder.text.contains(&key));
    let stranger = shop
        .get(
            &format!("/api/passport/{id}?key=EXAMPLE_KEY_NOT_A_SECRET000000000000000000A"),
            &[],
        )
        .await;
    assert_eq!(stranger.status, StatusCode::FORBIDDEN);
    assert!(!stranger.text.contains(settled.transaction.as_str()));
    assert!(!verified.text.contains(&key));
    let download = shop.get(&file, &[]).await;
    assert_eq!(download.status, StatusCode::OK);
    assert!(
        download.text.contains("sample deliverable"),
        "{}",
        download.text
    );
    assert!(download.text.contains(&id));
    assert_eq!(download.headers["cache-control"], "private, no-store");
    assert_eq!(download.headers["referrer-policy"], "no-referrer");

    // The Passport id alone, or with another key, unlocks nothing.
    let without_key = file.split_once('?').unwrap().0;
    let refused = shop.get(without_key, &[]).await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN);
    assert!(refused.json["error"].is_string());
    let other_key = format!("{without_key}?key={}", FulfillmentKey::generate().as_str());
    assert_eq!(
        shop.get(&other_key, &[]).await.status,
        StatusCode::FORBIDDEN
    );
}

async fn retrying_the_same_signature_returns_the_same_passport_without_a_second_settlement() {
    let shop = Shop::open(true).await;
    let wallet = SandboxWallet::random();
    let signature = shop.sign(&wallet, RECEIPT).await;

    let first = shop.present(RECEIPT, &signature, None).await;
    assert_eq!(first.status, StatusCode::OK, "{}", first.text);
    let second = shop.present(RECEIPT, &signature, None).await;
    assert_eq!(second.status, StatusCode::OK, "{}", second.text);

    assert_eq!(second.json["passport"], first.json["passport"]);
    assert_eq!(second.json["settlement"], first.json["settlement"]);
    assert_eq!(first.json["replayed"], false);
    assert_eq!(second.json["replayed"], true);
    assert_eq!(shop.facilitator.settlement_count(), 1);
    let rows = shop.state.store.row_counts().await.unwrap();
    assert_eq!(rows["orders"], 1);
    assert_eq!(rows["payment_ledger"], 1);

    // A re-delivery hands out the same key (derived from the store's secret) and adds no key.
    assert_eq!(first_file_path(&first), first_file_path(&second));
    assert_eq!(rows["fulfillment_grants"], 1);
    for _ in 0..5 {
        shop.present(RECEIPT, &signature, None).await;
    }
    let rows = shop.state.store.row_counts().await.unwrap();
    assert_eq!(rows["fulfillment_grants"], 1);
    assert_eq!(
        shop.get(&first_file_path(&first), &[]).await.status,
        StatusCode::OK
    );
}

async fn concurrent_retries_of_one_payment_make_one_order() {
    let shop = Shop::open(true).await;
    let wallet = SandboxWallet::random();
    let signature = shop.sign(&wallet, RECEIPT).await;
    let (a, b, c) = tokio::join!(
        shop.present(RECEIPT, &signature, None),
        shop.present(RECEIPT, &signature, None),
        shop.present(RECEIPT, &signature, None),
    );
    for answer in [&a, &b, &c] {
        assert_eq!(answer.status, StatusCode::OK, "{}", answer.text);
        assert_eq!(answer.json["passport"], a.json["passport"]);
    }
    assert_eq!(shop.facilitator.settlement_count(), 1);
    assert_eq!(shop.state.store.row_counts().await.unwrap()["orders"], 1);
}

async fn a_payment_settled_for_one_sku_is_refused_for_another() {
    let shop = Shop::open(true).await;
    let wallet = SandboxWallet::random();
    let signature = shop.sign(&wallet, TAX).await;
    let bought = shop.present(TAX, &signature, None).await;
    assert_eq!(bought.status, StatusCode::OK, "{}", bought.text);

    // Same price, same accept: only the settlement record tells the resources apart.
    let elsewhere = shop.present(STAMPS, &signature, None).await;
    assert_eq!(
        elsewhere.status,
        StatusCode::PAYMENT_REQUIRED,
        "{}",
        elsewhere.text
    );
    assert!(
        elsewhere.json["error"]
            .as_str()
            .unwrap()
            .contains("different resource")
    );
    assert_eq!(shop.facilitator.settlement_count(), 1);
    let rows = shop.state.store.row_counts().await.unwrap();
    assert_eq!(rows["orders"], 1);

    // The original SKU still answers the retry.
    let again = shop.present(TAX, &signature, None).await;
    assert_eq!(again.json["passport"], bought.json["passport"]);
}

async fn files_come_from_the_content_directory_when_it_has_the_sku() {
    let content = tempfile::tempdir().unwrap();
    let sku_dir = content.path().join(RECEIPT);
    std::fs::create_dir_all(&sku_dir).unwrap();
    std::fs::write(sku_dir.join("receipt.csv"), "rail,amount\nbase,1.00\n").unwrap();
    std::fs::write(sku_dir.join(".hidden"), "never served").unwrap();
    let database = std::sync::Arc::new(super::support::database().await);
    let shop = Shop::open_in(
        database,
        tower_x402_sandbox::SandboxFacilitator::new(),
        true,
        Some(content.path().to_owned()),
    )
    .await;
    let bought = shop.buy(&SandboxWallet::random(), RECEIPT, None).await;
    let files = bought.json["fulfillment"].as_array().unwrap();
    assert_eq!(files.len(), 1, "{files:?}");
    assert_eq!(files[0]["name"], "receipt.csv");
    let download = shop.get(&first_file_path(&bought), &[]).await;
    assert_eq!(download.status, StatusCode::OK);
    assert_eq!(download.text, "rail,amount\nbase,1.00\n");
    assert_eq!(download.headers["content-type"], "text/csv; charset=utf-8");

    // A name outside the listing is not served, whatever the key.
    let file = first_file_path(&bought);
    let hidden = file.replace("receipt.csv", ".hidden");
    assert_eq!(shop.get(&hidden, &[]).await.status, StatusCode::NOT_FOUND);
}

async fn a_replay_after_the_redelivery_window_is_gone_and_old_urls_keep_working() {
    let shop = Shop::open(true).await;
    let wallet = SandboxWallet::random();
    let signature = shop.sign(&wallet, RECEIPT).await;
    let first = shop.present(RECEIPT, &signature, None).await;
    assert_eq!(first.status, StatusCode::OK, "{}", first.text);

    // The same database, with a re-delivery window that has already closed.
    let closed = shop
        .sibling(|config| config.redelivery_window = std::time::Duration::ZERO)
        .await;
    let replay = closed.present(RECEIPT, &signature, None).await;
    assert_eq!(replay.status, StatusCode::GONE, "{}", replay.text);
    assert!(
        replay.json["error"]
            .as_str()
            .unwrap()
            .contains("re-delivery window")
    );
    assert!(replay.header("payment-required").is_none());
    assert!(!replay.text.contains("key="));
    assert_eq!(shop.facilitator.settlement_count(), 1);
    // What was delivered keeps working.
    assert_eq!(
        closed.get(&first_file_path(&first), &[]).await.status,
        StatusCode::OK
    );
}

super::support::on_both_backends!(
    a_purchase_issues_a_passport_that_verifies_and_unlocks_its_files,
    retrying_the_same_signature_returns_the_same_passport_without_a_second_settlement,
    concurrent_retries_of_one_payment_make_one_order,
    a_payment_settled_for_one_sku_is_refused_for_another,
    files_come_from_the_content_directory_when_it_has_the_sku,
    a_replay_after_the_redelivery_window_is_gone_and_old_urls_keep_working,
);
