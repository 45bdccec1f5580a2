//! `upto` end to end against the sandbox: an `X402Layer` with a metered offer served over
//! loopback HTTP, the sandbox facilitator reached over HTTP, the sandbox wallet's real Permit2
//! signature; the amount the handler charges is what moves, once, also when the settle answer
//! is lost and the Permit2 reconciler reads the chain view over JSON-RPC.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::http::HeaderMap;
use axum::routing::get;
use tower_x402::payment::Payments;
use tower_x402::{
    Charge, HttpFacilitator, MemorySettlementStore, Offer, SettlementMode, X402Layer,
};
use tower_x402_evm::EvmRpcReconciler;
use tower_x402_sandbox::{SandboxFacilitator, SandboxWallet, Step};
use x402_wire::{
    AtomicAmount, Network, PaymentRequired, ResourceInfo, SettleResponse, UsdcDeployment, header,
};

const PAY_TO: &str = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";
const START: u128 = 1_000_000_000;

async fn serve(router: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    url
}

/// Charges 0.01 USDC per row asked for in `x-rows`.
async fn rows(charge: Charge, headers: HeaderMap) -> String {
    let count: u64 = headers
        .get("x-rows")
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse().ok())
        .unwrap_or(0);
    charge.set(AtomicAmount(0));
    for _ in 0..count {
        charge.add_usd("0.01".parse().unwrap()).unwrap();
    }
    format!("{count} rows")
}

struct Shop {
    sandbox: SandboxFacilitator,
    base: String,
}

async fn shop(reconciled: bool) -> Shop {
    let sandbox = SandboxFacilitator::new();
    let facilitator = HttpFacilitator::new(serve(sandbox.router()).await).unwrap();
    let offer = Offer::builder(ResourceInfo::new("https://api.example.com/rows"))
        .usdc_upto(
            &UsdcDeployment::BASE_SEPOLIA,
            "0.50".parse().unwrap(),
            PAY_TO,
        )
        .settlement(SettlementMode::After)
        .build_for(&facilitator)
        .await
        .unwrap();
    let mut payments = Payments::new(facilitator)
        .settlement_store(Arc::new(MemorySettlementStore::default()))
        .pending_settlement_pause(Duration::from_millis(10));
    if reconciled {
        let chain = serve(sandbox.rpc_router(Network::BASE_SEPOLIA)).await;
        payments = payments.reconciler(EvmRpcReconciler::new(&chain).unwrap());
    }
    let layer = X402Layer::with_payments(payments, Arc::new(offer));
    let base = serve(Router::new().route("/rows", get(rows)).layer(layer)).await;
    Shop { sandbox, base }
}

impl Shop {
    async fn challenge(&self) -> PaymentRequired {
        let response = reqwest::get(format!("{}/rows", self.base)).await.unwrap();
        assert_eq!(response.status(), 402);
        header::decode(response.headers()["payment-required"].as_bytes()).unwrap()
    }

    async fn buy(&self, signature: &str, rows: u64) -> reqwest::Response {
        reqwest::Client::new()
            .get(format!("{}/rows", self.base))
            .header("payment-signature", signature)
            .header("x-rows", rows.to_string())
            .send()
            .await
            .unwrap()
    }
}

fn settlement(response: &reqwest::Response) -> SettleResponse {
    header::decode(response.headers()["payment-response"].as_bytes()).unwrap()
}

#[tokio::test]
async fn the_handlers_charge_moves_once_against_the_sandbox() {
    let shop = shop(false).await;
    let challenge = shop.challenge().await;
    let accept = &challenge.accepts[0];
    assert_eq!(accept.scheme, "upto");
    assert_eq!(
        accept.extra.as_ref().unwrap()["facilitatorAddress"],
        serde_json::json!(shop.sandbox.signer_address())
    );
    let wallet = SandboxWallet::random();
    let payment = wallet.pay(&challenge).unwrap();
    let signature = header::encode(&payment).unwrap();
    let signature = signature.to_str().unwrap();

    let response = shop.buy(signature, 7).await;
    assert_eq!(response.status(), 200);
    let settled = settlement(&response);
    assert!(settled.success);
    assert_eq!(settled.amount, Some(AtomicAmount(70_000)));
    assert_eq!(response.text().await.unwrap(), "7 rows");
    assert_eq!(
        shop.sandbox.balance_of(&wallet.address()).get(),
        START - 70_000
    );

    // A replay is refused with the record's settlement: nothing runs or moves again.
    let replay = shop.buy(signature, 7).await;
    assert_eq!(replay.status(), 409);
    assert_eq!(settlement(&replay).transaction, settled.transaction);
    assert_eq!(shop.sandbox.settlement_count(), 1);
    assert_eq!(
        shop.sandbox.balance_of(&wallet.address()).get(),
        START - 70_000
    );
}

#[tokio::test]
async fn a_zero_charge_moves_nothing_against_the_sandbox() {
    let shop = shop(false).await;
    let wallet = SandboxWallet::random();
    let payment = wallet.pay(&shop.challenge().await).unwrap();
    let signature = header::encode(&payment).unwrap();
    let response = shop.buy(signature.to_str().unwrap(), 0).await;
    assert_eq!(response.status(), 200);
    assert_eq!(shop.sandbox.settlement_count(), 0);
    assert_eq!(shop.sandbox.balance_of(&wallet.address()).get(), START);
}

#[tokio::test]
async fn a_lost_answer_is_delivered_once_through_the_permit2_reconciler() {
    let shop = shop(true).await;
    let wallet = SandboxWallet::random();
    let payment = wallet.pay(&shop.challenge().await).unwrap();
    let signature = header::encode(&payment).unwrap();
    let signature = signature.to_str().unwrap();

    // The settlement happens, its answer is lost (and so is the re-sent one's, which the
    // sandbox refuses as the nonce already used): the reconciler finds the transfer.
    shop.sandbox.queue_settle(Step::AnswerLost);
    let mut statuses = Vec::new();
    let mut delivered = None;
    for _ in 0..3 {
        let response = shop.buy(signature, 12).await;
        statuses.push(response.status().as_u16());
        if response.status() == 200 {
            delivered = Some(settlement(&response));
            break;
        }
    }
    let delivered = delivered.unwrap_or_else(|| panic!("never delivered: {statuses:?}"));
    assert!(delivered.success);
    assert_eq!(delivered.amount, Some(AtomicAmount(120_000)));
    assert_eq!(
        delivered.transaction,
        shop.sandbox.settlements()[0].transaction
    );
    // The lost one and the identical re-send, refused as the nonce already used.
    assert_eq!(shop.sandbox.settle_calls(), 2, "{statuses:?}");
    assert_eq!(shop.sandbox.settlement_count(), 1);
    assert_eq!(
        shop.sandbox.balance_of(&wallet.address()).get(),
        START - 120_000
    );
}
