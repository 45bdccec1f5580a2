//! What browsers see on the paid route: CORS for a page on another origin (preflight 200, the
//! origin allowed on 402, 400 and 200, the payment headers exposed), the origin list narrowing
//! it, the HTML paywall page for a navigation while every other client keeps the JSON 402, and
//! in Chromium the page titled by the product's name and its sign-in for a returning buyer.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use serde_json::{Value, json};
use tower_x402_sandbox::{SandboxFacilitator, SandboxWallet};

use super::browser_payments::{
    require_browser_tools, run_node, served_store, served_store_paying, signer,
};
use super::support::{Shop, store, store_with};

const PAID: &str = "/api/x402/store-rail-receipt";
const NAVIGATION: &str =
    "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,*/*;q=0.8";

fn preflight(origin: &str) -> Request<Body> {
    Request::options(PAID)
        .header("origin", origin)
        .header("access-control-request-method", "GET")
        .header(
            "access-control-request-headers",
            "access-control-expose-headers,payment-signature,x-referrer-passport",
        )
        .body(Body::empty())
        .unwrap()
}

#[tokio::test]
async fn preflight_for_a_payment_is_200_for_any_origin() {
    let store = store().await;
    let answer = store.send(preflight("https://shop.example")).await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(answer.header("access-control-allow-origin"), Some("*"));
    let allowed = answer
        .header("access-control-allow-headers")
        .unwrap()
        .to_ascii_lowercase();
    for name in [
        "payment-signature",
        "x-referrer-passport",
        "sign-in-with-x",
        "access-control-expose-headers",
    ] {
        assert!(allowed.contains(name), "{name} not in {allowed}");
    }
    assert!(
        answer
            .header("access-control-allow-methods")
            .unwrap()
            .contains("GET")
    );
}

#[tokio::test]
async fn challenge_bad_header_and_paid_answer_carry_the_origin() {
    let shop = Shop::open(true).await;
    let origin = [("origin", "https://shop.example")];
    let challenge = shop.get(PAID, &origin).await;
    assert_eq!(challenge.status, StatusCode::PAYMENT_REQUIRED);
    assert_eq!(challenge.header("access-control-allow-origin"), Some("*"));
    let exposed = challenge
        .header("access-control-expose-headers")
        .unwrap()
        .to_ascii_uppercase();
    assert!(exposed.contains("PAYMENT-REQUIRED") && exposed.contains("PAYMENT-RESPONSE"));

    let bad = shop
        .get(
            PAID,
            &[
                ("origin", "https://shop.example"),
                ("payment-signature", "not base64!"),
            ],
        )
        .await;
    // The store answers an unusable header 402 with the challenge, readable cross-origin too.
    assert_eq!(bad.status, StatusCode::PAYMENT_REQUIRED);
    assert_eq!(bad.header("access-control-allow-origin"), Some("*"));
    assert!(bad.header("payment-required").is_some());

    let wallet = SandboxWallet::random();
    let signature = shop.sign(&wallet, "store-rail-receipt").await;
    let paid = shop
        .get(
            PAID,
            &[
                ("origin", "https://shop.example"),
                ("payment-signature", &signature),
            ],
        )
        .await;
    assert_eq!(paid.status, StatusCode::OK, "{}", paid.text);
    assert_eq!(paid.header("access-control-allow-origin"), Some("*"));
    assert!(paid.header("payment-response").is_some());
}

#[tokio::test]
async fn configured_origins_narrow_who_may_pay() {
    let store = store_with(
        |c| c.cors_origins = vec!["https://shop.example".to_owned()],
        Arc::new(SandboxFacilitator::new()),
    )
    .await;
    let allowed = store.send(preflight("https://shop.example")).await;
    assert_eq!(
        allowed.header("access-control-allow-origin"),
        Some("https://shop.example")
    );
    let other = store.send(preflight("https://elsewhere.example")).await;
    assert_eq!(other.header("access-control-allow-origin"), None);
}

#[tokio::test]
async fn navigation_gets_the_page_other_clients_the_same_json() {
    let store = store().await;
    let plain = store.get(PAID).await;
    let page = store
        .send(
            Request::get(PAID)
                .header("accept", NAVIGATION)
                .body(Body::empty())
                .unwrap(),
        )
        .await;
    assert_eq!(page.status, StatusCode::PAYMENT_REQUIRED);
    assert_eq!(
        page.header("content-type"),
        Some("text/html; charset=utf-8")
    );
    assert_eq!(page.header("cache-control"), Some("no-store"));
    // The same challenge, but for the sign-in challenge each 402 issues afresh (its nonce).
    let without_sign_in = |value: Option<&str>| {
        let challenge: x402_wire::PaymentRequired =
            x402_wire::header::decode(value.unwrap().as_bytes()).unwrap();
        let mut challenge = serde_json::to_value(challenge).unwrap();
        let sign_in = challenge["extensions"]
            .as_object_mut()
            .unwrap()
            .remove("sign-in-with-x");
        assert!(sign_in.is_some_and(|s| s["info"]["nonce"].is_string()));
        challenge
    };
    assert_eq!(
        without_sign_in(page.header("payment-required")),
        without_sign_in(plain.header("payment-required"))
    );
    let policy = page.header("content-security-policy").unwrap();
    assert!(policy.starts_with("default-src 'none'; script-src 'sha256-"));
    assert!(page.text.contains("$0.01") || page.text.contains("USDC"));
    assert!(page.text.contains("demo mode"));
    assert!(page.bytes.len() < 30 * 1024, "{} bytes", page.bytes.len());

    for accept in [
        "*/*",
        "application/json",
        "application/json, text/html;q=0.5",
    ] {
        let json = store
            .send(
                Request::get(PAID)
                    .header("accept", accept)
                    .body(Body::empty())
                    .unwrap(),
            )
            .await;
        assert_eq!(json.status, StatusCode::PAYMENT_REQUIRED);
        assert_eq!(json.header("content-type"), Some("application/json"));
        let mut body = json.json.clone();
        let mut plain_body = plain.json.clone();
        for body in [&mut body, &mut plain_body] {
            body["extensions"]
                .as_object_mut()
                .unwrap()
                .remove("sign-in-with-x");
        }
        assert_eq!(body, plain_body, "{accept}");
        assert_eq!(
            without_sign_in(json.header("payment-required")),
            without_sign_in(plain.header("payment-required"))
        );
    }
}

