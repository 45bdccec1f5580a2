//! What browsers see on the paid route: CORS for a page on another origin (preflight 200, the
//! origin allowed on 402, 400 and 200, the payment headers exposed), the origin list narrowing
//! it, and the HTML paywall page for a navigation while every other client keeps the JSON 402.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use tower_x402_sandbox::{SandboxFacilitator, SandboxWallet};

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
        let challenge: tower_x402::proto::PaymentRequired =
            tower_x402::proto::header::decode(value.unwrap().as_bytes()).unwrap();
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
