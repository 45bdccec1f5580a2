//! Word of mouth: which citations count in `referred`.

use tower_x402_sandbox::SandboxWallet;

use super::support::{RECEIPT, Shop, TAX, passport_of};
use x402_store::sales::passport::PassportId;

fn referral(answer: &super::support::Answer) -> (bool, String) {
    let referral = &answer.json["referral"];
    (
        referral["counted"].as_bool().unwrap(),
        referral["reason"].as_str().unwrap().to_owned(),
    )
}

async fn another_buyers_live_passport_counts_in_every_accepted_form() {
    let shop = Shop::open(false).await;
    let first = shop.buy(&SandboxWallet::random(), RECEIPT, None).await;
    assert_eq!(first.json["passport"]["demo"], false);
    assert_eq!(first.json["status"], "live");
    let cited = passport_of(&first);

    let forms = [
        cited.clone(),
        format!("/api/passport/{cited}"),
        format!("https://shop.example/api/passport/{cited}"),
    ];
    for form in &forms {
        let bought = shop.buy(&SandboxWallet::random(), TAX, Some(form)).await;
        assert_eq!(referral(&bought), (true, "counted".to_owned()), "{form}");
        assert_eq!(bought.json["referral"]["cited"], cited.as_str());
    }
    let report = shop.state.standing.snapshot().await.unwrap();
    assert_eq!(report.live("referred"), Some(3));
    assert_eq!(report.demo("referred"), Some(0));
}

async fn a_self_citation_does_not_count() {
    let shop = Shop::open(false).await;
    let wallet = SandboxWallet::random();
    let first = shop.buy(&wallet, RECEIPT, None).await;
    let again = shop.buy(&wallet, TAX, Some(&passport_of(&first))).await;
    assert_eq!(referral(&again), (false, "self_citation".to_owned()));
    assert_eq!(
        shop.state
            .standing
            .snapshot()
            .await
            .unwrap()
            .live("referred"),
        Some(0)
    );
}

async fn an_unknown_passport_does_not_count() {
    let shop = Shop::open(false).await;
    let unknown = PassportId::generate();
    let bought = shop
        .buy(&SandboxWallet::random(), RECEIPT, Some(unknown.as_str()))
        .await;
    assert_eq!(referral(&bought), (false, "unknown_passport".to_owned()));
    assert_eq!(bought.json["referral"]["cited"], unknown.as_str());
    assert_eq!(
        shop.state
            .standing
            .snapshot()
            .await
            .unwrap()
            .live("referred"),
        Some(0)
    );
}

async fn demo_orders_never_count() {
    let shop = Shop::open(true).await;
    let first = shop.buy(&SandboxWallet::random(), RECEIPT, None).await;
    let second = shop
        .buy(&SandboxWallet::random(), TAX, Some(&passport_of(&first)))
        .await;
    assert_eq!(referral(&second), (false, "demo_order".to_owned()));
    let report = shop.state.standing.snapshot().await.unwrap();
    assert_eq!(report.live("referred"), Some(0));
    assert_eq!(report.demo("referred"), Some(0));
    assert_eq!(report.demo("purchased"), Some(2));
    assert_eq!(report.live("purchased"), Some(0));
}

async fn a_demo_passport_cited_in_a_live_store_does_not_count() {
    let demo_shop = Shop::open(true).await;
    let demo_passport = passport_of(&demo_shop.buy(&SandboxWallet::random(), RECEIPT, None).await);
    let live_shop = demo_shop.restart(false).await;

    let bought = live_shop
        .buy(&SandboxWallet::random(), TAX, Some(&demo_passport))
        .await;
    assert_eq!(referral(&bought), (false, "demo_passport".to_owned()));
    let report = live_shop.state.standing.snapshot().await.unwrap();
    assert_eq!(report.mode, "live");
    assert_eq!(report.live("purchased"), Some(1));
    assert_eq!(report.demo("purchased"), Some(1));
    assert_eq!(report.live("referred"), Some(0));
}

async fn a_retry_keeps_the_original_verdict() {
    let shop = Shop::open(false).await;
    let cited = passport_of(&shop.buy(&SandboxWallet::random(), RECEIPT, None).await);
    let wallet = SandboxWallet::random();
    let signature = shop.sign(&wallet, TAX).await;
    let first = shop.present(TAX, &signature, Some(&cited)).await;
    assert_eq!(referral(&first), (true, "counted".to_owned()));
    // The retry carries no header, yet reports the verdict recorded with the order.
    let retry = shop.present(TAX, &signature, None).await;
    assert_eq!(retry.json["referral"], first.json["referral"]);
    assert_eq!(
        shop.state
            .standing
            .snapshot()
            .await
            .unwrap()
            .live("referred"),
        Some(1)
    );
}

async fn two_citation_headers_are_malformed_and_the_sale_completes() {
    let shop = Shop::open(false).await;
    let cited = passport_of(&shop.buy(&SandboxWallet::random(), RECEIPT, None).await);
    let signature = shop.sign(&SandboxWallet::random(), TAX).await;
    let bought = shop
        .get(
            &format!("/api/x402/{TAX}"),
            &[
                ("payment-signature", &signature),
                ("x-referrer-passport", &cited),
                ("x-referrer-passport", &cited),
            ],
        )
        .await;
    assert_eq!(bought.status, 200, "{}", bought.text);
    assert_eq!(referral(&bought), (false, "malformed".to_owned()));
}

super::support::on_both_backends!(
    another_buyers_live_passport_counts_in_every_accepted_form,
    a_self_citation_does_not_count,
    an_unknown_passport_does_not_count,
    demo_orders_never_count,
    a_demo_passport_cited_in_a_live_store_does_not_count,
    a_retry_keeps_the_original_verdict,
    two_citation_headers_are_malformed_and_the_sale_completes,
);
