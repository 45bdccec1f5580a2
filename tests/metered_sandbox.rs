//! Metered (`upto`) payments end to end against the sandbox facilitator served over loopback
//! HTTP: real Permit2 signatures from the sandbox wallet, `/supported` read through
//! `HttpFacilitator`, and the sandbox's ledger telling what moved (for the streamed body, read
//! as the chain over JSON-RPC).

#[path = "common/streamed.rs"]
mod streamed;

use std::sync::Arc;

use axum::Router;
use axum::extract::Query;
use axum::routing::get;
use tower_x402::payment::Payments;
use tower_x402::{Charge, HttpFacilitator, Offer, SettlementMode, X402Layer};
use tower_x402_sandbox::{SandboxFacilitator, SandboxWallet, Step};
use x402_wire::{
    AtomicAmount, Network, PAYMENT_SIGNATURE, PaymentPayload, ResourceInfo, SettleResponse,
    UsdAmount, UsdcDeployment, header,
};

const PAY_TO: &str = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";

#[derive(serde::Deserialize)]
struct Rows {
    count: u32,
}

async fn rows(charge: Charge, Query(Rows { count }): Query<Rows>) -> String {
    charge.set_usd(UsdAmount::ZERO).unwrap();
    for _ in 0..count {
        charge.add_usd("0.01".parse().unwrap()).unwrap();
    }
    format!("{count} rows")
}

struct Shop {
    sandbox: SandboxFacilitator,
    offer: Arc<Offer>,
    base: String,
}

async fn shop() -> Shop {
    let sandbox = SandboxFacilitator::new();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let facilitator_url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(sandbox.clone().serve(listener));
    let facilitator = HttpFacilitator::new(facilitator_url).unwrap();

    let offer = Offer::builder(ResourceInfo::new("https://api.example.com/rows"))
        .usdc(&UsdcDeployment::BASE, "0.10".parse().unwrap(), PAY_TO)
        .usdc_upto(&UsdcDeployment::BASE, "0.50".parse().unwrap(), PAY_TO)
        .build_for(&facilitator)
        .await
        .map(Arc::new)
        .unwrap();
    // The sandbox answers a re-sent settle of a spent nonce with a refusal, so a lost answer
    // is proven settled by its reconciler, which reads its ledger.
    let layer = X402Layer::with_payments(
        Payments::new(facilitator)
            .reconciler(sandbox.clone())
            .pending_settlement_pause(std::time::Duration::from_millis(10)),
        Arc::clone(&offer),
    );
    let app = Router::new().route("/rows", get(rows)).layer(layer);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    Shop {
        sandbox,
        offer,
        base,
    }
}

/// A payment of the offer's `upto` accept, signed by `wallet`.
fn upto_payment(wallet: &SandboxWallet, offer: &Offer) -> PaymentPayload {
    let mut required = offer.payment_required().clone();
    required.accepts.retain(|accept| accept.scheme == "upto");
    wallet.pay(&required).unwrap()
}

async fn get_rows(shop: &Shop, count: u32, payload: &PaymentPayload) -> reqwest::Response {
    reqwest::Client::new()
        .get(format!("{}/rows?count={count}", shop.base))
        .header(
            PAYMENT_SIGNATURE.as_str(),
            header::encode(payload).unwrap().to_str().unwrap(),
        )
        .send()
        .await
        .unwrap()
}

fn settlement(response: &reqwest::Response) -> SettleResponse {
    header::decode(response.headers()["payment-response"].as_bytes()).unwrap()
}

#[tokio::test]
async fn the_sandbox_settles_the_metered_amount_once() {
    let shop = shop().await;
    let upto = &shop.offer.accepts()[1];
    assert_eq!(upto.scheme, "upto");
    assert_eq!(
        upto.extra.as_ref().unwrap()["facilitatorAddress"],
        shop.sandbox.signer_address().as_str()
    );
    let wallet = SandboxWallet::random();
    let payload = upto_payment(&wallet, &shop.offer);

    let response = get_rows(&shop, 12, &payload).await;
    assert_eq!(response.status(), 200);
    assert_eq!(settlement(&response).amount, Some(AtomicAmount(120_000)));
    assert_eq!(response.text().await.unwrap(), "12 rows");
    let settled = shop.sandbox.settlements();
    assert_eq!(settled.len(), 1);
    assert_eq!(settled[0].amount, AtomicAmount(120_000));
    assert_eq!(
        shop.sandbox.balance_of(&wallet.address()),
        AtomicAmount(1_000_000_000 - 120_000)
    );

    // Refused with the recorded settlement, the handler not run: no second /settle.
    let again = get_rows(&shop, 3, &payload).await;
    assert_eq!(again.status(), 409);
    assert_eq!(settlement(&again).amount, Some(AtomicAmount(120_000)));
    assert_eq!(shop.sandbox.settle_calls(), 1);
}

