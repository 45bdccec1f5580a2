//! The sandbox speaks `batch-settlement` over HTTP on loopback: one deposit, then vouchers
//! claimed in one batch and swept; claims beyond the balance or the ceiling, or with a forged
//! signature, refused and stale ones changing nothing; cooperative refunds with their nonce; a
//! timed withdrawal that completes only after its delay, beaten by a claim; several channels in
//! one claim; the contract's views over JSON-RPC.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use alloy_primitives::{Address, B256, U256};
use alloy_sol_types::{SolCall, sol};
use serde_json::{Value, json};
use tower_x402_sandbox::batch::{
    BATCH_SETTLEMENT, BatchPayload, BatchSettleResponse, BatchVerifyResponse, ChannelConfig,
    ChannelError, SignedVoucher, VoucherClaim, reason,
};
use tower_x402_sandbox::{SandboxFacilitator, SandboxWallet};
use x402_wire::{AtomicAmount, Network, PaymentPayload, PaymentRequirements, UsdcDeployment};

sol! {
    function channels(bytes32 channelId) external view returns (uint128 balance, uint128 totalClaimed);
    function pendingWithdrawals(bytes32 channelId) external view returns (uint128 amount, uint40 initiatedAt);
    function refundNonce(bytes32 channelId) external view returns (uint256);
    function receivers(address receiver, address token) external view returns (uint128 totalClaimed, uint128 totalSettled);
}

const PAY_TO: &str = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";
const START: u64 = 1_750_000_000;
const PRICE: u128 = 1_000;
const DELAY: u64 = 900;
const STARTING_BALANCE: u128 = 1_000_000_000;

/// A sandbox facilitator on a clock the test moves, served over HTTP with its chain view.
struct Sandbox {
    facilitator: SandboxFacilitator,
    clock: Arc<AtomicU64>,
    url: String,
    rpc: String,
    http: reqwest::Client,
}

