//! A shop over loopback HTTP against the sandbox facilitator served over HTTP: `/report` and
//! `/other` sold through an `X402Layer`, its ledger in memory, the sandbox's counters of
//! `/verify` and `/settle` calls at hand. Shared by the Permit2 and EVM signature tests.
#![allow(dead_code, unreachable_pub, missing_docs)]

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use tower_x402::payment::Payments;
use tower_x402::{HttpFacilitator, MemorySettlementStore, Offer, X402Layer};
use tower_x402_sandbox::{SandboxFacilitator, SandboxWallet};
use x402_wire::{PaymentPayload, PaymentRequired, SettleResponse, header};

pub const PAY_TO: &str = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";
/// What every sandbox address holds before its first transfer.
pub const START: u128 = 1_000_000_000;
/// The price of `/report` and `/other` in the offers the tests build: 0.25 USDC.
pub const PRICE: u128 = 250_000;

/// Serves `router` on 127.0.0.1 and returns the base URL.
pub async fn serve(router: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    url
}

pub struct Shop {
    pub sandbox: SandboxFacilitator,
    pub base: String,
}

impl Shop {
    /// A shop selling `/report` and `/other` with the offers `offer` builds for their paths,
    /// through `sandbox` served over HTTP, its core `configure`d (a reconciler, a scheme).
    pub async fn open<F>(
        sandbox: SandboxFacilitator,
        offer: impl Fn(&str) -> Arc<Offer>,
        configure: impl FnOnce(Payments, SandboxFacilitator) -> F,
    ) -> Self
    where
        F: Future<Output = Payments>,
    {
        let facilitator = HttpFacilitator::new(serve(sandbox.router()).await).unwrap();
        let payments = Payments::new(facilitator)
            .settlement_store(Arc::new(MemorySettlementStore::default()))
            .pending_settlement_pause(Duration::from_millis(10));
        let payments = configure(payments, sandbox.clone()).await;
        let report = X402Layer::with_payments(payments.clone(), offer("/report"));
        let other = X402Layer::with_payments(payments, offer("/other"));
        let router = Router::new()
            .route("/report", get(|| async { "the report" }).layer(report))
            .route("/other", get(|| async { "the other" }).layer(other));
        Self {
            sandbox,
            base: serve(router).await,
        }
    }

    pub async fn challenge(&self) -> PaymentRequired {
        let response = reqwest::get(format!("{}/report", self.base)).await.unwrap();
        assert_eq!(response.status(), 402);
        header::decode(response.headers()["payment-required"].as_bytes()).unwrap()
    }

    pub async fn buy_at(&self, path: &str, payment: &PaymentPayload) -> reqwest::Response {
        let signature = header::encode(payment).unwrap();
        reqwest::Client::new()
            .get(format!("{}{path}", self.base))
            .header("payment-signature", signature)
            .send()
            .await
            .unwrap()
    }

    pub async fn buy(&self, payment: &PaymentPayload) -> reqwest::Response {
        self.buy_at("/report", payment).await
    }

    pub fn balance(&self, wallet: &SandboxWallet) -> u128 {
        self.sandbox.balance_of(&wallet.address()).get()
    }
}

pub fn settlement(response: &reqwest::Response) -> SettleResponse {
    header::decode(response.headers()["payment-response"].as_bytes()).unwrap()
}

/// Unix seconds now.
pub fn now() -> u64 {
    x402_wire::unix_time().as_secs()
}
