//! The paid route: unknown products get a 404 without a challenge, every spelling of a known
//! product gets its 402, and no path variant is ever served unpaid.

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};

use std::sync::Arc;

use tower_x402_sandbox::SandboxWallet;
use x402_wire::header;

use super::support::{Counting, RECEIPT, TestStore, signature_header, store, store_with};

async fn unknown_sku_is_404_json_without_a_challenge() {
    let store = store().await;
    for path in [
        "/api/x402/store-nothing",
        "/api/x402/rail-receipt",
        "/api/x402/STORE-RAIL-RECEIPT",
    ] {
        let answer = store.get(path).await;
        assert_eq!(answer.status, StatusCode::NOT_FOUND, "{path}");
        assert!(answer.header("payment-required").is_none(), "{path}");
        assert!(
            answer.json["error"]
                .as_str()
                .unwrap()
                .contains("unknown SKU"),
            "{path}"
        );
        assert!(
            answer
                .header("content-type")
                .unwrap()
                .starts_with("application/json")
        );
    }
}

async fn percent_encoded_spellings_of_a_known_slug_are_priced() {
    let store = store().await;
    for path in [
        "/api/x402/store-rail%2Dreceipt",
        "/api/x402/%73tore-rail-receipt",
        "/api/x402/%73%74%6F%72%65%2D%72%61%69%6C%2D%72%65%63%65%69%70%74",
        "/api/x402/store-rail-receipt?utm=1",
    ] {
        let answer = store.get(path).await;
        assert_eq!(answer.status, StatusCode::PAYMENT_REQUIRED, "{path}");
        assert_eq!(
            answer.challenge()["resource"]["url"],
            "http://127.0.0.1:4020/api/x402/store-rail-receipt",
            "{path}"
        );
    }
}

async fn path_variants_are_never_served_unpaid() {
    let store = store().await;
    for path in [
        "/api/x402/store-rail-receipt/",
        "/api/x402//store-rail-receipt",
        "//api/x402/store-rail-receipt",
        "/api/x402/store-rail-receipt%2F",
        "/api/x402/store-rail-receipt%2Fextra",
        "/api/x402/..%2Fstore-rail-receipt",
        "/api/x402/../x402/store-rail-receipt",
        "/api/x402/%2E%2E",
        "/api/x402/store-rail-receipt%00",
        "/api/x402/%FF",
        "/api/x402/",
        "/api/x402",
    ] {
        let answer = store.get(path).await;
        assert_eq!(
            answer.status,
            StatusCode::NOT_FOUND,
            "{path}: {}",
            answer.text
        );
        assert!(answer.header("payment-required").is_none(), "{path}");
    }
}

async fn a_body_on_the_get_never_blocks_the_402() {
    let store = store().await;
    for body in [
        Vec::new(),
        b"{\"not\":\"read\"}".to_vec(),
        vec![b'x'; 1024 * 1024],
    ] {
        let request = Request::get("/api/x402/store-rail-receipt")
            .header("content-type", "application/json")
            .body(Body::from(body))
            .unwrap();
        assert_eq!(
            store.send(request).await.status,
            StatusCode::PAYMENT_REQUIRED
        );
    }
}

async fn other_methods_are_405_and_head_is_challenged() {
    let store = store().await;
    for method in [Method::POST, Method::PUT, Method::DELETE, Method::PATCH] {
        let request = Request::builder()
            .method(method.clone())
            .uri("/api/x402/store-rail-receipt")
            .body(Body::empty())
            .unwrap();
        let answer = store.send(request).await;
        assert_eq!(answer.status, StatusCode::METHOD_NOT_ALLOWED, "{method}");
        assert!(answer.header("payment-required").is_none(), "{method}");
    }
    let head = Request::head("/api/x402/store-rail-receipt")
        .body(Body::empty())
        .unwrap();
    assert_eq!(store.send(head).await.status, StatusCode::PAYMENT_REQUIRED);
}

async fn a_garbage_payment_is_refused_not_served() {
    let store = store().await;
    let request = Request::get("/api/x402/store-rail-receipt")
        .header("payment-signature", "bm90IGEgcGF5bWVudA==")
        .body(Body::empty())
        .unwrap();
    let answer = store.send(request).await;
    assert!(answer.status.is_client_error(), "{}", answer.status);
    assert_ne!(answer.status, StatusCode::OK);
}

