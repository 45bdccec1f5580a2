//! The claimer against the sandbox facilitator over loopback HTTP and its chain over JSON-RPC:
//! claims batched across channels and swept; a lost claim answer resolved against the chain
//! without a second claim; a withdrawal claimed before its delay; everything claimed on
//! shutdown; two claimers on one store claiming each voucher once; the server's own claim
//! signature; the claim policy by interval and by unclaimed amount.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use tower_x402::{BoxError, BoxFuture, Facilitator, FacilitatorError, HttpFacilitator};
use tower_x402_channels::{
    Begin, Channel, ChannelConfig, ChannelStore, ClaimAuthorizer, ClaimPolicy, Claimer, Commit,
    Committed, Hold, MemoryChannelStore, OnChain, RpcChainReader, Voucher, VoucherClaim,
};
use tower_x402_sandbox::{SandboxFacilitator, SandboxWallet, Step};
use x402_wire::{
    AtomicAmount, FacilitatorRequest, Network, PaymentRequirements, SettleResponse, UsdcDeployment,
    VerifyResponse,
};

const PAY_TO: &str = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";
const PRICE: u128 = 1_000;
const DELAY: u64 = 900;
const START: u64 = 1_750_000_000;

/// The sandbox on a clock the test moves, served over HTTP with its chain's JSON-RPC.
struct Sandbox {
    facilitator: SandboxFacilitator,
    clock: Arc<AtomicU64>,
    url: String,
    rpc: String,
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
        }
    }

    /// The facilitator over HTTP, counting the claim rows and sweeps it is sent.
    fn client(&self) -> Counting {
        Counting {
            inner: HttpFacilitator::new(&self.url).unwrap(),
            claim_rows: Arc::default(),
            claims: Arc::default(),
            sweeps: Arc::default(),
        }
    }

    fn chain(&self) -> RpcChainReader {
        RpcChainReader::new(&self.rpc).unwrap()
    }

    fn claimed_on_chain(&self, id: &str) -> u128 {
        self.facilitator
            .channel_state(&network(), id)
            .unwrap()
            .total_claimed
    }

    fn received(&self) -> u128 {
        self.facilitator.balance_of(PAY_TO).get()
    }
}

async fn serve(router: axum::Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await });
    address
}

/// A facilitator that counts what a claimer sends through it.
#[derive(Clone)]
struct Counting {
    inner: HttpFacilitator,
    claim_rows: Arc<std::sync::Mutex<Vec<(String, String)>>>,
    claims: Arc<AtomicUsize>,
    sweeps: Arc<AtomicUsize>,
}

impl Counting {
    /// Every (channel salt, totalClaimed) sent in a claim, in order.
    fn rows(&self) -> Vec<(String, String)> {
        self.claim_rows.lock().unwrap().clone()
    }
}

impl Facilitator for Counting {
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
        match payload["type"].as_str() {
            Some("claim") => {
                self.claims.fetch_add(1, Ordering::SeqCst);
                let mut rows = self.claim_rows.lock().unwrap();
                for row in payload["claims"].as_array().unwrap() {
                    rows.push((
                        row["voucher"]["channel"]["salt"]
                            .as_str()
                            .unwrap()
                            .to_owned(),
                        row["totalClaimed"].as_str().unwrap().to_owned(),
                    ));
                }
            }
            Some("settle") => {
                self.sweeps.fetch_add(1, Ordering::SeqCst);
            }
            other => panic!("the claimer sent {other:?}"),
        }
        self.inner.settle(request)
    }
}

fn usdc() -> UsdcDeployment {
    UsdcDeployment::BASE_SEPOLIA
}

fn network() -> Network {
    usdc().network
}

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

/// A buyer's channel, deposited on the sandbox and opened in the server's store.
struct Buyer {
    wallet: SandboxWallet,
    config: tower_x402_sandbox::batch::ChannelConfig,
    id: String,
}

