//! The paid route: unknown products get a 404 without a challenge, every spelling of a known
//! product gets its 402, and no path variant is ever served unpaid.

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};

use super::support::store;

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

super::support::on_both_backends!(
    unknown_sku_is_404_json_without_a_challenge,
    percent_encoded_spellings_of_a_known_slug_are_priced,
    path_variants_are_never_served_unpaid,
    a_body_on_the_get_never_blocks_the_402,
    other_methods_are_405_and_head_is_challenged,
    a_garbage_payment_is_refused_not_served,
);
