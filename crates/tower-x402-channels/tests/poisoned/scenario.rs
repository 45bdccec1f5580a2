//! A poisoned channel beside honest ones, on any [`ChannelStore`]: a channel charged beyond what
//! it holds on chain (its payer withdrew, and the server's mirror still shows the deposit) makes
//! the contract revert a claim batch whole. The honest channels are claimed in the same round;
//! the poisoned one is marked refused, reported, and never batched with the others again.
//! Included by the memory store's test and by tower-x402-postgres's.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use tower_x402::{BoxFuture, Facilitator, FacilitatorError, HttpFacilitator};
use tower_x402_channels::{
    Begin, Channel, ChannelConfig, ChannelStore, Claimer, Commit, Committed, Hold, OnChain,
    RpcChainReader, Voucher,
};
use tower_x402_sandbox::{SandboxFacilitator, SandboxWallet};
use x402_wire::{
    AtomicAmount, FacilitatorRequest, PaymentRequirements, SettleResponse, UsdcDeployment,
    VerifyResponse,
};

const PAY_TO: &str = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";
const PRICE: u128 = 10_000;
const DELAY: u64 = 900;
const START: u64 = 1_750_000_000;

fn usdc() -> UsdcDeployment {
    UsdcDeployment::BASE_SEPOLIA
}

async fn serve(router: axum::Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await });
    address
}

/// The facilitator over HTTP, keeping the channel ids of every claim batch it is sent.
#[derive(Clone)]
struct Batches {
    inner: HttpFacilitator,
    batches: Arc<Mutex<Vec<Vec<String>>>>,
}

impl Facilitator for Batches {
    fn verify<'a>(
        &'a self,
        request: &'a FacilitatorRequest,
    ) -> BoxFuture<'a, Result<VerifyResponse, FacilitatorError>> {
        self.inner.verify(request)
    }

    fn settle<'a>(
        &'a self,
        request: &'a FacilitatorRequest,
    ) -> BoxFuture<'a, Result<SettleResponse, FacilitatorError>> {
        let payload: Value = serde_json::from_str(request.payment_payload().payload.get()).unwrap();
        if payload["type"] == "claim" {
            let salts = payload["claims"]
                .as_array()
                .unwrap()
                .iter()
                .map(|row| {
                    row["voucher"]["channel"]["salt"]
                        .as_str()
                        .unwrap()
                        .to_owned()
                })
                .collect();
            self.batches.lock().unwrap().push(salts);
        }
        self.inner.settle(request)
    }
}

struct Buyer {
    wallet: SandboxWallet,
    config: tower_x402_sandbox::batch::ChannelConfig,
    id: String,
    salt: String,
}

impl Buyer {
    async fn open(
        sandbox: &SandboxFacilitator,
        url: &str,
        clock: &AtomicU64,
        store: &dyn ChannelStore,
        deposit: u128,
    ) -> Self {
        let mut extra = usdc().eip712.map(|d| d.to_extra()).unwrap_or_default();
        extra.insert(
            "receiverAuthorizer".into(),
            json!(sandbox.receiver_authorizer()),
        );
        extra.insert("withdrawDelay".into(), json!(DELAY));
        let accept = PaymentRequirements {
            scheme: "batch-settlement".into(),
            network: usdc().network,
            amount: AtomicAmount(PRICE),
            asset: usdc().asset.into(),
            pay_to: PAY_TO.into(),
            max_timeout_seconds: 3600,
            extra: Some(extra),
        };
        let wallet = SandboxWallet::random();
        let config = wallet.channel_config(&accept, rand::random()).unwrap();
        let id = SandboxWallet::channel_id(&config, &usdc().network).unwrap();
        let payment = wallet
            .deposit_payment_at(
                &accept,
                &config,
                deposit,
                PRICE,
                clock.load(Ordering::SeqCst),
            )
            .unwrap();
        let client = HttpFacilitator::new(url).unwrap();
        let settled = client
            .settle(&FacilitatorRequest::new(payment, accept.clone()))
            .await
            .unwrap();
        assert!(settled.success, "{settled:?}");
        let server_config: ChannelConfig =
            serde_json::from_value(serde_json::to_value(&config).unwrap()).unwrap();
        let salt = server_config.salt.clone();
        let channel = Channel::new(
            &id,
            usdc().network,
            server_config,
            OnChain::new(deposit, 0, 1),
        );
        assert!(store.open(&channel).await.unwrap());
        Self {
            wallet,
            config,
            id,
            salt,
        }
    }

    /// Requests served and committed as the scheme does, `charge` each.
    async fn pay(&self, store: &dyn ChannelStore, requests: usize, charge: u128) -> u128 {
        for _ in 0..requests {
            let hold = Hold::new("server", u64::MAX);
            let Begin::Held(channel) = store.begin(&self.id, &hold, 0).await.unwrap() else {
                panic!("the channel is free")
            };
            let ceiling = channel.charged + PRICE;
            let signed = self
                .wallet
                .sign_voucher(&usdc().network, &self.id, ceiling)
                .unwrap();
            let commit = Commit::new(
                channel.charged,
                channel.charged + charge,
                Voucher::new(ceiling, signed.signature),
            );
            assert_eq!(
                store.commit(&self.id, &hold.id, &commit).await.unwrap(),
                Committed::Done
            );
        }
        store.load(&self.id).await.unwrap().unwrap().charged
    }
}

