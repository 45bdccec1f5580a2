//! `VerifiedPayment` and the crate's other axum extractors, and how a request behind hooks got
//! in.

mod common;

use axum::Router;
use axum::body::Body;
use axum::routing::get;
use common::*;
use http::{Request, Response, StatusCode};
use tower::ServiceExt;
use tower_x402::payment::{
    Decision, HookStages, MissingPayment, PaymentHooks, Payments, ProtectedRequest,
};
use tower_x402::{BoxFuture, Charge, SettledPayment, SettlementMode, VerifiedPayment, X402Layer};

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

/// Grants requests carrying `x-pass: member` without payment, saying nothing of why.
struct Members;

impl PaymentHooks for Members {
    fn stages(&self) -> HookStages {
        HookStages::REQUEST
    }

    fn considers_request(&self, request: &ProtectedRequest<'_>) -> bool {
        request.field("x-pass").is_some()
    }

    fn on_protected_request<'a>(
        &'a self,
        request: &'a ProtectedRequest<'a>,
    ) -> BoxFuture<'a, Decision<http::Extensions>> {
        let member = request.field("x-pass") == Some(b"member");
        Box::pin(async move {
            match member {
                true => Decision::Handled(http::Extensions::new()),
                false => Decision::Continue,
            }
        })
    }
}

/// How the request got in, as the crate's optional extractors tell it.
async fn how_it_got_in(
    payment: Option<VerifiedPayment>,
    settled: Option<SettledPayment>,
    charge: Option<Charge>,
    granted: Option<MissingPayment>,
) -> axum::Json<serde_json::Value> {
    axum::Json(serde_json::json!({
        "paid": payment.is_some(),
        "settled": settled.is_some(),
        "metered": charge.is_some(),
        "granted": granted.map(|granted| granted.reason()),
    }))
}

#[tokio::test]
async fn a_handler_behind_hooks_learns_how_a_request_got_in_without_a_500() {
    let facilitator = accepting();
    let offer = offer("https://shop.example/report", SettlementMode::Before);
    let payments = Payments::new(facilitator.clone()).hook(Members);
    let app = Router::new().route(
        "/report",
        get(how_it_got_in).layer(X402Layer::with_payments(payments, offer.clone())),
    );

    let member = Request::get("/report")
        .header("x-pass", "member")
        .body(Body::empty())
        .unwrap();
    let response = app.clone().oneshot(member).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let body = body_json(response).await;
    assert_eq!(
        (&body["paid"], &body["settled"], &body["metered"]),
        (&false.into(), &false.into(), &false.into()),
        "{body}"
    );
    assert!(
        body["granted"].as_str().unwrap().contains("payment hook"),
        "{body}"
    );

    let paid = paid_get("/report", &payment(&offer, 3)).map(Body::new);
    let response = app.clone().oneshot(paid).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let body = body_json(response).await;
    assert_eq!(
        body,
        serde_json::json!({ "paid": true, "settled": true, "metered": false, "granted": null })
    );

    // A handler that requires a payment is told why there is none, rather than the message
    // for a missing layer.
    let strict = Router::new().route(
        "/report",
        get(handler).layer(X402Layer::with_payments(
            Payments::new(facilitator).hook(Members),
            offer,
        )),
    );
    let member = Request::get("/report")
        .header("x-pass", "member")
        .body(Body::empty())
        .unwrap();
    let response = strict.oneshot(member).await.unwrap();
    assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
    let body = body_json(response).await;
    assert!(
        body["error"].as_str().unwrap().contains("payment hook"),
        "{body}"
    );
}