#[tokio::test]
async fn a_lost_or_pending_upto_settle_answer_is_delivered_once_with_one_transfer() {
    for step in [Step::AnswerLost, Step::PendingThenSettled] {
        let shop = shop().await;
        let wallet = SandboxWallet::random();
        let payload = upto_payment(&wallet, &shop.offer);
        shop.sandbox.queue_settle(step.clone());
        let first = get_rows(&shop, 5, &payload).await;
        let delivered = if step == Step::AnswerLost {
            // In doubt. A retry with another query does not recover it: refused, still in
            // doubt, nothing re-sent.
            assert_eq!(first.status(), 503, "{step:?}");
            let other = get_rows(&shop, 40, &payload).await;
            assert_eq!(other.status(), 409, "{step:?}");
            let body: serde_json::Value = other.json().await.unwrap();
            assert_eq!(body["error"], "payment_used_for_another_request");
            assert_eq!(shop.sandbox.settle_calls(), 1, "{step:?}");
            // The same request re-sends the identical /settle, refused for the spent nonce,
            // and the reconciler finds the transfer.
            get_rows(&shop, 5, &payload).await
        } else {
            // `settlement_pending`, then the identical re-send is answered with the settlement.
            first
        };
        assert_eq!(delivered.status(), 200, "{step:?}");
        assert_eq!(settlement(&delivered).amount, Some(AtomicAmount(50_000)));
        let settled = shop.sandbox.settlements();
        assert_eq!(settled.len(), 1, "{step:?}: one transfer");
        assert_eq!(settled[0].amount, AtomicAmount(50_000));
        assert_eq!(
            shop.sandbox.balance_of(&wallet.address()),
            AtomicAmount(1_000_000_000 - 50_000)
        );
    }
}

#[tokio::test]
async fn zero_rows_moves_nothing_on_the_sandbox() {
    let shop = shop().await;
    let wallet = SandboxWallet::random();
    let payload = upto_payment(&wallet, &shop.offer);
    let response = get_rows(&shop, 0, &payload).await;
    assert_eq!(response.status(), 200);
    assert_eq!(settlement(&response).amount, Some(AtomicAmount(0)));
    assert_eq!(shop.sandbox.settle_calls(), 0);
    assert_eq!(shop.sandbox.settlement_count(), 0);
}

/// A streamed shop settling after the body (`SettlementMode::AfterBody`) through the sandbox
/// facilitator over HTTP, whose ledger is also served as the Base chain over JSON-RPC: `/tokens`
/// sends one token each time the test releases one.
struct Stream {
    sandbox: SandboxFacilitator,
    offer: Arc<Offer>,
    addr: std::net::SocketAddr,
    rpc: String,
    gate: Arc<tokio::sync::Semaphore>,
}

async fn streamed() -> Stream {
    let sandbox = SandboxFacilitator::new();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let facilitator_url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(sandbox.clone().serve(listener));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let rpc = format!("http://{}", listener.local_addr().unwrap());
    let chain = sandbox.rpc_router(Network::BASE);
    tokio::spawn(async move { axum::serve(listener, chain).await.unwrap() });
    let facilitator = HttpFacilitator::new(facilitator_url).unwrap();

    let offer = Offer::builder(ResourceInfo::new("https://api.example.com/tokens"))
        .usdc_upto(&UsdcDeployment::BASE, "0.50".parse().unwrap(), PAY_TO)
        .settlement(SettlementMode::AfterBody)
        .build_for(&facilitator)
        .await
        .map(Arc::new)
        .unwrap();
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let layer = X402Layer::new(facilitator, Arc::clone(&offer));
    let addr = streamed::serve(streamed::tokens_router(&gate).layer(layer)).await;
    Stream {
        sandbox,
        offer,
        addr,
        rpc,
        gate,
    }
}

