//! `SandboxWallet::buy`: 402 → pay → 200 against an axum app in process, the money moved once in
//! the sandbox's ledger; and the errors it answers when there is nothing to buy.

use axum::Router;
use axum::http::{Request, StatusCode};
use axum::routing::get;
use tower_x402::{Offer, X402Layer};
use tower_x402_sandbox::{BuyError, SandboxFacilitator, SandboxWallet};
use x402_wire::{PAYMENT_SIGNATURE, ResourceInfo, UsdcDeployment, header};

const PAY_TO: &str = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";

fn app(facilitator: &SandboxFacilitator) -> Router {
    let offer = Offer::builder(ResourceInfo::new("https://api.example.com/report"))
        .usdc(
            &UsdcDeployment::BASE_SEPOLIA,
            "0.10".parse().unwrap(),
            PAY_TO,
        )
        .build()
        .unwrap();
    Router::new()
        .route(
            "/report",
            get(|| async { "the report" }).layer(X402Layer::new(facilitator.clone(), offer)),
        )
        .route("/free", get(|| async { "free" }))
}

#[tokio::test]
async fn buys_once_and_the_ledger_moves_once() {
    let facilitator = SandboxFacilitator::new();
    let app = app(&facilitator);
    let wallet = SandboxWallet::random();
    let before = facilitator.balance_of(&wallet.address()).get();

    let purchase = wallet
        .buy(
            app.clone(),
            Request::get("/report").body(String::new()).unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(purchase.response.status(), StatusCode::OK);
    assert_eq!(purchase.challenge.accepts[0].amount.get(), 100_000);
    let settlement = purchase.settlement().unwrap();
    assert!(settlement.success);
    assert_eq!(settlement.amount.map(|amount| amount.get()), Some(100_000));
    let body = axum::body::to_bytes(purchase.response.into_body(), 1024)
        .await
        .unwrap();
    assert_eq!(&body[..], b"the report");
    assert_eq!(facilitator.settlement_count(), 1);
    assert_eq!(
        facilitator.balance_of(&wallet.address()).get(),
        before - 100_000
    );

    // The same payment again is answered from its record: no second transfer.
    let again = Request::get("/report")
        .header(
            PAYMENT_SIGNATURE,
            header::encode(&purchase.payment).unwrap(),
        )
        .body(String::new())
        .unwrap();
    let response = tower::ServiceExt::oneshot(app, again).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(facilitator.settlement_count(), 1);
}

#[tokio::test]
async fn a_route_that_asks_no_payment_is_an_error_naming_its_status() {
    let facilitator = SandboxFacilitator::new();
    let wallet = SandboxWallet::random();
    let error = wallet
        .buy(
            app(&facilitator),
            Request::get("/free").body(String::new()).unwrap(),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(error, BuyError::NotAsked(StatusCode::OK)),
        "{error}"
    );
    let error = wallet
        .buy(
            app(&facilitator),
            Request::get("/missing").body(String::new()).unwrap(),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(error, BuyError::NotAsked(StatusCode::NOT_FOUND)),
        "{error}"
    );
    assert_eq!(facilitator.settlement_count(), 0);
}
