//! Payment channels in PostgreSQL against the `ChannelStore` contract
//! (`tower_x402_channels::check_conformance`) on a throwaway PostgreSQL server; two instances
//! (two pools on one database) serving one channel a request at a time without counting a
//! voucher twice, and a restart continuing the channel; two claimers on one database claiming each voucher once, against the sandbox
//! facilitator over loopback HTTP.

#[path = "../../../examples/store/tests/store/postgres_server.rs"]
#[allow(dead_code)]
mod postgres_server;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::json;
use sqlx::postgres::{PgPool, PgPoolOptions};
use tower_x402::{BoxFuture, Facilitator, FacilitatorError, HttpFacilitator};
use tower_x402_channels::{
    Begin, Channel, ChannelConfig, ChannelStore, Claimer, Commit, Committed, Hold, OnChain,
    RpcChainReader, Voucher, check_conformance,
};
use tower_x402_postgres::PostgresChannelStore;
use tower_x402_sandbox::{SandboxFacilitator, SandboxWallet};
use x402_wire::{
    AtomicAmount, FacilitatorRequest, Network, PaymentRequirements, SettleResponse, UsdcDeployment,
    VerifyResponse,
};

async fn pool(database: &str) -> PgPool {
    PgPoolOptions::new()
        .max_connections(8)
        .connect(database)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_channel_store_conforms() {
    postgres_server::require();
    let database = postgres_server::fresh_database().await;
    let pool = pool(&database).await;
    tower_x402_postgres::migrate(&pool).await.unwrap();
    tower_x402_postgres::migrate(&pool).await.unwrap();
    let store = Arc::new(PostgresChannelStore::new(pool.clone()));
    check_conformance(store.clone()).await;
    check_conformance(store).await;
    // The claimer's column follows the record: the conformance runs left nothing to claim.
    let needing: i64 = sqlx::query_scalar("SELECT count(*) FROM x402_channels WHERE needs_claim")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(needing, 0);
}

fn config() -> ChannelConfig {
    ChannelConfig {
        payer: "0x2c7536E3605D9C16a7a3D7b1898e529396a65c23".into(),
        payer_authorizer: "0x2c7536E3605D9C16a7a3D7b1898e529396a65c23".into(),
        receiver: "0x209693Bc6afc0C5328bA36FaF03C514EF312287C".into(),
        receiver_authorizer: "0x3f1Eae7D46d88F08fc2F8ed27FCb2AB183EB2d0E".into(),
        token: "0x036CbD53842c5426634e7929541eC2318f3dCF7e".into(),
        withdraw_delay: 900,
        salt: format!("0x{}", "00".repeat(32)),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_instances_serve_a_channel_one_request_at_a_time_never_count_twice_and_a_restart_continues()
 {
    postgres_server::require();
    let database = postgres_server::fresh_database().await;
    let first = PostgresChannelStore::new(pool(&database).await);
    let second = PostgresChannelStore::new(pool(&database).await);
    tower_x402_postgres::migrate(first.pool()).await.unwrap();
    let id = format!("0x{}", "cd".repeat(32));
    let channel = Channel::new(&id, Network::BASE, config(), OnChain::default());
    assert!(first.open(&channel).await.unwrap());
    assert!(!second.open(&channel).await.unwrap(), "opened once");

    // 40 requests, 20 on each instance, all at once, each charging 100 under a voucher for its
    // base plus 1,000: every one either holds the channel (and commits) or is told busy, and
    // the cumulative is the sum of the committed charges, never more.
    let instances = [Arc::new(first), Arc::new(second)];
    let served = Arc::new(AtomicUsize::new(0));
    let busy = Arc::new(AtomicUsize::new(0));
    let mut requests = Vec::new();
    for n in 0..40 {
        let store = Arc::clone(&instances[n % 2]);
        let (id, served, busy) = (id.clone(), Arc::clone(&served), Arc::clone(&busy));
        requests.push(tokio::spawn(async move {
            let hold = Hold::new(format!("instance-{}", n % 2), u64::MAX);
            match store.begin(&id, &hold, 0).await.unwrap() {
                Begin::Held(channel) => {
                    // The handler runs while the channel is held.
                    tokio::time::sleep(std::time::Duration::from_millis(2)).await;
                    let ceiling = channel.charged + 1_000;
                    let commit = Commit::new(
                        channel.charged,
                        channel.charged + 100,
                        Voucher::new(ceiling, format!("0x{n:02x}")),
                    );
                    assert_eq!(
                        store.commit(&id, &hold.id, &commit).await.unwrap(),
                        Committed::Done
                    );
                    // A commit sent again after a lost answer is recognized, not applied.
                    assert_eq!(
                        store.commit(&id, &hold.id, &commit).await.unwrap(),
                        Committed::Done
                    );
                    served.fetch_add(1, Ordering::SeqCst);
                }
                Begin::Busy { .. } => {
                    busy.fetch_add(1, Ordering::SeqCst);
                }
                other => panic!("{other:?}"),
            }
        }));
    }
    for request in requests {
        request.await.unwrap();
    }
    let served = served.load(Ordering::SeqCst);
    assert_eq!(served + busy.load(Ordering::SeqCst), 40);
    assert!(served >= 1);
    let channel = instances[1].load(&id).await.unwrap().unwrap();
    assert_eq!(
        channel.charged,
        100 * served as u128,
        "each served request counted once"
    );
    assert_eq!(channel.hold, None);

    // Sequential requests alternating between the instances continue one cumulative.
    for n in 0..6 {
        let store = &instances[n % 2];
        let hold = Hold::new("sequential", u64::MAX);
        let Begin::Held(held) = store.begin(&id, &hold, 0).await.unwrap() else {
            panic!("the channel is free")
        };
        let commit = Commit::new(
            held.charged,
            held.charged + 50,
            Voucher::new(held.charged + 1_000, "0xff"),
        );
        assert_eq!(
            store.commit(&id, &hold.id, &commit).await.unwrap(),
            Committed::Done
        );
        // The other instance, starting from the base before this commit, is refused.
        let other = &instances[(n + 1) % 2];
        let late = Hold::new("late", u64::MAX);
        assert!(matches!(
            other.begin(&id, &late, 0).await.unwrap(),
            Begin::Held(_)
        ));
        let stale = Commit::new(
            held.charged,
            held.charged + 50,
            Voucher::new(held.charged + 1_000, "0xee"),
        );
        assert_eq!(
            other.commit(&id, &late.id, &stale).await.unwrap(),
            Committed::Moved {
                charged: held.charged + 50
            }
        );
        assert!(other.release(&id, &late.id).await.unwrap());
    }
    let channel = instances[0].load(&id).await.unwrap().unwrap();
    assert_eq!(channel.charged, 100 * served as u128 + 300);

    // A restart (both instances gone, a new pool) continues the channel where it stood.
    for instance in instances {
        instance.pool().close().await;
    }
    let restarted = PostgresChannelStore::new(pool(&database).await);
    let hold = Hold::new("restarted", u64::MAX);
    let Begin::Held(held) = restarted.begin(&id, &hold, 0).await.unwrap() else {
        panic!("no hold survives the restart")
    };
    assert_eq!(
        (held.charged, held.voucher),
        (channel.charged, channel.voucher)
    );
    let commit = Commit::new(
        held.charged,
        held.charged + 10,
        Voucher::new(held.charged + 1_000, "0xdd"),
    );
    assert_eq!(
        restarted.commit(&id, &hold.id, &commit).await.unwrap(),
        Committed::Done
    );
    assert_eq!(
        restarted.load(&id).await.unwrap().unwrap().charged,
        channel.charged + 10
    );
}

/// The sandbox's facilitator over HTTP, counting the claim rows sent.
#[derive(Clone)]
struct Counting {
    inner: HttpFacilitator,
    rows: Arc<AtomicUsize>,
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
        let payload: serde_json::Value =
            serde_json::from_str(request.payment_payload().payload.get()).unwrap();
        if payload["type"] == "claim" {
            let rows = payload["claims"].as_array().map_or(0, Vec::len);
            self.rows.fetch_add(rows, Ordering::SeqCst);
        }
        self.inner.settle(request)
    }
}

async fn serve(router: axum::Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await });
    format!("http://{address}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_claimers_on_one_database_claim_each_voucher_once() {
    postgres_server::require();
    let database = postgres_server::fresh_database().await;
    let stores = [
        PostgresChannelStore::new(pool(&database).await),
        PostgresChannelStore::new(pool(&database).await),
    ];
    tower_x402_postgres::migrate(stores[0].pool())
        .await
        .unwrap();

    let sandbox = SandboxFacilitator::new();
    let usdc = UsdcDeployment::BASE_SEPOLIA;
    let network = usdc.network.clone();
    let url = serve(sandbox.router()).await;
    let rpc = serve(sandbox.rpc_router(network.clone())).await;
    let mut extra = usdc
        .eip712
        .map(|domain| domain.to_extra())
        .unwrap_or_default();
    extra.insert(
        "receiverAuthorizer".into(),
        json!(sandbox.receiver_authorizer()),
    );
    extra.insert("withdrawDelay".into(), json!(900));
    let accept = PaymentRequirements {
        scheme: "batch-settlement".into(),
        network: network.clone(),
        amount: AtomicAmount(1_000),
        asset: usdc.asset.into(),
        pay_to: "0x209693Bc6afc0C5328bA36FaF03C514EF312287C".into(),
        max_timeout_seconds: 3600,
        extra: Some(extra),
    };

    // Eight channels deposited on the sandbox, each charged 2,000 under its latest voucher.
    let client = HttpFacilitator::new(&url).unwrap();
    let mut ids = Vec::new();
    for _ in 0..8 {
        let wallet = SandboxWallet::random();
        let config = wallet.channel_config(&accept, rand::random()).unwrap();
        let id = SandboxWallet::channel_id(&config, &network).unwrap();
        let deposit = wallet
            .deposit_payment_at(&accept, &config, 10_000, 1_000, sandbox.now())
            .unwrap();
        let settled = client
            .settle(&FacilitatorRequest::new(deposit, accept.clone()))
            .await
            .unwrap();
        assert!(settled.success, "{settled:?}");
        let config: ChannelConfig =
            serde_json::from_value(serde_json::to_value(&config).unwrap()).unwrap();
        let on_chain = OnChain::new(10_000, 0, 0);
        stores[0]
            .open(&Channel::new(&id, network.clone(), config, on_chain))
            .await
            .unwrap();
        let hold = Hold::new("server", u64::MAX);
        assert!(matches!(
            stores[0].begin(&id, &hold, 0).await.unwrap(),
            Begin::Held(_)
        ));
        let voucher = wallet.sign_voucher(&network, &id, 3_000).unwrap();
        let commit = Commit::new(0, 2_000, Voucher::new(3_000, voucher.signature));
        assert_eq!(
            stores[0].commit(&id, &hold.id, &commit).await.unwrap(),
            Committed::Done
        );
        ids.push(id);
    }

    let rows = Arc::new(AtomicUsize::new(0));
    let mut claimers = Vec::new();
    for (n, store) in stores.into_iter().enumerate() {
        let facilitator = Counting {
            inner: HttpFacilitator::new(&url).unwrap(),
            rows: Arc::clone(&rows),
        };
        let claimer = Claimer::new(store, facilitator)
            .chain(RpcChainReader::new(&rpc).unwrap())
            .owner(format!("instance-{n}"));
        claimers.push(tokio::spawn(
            async move { claimer.claim_all().await.unwrap() },
        ));
    }
    let mut claimed = 0;
    for claimer in claimers {
        claimed += claimer.await.unwrap().claimed.len();
    }
    assert_eq!(claimed, 8, "each channel claimed by one of the two");
    assert_eq!(
        rows.load(Ordering::SeqCst),
        8,
        "no voucher sent in two claims"
    );
    for id in &ids {
        assert_eq!(
            sandbox.channel_state(&network, id).unwrap().total_claimed,
            2_000
        );
    }
    let totals = sandbox
        .receiver_totals(
            &network,
            "0x209693Bc6afc0C5328bA36FaF03C514EF312287C",
            usdc.asset,
        )
        .unwrap();
    assert_eq!(totals, (16_000, 16_000), "claimed and swept once");
}

#[path = "../../tower-x402-channels/tests/poisoned/scenario.rs"]
mod poisoned;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_poisoned_channel_leaves_the_honest_ones_claimed_in_the_first_round() {
    postgres_server::require();
    let database = postgres_server::fresh_database().await;
    let pool = pool(&database).await;
    tower_x402_postgres::migrate(&pool).await.unwrap();
    let store = Arc::new(PostgresChannelStore::new(pool.clone()));
    poisoned::a_poisoned_channel_leaves_the_honest_ones_claimed(store.clone(), false).await;
    // The mark is in the row: a second instance on the database sees it.
    let other = PostgresChannelStore::new(pool);
    let marked = other.unclaimed(100).await.unwrap();
    assert_eq!(
        marked
            .iter()
            .filter(|channel| channel.refused.is_some())
            .count(),
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn with_a_chain_reader_a_poisoned_claim_is_capped_at_the_balance_read() {
    postgres_server::require();
    let database = postgres_server::fresh_database().await;
    let pool = pool(&database).await;
    tower_x402_postgres::migrate(&pool).await.unwrap();
    let store = Arc::new(PostgresChannelStore::new(pool));
    poisoned::a_poisoned_channel_leaves_the_honest_ones_claimed(store, true).await;
}