impl Stream {
    /// The USDC amounts `payer` sent [`PAY_TO`] on the chain view: the token's
    /// `Transfer(payer, payTo)` logs, read through `eth_getLogs`.
    async fn transfers(&self, payer: &str) -> Vec<u128> {
        let topic = |address: &str| {
            format!(
                "0x{:0>64}",
                address.trim_start_matches("0x").to_ascii_lowercase()
            )
        };
        let request = serde_json::json!({
            "jsonrpc": "2.0",
            "id": 1,
            "method": "eth_getLogs",
            "params": [{
                "address": UsdcDeployment::BASE.asset,
                "fromBlock": "0x0",
                "toBlock": "latest",
                "topics": [
                    "0xddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef",
                    topic(payer),
                    topic(PAY_TO),
                ],
            }],
        });
        let answer: serde_json::Value = reqwest::Client::new()
            .post(&self.rpc)
            .json(&request)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        answer["result"]
            .as_array()
            .unwrap_or_else(|| panic!("eth_getLogs: {answer}"))
            .iter()
            .map(|log| {
                let data = log["data"].as_str().unwrap().trim_start_matches("0x");
                u128::from_str_radix(data.trim_start_matches('0'), 16).unwrap_or(0)
            })
            .collect()
    }

    /// Waits (up to 5 s) for the first `/settle` to reach the sandbox.
    async fn settled(&self) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while self.sandbox.settle_calls() == 0 {
            assert!(std::time::Instant::now() < deadline, "never settled");
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }
}

#[tokio::test]
async fn a_streamed_body_settles_on_the_sandbox_after_its_last_token_with_a_trailer() {
    let shop = streamed().await;
    let wallet = SandboxWallet::random();
    let payload = upto_payment(&wallet, &shop.offer);
    let (response, _driver) = streamed::pay(shop.addr, &payload).await;
    let mut body = streamed::streaming_body(response);

    // Streamed as produced: tokens arrive with the stream open and nothing settled.
    streamed::release(&shop.gate, &mut body, 0..7).await;
    assert_eq!(shop.sandbox.settle_calls(), 0);
    assert!(shop.transfers(&wallet.address()).await.is_empty());

    // The stream ends after 7 tokens: settled for 7 × 0.001 USDC, told in the trailer.
    let settled = streamed::finish(&shop.gate, body).await;
    assert!(settled.success);
    assert_eq!(settled.amount, Some(AtomicAmount(7_000)));
    assert_eq!(shop.sandbox.settle_calls(), 1);
    assert_eq!(shop.transfers(&wallet.address()).await, vec![7_000]);
    assert_eq!(
        shop.sandbox.balance_of(&wallet.address()),
        AtomicAmount(1_000_000_000 - 7_000)
    );

    // The same payment sent again is refused with the record's settlement, not streamed or
    // settled again.
    let (again, _driver) = streamed::pay(shop.addr, &payload).await;
    assert_eq!(again.status(), 409);
    let replayed: SettleResponse =
        header::decode(again.headers()["payment-response"].as_bytes()).unwrap();
    assert_eq!(replayed, settled);
    assert_eq!(shop.sandbox.settle_calls(), 1);
    assert_eq!(shop.transfers(&wallet.address()).await, vec![7_000]);
}

#[tokio::test]
async fn a_client_that_hangs_up_after_k_tokens_is_charged_k_tokens_once_on_the_sandbox() {
    const K: u32 = 4;
    let shop = streamed().await;
    let wallet = SandboxWallet::random();
    let payload = upto_payment(&wallet, &shop.offer);
    let (response, driver) = streamed::pay(shop.addr, &payload).await;
    assert_eq!(response.status(), 200);
    let mut body = response.into_body();
    streamed::release(&shop.gate, &mut body, 0..K).await;
    // Hang up with the stream still open.
    driver.abort();
    drop(body);
    shop.settled().await;
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert_eq!(shop.sandbox.settle_calls(), 1, "settled once");
    assert_eq!(
        shop.transfers(&wallet.address()).await,
        vec![u128::from(K) * 1_000]
    );
    assert_eq!(
        shop.sandbox.balance_of(&wallet.address()),
        AtomicAmount(1_000_000_000 - u128::from(K) * 1_000)
    );

    // The buyer's retry learns the settlement from the record.
    let (again, _driver) = streamed::pay(shop.addr, &payload).await;
    let replayed: SettleResponse =
        header::decode(again.headers()["payment-response"].as_bytes()).unwrap();
    assert_eq!(replayed.amount, Some(AtomicAmount(u128::from(K) * 1_000)));
    assert_eq!(shop.sandbox.settle_calls(), 1);
}