/// Two honest channels and a poisoned one between them; `with_chain`: the claimer reads the
/// chain (and so caps the poisoned claim at what the channel holds) or not.
pub(crate) async fn a_poisoned_channel_leaves_the_honest_ones_claimed(
    store: Arc<dyn ChannelStore>,
    with_chain: bool,
) {
    let clock = Arc::new(AtomicU64::new(START));
    let time = Arc::clone(&clock);
    let sandbox = SandboxFacilitator::new().with_clock(move || time.load(Ordering::SeqCst));
    let url = format!("http://{}", serve(sandbox.router()).await);
    let rpc = format!("http://{}", serve(sandbox.rpc_router(usdc().network)).await);

    let first = Buyer::open(&sandbox, &url, &clock, &*store, 50_000).await;
    let poisoned = Buyer::open(&sandbox, &url, &clock, &*store, 50_000).await;
    let last = Buyer::open(&sandbox, &url, &clock, &*store, 50_000).await;
    let honest = [
        first.pay(&*store, 5, 10_000).await,
        last.pay(&*store, 2, 4_000).await,
    ];
    assert_eq!(honest, [50_000, 8_000]);
    // The payer withdraws the whole deposit; the server's mirror still shows it, and the server
    // goes on charging (served unpaid: what a stale mirror costs).
    let payer = poisoned.wallet.address();
    sandbox
        .initiate_withdraw(&usdc().network, &poisoned.config, 50_000, &payer)
        .unwrap();
    clock.fetch_add(DELAY, Ordering::SeqCst);
    let withdrawn = sandbox
        .finalize_withdraw(&usdc().network, &poisoned.config, &payer)
        .unwrap();
    assert_eq!(withdrawn, 50_000);
    let poison = poisoned.pay(&*store, 3, 10_000).await;
    assert_eq!(poison, 30_000);

    let batches = Arc::new(Mutex::new(Vec::new()));
    let facilitator = Batches {
        inner: HttpFacilitator::new(&url).unwrap(),
        batches: Arc::clone(&batches),
    };
    let refusals = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&refusals);
    let mut claimer = Claimer::new(Arc::clone(&store), facilitator).on_refused(
        move |_channel, amount, _reason| {
            assert_eq!(amount, 30_000);
            counted.fetch_add(1, Ordering::SeqCst);
        },
    );
    if with_chain {
        claimer = claimer.chain(RpcChainReader::new(&rpc).unwrap());
    }
    let received = sandbox.balance_of(PAY_TO).get();
    let claimed_on_chain = |id: &str| {
        sandbox
            .channel_state(&usdc().network, id)
            .unwrap()
            .total_claimed
    };

    // The first round: the batch of three reverts; the honest channels are claimed anyway.
    let report = claimer.claim_all().await.unwrap();
    assert_eq!(claimed_on_chain(&first.id), honest[0], "{report:?}");
    assert_eq!(claimed_on_chain(&last.id), honest[1], "{report:?}");
    assert_eq!(claimed_on_chain(&poisoned.id), 0);
    assert_eq!(
        sandbox.balance_of(PAY_TO).get() - received,
        honest.iter().sum::<u128>(),
        "the honest channels swept in the same round"
    );
    assert_eq!(
        report.left,
        vec![(poisoned.id.clone(), poison)],
        "{report:?}"
    );
    assert!(!report.is_settled());
    let stored = store.load(&poisoned.id).await.unwrap().unwrap();
    if with_chain {
        // Read again after the batch was refused: the chain shows nothing to claim on it, so no
        // claim of it is sent alone, and it is reported as charged beyond its balance.
        assert_eq!(stored.on_chain.balance, 0);
        assert_eq!(stored.over_balance(), poison);
        assert_eq!(report.refused, Vec::new(), "{report:?}");
        assert_eq!(refusals.load(Ordering::SeqCst), 0);
    } else {
        assert_eq!(
            report
                .refused
                .iter()
                .map(|(id, _)| id.as_str())
                .collect::<Vec<_>>(),
            [poisoned.id.as_str()],
            "{report:?}"
        );
        assert!(
            report.refused[0].1.contains("ClaimExceedsBalance"),
            "{report:?}"
        );
        assert_eq!(stored.refused.map(|refused| refused.total), Some(poison));
        assert_eq!(refusals.load(Ordering::SeqCst), 1, "the hook told");
    }

    // More honest charges: the next round claims them without the poisoned channel.
    let sent_before = batches.lock().unwrap().len();
    let more = first.pay(&*store, 1, 0).await + last.pay(&*store, 1, 2_000).await;
    assert_eq!(more, 60_000);
    let report = claimer.claim_all().await.unwrap();
    assert_eq!(claimed_on_chain(&last.id), 10_000, "{report:?}");
    let later: Vec<Vec<String>> = batches.lock().unwrap()[sent_before..].to_vec();
    assert_eq!(
        later,
        vec![vec![last.salt.clone()]],
        "one batch, without the poisoned channel"
    );
    assert_eq!(report.left, vec![(poisoned.id.clone(), poison)]);
    assert!(
        report.refused.is_empty(),
        "not tried again before its retry: {report:?}"
    );
    let _ = (first.salt, poisoned.salt);
}
