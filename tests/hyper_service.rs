//! The layer works beyond axum: around a plain `tower::service_fn` served by hyper, reached
//! over real TCP. Hyper's own request body (`Incoming`) is mapped into a body the layer can
//! hand on after reading a paid request's body (one that is `From<Bytes>`).

mod common;

use std::convert::Infallible;

use axum::body::Body;
use bytes::Bytes;
use common::*;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::service::TowerToHyperService;
use tower::ServiceBuilder;
use tower_x402::{SettlementMode, VerifiedPayment, X402Layer};
use tower_x402_sandbox::{SandboxFacilitator, SandboxWallet};
use x402_wire::header;

async fn report(request: Request<Body>) -> Result<Response<Full<Bytes>>, Infallible> {
    let payer = request
        .extensions()
        .get::<VerifiedPayment>()
        .and_then(|p| p.payer.clone());
    let body = request
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes().len())
        .unwrap_or(0);
    Ok(Response::new(Full::new(Bytes::from(format!(
        "report for {payer:?}, body {body} bytes"
    )))))
}

#[tokio::test]
async fn layer_serves_a_plain_hyper_service() {
    let offer =
        tower_x402::Offer::builder(x402_wire::ResourceInfo::new("https://shop.example/report"))
            .usdc(
                &x402_wire::UsdcDeployment::BASE_SEPOLIA,
                "0.05".parse().unwrap(),
                PAY_TO,
            )
            .settlement(SettlementMode::After)
            .build()
            .map(std::sync::Arc::new)
            .unwrap();
    let required = offer.payment_required().clone();
    let facilitator = SandboxFacilitator::new();
    let service = ServiceBuilder::new()
        .map_request(|request: Request<Incoming>| request.map(Body::new))
        .layer(X402Layer::new(facilitator.clone(), offer))
        .service_fn(report);

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            let service = TowerToHyperService::new(service.clone());
            tokio::spawn(async move {
                hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), service)
                    .await
                    .ok();
            });
        }
    });

    let client = reqwest::Client::new();
    let url = format!("http://{addr}/report");
    let unpaid = client.get(&url).body("ignored body").send().await.unwrap();
    assert_eq!(unpaid.status(), StatusCode::PAYMENT_REQUIRED);
    let challenge: x402_wire::PaymentRequired =
        header::decode(unpaid.headers()["payment-required"].as_bytes()).unwrap();
    assert_eq!(challenge, required);

    let wallet = SandboxWallet::random();
    let payment = header::encode(&wallet.pay(&challenge).unwrap()).unwrap();
    let paid = client
        .get(&url)
        .header("payment-signature", payment)
        .body("twelve bytes")
        .send()
        .await
        .unwrap();
    assert_eq!(paid.status(), StatusCode::OK);
    let settlement: x402_wire::SettleResponse =
        header::decode(paid.headers()["payment-response"].as_bytes()).unwrap();
    assert!(settlement.success);
    let text = paid.text().await.unwrap();
    assert!(text.contains(&wallet.address()), "{text}");
    assert!(
        text.contains("body 12 bytes"),
        "the paid body reaches the handler: {text}"
    );
    assert_eq!(facilitator.settlement_count(), 1);
}
