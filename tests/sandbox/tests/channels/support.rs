//! What the channel tests share: a sandbox on a clock they move, served over HTTP with its
//! chain view; the 402's accept; a buyer's channel.

pub(crate) use std::net::SocketAddr;
pub(crate) use std::sync::Arc;
pub(crate) use std::sync::atomic::{AtomicU64, Ordering};

pub(crate) use alloy_primitives::{Address, B256, U256};
pub(crate) use alloy_sol_types::{SolCall, sol};
pub(crate) use serde_json::{Value, json};
pub(crate) use tower_x402_sandbox::batch::{
    BATCH_SETTLEMENT, BatchPayload, BatchSettleResponse, BatchVerifyResponse, ChannelConfig,
    ChannelError, SignedVoucher, VoucherClaim, reason,
};
pub(crate) use tower_x402_sandbox::{SandboxFacilitator, SandboxWallet};
pub(crate) use x402_wire::{
    AtomicAmount, Network, PaymentPayload, PaymentRequirements, UsdcDeployment,
};

sol! {
    function channels(bytes32 channelId) external view returns (uint128 balance, uint128 totalClaimed);
    function pendingWithdrawals(bytes32 channelId) external view returns (uint128 amount, uint40 initiatedAt);
    function refundNonce(bytes32 channelId) external view returns (uint256);
    function receivers(address receiver, address token) external view returns (uint128 totalClaimed, uint128 totalSettled);
}

pub(crate) const PAY_TO: &str = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";
pub(crate) const START: u64 = 1_750_000_000;
pub(crate) const PRICE: u128 = 1_000;
pub(crate) const DELAY: u64 = 900;
pub(crate) const STARTING_BALANCE: u128 = 1_000_000_000;

/// A sandbox facilitator on a clock the test moves, served over HTTP with its chain view.
pub(crate) struct Sandbox {
    pub(crate) facilitator: SandboxFacilitator,
    pub(crate) clock: Arc<AtomicU64>,
    pub(crate) url: String,
    pub(crate) rpc: String,
    pub(crate) http: reqwest::Client,
}

impl Sandbox {
    pub(crate) async fn start() -> Self {
        let clock = Arc::new(AtomicU64::new(START));
        let time = Arc::clone(&clock);
        let facilitator = SandboxFacilitator::new().with_clock(move || time.load(Ordering::SeqCst));
        let url = format!("http://{}", serve(facilitator.router()).await);
        let rpc = format!("http://{}", serve(facilitator.rpc_router(network())).await);
        Self {
            facilitator,
            clock,
            url,
            rpc,
            http: reqwest::Client::new(),
        }
    }

    pub(crate) fn advance(&self, seconds: u64) {
        self.clock.fetch_add(seconds, Ordering::SeqCst);
    }

    pub(crate) fn now(&self) -> u64 {
        self.clock.load(Ordering::SeqCst)
    }

    pub(crate) async fn post(&self, path: &str, body: &Value) -> Value {
        let response = self
            .http
            .post(format!("{}{path}", self.url))
            .json(body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "{path}");
        response.json().await.unwrap()
    }

    pub(crate) async fn verify(
        &self,
        payment: &PaymentPayload,
        accept: &PaymentRequirements,
    ) -> BatchVerifyResponse {
        let body =
            json!({"x402Version": 2, "paymentPayload": payment, "paymentRequirements": accept});
        serde_json::from_value(self.post("/verify", &body).await).unwrap()
    }

    pub(crate) async fn settle(
        &self,
        payment: &PaymentPayload,
        accept: &PaymentRequirements,
    ) -> BatchSettleResponse {
        let body =
            json!({"x402Version": 2, "paymentPayload": payment, "paymentRequirements": accept});
        let answer = self.post("/settle", &body).await;
        serde_json::from_value(answer).unwrap()
    }

    /// A server-authored `/settle` (claim or sweep): requirements with amount 0, no timeout,
    /// empty extra, as the reference server sends them.
    pub(crate) async fn operate(&self, payload: &BatchPayload) -> BatchSettleResponse {
        let mut requirements = accept(&self.facilitator.receiver_authorizer());
        requirements.amount = AtomicAmount(0);
        requirements.max_timeout_seconds = 0;
        requirements.extra = Some(serde_json::Map::new());
        let payment = json!({
            "x402Version": 2,
            "accepted": requirements,
            "payload": payload,
        });
        let body = json!({"x402Version": 2, "paymentPayload": payment, "paymentRequirements": requirements});
        serde_json::from_value(self.post("/settle", &body).await).unwrap()
    }

