//! `VerifiedPayment` as an axum extractor.

mod common;

use axum::Router;
use axum::body::Body;
use axum::routing::get;
use common::*;
use http::{Request, StatusCode};
use tower::ServiceExt;
use tower_x402::{SettlementMode, VerifiedPayment, X402Layer};

async fn handler(payment: VerifiedPayment) -> String {
    format!("paid by {}", payment.payer.unwrap_or_default())
}

#[tokio::test]
async fn missing_layer_is_named_in_the_rejection() {
    let app = Router::new().route("/report", get(handler));
    let response = app
        .oneshot(Request::get("/report").body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(response.headers()["content-type"], "application/json");
    let body = body_json(response).await;
    assert!(
        body["error"].as_str().unwrap().contains("`X402Layer`"),
        "{body}"
    );
}

#[tokio::test]
async fn extractor_sees_the_verified_payment() {
    let offer = offer("https://shop.example/report", SettlementMode::Before);
    let app = Router::new().route(
        "/report",
        get(handler).layer(X402Layer::new(accepting(), offer.clone())),
    );
    let request = paid_get("/report", &payment(&offer, 1)).map(Body::new);
    let response = app.oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let body = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    assert_eq!(body, format!("paid by {PAYER}"));
}

async fn settled_handler(paid: tower_x402::SettledPayment) -> String {
    format!("settled in {}", paid.settlement.transaction)
}

#[tokio::test]
async fn settled_payment_is_extracted_behind_settle_before() {
    let offer = offer("https://shop.example/report", SettlementMode::Before);
    let facilitator = accepting();
    let app = Router::new().route(
        "/report",
        get(settled_handler).layer(X402Layer::new(facilitator.clone(), offer.clone())),
    );
    let request = paid_get("/report", &payment(&offer, 1)).map(Body::new);
    let response = app.oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let body = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    let transaction = &facilitator.settlements()[0].transaction;
    assert_eq!(body, format!("settled in {transaction}"));
}

#[tokio::test]
async fn settled_payment_is_refused_before_settlement_exists() {
    // Settle-after runs the handler before the money moves: asking for a settlement there is a
    // misconfiguration, answered 500 and never settled (the handler failed).
    let offer = offer("https://shop.example/report", SettlementMode::After);
    let facilitator = accepting();
    let app = Router::new().route(
        "/report",
        get(settled_handler).layer(X402Layer::new(facilitator.clone(), offer.clone())),
    );
    let request = paid_get("/report", &payment(&offer, 1)).map(Body::new);
    let response = app.oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
    let body = body_json(response).await;
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("SettlementMode::Before"),
        "{body}"
    );
    assert_eq!(facilitator.settle_calls(), 0);
}