/// The product the browser tests open, as the catalog names and describes it.
const RAIL_RECEIPT_NAME: &str = "Rail receipt";
const RAIL_RECEIPT_DESCRIPTION: &str =
    "A sample receipt record from the store's own x402 rail; the lowest-priced first probe.";

/// The paywall page's sign-in in Chromium (`run.mjs sign-in`) for a fresh wallet, which pays
/// on the page first when `buy_first`; what the page showed, and the facilitator it paid
/// through.
async fn sign_in_on_the_page(buy_first: bool) -> (Value, SandboxFacilitator) {
    require_browser_tools();
    let facilitator = SandboxFacilitator::new();
    let (_store, base) = served_store_paying(|_| {}, Arc::new(facilitator.clone())).await;
    let wallet = SandboxWallet::random();
    let address = wallet.address();
    let signer = signer(wallet).await;
    let found = run_node(
        "sign-in",
        &[
            ("STORE_URL", base),
            ("SIGNER_URL", format!("http://{signer}/sign")),
            ("WALLET_ADDRESS", address),
            ("BUY_FIRST", if buy_first { "1" } else { "0" }.to_owned()),
        ],
    )
    .await;
    assert_eq!(found["status"], 402, "{found}");
    assert_eq!(found["signInVisible"], true, "{found}");
    assert_eq!(found["heading"], RAIL_RECEIPT_NAME, "{found}");
    assert_eq!(found["lede"], RAIL_RECEIPT_DESCRIPTION, "{found}");
    assert_eq!(found["violations"], json!([]), "{found}");
    assert_eq!(found["dialogs"], json!([]), "{found}");
    (found, facilitator)
}

#[tokio::test]
async fn a_buyer_signs_in_on_the_page_and_gets_the_passport_without_paying_again() {
    let (found, facilitator) = sign_in_on_the_page(true).await;
    let paid = found["paidPassport"].as_str().unwrap();
    assert!(paid.starts_with("Passport: pp_"), "{found}");
    let signed_in = &found["signIn"];
    assert_eq!(signed_in["kind"], "done", "{found}");
    assert_eq!(
        signed_in["status"],
        "Signed in: here is what this wallet bought."
    );
    assert_eq!(signed_in["heading"], "Already yours", "{found}");
    assert_eq!(signed_in["passport"], paid, "the same Passport: {found}");
    assert!(
        !signed_in["links"].as_array().unwrap().is_empty(),
        "{found}"
    );
    // The purchase settled once; signing in called no settlement.
    assert_eq!(facilitator.settlement_count(), 1);
}

#[tokio::test]
async fn a_wallet_that_did_not_buy_is_told_so_and_can_still_pay() {
    let (found, facilitator) = sign_in_on_the_page(false).await;
    let refused = &found["signIn"];
    assert_eq!(refused["kind"], "error", "{found}");
    assert!(
        refused["status"]
            .as_str()
            .unwrap()
            .starts_with("This wallet has not bought this yet."),
        "{found}"
    );
    assert_eq!(refused["passport"], Value::Null, "{found}");
    assert_eq!(found["payVisible"], true, "{found}");
    assert!(
        found["paidPassport"]
            .as_str()
            .unwrap()
            .starts_with("Passport: pp_"),
        "{found}"
    );
    assert_eq!(found["paidStatus"], "Payment settled.", "{found}");
    assert_eq!(facilitator.settlement_count(), 1);
}

#[tokio::test]
async fn the_page_is_titled_by_the_product_name_above_its_description() {
    require_browser_tools();
    let (_store, base) = served_store(|_| {}).await;
    let found = run_node(
        "hostile",
        &[("PAGE_URL", format!("{base}/api/x402/store-rail-receipt"))],
    )
    .await;
    assert_eq!(found["status"], 402, "{found}");
    assert_eq!(
        found["title"],
        format!("Payment required — {RAIL_RECEIPT_NAME}"),
        "{found}"
    );
    assert_eq!(found["heading"], RAIL_RECEIPT_NAME, "{found}");
    assert_eq!(found["lede"], RAIL_RECEIPT_DESCRIPTION, "{found}");
    assert_eq!(found["pwned"], false, "{found}");
}