impl Sandbox {
    async fn start() -> Self {
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

    fn advance(&self, seconds: u64) {
        self.clock.fetch_add(seconds, Ordering::SeqCst);
    }

    fn now(&self) -> u64 {
        self.clock.load(Ordering::SeqCst)
    }

    async fn post(&self, path: &str, body: &Value) -> Value {
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

    async fn verify(
        &self,
        payment: &PaymentPayload,
        accept: &PaymentRequirements,
    ) -> BatchVerifyResponse {
        let body =
            json!({"x402Version": 2, "paymentPayload": payment, "paymentRequirements": accept});
        serde_json::from_value(self.post("/verify", &body).await).unwrap()
    }

    async fn settle(
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
    async fn operate(&self, payload: &BatchPayload) -> BatchSettleResponse {
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

    async fn claim(
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

    async fn sweep(&self) -> BatchSettleResponse {
        self.operate(&BatchPayload::Settle {
            receiver: PAY_TO.into(),
            token: usdc().asset.into(),
        })
        .await
    }

    /// `eth_call` of `input` on the contract, through the JSON-RPC endpoint.
    async fn call(&self, input: Vec<u8>) -> Vec<u8> {
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

    fn balance(&self, address: &str) -> u128 {
        self.facilitator.balance_of(address).get()
    }
}

async fn serve(router: axum::Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await });
    address
}

fn usdc() -> UsdcDeployment {
    UsdcDeployment::BASE_SEPOLIA
}

fn network() -> Network {
    usdc().network
}

/// The 402's `batch-settlement` accept: up to `PRICE` a request, channels authorized by
/// `receiver_authorizer`, with a 15-minute withdrawal delay.
fn accept(receiver_authorizer: &str) -> PaymentRequirements {
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
struct Channel {
    wallet: SandboxWallet,
    config: ChannelConfig,
    id: String,
    accept: PaymentRequirements,
}

impl Channel {
    fn new(accept: &PaymentRequirements) -> Self {
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

    fn id(&self) -> B256 {
        self.id.parse().unwrap()
    }

    fn voucher(&self, max: u128) -> SignedVoucher {
        self.wallet.sign_voucher(&network(), &self.id, max).unwrap()
    }

    fn claim(&self, max: u128, total: u128) -> VoucherClaim {
        VoucherClaim::new(&self.config, &self.voucher(max), total)
    }

    /// Deposits `amount` over HTTP (`/verify`, then `/settle`) with the first voucher.
    async fn open(&self, sandbox: &Sandbox, amount: u128) -> BatchSettleResponse {
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

    fn state(&self, sandbox: &Sandbox) -> tower_x402_sandbox::batch::ChannelView {
        sandbox
            .facilitator
            .channel_state(&network(), &self.id)
            .unwrap()
    }
}

#[tokio::test]
async fn supported_lists_batch_settlement_with_the_facilitators_receiver_authorizer() {
    let sandbox = Sandbox::start().await;
    let supported: Value = sandbox
        .http
        .get(format!("{}/supported", sandbox.url))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let kinds: Vec<&Value> = supported["kinds"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|kind| kind["scheme"] == "batch-settlement")
        .collect();
    let networks: Vec<&str> = kinds
        .iter()
        .map(|kind| kind["network"].as_str().unwrap())
        .collect();
    assert_eq!(networks, ["eip155:8453", "eip155:84532"]);
    for kind in kinds {
        assert_eq!(kind["x402Version"], 2);
        assert_eq!(
            kind["extra"]["receiverAuthorizer"],
            sandbox.facilitator.receiver_authorizer()
        );
    }
}

#[tokio::test]
async fn one_deposit_then_twenty_vouchers_claimed_in_one_batch_and_swept() {
    let sandbox = Sandbox::start().await;
    let accept = accept(&sandbox.facilitator.receiver_authorizer());
    let channel = Channel::new(&accept);
    let payer = channel.wallet.address();

    // The deposit's /verify shows the empty channel; its /settle the funded one.
    let payment = channel
        .wallet
        .deposit_payment_at(&accept, &channel.config, 100_000, PRICE, sandbox.now())
        .unwrap();
    let verified = sandbox.verify(&payment, &accept).await;
    assert!(verified.is_valid, "{verified:?}");
    assert_eq!(verified.payer.as_deref(), Some(payer.as_str()));
    let before = verified.extra.unwrap();
    assert_eq!(
        (before.channel_id.as_str(), before.balance.as_str()),
        (channel.id.as_str(), "0")
    );
    let deposited = sandbox.settle(&payment, &accept).await;
    assert!(deposited.success, "{deposited:?}");
    assert_eq!(deposited.amount, "100000");
    assert_eq!(deposited.transaction.len(), 66);
    let state = deposited.channel_state().unwrap();
    assert_eq!(
        (state.balance.as_str(), state.total_claimed.as_str()),
        ("100000", "0")
    );
    assert_eq!(
        (state.withdraw_requested_at, state.refund_nonce.as_str()),
        (0, "0")
    );
    assert_eq!(sandbox.balance(&payer), STARTING_BALANCE - 100_000);
    assert_eq!(
        sandbox.balance(&BATCH_SETTLEMENT.to_checksum(None)),
        100_000
    );

    // The same deposit again: its authorization nonce is spent.
    let again = sandbox.settle(&payment, &accept).await;
    assert_eq!(
        again.error_reason.as_deref(),
        Some(reason::DEPOSIT_SIMULATION_FAILED)
    );
    assert_eq!(sandbox.balance(&payer), STARTING_BALANCE - 100_000);

    // Twenty paid requests, each a voucher for the cumulative ceiling; the server charged 700 of
    // each 1,000 after the first.
    let mut charged = PRICE;
    let mut latest = None;
    for _ in 0..20 {
        let ceiling = charged + PRICE;
        let voucher = channel
            .wallet
            .voucher_payment(&accept, &channel.config, ceiling)
            .unwrap();
        let verified = sandbox.verify(&voucher, &accept).await;
        assert!(verified.is_valid, "{verified:?}");
        assert_eq!(verified.extra.unwrap().balance, "100000");
        charged += 700;
        latest = Some((ceiling, charged));
    }
    let (ceiling, charged) = latest.unwrap();
    assert_eq!((ceiling, charged), (15_300, 15_000));
    assert_eq!(
        channel.state(&sandbox).total_claimed,
        0,
        "vouchers move nothing"
    );

    // One claim of the latest voucher, signed by the facilitator's key; then one sweep.
    let claimed = sandbox
        .claim(vec![channel.claim(ceiling, charged)], None)
        .await;
    assert!(claimed.success, "{claimed:?}");
    assert_eq!(claimed.amount, "", "a claim moves no tokens");
    assert_eq!(channel.state(&sandbox).total_claimed, charged);
    assert_eq!(sandbox.balance(PAY_TO), STARTING_BALANCE);
    let swept = sandbox.sweep().await;
    assert!(swept.success, "{swept:?}");
    assert_eq!(swept.amount, charged.to_string());
    assert_eq!(sandbox.balance(PAY_TO), STARTING_BALANCE + charged);
    assert_eq!(
        sandbox.balance(&BATCH_SETTLEMENT.to_checksum(None)),
        100_000 - charged
    );
    let nothing = sandbox.sweep().await;
    assert_eq!(
        nothing.error_reason.as_deref(),
        Some(reason::NOTHING_TO_SETTLE)
    );
    assert_eq!(sandbox.balance(PAY_TO), STARTING_BALANCE + charged);

    // The views over JSON-RPC.
    let views = sandbox
        .call(
            channelsCall {
                channelId: channel.id(),
            }
            .abi_encode(),
        )
        .await;
    let views = channelsCall::abi_decode_returns(&views).unwrap();
    assert_eq!((views.balance, views.totalClaimed), (100_000, charged));
    let totals = receiversCall {
        receiver: PAY_TO.parse().unwrap(),
        token: usdc().asset.parse().unwrap(),
    };
    let totals =
        receiversCall::abi_decode_returns(&sandbox.call(totals.abi_encode()).await).unwrap();
    assert_eq!(
        (totals.totalClaimed, totals.totalSettled),
        (charged, charged)
    );
}

#[tokio::test]
async fn claims_beyond_the_balance_or_the_ceiling_or_forged_are_refused_and_stale_ones_change_nothing()
 {
    let sandbox = Sandbox::start().await;
    let accept = accept(&sandbox.facilitator.receiver_authorizer());
    let channel = Channel::new(&accept);
    channel.open(&sandbox, 10_000).await;

    // Beyond the balance: /verify refuses the voucher, the contract the claim.
    let beyond = channel
        .wallet
        .voucher_payment(&accept, &channel.config, 12_000)
        .unwrap();
    let refused = sandbox.verify(&beyond, &accept).await;
    assert_eq!(
        refused.invalid_reason.as_deref(),
        Some(reason::CUMULATIVE_EXCEEDS_BALANCE)
    );
    let refused = sandbox
        .claim(vec![channel.claim(12_000, 12_000)], None)
        .await;
    assert_eq!(
        refused.error_reason.as_deref(),
        Some(reason::CLAIM_SIMULATION_FAILED)
    );
    assert!(
        refused
            .error_message
            .unwrap()
            .contains("ClaimExceedsBalance")
    );
    // Above the voucher's ceiling.
    let refused = sandbox.claim(vec![channel.claim(4_000, 5_000)], None).await;
    assert!(
        refused
            .error_message
            .unwrap()
            .contains("ClaimExceedsCeiling")
    );

    // A voucher signed by another key: refused by /verify and by the claim.
    let thief = SandboxWallet::random();
    let forged = thief.sign_voucher(&network(), &channel.id, 5_000).unwrap();
    let mut payment = channel
        .wallet
        .voucher_payment(&accept, &channel.config, 5_000)
        .unwrap();
    payment.payload = serde_json::value::to_raw_value(&BatchPayload::Voucher {
        channel_config: channel.config.clone(),
        voucher: forged.clone(),
    })
    .unwrap();
    let refused = sandbox.verify(&payment, &accept).await;
    assert_eq!(
        refused.invalid_reason.as_deref(),
        Some(reason::VOUCHER_SIGNATURE)
    );
    let refused = sandbox
        .claim(
            vec![VoucherClaim::new(&channel.config, &forged, 5_000)],
            None,
        )
        .await;
    assert!(refused.error_message.unwrap().contains("InvalidSignature"));
    // A tampered configuration no longer hashes to the channel id.
    let mut tampered = channel.config.clone();
    tampered.receiver = thief.address();
    payment.payload = serde_json::value::to_raw_value(&BatchPayload::Voucher {
        channel_config: tampered,
        voucher: channel.voucher(5_000),
    })
    .unwrap();
    let refused = sandbox.verify(&payment, &accept).await;
    assert_eq!(
        refused.invalid_reason.as_deref(),
        Some(reason::CHANNEL_ID_MISMATCH)
    );
    // A claim batch signature by someone other than the receiver authorizer.
    let signature = thief
        .sign_claim_batch(&network(), &[channel.claim(5_000, 5_000)])
        .unwrap();
    let refused = sandbox
        .claim(vec![channel.claim(5_000, 5_000)], Some(signature))
        .await;
    assert!(refused.error_message.unwrap().contains("InvalidSignature"));
    assert_eq!(
        channel.state(&sandbox).total_claimed,
        0,
        "nothing refused changed anything"
    );

    // A batch is all or nothing: one bad row and the good one is not applied either.
    let mixed = vec![
        channel.claim(5_000, 5_000),
        VoucherClaim::new(&channel.config, &forged, 6_000),
    ];
    assert!(!sandbox.claim(mixed, None).await.success);
    assert_eq!(channel.state(&sandbox).total_claimed, 0);

    // Claims are monotonic: a lower total after a higher one is a no-op.
    assert!(
        sandbox
            .claim(vec![channel.claim(5_000, 5_000)], None)
            .await
            .success
    );
    let stale = sandbox.claim(vec![channel.claim(3_000, 3_000)], None).await;
    assert!(
        stale.success,
        "the contract ignores a total at or below the claimed one"
    );
    assert_eq!(channel.state(&sandbox).total_claimed, 5_000);
    let replayed = sandbox.claim(vec![channel.claim(5_000, 5_000)], None).await;
    assert!(replayed.success);
    let totals = sandbox
        .facilitator
        .receiver_totals(&network(), PAY_TO, usdc().asset)
        .unwrap();
    assert_eq!(totals, (5_000, 0), "claimed once, never twice");
    // And a voucher at or below what was claimed no longer verifies.
    let old = channel
        .wallet
        .voucher_payment(&accept, &channel.config, 5_000)
        .unwrap();
    let refused = sandbox.verify(&old, &accept).await;
    assert_eq!(
        refused.invalid_reason.as_deref(),
        Some(reason::CUMULATIVE_BELOW_CLAIMED)
    );
}

#[tokio::test]
async fn claims_follow_the_receiver_authorizer_rule() {
    let sandbox = Sandbox::start().await;
    // A server that owns its receiver-authorizer key.
    let server = SandboxWallet::random();
    let accept = accept(&server.address());
    let channel = Channel::new(&accept);
    channel.open(&sandbox, 10_000).await;

    // Without the server's signature the facilitator cannot sign for a key it does not hold.
    let refused = sandbox.claim(vec![channel.claim(3_000, 2_500)], None).await;
    assert_eq!(
        refused.error_reason.as_deref(),
        Some(reason::AUTHORIZER_ADDRESS_MISMATCH)
    );
    // A signature over other totals than those submitted does not authorize them.
    let signature = server
        .sign_claim_batch(&network(), &[channel.claim(3_000, 2_000)])
        .unwrap();
    let refused = sandbox
        .claim(vec![channel.claim(3_000, 2_500)], Some(signature))
        .await;
    assert!(refused.error_message.unwrap().contains("InvalidSignature"));
    // The server's own signature over the batch.
    let signature = server
        .sign_claim_batch(&network(), &[channel.claim(3_000, 2_500)])
        .unwrap();
    let claimed = sandbox
        .claim(vec![channel.claim(3_000, 2_500)], Some(signature))
        .await;
    assert!(claimed.success, "{claimed:?}");
    assert_eq!(channel.state(&sandbox).total_claimed, 2_500);

    // One batch, one receiver authorizer: a row of a channel the facilitator authorizes does
    // not ride on the server's signature, and the facilitator does not sign for the server's.
    let delegated = Channel::new(&super_accept(
        &sandbox.facilitator.receiver_authorizer(),
        DELAY,
    ));
    delegated.open(&sandbox, 10_000).await;
    let rows = vec![channel.claim(4_000, 4_000), delegated.claim(PRICE, PRICE)];
    let signature = server.sign_claim_batch(&network(), &rows).unwrap();
    let refused = sandbox.claim(rows.clone(), Some(signature)).await;
    assert!(
        refused
            .error_message
            .unwrap()
            .contains("NotReceiverAuthorizer")
    );
    let refused = sandbox.claim(rows, None).await;
    assert_eq!(
        refused.error_reason.as_deref(),
        Some(reason::AUTHORIZER_ADDRESS_MISMATCH)
    );
    assert_eq!(channel.state(&sandbox).total_claimed, 2_500);
    assert_eq!(delegated.state(&sandbox).total_claimed, 0);
}

#[tokio::test]
async fn refunds_partial_and_full_with_the_nonce_advancing_even_when_nothing_moves() {
    let sandbox = Sandbox::start().await;
    let accept = accept(&sandbox.facilitator.receiver_authorizer());
    let channel = Channel::new(&accept);
    let payer = channel.wallet.address();
    channel.open(&sandbox, 50_000).await;
    let charged = 3_000;

    // The payer asks for 10,000 back with its zero-charge voucher; the server verifies it and
    // completes it with the nonce and the claim of what was charged.
    let request = channel
        .wallet
        .refund_payment(&accept, &channel.config, charged, Some(10_000))
        .unwrap();
    let verified = sandbox.verify(&request, &accept).await;
    assert!(verified.is_valid, "{verified:?}");
    assert_eq!(verified.extra.as_ref().unwrap().refund_nonce, "0");
    let complete = |amount: u128, nonce: u128| {
        let mut payment = request.clone();
        payment.payload = serde_json::value::to_raw_value(&BatchPayload::Refund {
            channel_config: channel.config.clone(),
            voucher: channel.voucher(charged),
            amount: Some(amount.to_string()),
            refund_nonce: Some(nonce.to_string()),
            claims: Some(vec![channel.claim(charged, charged)]),
            refund_authorizer_signature: None,
            claim_authorizer_signature: None,
        })
        .unwrap();
        payment
    };
    let refunded = sandbox.settle(&complete(10_000, 0), &accept).await;
    assert!(refunded.success, "{refunded:?}");
    assert_eq!(refunded.amount, "10000");
    assert_eq!(refunded.payer.as_deref(), Some(payer.as_str()));
    let state = refunded.channel_state().unwrap();
    assert_eq!(
        (
            state.balance.as_str(),
            state.total_claimed.as_str(),
            state.refund_nonce.as_str()
        ),
        ("40000", "3000", "1")
    );
    assert_eq!(sandbox.balance(&payer), STARTING_BALANCE - 50_000 + 10_000);

    // The same completed refund again: its nonce is spent.
    let replayed = sandbox.settle(&complete(10_000, 0), &accept).await;
    assert_eq!(
        replayed.error_reason.as_deref(),
        Some(reason::REFUND_SIMULATION_FAILED)
    );
    assert!(
        replayed
            .error_message
            .unwrap()
            .contains("InvalidRefundNonce")
    );

    // The rest: 37,000; the charged 3,000 stay claimed for the receiver.
    let full = sandbox.settle(&complete(37_000, 1), &accept).await;
    assert!(full.success, "{full:?}");
    assert_eq!(full.amount, "37000");
    let state = full.channel_state().unwrap();
    assert_eq!(
        (state.balance.as_str(), state.refund_nonce.as_str()),
        ("3000", "2")
    );
    assert_eq!(sandbox.balance(&payer), STARTING_BALANCE - 3_000);
    let nothing = sandbox.settle(&complete(1, 2), &accept).await;
    assert_eq!(
        nothing.error_reason.as_deref(),
        Some(reason::REFUND_NO_BALANCE)
    );

    // A direct refund by the receiver with nothing unclaimed moves nothing but spends a nonce.
    let moved = sandbox
        .facilitator
        .refund_directly(&network(), &channel.config, 1, PAY_TO)
        .unwrap();
    assert_eq!(moved, 0);
    assert_eq!(channel.state(&sandbox).refund_nonce, 3);
    let nonce = refundNonceCall::abi_decode_returns(
        &sandbox
            .call(
                refundNonceCall {
                    channelId: channel.id(),
                }
                .abi_encode(),
            )
            .await,
    )
    .unwrap();
    assert_eq!(nonce, U256::from(3));
    // Only the receiver side may refund directly.
    let refused = sandbox
        .facilitator
        .refund_directly(&network(), &channel.config, 1, &payer);
    assert_eq!(
        refused,
        Err(ChannelError::Reverted("NotAuthorizedToRefund".into()))
    );

    assert!(sandbox.sweep().await.success);
    assert_eq!(sandbox.balance(PAY_TO), STARTING_BALANCE + 3_000);
}

#[tokio::test]
async fn a_server_owned_authorizer_signs_the_refund_itself() {
    let sandbox = Sandbox::start().await;
    let server = SandboxWallet::random();
    let accept = accept(&server.address());
    let channel = Channel::new(&accept);
    channel.open(&sandbox, 20_000).await;
    let completed = |refund_signature: Option<String>| {
        let claims = vec![channel.claim(PRICE, PRICE)];
        let claim_signature = server.sign_claim_batch(&network(), &claims).unwrap();
        let mut payment = channel
            .wallet
            .refund_payment(&accept, &channel.config, PRICE, None)
            .unwrap();
        payment.payload = serde_json::value::to_raw_value(&BatchPayload::Refund {
            channel_config: channel.config.clone(),
            voucher: channel.voucher(PRICE),
            amount: Some("19000".into()),
            refund_nonce: Some("0".into()),
            claims: Some(claims),
            refund_authorizer_signature: refund_signature,
            claim_authorizer_signature: Some(claim_signature),
        })
        .unwrap();
        payment
    };
    let refused = sandbox.settle(&completed(None), &accept).await;
    assert_eq!(
        refused.error_reason.as_deref(),
        Some(reason::AUTHORIZER_ADDRESS_MISMATCH)
    );
    let wrong_amount = server
        .sign_refund(&network(), &channel.id, 0, 18_000)
        .unwrap();
    let refused = sandbox
        .settle(&completed(Some(wrong_amount)), &accept)
        .await;
    assert!(refused.error_message.unwrap().contains("InvalidSignature"));
    let signature = server
        .sign_refund(&network(), &channel.id, 0, 19_000)
        .unwrap();
    let refunded = sandbox.settle(&completed(Some(signature)), &accept).await;
    assert!(refunded.success, "{refunded:?}");
    assert_eq!(refunded.amount, "19000");
    let state = channel.state(&sandbox);
    assert_eq!(
        (state.balance, state.total_claimed, state.refund_nonce),
        (1_000, 1_000, 1)
    );
}

#[tokio::test]
async fn a_withdrawal_completes_only_after_its_delay_and_a_claim_before_it_wins() {
    let sandbox = Sandbox::start().await;
    let accept = accept(&sandbox.facilitator.receiver_authorizer());
    let channel = Channel::new(&accept);
    let payer = channel.wallet.address();
    channel.open(&sandbox, 20_000).await;

    let started = sandbox.now();
    sandbox
        .facilitator
        .initiate_withdraw(&network(), &channel.config, 20_000, &payer)
        .unwrap();
    // Only the payer side may start one, once.
    let refused = sandbox
        .facilitator
        .initiate_withdraw(&network(), &channel.config, 1, PAY_TO);
    assert_eq!(
        refused,
        Err(ChannelError::Reverted("InvalidChannel".into()))
    );
    let refused = sandbox
        .facilitator
        .initiate_withdraw(&network(), &channel.config, 1, &payer);
    assert_eq!(
        refused,
        Err(ChannelError::Reverted("WithdrawalAlreadyPending".into()))
    );

    // A server watching the chain sees it, through eth_call and in /verify's snapshot.
    let pending = pendingWithdrawalsCall::abi_decode_returns(
        &sandbox
            .call(
                pendingWithdrawalsCall {
                    channelId: channel.id(),
                }
                .abi_encode(),
            )
            .await,
    )
    .unwrap();
    assert_eq!(
        (pending.amount, pending.initiatedAt.to::<u64>()),
        (20_000, started)
    );
    let voucher = channel
        .wallet
        .voucher_payment(&accept, &channel.config, 8_000)
        .unwrap();
    let verified = sandbox.verify(&voucher, &accept).await;
    assert_eq!(verified.extra.unwrap().withdraw_requested_at, started);

    // Not before the delay.
    sandbox.advance(DELAY - 1);
    let early = sandbox
        .facilitator
        .finalize_withdraw(&network(), &channel.config, &payer);
    assert_eq!(
        early,
        Err(ChannelError::Reverted("WithdrawDelayNotElapsed".into()))
    );
    // The server claims in time.
    let claimed = sandbox.claim(vec![channel.claim(8_000, 7_500)], None).await;
    assert!(claimed.success, "{claimed:?}");

    sandbox.advance(1);
    let withdrawn = sandbox
        .facilitator
        .finalize_withdraw(&network(), &channel.config, &payer)
        .unwrap();
    assert_eq!(withdrawn, 20_000 - 7_500, "capped by what is unclaimed");
    assert_eq!(sandbox.balance(&payer), STARTING_BALANCE - 7_500);
    let state = channel.state(&sandbox);
    assert_eq!(
        (
            state.balance,
            state.total_claimed,
            state.withdraw_requested_at
        ),
        (7_500, 7_500, 0)
    );
    let swept = sandbox.sweep().await;
    assert_eq!(swept.amount, "7500");
    assert_eq!(sandbox.balance(&BATCH_SETTLEMENT.to_checksum(None)), 0);

    // A channel whose server did not claim in time: the late claim finds no balance.
    let late = Channel::new(&accept);
    late.open(&sandbox, 5_000).await;
    let payer = late.wallet.address();
    sandbox
        .facilitator
        .initiate_withdraw(&network(), &late.config, 5_000, &payer)
        .unwrap();
    sandbox.advance(DELAY);
    assert_eq!(
        sandbox
            .facilitator
            .finalize_withdraw(&network(), &late.config, &payer),
        Ok(5_000)
    );
    let refused = sandbox.claim(vec![late.claim(PRICE, PRICE)], None).await;
    assert!(
        refused
            .error_message
            .unwrap()
            .contains("ClaimExceedsBalance")
    );
    assert_eq!(sandbox.balance(&payer), STARTING_BALANCE);
}

#[tokio::test]
async fn a_refund_reduces_a_pending_withdrawal() {
    let sandbox = Sandbox::start().await;
    let accept = accept(&sandbox.facilitator.receiver_authorizer());
    let channel = Channel::new(&accept);
    let payer = channel.wallet.address();
    channel.open(&sandbox, 10_000).await;
    sandbox
        .facilitator
        .initiate_withdraw(&network(), &channel.config, 6_000, &payer)
        .unwrap();
    let receiver_authorizer = sandbox.facilitator.receiver_authorizer();
    let refunded = sandbox
        .facilitator
        .refund_directly(&network(), &channel.config, 4_000, &receiver_authorizer)
        .unwrap();
    assert_eq!(refunded, 4_000);
    assert_eq!(channel.state(&sandbox).pending_withdrawal, 2_000);
    sandbox
        .facilitator
        .refund_directly(&network(), &channel.config, 2_000, &receiver_authorizer)
        .unwrap();
    let state = channel.state(&sandbox);
    assert_eq!(
        (state.pending_withdrawal, state.withdraw_requested_at),
        (0, 0),
        "cancelled"
    );
}

#[tokio::test]
async fn several_channels_are_claimed_in_one_settle_and_swept_in_one() {
    let sandbox = Sandbox::start().await;
    let accept = accept(&sandbox.facilitator.receiver_authorizer());
    let channels: Vec<Channel> = (0..3).map(|_| Channel::new(&accept)).collect();
    for channel in &channels {
        channel.open(&sandbox, 30_000).await;
    }
    let claims: Vec<VoucherClaim> = channels
        .iter()
        .zip([4_000u128, 9_000, 1_000])
        .map(|(channel, total)| channel.claim(total, total))
        .collect();
    let claimed = sandbox.claim(claims, None).await;
    assert!(claimed.success, "{claimed:?}");
    for (channel, total) in channels.iter().zip([4_000u128, 9_000, 1_000]) {
        assert_eq!(channel.state(&sandbox).total_claimed, total);
    }
    let swept = sandbox.sweep().await;
    assert_eq!(swept.amount, "14000");
    assert_eq!(sandbox.balance(PAY_TO), STARTING_BALANCE + 14_000);
    assert_eq!(
        sandbox.balance(&BATCH_SETTLEMENT.to_checksum(None)),
        90_000 - 14_000
    );
}

#[tokio::test]
async fn a_smart_wallet_payer_signs_through_eip_1271() {
    let sandbox = Sandbox::start().await;
    let accept = accept(&sandbox.facilitator.receiver_authorizer());
    let owner = SandboxWallet::random();
    let wallet = sandbox
        .facilitator
        .deploy_contract_wallet(&owner.address())
        .unwrap();
    let mut config = owner.channel_config(&accept, [7; 32]).unwrap();
    config.payer = wallet.clone();
    config.payer_authorizer = Address::ZERO.to_checksum(None);
    let id = SandboxWallet::channel_id(&config, &network()).unwrap();

    let payment = owner
        .deposit_payment_at(&accept, &config, 10_000, PRICE, sandbox.now())
        .unwrap();
    let verified = sandbox.verify(&payment, &accept).await;
    assert!(verified.is_valid, "{verified:?}");
    assert!(sandbox.settle(&payment, &accept).await.success);
    assert_eq!(sandbox.balance(&wallet), STARTING_BALANCE - 10_000);

    let voucher = owner.voucher_payment(&accept, &config, 2 * PRICE).unwrap();
    assert!(sandbox.verify(&voucher, &accept).await.is_valid);
    let stranger = SandboxWallet::random()
        .voucher_payment(&accept, &config, 2 * PRICE)
        .unwrap();
    let refused = sandbox.verify(&stranger, &accept).await;
    assert_eq!(
        refused.invalid_reason.as_deref(),
        Some(reason::VOUCHER_SIGNATURE)
    );
    let signed = owner.sign_voucher(&network(), &id, 2 * PRICE).unwrap();
    let claimed = sandbox
        .claim(vec![VoucherClaim::new(&config, &signed, 1_500)], None)
        .await;
    assert!(claimed.success, "{claimed:?}");
}

#[tokio::test]
async fn deposits_are_checked_before_anything_moves() {
    let sandbox = Sandbox::start().await;
    let accept = accept(&sandbox.facilitator.receiver_authorizer());
    let channel = Channel::new(&accept);
    let payer = channel.wallet.address();
    let settle_reason = |answer: BatchSettleResponse| answer.error_reason.unwrap_or_default();

    // More than the payer holds.
    sandbox
        .facilitator
        .set_balance(&payer, AtomicAmount(5_000))
        .unwrap();
    let payment = channel
        .wallet
        .deposit_payment_at(&accept, &channel.config, 6_000, PRICE, sandbox.now())
        .unwrap();
    assert_eq!(
        sandbox
            .verify(&payment, &accept)
            .await
            .invalid_reason
            .as_deref(),
        Some(reason::INSUFFICIENT_BALANCE)
    );
    assert_eq!(
        settle_reason(sandbox.settle(&payment, &accept).await),
        reason::INSUFFICIENT_BALANCE
    );
    // A first voucher above the deposit.
    let payment = channel
        .wallet
        .deposit_payment_at(&accept, &channel.config, 4_000, 4_001, sandbox.now())
        .unwrap();
    assert_eq!(
        sandbox
            .verify(&payment, &accept)
            .await
            .invalid_reason
            .as_deref(),
        Some(reason::CUMULATIVE_EXCEEDS_BALANCE)
    );
    // An expired authorization.
    let payment = channel
        .wallet
        .deposit_payment_at(
            &accept,
            &channel.config,
            4_000,
            PRICE,
            sandbox.now() - 3_600,
        )
        .unwrap();
    assert_eq!(
        sandbox
            .verify(&payment, &accept)
            .await
            .invalid_reason
            .as_deref(),
        Some(reason::VALID_BEFORE)
    );
    // A channel for another receiver authorizer or another delay than the 402's.
    let other = super_accept(&SandboxWallet::random().address(), DELAY);
    let payment = channel
        .wallet
        .deposit_payment_at(&other, &channel.config, 4_000, PRICE, sandbox.now())
        .unwrap();
    assert_eq!(
        sandbox
            .verify(&payment, &other)
            .await
            .invalid_reason
            .as_deref(),
        Some(reason::RECEIVER_AUTHORIZER_MISMATCH)
    );
    let longer = super_accept(&sandbox.facilitator.receiver_authorizer(), 2 * DELAY);
    let payment = channel
        .wallet
        .deposit_payment_at(&longer, &channel.config, 4_000, PRICE, sandbox.now())
        .unwrap();
    assert_eq!(
        sandbox
            .verify(&payment, &longer)
            .await
            .invalid_reason
            .as_deref(),
        Some(reason::WITHDRAW_DELAY_MISMATCH)
    );
    // A voucher payment before any deposit: there is no channel.
    let voucher = channel
        .wallet
        .voucher_payment(&accept, &channel.config, PRICE)
        .unwrap();
    assert_eq!(
        sandbox
            .verify(&voucher, &accept)
            .await
            .invalid_reason
            .as_deref(),
        Some(reason::CHANNEL_NOT_FOUND)
    );
    // A voucher is never settled on its own.
    assert_eq!(
        settle_reason(sandbox.settle(&voucher, &accept).await),
        reason::PAYLOAD_TYPE
    );
    assert_eq!(sandbox.balance(&payer), 5_000);
    assert_eq!(channel.state(&sandbox).balance, 0);
}

/// `accept` with another receiver authorizer and withdrawal delay.
fn super_accept(receiver_authorizer: &str, delay: u64) -> PaymentRequirements {
    let mut accept = accept(receiver_authorizer);
    if let Some(extra) = accept.extra.as_mut() {
        extra.insert("withdrawDelay".into(), json!(delay));
    }
    accept
}

#[tokio::test]
async fn a_claim_whose_answer_is_lost_happened_and_sending_it_again_claims_nothing_twice() {
    let sandbox = Sandbox::start().await;
    let accept = accept(&sandbox.facilitator.receiver_authorizer());
    let channel = Channel::new(&accept);
    channel.open(&sandbox, 10_000).await;

    sandbox
        .facilitator
        .queue_settle(tower_x402_sandbox::Step::AnswerLost);
    let mut requirements = accept.clone();
    requirements.amount = AtomicAmount(0);
    let claim = BatchPayload::Claim {
        claims: vec![channel.claim(3_000, 2_000)],
        claim_authorizer_signature: None,
    };
    let body = json!({
        "x402Version": 2,
        "paymentPayload": {"x402Version": 2, "accepted": requirements, "payload": claim},
        "paymentRequirements": requirements,
    });
    let lost = sandbox
        .http
        .post(format!("{}/settle", sandbox.url))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(lost.status(), 504);
    // The chain shows the claim; the same claim again is a no-op.
    let views = sandbox
        .call(
            channelsCall {
                channelId: channel.id(),
            }
            .abi_encode(),
        )
        .await;
    assert_eq!(
        channelsCall::abi_decode_returns(&views)
            .unwrap()
            .totalClaimed,
        2_000
    );
    assert!(
        sandbox.post("/settle", &body).await["success"]
            .as_bool()
            .unwrap()
    );
    let totals = sandbox
        .facilitator
        .receiver_totals(&network(), PAY_TO, usdc().asset)
        .unwrap();
    assert_eq!(totals, (2_000, 0));
}

#[tokio::test]
async fn the_in_process_facilitator_answers_batch_settlement_too() {
    use tower_x402::Facilitator as _;
    use x402_wire::FacilitatorRequest;

    let sandbox = Sandbox::start().await;
    let accept = accept(&sandbox.facilitator.receiver_authorizer());
    let channel = Channel::new(&accept);
    let payment = channel
        .wallet
        .deposit_payment_at(&accept, &channel.config, 10_000, PRICE, sandbox.now())
        .unwrap();
    let request = FacilitatorRequest::new(payment, accept.clone());
    let verified = sandbox.facilitator.verify(&request).await.unwrap();
    assert!(verified.is_valid, "{verified:?}");
    let settled = sandbox.facilitator.settle(&request).await.unwrap();
    assert!(settled.success, "{settled:?}");
    assert_eq!(settled.amount, Some(AtomicAmount(10_000)));
    let again = sandbox.facilitator.settle(&request).await.unwrap();
    assert_eq!(
        again.error_reason.as_deref(),
        Some(reason::DEPOSIT_SIMULATION_FAILED)
    );
}

#[tokio::test]
async fn a_permit2_deposit_is_pulled_once_and_its_permit_checked() {
    let sandbox = Sandbox::start().await;
    let mut accept = accept(&sandbox.facilitator.receiver_authorizer());
    if let Some(extra) = accept.extra.as_mut() {
        extra.insert("assetTransferMethod".into(), json!("permit2"));
    }
    let channel = Channel::new(&accept);
    let payer = channel.wallet.address();
    let payment = channel
        .wallet
        .deposit_payment_at(&accept, &channel.config, 40_000, PRICE, sandbox.now())
        .unwrap();
    let BatchPayload::Deposit { deposit, .. } =
        serde_json::from_str::<BatchPayload>(payment.payload.get()).unwrap()
    else {
        panic!("a deposit");
    };
    let permit = deposit.authorization.permit2_authorization.clone().unwrap();
    assert!(deposit.authorization.erc3009_authorization.is_none());
    assert_eq!(permit.witness.channel_id, channel.id);

    // Each tampered field is refused with its reason, before anything moves.
    let tampered = |edit: &dyn Fn(&mut tower_x402_sandbox::batch::Permit2Deposit)| {
        let mut deposit = deposit.clone();
        edit(
            deposit
                .authorization
                .permit2_authorization
                .as_mut()
                .unwrap(),
        );
        let mut payment = payment.clone();
        payment.payload = serde_json::value::to_raw_value(&BatchPayload::Deposit {
            channel_config: channel.config.clone(),
            voucher: channel.voucher(PRICE),
            deposit,
        })
        .unwrap();
        payment
    };
    let cases: [(
        &dyn Fn(&mut tower_x402_sandbox::batch::Permit2Deposit),
        &str,
    ); 4] = [
        (
            &|permit| permit.spender = PAY_TO.into(),
            reason::PERMIT2_INVALID_SPENDER,
        ),
        (
            &|permit| permit.permitted.amount = "40001".into(),
            reason::PERMIT2_AMOUNT_MISMATCH,
        ),
        (
            &|permit| permit.deadline = (START - 1).to_string(),
            reason::PERMIT2_DEADLINE_EXPIRED,
        ),
        (
            &|permit| permit.nonce = "7".into(),
            reason::PERMIT2_INVALID_SIGNATURE,
        ),
    ];
    for (edit, expected) in cases {
        let refused = sandbox.verify(&tampered(edit), &accept).await;
        assert_eq!(refused.invalid_reason.as_deref(), Some(expected));
        let refused = sandbox.settle(&tampered(edit), &accept).await;
        assert_eq!(refused.error_reason.as_deref(), Some(expected));
    }
    assert_eq!(sandbox.balance(&payer), STARTING_BALANCE);

    let verified = sandbox.verify(&payment, &accept).await;
    assert!(verified.is_valid, "{verified:?}");
    let settled = sandbox.settle(&payment, &accept).await;
    assert!(settled.success, "{settled:?}");
    assert_eq!(settled.amount, "40000");
    assert_eq!(sandbox.balance(&payer), STARTING_BALANCE - 40_000);
    assert_eq!(channel.state(&sandbox).balance, 40_000);
    let again = sandbox.settle(&payment, &accept).await;
    assert_eq!(
        again.error_reason.as_deref(),
        Some(reason::DEPOSIT_SIMULATION_FAILED)
    );
    assert_eq!(sandbox.balance(&payer), STARTING_BALANCE - 40_000);
}
