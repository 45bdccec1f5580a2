//! Scenarios run on every channel store (memory here, PostgreSQL in tower-x402-postgres): no
//! voucher is served once the payer's withdrawal may finalize before a claim, and a stranger
//! gets neither a channel's state nor a refund of it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::StatusCode;
use serde_json::Value;
use tower_x402::HttpFacilitator;
use tower_x402::proto::PaymentPayload;
use tower_x402_channels::{
    BatchSettlement, ChannelStore, ClaimPolicy, Claimer, RpcChainReader, normalize_id,
};
use tower_x402_sandbox::SandboxWallet;
use x402_wire::Network;

use crate::support::{AMOUNT, Buyer, DEPOSIT, ROW, Server, serve};

const WITHDRAWAL_PENDING: &str = "invalid_batch_settlement_evm_withdrawal_pending";
/// The reference contract's (and the sandbox's offer's) withdrawal delay, seconds.
const DELAY: u64 = 900;

fn unix_seconds() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// The server's sandbox reading its time from the returned clock, set to `at` (unix seconds).
fn clock_at(server: &Server, at: u64) -> Arc<AtomicU64> {
    let clock = Arc::new(AtomicU64::new(at));
    let time = Arc::clone(&clock);
    let _ = server
        .sandbox
        .clone()
        .with_clock(move || time.load(Ordering::SeqCst));
    clock
}

/// A claimer of `server`'s channels that claims only on a withdrawal (no interval).
fn claimer(server: &Server, chain: Option<RpcChainReader>) -> Claimer {
    let mut policy = ClaimPolicy::default();
    policy.interval = None;
    policy.watch_every = Duration::ZERO;
    let facilitator = HttpFacilitator::new(&server.sandbox_url).unwrap();
    let claimer = Claimer::new(Arc::clone(&server.channels), facilitator).policy(policy);
    match chain {
        Some(chain) => claimer.chain(chain),
        None => claimer,
    }
}

/// A deposit and a voucher on a fresh channel: charged `3 * ROW`.
async fn charged_channel(server: &Server) -> Buyer {
    let buyer = Buyer::new(server);
    let opened = server.get("/rows?count=1", &buyer.deposit(server, 0)).await;
    assert_eq!(opened.status, StatusCode::OK, "{opened:?}");
    let paid = server
        .get("/rows?count=2", &buyer.voucher(server, ROW + AMOUNT))
        .await;
    assert_eq!(paid.status, StatusCode::OK, "{paid:?}");
    buyer
}

fn claimed_on_chain(server: &Server, buyer: &Buyer) -> (u128, u128) {
    let state = server
        .sandbox
        .channel_state(&Network::BASE, &buyer.id)
        .unwrap();
    (state.balance, state.total_claimed)
}

/// With a withdrawal watch (`--rpc-url`): the watch mirrors the payer's withdrawal and claims
/// the channel; once the withdrawal may finalize, a voucher is refused though the mirror is
/// fresh and shows the old balance, so nothing is served the receiver cannot claim.
pub(crate) async fn no_voucher_is_served_once_a_watched_withdrawal_may_finalize(
    store: Arc<dyn ChannelStore>,
) {
    let server = Server::start(store).await;
    // The payer started its withdrawal a delay and a bit ago, on the chain's clock.
    let started = unix_seconds() - DELAY - 5;
    let clock = clock_at(&server, started);
    let rpc = format!(
        "http://{}",
        serve(server.sandbox.rpc_router(Network::BASE)).await
    );
    let buyer = charged_channel(&server).await;
    let claimer = claimer(&server, Some(RpcChainReader::new(&rpc).unwrap()));
    assert!(claimer.tick().await.unwrap().is_none(), "nothing pending");

    let payer = buyer.wallet.address();
    server
        .sandbox
        .initiate_withdraw(&Network::BASE, &buyer.sandbox_config(), DEPOSIT, &payer)
        .unwrap();
    let report = claimer.tick().await.unwrap().expect("the withdrawal seen");
    assert_eq!(report.claimed, vec![(normalize_id(&buyer.id), 3 * ROW)]);
    let mirrored = server.channels.load(&buyer.id).await.unwrap().unwrap();
    assert_eq!(mirrored.on_chain.withdraw_requested_at, started);

    // The delay has passed: the payer takes back everything unclaimed.
    clock.store(unix_seconds(), Ordering::SeqCst);
    let returned = server
        .sandbox
        .finalize_withdraw(&Network::BASE, &buyer.sandbox_config(), &payer)
        .unwrap();
    assert_eq!(returned, DEPOSIT - 3 * ROW);

    let after = server
        .get("/rows?count=4", &buyer.voucher(&server, 3 * ROW + AMOUNT))
        .await;
    assert_eq!(after.status, StatusCode::PAYMENT_REQUIRED, "{after:?}");
    assert_eq!(after.error(), WITHDRAWAL_PENDING, "{after:?}");
    assert!(!after.body.contains("4 rows"), "served: {}", after.body);
    let channel = server.channels.load(&buyer.id).await.unwrap().unwrap();
    assert_eq!(
        channel.charged,
        3 * ROW,
        "nothing charged that cannot be claimed"
    );
    assert_eq!(claimed_on_chain(&server, &buyer).1, channel.charged);
}