impl Buyer {
    /// Deposits `deposit` over HTTP and opens the channel in `store` from the deposit's answer.
    async fn open(
        sandbox: &Sandbox,
        store: &dyn ChannelStore,
        accept: &PaymentRequirements,
        deposit: u128,
    ) -> Self {
        let wallet = SandboxWallet::random();
        let config = wallet.channel_config(accept, rand::random()).unwrap();
        let id = SandboxWallet::channel_id(&config, &network()).unwrap();
        let payment = wallet
            .deposit_payment_at(
                accept,
                &config,
                deposit,
                PRICE,
                sandbox.clock.load(Ordering::SeqCst),
            )
            .unwrap();
        let client = HttpFacilitator::new(&sandbox.url).unwrap();
        let request = FacilitatorRequest::new(payment, accept.clone());
        assert!(client.verify(&request).await.unwrap().is_valid);
        let settled = client.settle(&request).await.unwrap();
        assert!(settled.success, "{settled:?}");
        let on_chain = OnChain::new(deposit, 0, 0);
        let server_config: ChannelConfig =
            serde_json::from_value(serde_json::to_value(&config).unwrap()).unwrap();
        assert_eq!(
            server_config.id(&network()).unwrap(),
            id,
            "the contract's channel id"
        );
        let channel = Channel::new(&id, network(), server_config, on_chain);
        assert!(store.open(&channel).await.unwrap());
        Self { wallet, config, id }
    }

