//! A price read asynchronously (`Price::later`) behaves as the same price given at once: the
//! same challenge bytes, the same paid delivery, free passing through, nothing sold refused.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use http::StatusCode;
use http::request::Parts;
use http_body_util::BodyExt;
use tower::{ServiceBuilder, ServiceExt};
use tower_x402::{Offer, Price, Pricing, SettlementMode, X402Layer};

/// A catalog whose answers take a while, as a database's would.
async fn lookup(path: String, offer: Arc<Offer>) -> Price {
    tokio::time::sleep(Duration::from_millis(5)).await;
    match path.as_str() {
        "/report" => Price::Charge(offer),
        "/free" => Price::Free,
        _ => Price::not_found("no such product"),
    }
}

fn later(offer: Arc<Offer>) -> impl Pricing {
    move |parts: &Parts| Price::later(lookup(parts.uri.path().to_owned(), Arc::clone(&offer)))
}

async fn send(
    sandbox: &SandboxFacilitator,
    pricing: impl Pricing,
    request: http::Request<http_body_util::Full<bytes::Bytes>>,
) -> (StatusCode, http::HeaderMap, bytes::Bytes) {
    let response = ServiceBuilder::new()
        .layer(X402Layer::new(sandbox.clone(), pricing))
        .service_fn(echo_payment)
        .oneshot(request)
        .await
        .unwrap();
    let (parts, body) = response.into_parts();
    (
        parts.status,
        parts.headers,
        body.collect().await.unwrap().to_bytes(),
    )
}

#[tokio::test]
async fn a_price_read_later_answers_as_the_same_price_given_at_once() {
    let sandbox = accepting();
    let offer = offer("https://shop.example/report", SettlementMode::After);

    let (status, headers, body) = send(&sandbox, later(Arc::clone(&offer)), get("/report")).await;
    let (_, sync_headers, sync_body) = send(&sandbox, Arc::clone(&offer), get("/report")).await;
    assert_eq!(status, StatusCode::PAYMENT_REQUIRED);
    assert_eq!(headers, sync_headers, "the same challenge headers");
    assert_eq!(body, sync_body, "the same challenge bytes");

    let paid = paid_get("/report", &payment(&offer, 1));
    let (status, headers, body) = send(&sandbox, later(Arc::clone(&offer)), paid).await;
    assert_eq!(status, StatusCode::OK);
    assert!(headers.contains_key("payment-response"));
    let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(body["paid"], true);
    assert_eq!((sandbox.verify_calls(), sandbox.settle_calls()), (1, 1));

    let (status, headers, body) = send(&sandbox, later(Arc::clone(&offer)), get("/free")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(!headers.contains_key("payment-required"));
    let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(body["paid"], false);

    let (status, _, body) = send(&sandbox, later(offer), get("/nothing")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(body["error"], "no such product");
    assert_eq!((sandbox.verify_calls(), sandbox.settle_calls()), (1, 1));
}
