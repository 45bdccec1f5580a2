//! A purchase whose settlement answer was lost after the money moved: answered 503, never 402;
//! the retry of the same payment delivers one Passport, counted once, with one transfer.

use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use tower_x402::HttpFacilitator;
use tower_x402_sandbox::{SandboxFacilitator, SandboxWallet, Step};
use x402_wire::{PaymentRequired, header};

use super::support::{RECEIPT, passport_of, store_with};

async fn a_lost_settle_answer_is_503_then_one_passport_counted_once() {
    let sandbox = SandboxFacilitator::new();
    let faulty = sandbox.clone();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(faulty.clone().serve(listener));
    let client = HttpFacilitator::builder(url)
        .settle_timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    // The reconciler reads the sandbox's ledger as a chain over JSON-RPC, as `STORE_RPC_URL`
    // would read Base.
    let chain = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let rpc_url = format!("http://{}", chain.local_addr().unwrap());
    let store = store_with(|c| c.rpc_url = Some(rpc_url), Arc::new(client)).await;

    let path = format!("/api/x402/{RECEIPT}");
    let challenge = store.get(&path).await;
    let required: PaymentRequired =
        header::decode(challenge.headers["payment-required"].as_bytes()).unwrap();
    let router = sandbox.rpc_router(required.accepts[0].network.clone());
    tokio::spawn(async move { axum::serve(chain, router).await.unwrap() });
    let signature = header::encode(&SandboxWallet::random().pay(&required).unwrap())
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    let paid = |signature: String| {
        axum::http::Request::get(&path)
            .header("payment-signature", signature)
            .body(axum::body::Body::empty())
            .unwrap()
    };

    faulty.queue_settle(Step::AnswerLost);
    let lost = store.send(paid(signature.clone())).await;
    assert_eq!(
        lost.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        lost.text
    );
    assert!(lost.header("retry-after").is_some());
    assert!(
        lost.json["error"]
            .as_str()
            .unwrap()
            .contains("same PAYMENT-SIGNATURE")
    );
    assert_eq!(sandbox.settlement_count(), 1, "the money moved");
    let rows = store.state.store.row_counts().await.unwrap();
    assert_eq!(rows["orders"], 0, "nothing delivered without proof");

    let delivered = store.send(paid(signature.clone())).await;
    assert_eq!(delivered.status, StatusCode::OK, "{}", delivered.text);
    let replayed = store.send(paid(signature)).await;
    assert_eq!(replayed.status, StatusCode::OK, "{}", replayed.text);
    assert_eq!(passport_of(&delivered), passport_of(&replayed));
    assert_eq!(sandbox.settlement_count(), 1, "one transfer");

    store.state.standing.flush().await.unwrap();
    let rows = store.state.store.row_counts().await.unwrap();
    assert_eq!(rows["orders"], 1, "one order");
    let report = store.state.standing.snapshot().await.unwrap();
    let purchased = report
        .stages
        .iter()
        .chain(&report.demo)
        .find(|stage| stage.stage == "purchased" && stage.count > 0)
        .map(|stage| stage.count);
    assert_eq!(purchased, Some(1), "counted once");
}

super::support::on_both_backends!(a_lost_settle_answer_is_503_then_one_passport_counted_once,);