    pub(crate) async fn claim(
        &self,
        claims: Vec<VoucherClaim>,
        signature: Option<String>,
    ) -> BatchSettleResponse {
        self.operate(&BatchPayload::Claim {
            claims,
            claim_authorizer_signature: signature,
        })
        .await
    }

    pub(crate) async fn sweep(&self) -> BatchSettleResponse {
        self.operate(&BatchPayload::Settle {
            receiver: PAY_TO.into(),
            token: usdc().asset.into(),
        })
        .await
    }

    /// `eth_call` of `input` on the contract, through the JSON-RPC endpoint.
    pub(crate) async fn call(&self, input: Vec<u8>) -> Vec<u8> {
        let body = json!({
            "jsonrpc": "2.0", "id": 1, "method": "eth_call",
            "params": [{"to": BATCH_SETTLEMENT.to_checksum(None), "input": alloy_primitives::hex::encode_prefixed(input)}, "latest"],
        });
        let answer: Value = self
            .http
            .post(&self.rpc)
            .json(&body)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        alloy_primitives::hex::decode(answer["result"].as_str().expect("an eth_call result"))
            .unwrap()
    }

    pub(crate) fn balance(&self, address: &str) -> u128 {
        self.facilitator.balance_of(address).get()
    }
}

pub(crate) async fn serve(router: axum::Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await });
    address
}

pub(crate) fn usdc() -> UsdcDeployment {
    UsdcDeployment::BASE_SEPOLIA
}

pub(crate) fn network() -> Network {
    usdc().network
}

/// The 402's `batch-settlement` accept: up to `PRICE` a request, channels authorized by
/// `receiver_authorizer`, with a 15-minute withdrawal delay.
pub(crate) fn accept(receiver_authorizer: &str) -> PaymentRequirements {
    let mut extra = usdc()
        .eip712
        .map(|domain| domain.to_extra())
        .unwrap_or_default();
    extra.insert("receiverAuthorizer".into(), json!(receiver_authorizer));
    extra.insert("withdrawDelay".into(), json!(DELAY));
    PaymentRequirements {
        scheme: "batch-settlement".into(),
        network: network(),
        amount: AtomicAmount(PRICE),
        asset: usdc().asset.into(),
        pay_to: PAY_TO.into(),
        max_timeout_seconds: 3600,
        extra: Some(extra),
    }
}

/// A buyer's open channel: its configuration, id and latest voucher.
pub(crate) struct Channel {
    pub(crate) wallet: SandboxWallet,
    pub(crate) config: ChannelConfig,
    pub(crate) id: String,
    pub(crate) accept: PaymentRequirements,
}

impl Channel {
    pub(crate) fn new(accept: &PaymentRequirements) -> Self {
        let wallet = SandboxWallet::random();
        let config = wallet.channel_config(accept, rand::random()).unwrap();
        let id = SandboxWallet::channel_id(&config, &network()).unwrap();
        Self {
            wallet,
            config,
            id,
            accept: accept.clone(),
        }
    }

    pub(crate) fn id(&self) -> B256 {
        self.id.parse().unwrap()
    }

    pub(crate) fn voucher(&self, max: u128) -> SignedVoucher {
        self.wallet.sign_voucher(&network(), &self.id, max).unwrap()
    }

    pub(crate) fn claim(&self, max: u128, total: u128) -> VoucherClaim {
        VoucherClaim::new(&self.config, &self.voucher(max), total)
    }

    /// Deposits `amount` over HTTP (`/verify`, then `/settle`) with the first voucher.
    pub(crate) async fn open(&self, sandbox: &Sandbox, amount: u128) -> BatchSettleResponse {
        let payment = self
            .wallet
            .deposit_payment_at(&self.accept, &self.config, amount, PRICE, sandbox.now())
            .unwrap();
        let verified = sandbox.verify(&payment, &self.accept).await;
        assert!(verified.is_valid, "{verified:?}");
        let settled = sandbox.settle(&payment, &self.accept).await;
        assert!(settled.success, "{settled:?}");
        settled
    }

    pub(crate) fn state(&self, sandbox: &Sandbox) -> tower_x402_sandbox::batch::ChannelView {
        sandbox
            .facilitator
            .channel_state(&network(), &self.id)
            .unwrap()
    }
}

/// `accept` with another receiver authorizer and withdrawal delay.
pub(crate) fn super_accept(receiver_authorizer: &str, delay: u64) -> PaymentRequirements {
    let mut accept = accept(receiver_authorizer);
    if let Some(extra) = accept.extra.as_mut() {
        extra.insert("withdrawDelay".into(), json!(delay));
    }
    accept
}