/// A fresh signature for `slug` from the store's 402.
async fn signature_for(store: &TestStore, slug: &str) -> String {
    let answer = store.get(&format!("/api/x402/{slug}")).await;
    let required = header::decode(answer.headers["payment-required"].as_bytes()).unwrap();
    signature_header(&SandboxWallet::random(), &required)
}

async fn a_signed_head_is_challenged_and_creates_no_order() {
    let counting = Counting::default();
    let store = store_with(|_| {}, Arc::new(counting.clone())).await;
    let signature = signature_for(&store, RECEIPT).await;
    let head = Request::head(format!("/api/x402/{RECEIPT}"))
        .header("payment-signature", &signature)
        .body(Body::empty())
        .unwrap();
    let answer = store.send(head).await;
    assert_eq!(answer.status, StatusCode::PAYMENT_REQUIRED);
    assert!(answer.header("payment-required").is_some());
    assert_eq!(answer.header("cache-control"), Some("no-store"));
    assert!(answer.header("payment-response").is_none());
    assert_eq!(counting.calls(), 0, "a HEAD never reaches the facilitator");
    assert_eq!(counting.inner.settlement_count(), 0);
    let rows = store.state.store.row_counts().await.unwrap();
    for table in ["payment_ledger", "orders", "fulfillment_grants"] {
        assert_eq!(rows[table], 0, "{table}: {rows:?}");
    }
    // The same signature still buys the product with a GET afterwards.
    let get = Request::get(format!("/api/x402/{RECEIPT}"))
        .header("payment-signature", &signature)
        .body(Body::empty())
        .unwrap();
    assert_eq!(store.send(get).await.status, StatusCode::OK);
}

async fn signed_requests_with_other_methods_never_reach_the_facilitator() {
    let counting = Counting::default();
    let store = store_with(|_| {}, Arc::new(counting.clone())).await;
    let signature = signature_for(&store, RECEIPT).await;
    for method in [Method::POST, Method::PUT, Method::DELETE, Method::PATCH] {
        let request = Request::builder()
            .method(method.clone())
            .uri(format!("/api/x402/{RECEIPT}"))
            .header("payment-signature", &signature)
            .body(Body::empty())
            .unwrap();
        let answer = store.send(request).await;
        assert_eq!(answer.status, StatusCode::METHOD_NOT_ALLOWED, "{method}");
    }
    assert_eq!(counting.calls(), 0);
    assert_eq!(counting.inner.settlement_count(), 0);
}

#[tokio::test]
async fn an_unusable_payment_header_gets_402_with_the_challenge_and_what_was_wrong() {
    use base64::Engine as _;
    let store = store().await;
    let b64 = |text: &str| base64::engine::general_purpose::STANDARD.encode(text);
    let cases = [
        ("not base64", "%%%".to_owned(), "not standard base64"),
        ("not JSON", b64("not a payment"), "not JSON"),
        ("wrong version", b64(r#"{"x402Version":1}"#), "x402Version"),
        ("too large", "A".repeat(20 * 1024), "over the"),
    ];
    for (case, value, expected) in cases {
        let request = Request::get(format!("/api/x402/{RECEIPT}"))
            .header("payment-signature", value)
            .body(Body::empty())
            .unwrap();
        let answer = store.send(request).await;
        assert_eq!(answer.status, StatusCode::PAYMENT_REQUIRED, "{case}");
        assert!(answer.header("payment-required").is_some(), "{case}");
        let error = answer.challenge()["error"].as_str().unwrap().to_owned();
        assert!(
            error.contains("invalid PAYMENT-SIGNATURE header"),
            "{case}: {error}"
        );
        assert!(error.contains(expected), "{case}: {error}");
        assert_eq!(answer.json["error"], error.as_str(), "{case}");
        assert!(answer.json["accepts"].is_array(), "{case}");
    }
}

super::support::on_both_backends!(
    unknown_sku_is_404_json_without_a_challenge,
    percent_encoded_spellings_of_a_known_slug_are_priced,
    path_variants_are_never_served_unpaid,
    a_body_on_the_get_never_blocks_the_402,
    other_methods_are_405_and_head_is_challenged,
    a_garbage_payment_is_refused_not_served,
    a_signed_head_is_challenged_and_creates_no_order,
    signed_requests_with_other_methods_never_reach_the_facilitator,
);
