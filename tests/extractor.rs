//! `VerifiedPayment` as an axum extractor.

mod common;

use axum::Router;
use axum::body::Body;
use axum::routing::get;
use common::*;
use http::{Request, Response, StatusCode};
use tower::ServiceExt;
use tower_x402::{SettlementMode, VerifiedPayment, X402Layer};

async fn handler(payment: VerifiedPayment) -> String {
    format!("paid by {}", payment.payer.unwrap_or_default())
}

/// A paid `GET /report` answered by `handler` behind a layer over `facilitator` settling in
/// `mode`.
async fn paid_request<H, T>(
    handler: H,
    mode: SettlementMode,
    facilitator: &SandboxFacilitator,
) -> Response<Body>
where
    H: axum::handler::Handler<T, ()>,
    T: 'static,
{
    let offer = offer("https://shop.example/report", mode);
    let app = Router::new().route(
        "/report",
        get(handler).layer(X402Layer::new(facilitator.clone(), offer.clone())),
    );
    let request = paid_get("/report", &payment(&offer, 1)).map(Body::new);
    app.oneshot(request).await.unwrap()
}

/// The whole body of `response`.
async fn body_bytes(response: Response<Body>) -> bytes::Bytes {
    axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap()
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
    let response = paid_request(handler, SettlementMode::Before, &accepting()).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(body_bytes(response).await, format!("paid by {PAYER}"));
}

async fn settled_handler(paid: tower_x402::SettledPayment) -> String {
    format!("settled in {}", paid.settlement.transaction)
}

#[tokio::test]
async fn settled_payment_is_extracted_behind_settle_before() {
    let facilitator = accepting();
    let response = paid_request(settled_handler, SettlementMode::Before, &facilitator).await;
    assert_eq!(response.status(), StatusCode::OK);
    let transaction = &facilitator.settlements()[0].transaction;
    assert_eq!(
        body_bytes(response).await,
        format!("settled in {transaction}")
    );
}

#[tokio::test]
async fn settled_payment_is_refused_before_settlement_exists() {
    // Settle-after runs the handler before the money moves: asking for a settlement there is a
    // misconfiguration, answered 500 and never settled (the handler failed).
    let facilitator = accepting();
    let response = paid_request(settled_handler, SettlementMode::After, &facilitator).await;
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