    /// `requests` paid requests as the server serves them: hold, voucher for charged + PRICE,
    /// charge `charge` each, commit.
    async fn pay(&self, store: &dyn ChannelStore, requests: usize, charge: u128) -> u128 {
        for _ in 0..requests {
            let hold = Hold::new("server", u64::MAX);
            let Begin::Held(channel) = store.begin(&self.id, &hold, 0).await.unwrap() else {
                panic!("the channel is free")
            };
            let ceiling = channel.charged + PRICE;
            let signed = self
                .wallet
                .sign_voucher(&network(), &self.id, ceiling)
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

#[tokio::test]
async fn claims_are_batched_across_channels_in_one_settle_and_swept_once() {
    let sandbox = Sandbox::start().await;
    let accept = accept(&sandbox.facilitator.receiver_authorizer());
    let store = Arc::new(MemoryChannelStore::default());
    let mut buyers = Vec::new();
    for _ in 0..3 {
        buyers.push(Buyer::open(&sandbox, &*store, &accept, 50_000).await);
    }
    let mut charged = Vec::new();
    for (buyer, requests) in buyers.iter().zip([5, 12, 1]) {
        charged.push(buyer.pay(&*store, requests, 700).await);
    }
    assert_eq!(charged, [3_500, 8_400, 700]);
    let before = sandbox.received();

    let facilitator = sandbox.client();
    let claimer = Claimer::new(Arc::clone(&store), facilitator.clone()).chain(sandbox.chain());
    let report = claimer.claim_all().await.unwrap();
    assert_eq!(
        (report.claim_calls, report.sweep_calls),
        (1, 1),
        "{report:?}"
    );
    assert_eq!(facilitator.rows().len(), 3, "three channels in one claim");
    for (buyer, total) in buyers.iter().zip(&charged) {
        assert_eq!(sandbox.claimed_on_chain(&buyer.id), *total);
        let channel = store.load(&buyer.id).await.unwrap().unwrap();
        assert_eq!((channel.claimed, channel.unclaimed()), (*total, 0));
    }
    let total: u128 = charged.iter().sum();
    assert_eq!(sandbox.received() - before, total, "swept to the receiver");
    assert_eq!(report.swept.len(), 1);
    assert_eq!(report.swept[0].3, Some(total));

    // Nothing left: the next round sends nothing.
    let again = claimer.claim_all().await.unwrap();
    assert_eq!((again.claim_calls, again.sweep_calls), (0, 0), "{again:?}");

    // More requests on one channel: only it is claimed, for its new total.
    let newer = buyers[1].pay(&*store, 2, 1_000).await;
    let report = claimer.claim_all().await.unwrap();
    assert_eq!(report.claimed, vec![(buyers[1].id.clone(), newer)]);
    assert_eq!(sandbox.claimed_on_chain(&buyers[1].id), newer);
    assert_eq!(sandbox.received() - before, total + 2_000);
}

#[tokio::test]
async fn a_claim_whose_answer_was_lost_is_resolved_on_chain_without_a_second_claim() {
    let sandbox = Sandbox::start().await;
    let accept = accept(&sandbox.facilitator.receiver_authorizer());
    let store = Arc::new(MemoryChannelStore::default());
    let buyer = Buyer::open(&sandbox, &*store, &accept, 20_000).await;
    let charged = buyer.pay(&*store, 4, 900).await;

    // The claim runs on chain, then its answer is lost (a 504 after the work).
    sandbox.facilitator.queue_settle(Step::AnswerLost);
    let settles = sandbox.facilitator.settle_calls();
    let facilitator = sandbox.client();
    let claimer = Claimer::new(Arc::clone(&store), facilitator.clone()).chain(sandbox.chain());
    let report = claimer.claim_all().await.unwrap();
    assert_eq!(
        report.claimed,
        vec![(buyer.id.clone(), charged)],
        "{report:?}"
    );
    assert!(report.in_doubt.is_empty());
    assert_eq!(
        facilitator.claims.load(Ordering::SeqCst),
        1,
        "one claim sent"
    );
    assert_eq!(
        sandbox.facilitator.settle_calls() - settles,
        2,
        "the facilitator received one claim and one sweep"
    );
    assert_eq!(sandbox.claimed_on_chain(&buyer.id), charged);
    let channel = store.load(&buyer.id).await.unwrap().unwrap();
    assert_eq!((channel.claimed, channel.claim), (charged, None));

    // Nothing is claimed again, and the swept amount is the charge, once.
    let again = claimer.claim_all().await.unwrap();
    assert_eq!(again.claim_calls, 0, "{again:?}");
    assert_eq!(facilitator.claims.load(Ordering::SeqCst), 1);
    let totals = sandbox
        .facilitator
        .receiver_totals(&network(), PAY_TO, usdc().asset)
        .unwrap();
    assert_eq!(totals, (charged, charged), "claimed once, swept once");
}

#[tokio::test]
async fn a_claim_in_doubt_stays_under_its_lease_and_is_then_resolved_by_another_claimer() {
    let sandbox = Sandbox::start().await;
    let accept = accept(&sandbox.facilitator.receiver_authorizer());
    let store = Arc::new(MemoryChannelStore::default());
    let buyer = Buyer::open(&sandbox, &*store, &accept, 20_000).await;
    let charged = buyer.pay(&*store, 3, 1_000).await;
    let now = Arc::new(AtomicU64::new(1_000_000));
    let clock = {
        let now = Arc::clone(&now);
        move || now.load(Ordering::SeqCst)
    };

    // A pending answer that ran nothing: the chain does not show the claim, so it stays in
    // doubt under its lease; no claimer sends it again meanwhile.
    sandbox.facilitator.queue_settle(Step::Pending);
    let facilitator = sandbox.client();
    let first = Claimer::new(Arc::clone(&store), facilitator.clone())
        .chain(sandbox.chain())
        .clock(clock.clone());
    let report = first.claim_all().await.unwrap();
    assert_eq!(report.in_doubt, vec![buyer.id.clone()], "{report:?}");
    assert_eq!(sandbox.claimed_on_chain(&buyer.id), 0);
    let second = Claimer::new(Arc::clone(&store), facilitator.clone())
        .chain(sandbox.chain())
        .clock(clock);
    let report = second.claim_all().await.unwrap();
    assert_eq!(report.claim_calls, 0, "the lease still runs: {report:?}");

    // Once the lease ended, the other claimer reads the chain (not there), clears the claim,
    // and claims afresh.
    now.fetch_add(
        ClaimPolicy::default().lease.as_millis() as u64,
        Ordering::SeqCst,
    );
    let report = second.claim_all().await.unwrap();
    assert_eq!(report.claim_calls, 1, "{report:?}");
    assert_eq!(report.claimed, vec![(buyer.id.clone(), charged)]);
    assert_eq!(sandbox.claimed_on_chain(&buyer.id), charged);
    assert_eq!(facilitator.claims.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_pending_withdrawal_is_claimed_before_its_delay() {
    let sandbox = Sandbox::start().await;
    let accept = accept(&sandbox.facilitator.receiver_authorizer());
    let store = Arc::new(MemoryChannelStore::default());
    let leaving = Buyer::open(&sandbox, &*store, &accept, 20_000).await;
    let staying = Buyer::open(&sandbox, &*store, &accept, 20_000).await;
    let charged = leaving.pay(&*store, 6, 1_000).await;
    staying.pay(&*store, 2, 1_000).await;

    let facilitator = sandbox.client();
    let mut policy = ClaimPolicy::default();
    policy.interval = None;
    policy.watch_every = Duration::ZERO;
    let claimer = Claimer::new(Arc::clone(&store), facilitator.clone())
        .chain(sandbox.chain())
        .policy(policy);
    // Nothing pending: the watch reads the chain and claims nothing.
    assert_eq!(claimer.tick().await.unwrap(), None);
    assert_eq!(facilitator.claims.load(Ordering::SeqCst), 0);

    let payer = leaving.wallet.address();
    sandbox
        .facilitator
        .initiate_withdraw(&network(), &leaving.config, 20_000, &payer)
        .unwrap();
    let report = claimer
        .tick()
        .await
        .unwrap()
        .expect("the withdrawal is seen");
    assert_eq!(
        report.claimed,
        vec![(leaving.id.clone(), charged)],
        "only that channel"
    );
    let mirrored = store.load(&leaving.id).await.unwrap().unwrap().on_chain;
    assert_eq!(mirrored.withdraw_requested_at, START);
    assert_eq!(sandbox.claimed_on_chain(&staying.id), 0);

    // When the delay ends the payer gets back only what was not charged.
    sandbox.clock.fetch_add(DELAY, Ordering::SeqCst);
    let returned = sandbox
        .facilitator
        .finalize_withdraw(&network(), &leaving.config, &payer)
        .unwrap();
    assert_eq!(returned, 20_000 - charged);
}

#[tokio::test]
async fn shutdown_claims_everything_outstanding() {
    let sandbox = Sandbox::start().await;
    let accept = accept(&sandbox.facilitator.receiver_authorizer());
    let store = Arc::new(MemoryChannelStore::default());
    let buyer = Buyer::open(&sandbox, &*store, &accept, 20_000).await;
    let before = sandbox.received();

    let facilitator = sandbox.client();
    let policy = ClaimPolicy::default().every(Duration::from_secs(3_600));
    let task = Claimer::new(Arc::clone(&store), facilitator.clone())
        .policy(policy)
        .spawn();
    // The first look claims (nothing yet); the next is an hour away.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let charged = buyer.pay(&*store, 7, 800).await;
    assert_eq!(sandbox.claimed_on_chain(&buyer.id), 0);

    let report = task.shutdown().await.unwrap();
    assert_eq!(
        report.claimed,
        vec![(buyer.id.clone(), charged)],
        "{report:?}"
    );
    assert_eq!(sandbox.claimed_on_chain(&buyer.id), charged);
    assert_eq!(sandbox.received() - before, charged, "swept before exit");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_claimers_on_one_store_claim_each_voucher_once() {
    let sandbox = Sandbox::start().await;
    let accept = accept(&sandbox.facilitator.receiver_authorizer());
    let store = Arc::new(MemoryChannelStore::default());
    let mut charged = 0;
    for _ in 0..6 {
        let buyer = Buyer::open(&sandbox, &*store, &accept, 10_000).await;
        charged += buyer.pay(&*store, 2, 1_000).await;
    }
    let before = sandbox.received();
    let facilitator = sandbox.client();
    let claimers: Vec<_> = (0..2)
        .map(|n| {
            let claimer = Claimer::new(Arc::clone(&store), facilitator.clone())
                .chain(sandbox.chain())
                .owner(format!("instance-{n}"));
            tokio::spawn(async move { claimer.claim_all().await.unwrap() })
        })
        .collect();
    let mut claimed = 0;
    for claimer in claimers {
        claimed += claimer.await.unwrap().claimed.len();
    }
    assert_eq!(claimed, 6, "every channel claimed by one claimer");
    let rows = facilitator.rows();
    assert_eq!(rows.len(), 6, "no voucher sent twice: {rows:?}");
    assert_eq!(sandbox.received() - before, charged);
}

/// The server's own receiver-authorizer key, signing claim batches.
struct OwnKey(SandboxWallet, String);

impl ClaimAuthorizer for OwnKey {
    fn address(&self) -> &str {
        &self.1
    }

    fn sign<'a>(
        &'a self,
        network: &'a Network,
        claims: &'a [VoucherClaim],
    ) -> BoxFuture<'a, Result<String, BoxError>> {
        Box::pin(async move {
            let rows: Vec<tower_x402_sandbox::batch::VoucherClaim> =
                serde_json::from_value(serde_json::to_value(claims)?)?;
            let signature = self.0.sign_claim_batch(network, &rows)?;
            // The digest this crate computes is the one the key signed.
            let digest = tower_x402_channels::claim_batch_digest(network, claims)?;
            let signer = signature
                .parse::<alloy_primitives::Signature>()?
                .recover_address_from_prehash(&digest.into())?;
            assert!(signer.to_checksum(None).eq_ignore_ascii_case(&self.1));
            Ok(signature)
        })
    }
}

#[tokio::test]
async fn a_server_owning_its_receiver_authorizer_signs_its_claims() {
    let sandbox = Sandbox::start().await;
    let key = SandboxWallet::random();
    let own = accept(&key.address());
    let delegated = accept(&sandbox.facilitator.receiver_authorizer());
    let store = Arc::new(MemoryChannelStore::default());
    let mine = Buyer::open(&sandbox, &*store, &own, 10_000).await;
    let theirs = Buyer::open(&sandbox, &*store, &delegated, 10_000).await;
    let (a, b) = (
        mine.pay(&*store, 3, 1_000).await,
        theirs.pay(&*store, 2, 1_000).await,
    );

    // Without the key the facilitator refuses the server's channel; nothing is lost.
    let facilitator = sandbox.client();
    let unsigned = Claimer::new(Arc::clone(&store), facilitator.clone());
    let report = unsigned.claim_all().await.unwrap();
    assert_eq!(report.claimed, vec![(theirs.id.clone(), b)], "{report:?}");
    assert_eq!(report.refused.len(), 1);
    assert_eq!(report.refused[0].0, mine.id);
    assert_eq!(store.load(&mine.id).await.unwrap().unwrap().unclaimed(), a);

    // With it: one batch per receiver authorizer, the server's signed.
    let address = key.address();
    let signed = Claimer::new(Arc::clone(&store), facilitator).authorizer(OwnKey(key, address));
    let report = signed.claim_all().await.unwrap();
    assert_eq!(report.claimed, vec![(mine.id.clone(), a)], "{report:?}");
    assert_eq!(sandbox.claimed_on_chain(&mine.id), a);
}

#[tokio::test]
async fn the_policy_claims_by_interval_and_by_unclaimed_amount() {
    let sandbox = Sandbox::start().await;
    let accept = accept(&sandbox.facilitator.receiver_authorizer());
    let store = Arc::new(MemoryChannelStore::default());
    let buyer = Buyer::open(&sandbox, &*store, &accept, 50_000).await;
    let now = Arc::new(AtomicU64::new(5_000_000));
    let clock = {
        let now = Arc::clone(&now);
        move || now.load(Ordering::SeqCst)
    };

    // Every minute.
    let facilitator = sandbox.client();
    let by_interval = Claimer::new(Arc::clone(&store), facilitator.clone())
        .policy(ClaimPolicy::default().every(Duration::from_secs(60)))
        .clock(clock.clone());
    let first = buyer.pay(&*store, 2, 1_000).await;
    let report = by_interval
        .tick()
        .await
        .unwrap()
        .expect("the first look claims");
    assert_eq!(report.claimed, vec![(buyer.id.clone(), first)]);
    let second = buyer.pay(&*store, 1, 1_000).await;
    now.fetch_add(59_999, Ordering::SeqCst);
    assert_eq!(by_interval.tick().await.unwrap(), None, "not yet a minute");
    assert_eq!(sandbox.claimed_on_chain(&buyer.id), first);
    now.fetch_add(1, Ordering::SeqCst);
    let report = by_interval.tick().await.unwrap().expect("a minute later");
    assert_eq!(report.claimed, vec![(buyer.id.clone(), second)]);

    // Past 5,000 unclaimed.
    let mut policy = ClaimPolicy::default()
        .unclaimed_over(5_000)
        .on_withdrawal(false);
    policy.interval = None;
    let by_amount = Claimer::new(Arc::clone(&store), facilitator.clone())
        .policy(policy)
        .clock(clock);
    buyer.pay(&*store, 4, 1_000).await;
    assert_eq!(by_amount.tick().await.unwrap(), None, "4,000 unclaimed");
    let third = buyer.pay(&*store, 1, 1_000).await;
    let report = by_amount.tick().await.unwrap().expect("5,000 unclaimed");
    assert_eq!(report.claimed, vec![(buyer.id.clone(), third)]);
    assert_eq!(sandbox.claimed_on_chain(&buyer.id), third);
    assert_eq!(facilitator.claims.load(Ordering::SeqCst), 3);
}