/// Without a withdrawal watch: the facilitator's `/verify` (the mirror is stale) shows the
/// withdrawal, the voucher is refused, and the next claimer round claims the channel before
/// the withdrawal finalizes.
pub(crate) async fn a_withdrawal_seen_by_verify_refuses_the_voucher_and_is_claimed_first(
    store: Arc<dyn ChannelStore>,
) {
    let stale: fn(BatchSettlement) -> BatchSettlement = |scheme| scheme.fresh_for(Duration::ZERO);
    let server = Server::configured(store, Box::new(stale)).await;
    let started = unix_seconds() - DELAY + 100;
    let clock = clock_at(&server, started);
    let buyer = charged_channel(&server).await;
    let claimer = claimer(&server, None);
    assert!(claimer.tick().await.unwrap().is_none(), "nothing pending");

    let payer = buyer.wallet.address();
    server
        .sandbox
        .initiate_withdraw(&Network::BASE, &buyer.sandbox_config(), DEPOSIT, &payer)
        .unwrap();
    // The withdrawal finalizes in 100 s, before this server's next claim could land.
    let refused = server
        .get("/rows?count=4", &buyer.voucher(&server, 3 * ROW + AMOUNT))
        .await;
    assert_eq!(refused.status, StatusCode::PAYMENT_REQUIRED, "{refused:?}");
    assert_eq!(refused.error(), WITHDRAWAL_PENDING, "{refused:?}");
    let channel = server.channels.load(&buyer.id).await.unwrap().unwrap();
    assert_eq!(channel.charged, 3 * ROW);
    assert_eq!(channel.on_chain.withdraw_requested_at, started, "mirrored");
    assert_eq!(channel.hold, None, "released");

    let report = claimer
        .tick()
        .await
        .unwrap()
        .expect("claimed for the withdrawal");
    assert_eq!(report.claimed, vec![(normalize_id(&buyer.id), 3 * ROW)]);
    clock.store(started + DELAY, Ordering::SeqCst);
    let returned = server
        .sandbox
        .finalize_withdraw(&Network::BASE, &buyer.sandbox_config(), &payer)
        .unwrap();
    assert_eq!(
        returned,
        DEPOSIT - 3 * ROW,
        "the payer gets only the unspent"
    );
    assert_eq!(claimed_on_chain(&server, &buyer), (3 * ROW, 3 * ROW));
}

/// `payment` with its voucher's signature replaced by `signature`.
fn with_signature(payment: &PaymentPayload, signature: &str) -> PaymentPayload {
    let mut payload: Value = serde_json::from_str(payment.payload.get()).unwrap();
    payload["voucher"]["signature"] = signature.into();
    let mut changed = payment.clone();
    changed.payload = serde_json::value::to_raw_value(&payload).unwrap();
    changed
}

/// A stranger's voucher on someone's channel gets a plain refusal, no channel state; a refund
/// carrying the voucher the server holds (what a corrective 402 hands out) moves nothing; the
/// payer's own refund, freshly signed, still runs.
pub(crate) async fn a_stranger_gets_no_channel_state_and_refunds_nothing(
    store: Arc<dyn ChannelStore>,
) {
    let server = Server::start(store).await;
    let buyer = Buyer::new(&server);
    let opened = server
        .get("/rows?count=1", &buyer.deposit(&server, 0))
        .await;
    assert_eq!(opened.status, StatusCode::OK, "{opened:?}");
    // A full-price request: the voucher held is signed on exactly what is charged, as a
    // refund's voucher is.
    let full = server
        .get("/rows?count=10", &buyer.voucher(&server, ROW + AMOUNT))
        .await;
    assert_eq!(full.status, StatusCode::OK, "{full:?}");
    let charged = ROW + AMOUNT;
    let payer = buyer.wallet.address();
    let before = server.sandbox.balance_of(&payer).0;
    let settles = server.sandbox.settle_calls();

    let stranger = SandboxWallet::random();
    let probe = stranger
        .voucher_payment(&server.accept, &buyer.sandbox_config(), AMOUNT)
        .unwrap();
    let probed = server.get("/rows?count=1", &probe).await;
    assert_eq!(probed.status, StatusCode::PAYMENT_REQUIRED, "{probed:?}");
    let shown = probed.required.as_ref().map(|required| {
        let extra = &required["accepts"][0]["extra"];
        (
            extra.get("channelState").cloned(),
            extra.get("voucherState").cloned(),
        )
    });
    assert_eq!(
        shown,
        Some((None, None)),
        "a stranger is shown nothing of the channel: {probed:?}"
    );
    assert_ne!(
        probed.error(),
        "invalid_batch_settlement_evm_cumulative_amount_mismatch"
    );

    // The voucher the server holds, as a corrective 402 would show it to the payer.
    let held = server.channels.load(&buyer.id).await.unwrap().unwrap();
    let held = held.voucher.expect("a voucher held").signature;
    let replayed = with_signature(&buyer.refund(&server, charged, None), &held);
    let refund = server.get("/rows?count=1", &replayed).await;
    assert_eq!(refund.status, StatusCode::PAYMENT_REQUIRED, "{refund:?}");
    assert_eq!(
        refund.error(),
        "invalid_batch_settlement_evm_refund_voucher_not_fresh"
    );
    assert_eq!(server.sandbox.balance_of(&payer).0, before, "nothing moved");
    assert_eq!(server.sandbox.settle_calls(), settles, "nothing sent");
    assert_eq!(claimed_on_chain(&server, &buyer), (DEPOSIT, 0));
    let channel = server.channels.load(&buyer.id).await.unwrap().unwrap();
    assert_eq!((channel.charged, channel.hold), (charged, None));

    // The payer, on a voucher of its own the server never held, is refunded.
    let more = server
        .get("/rows?count=1", &buyer.voucher(&server, charged + AMOUNT))
        .await;
    assert_eq!(more.status, StatusCode::OK, "{more:?}");
    let charged = charged + ROW;
    let own = server
        .get("/rows?count=1", &buyer.refund(&server, charged, None))
        .await;
    assert_eq!(own.status, StatusCode::OK, "{own:?}");
    assert_eq!(
        server.sandbox.balance_of(&payer).0,
        before + DEPOSIT - charged
    );
}
