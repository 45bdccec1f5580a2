//! The [`ChannelStore`] contract as a test any implementation can run.
//!
//! ```
//! use std::sync::Arc;
//! use tower_x402_channels::{MemoryChannelStore, check_conformance};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! check_conformance(Arc::new(MemoryChannelStore::default())).await;
//! # }
//! ```

mod states;

use std::sync::Arc;

use x402_wire::Network;

use crate::channel::{
    Begin, Channel, ClaimLease, ClaimResult, Commit, Committed, Hold, OnChain, Voucher,
};
use crate::store::{ChannelStore, StoreError};
use crate::wire::ChannelConfig;

/// How many tasks race in the concurrency checks.
const RACERS: usize = 16;

/// Runs every check of the [`ChannelStore`] contract against `store`, panicking with the broken
/// rule on the first violation. Uses fresh channel ids on every call, so it can run against a
/// database that already holds data (and several times against the same one). Its channels
/// are left claimed, so a store shared with a claimer is left with nothing to claim.
///
/// Checks: an unknown channel loads as `None` and every operation on it changes nothing; `open`
/// stores once and the record round-trips (amounts beyond 64 bits included); a hold is
/// exclusive until its lease ends and then taken over; a commit applies only under its hold and
/// from its base, is recognized when sent again, and releases the hold; a release changes
/// nothing else; mirroring keeps the newest reading; `unclaimed` lists a channel with charges
/// or a claim in flight and not one without; a claim is written once (of concurrent claimers
/// one wins per channel, an expired claim included) and finished once; `remove` needs the hold;
/// of concurrent `begin`s one holds, and of concurrent commits from one base one applies; a
/// claim asks no more than the balance last read, and a claim refused alone marks the channel
/// (kept, listed, round-tripped) until a claim succeeds; a pending withdrawal is kept as read;
/// a refund in doubt keeps its channel held until its lease ends, the chain mirrored meanwhile,
/// and a refund that emptied the channel removes it under its hold.
///
/// ```
/// use std::sync::Arc;
/// use tower_x402_channels::{MemoryChannelStore, check_conformance};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// check_conformance(Arc::new(MemoryChannelStore::default())).await;
/// # }
/// ```
pub async fn check(store: Arc<dyn ChannelStore>) {
    let fresh = || format!("0x{}", hex(&rand::random::<[u8; 32]>()));

    // Unknown channels.
    let unknown = fresh();
    let hold = Hold::new("conformance", 1_000);
    assert_eq!(
        load(&*store, &unknown).await,
        None,
        "an unknown channel loads as None"
    );
    assert_eq!(
        ok(store.begin(&unknown, &hold, 0).await),
        Begin::NotFound,
        "begin on an unknown channel"
    );
    let commit = Commit::new(0, 1, Voucher::new(1, "0x01"));
    assert_eq!(
        ok(store.commit(&unknown, &hold.id, &commit).await),
        Committed::NotFound,
        "commit on an unknown channel"
    );
    assert!(
        !ok(store.release(&unknown, &hold.id).await),
        "release on an unknown channel"
    );
    assert!(
        !ok(store.mirror(&unknown, &OnChain::default()).await),
        "mirror on an unknown channel"
    );
    assert!(
        !ok(store.remove(&unknown, &hold.id).await),
        "remove on an unknown channel"
    );

    // Open once; the record reads back as stored, its id lower-case.
    let id = fresh().to_ascii_uppercase().replacen("0X", "0x", 1);
    let big = u128::MAX - 7;
    let on_chain = OnChain {
        balance: big,
        total_claimed: 3,
        withdraw_requested_at: 0,
        pending_withdrawal: 0,
        refund_nonce: 2,
        read_at: 10,
    };
    let channel = Channel::new(&id, Network::BASE_SEPOLIA, config(), on_chain);
    assert!(ok(store.open(&channel).await), "open of a new channel");
    let mut other = channel.clone();
    other.charged = 99;
    assert!(
        !ok(store.open(&other).await),
        "open of a known channel fails"
    );
    let id = id.to_ascii_lowercase();
    assert_eq!(
        load(&*store, &id).await.as_ref(),
        Some(&channel),
        "a channel reads back as opened, with its id lower-case"
    );

    // One hold at a time; an expired one is taken over.
    let first = Hold::new("a", 100);
    let Begin::Held(held) = ok(store.begin(&id, &first, 0).await) else {
        panic!("begin on a free channel holds it")
    };
    assert_eq!(
        (held.charged, held.hold.as_ref()),
        (3, Some(&first)),
        "the held record"
    );
    let second = Hold::new("b", 300);
    assert_eq!(
        ok(store.begin(&id, &second, 99).await),
        Begin::Busy { until: 100 },
        "begin while another hold's lease runs is busy"
    );
    let released = ok(store.release(&id, &second.id).await);
    assert!(!released, "release of a hold the request does not have");
    assert!(
        matches!(ok(store.begin(&id, &second, 100).await), Begin::Held(_)),
        "an expired hold is taken over"
    );
    let commit = Commit::new(3, 503, Voucher::new(1_003, "0xaa"));
    assert_eq!(
        ok(store.commit(&id, &first.id, &commit).await),
        Committed::HoldLost,
        "a commit under a hold taken over"
    );
    assert_eq!(
        load(&*store, &id).await.map(|channel| channel.charged),
        Some(3),
        "a refused commit changes nothing"
    );

    // Commit from its base only, once, releasing the hold.
    let moved = Commit::new(2, 502, Voucher::new(1_002, "0xaa"));
    assert_eq!(
        ok(store.commit(&id, &second.id, &moved).await),
        Committed::Moved { charged: 3 },
        "a commit from another base"
    );
    let above = Commit::new(3, 2_000, Voucher::new(1_003, "0xaa"));
    assert!(
        matches!(
            ok(store.commit(&id, &second.id, &above).await),
            Committed::Invalid(_)
        ),
        "a commit above its voucher's ceiling"
    );
    let reading = OnChain {
        read_at: 20,
        ..on_chain
    };
    let commit = Commit::new(3, 503, Voucher::new(1_003, "0xaa")).with_on_chain(reading);
    assert_eq!(
        ok(store.commit(&id, &second.id, &commit).await),
        Committed::Done,
        "commit"
    );
    assert_eq!(
        ok(store.commit(&id, &second.id, &commit).await),
        Committed::Done,
        "the same commit sent again is recognized"
    );
    let stored = load(&*store, &id).await.expect("the channel");
    assert_eq!(
        (
            stored.charged,
            stored.voucher.as_ref(),
            stored.hold.as_ref(),
            stored.on_chain
        ),
        (503, Some(&commit.voucher), None, reading),
        "a commit stores the charge, the voucher and the reading, and releases the hold"
    );

    // A commit sent again after another request on the channel committed is still recognized,
    // and counted once.
    let busy = fresh();
    assert!(ok(store
        .open(&Channel::new(
            &busy,
            Network::BASE,
            config(),
            OnChain::default()
        ))
        .await));
    let earlier_hold = Hold::new("e1", 1_000);
    assert!(matches!(
        ok(store.begin(&busy, &earlier_hold, 150).await),
        Begin::Held(_)
    ));
    let earlier = Commit::new(0, 100, Voucher::new(1_000, "0xc1"));
    assert_eq!(
        ok(store.commit(&busy, &earlier_hold.id, &earlier).await),
        Committed::Done,
        "the earlier request's commit"
    );
    let later_hold = Hold::new("e2", 1_000);
    assert!(matches!(
        ok(store.begin(&busy, &later_hold, 160).await),
        Begin::Held(_)
    ));
    let later = Commit::new(100, 200, Voucher::new(1_100, "0xc2"));
    assert_eq!(
        ok(store.commit(&busy, &later_hold.id, &later).await),
        Committed::Done,
        "the later request's commit"
    );
    assert_eq!(
        ok(store.commit(&busy, &earlier_hold.id, &earlier).await),
        Committed::Done,
        "an earlier commit sent again after a later one is recognized"
    );
    let stored = load(&*store, &busy).await.expect("the channel");
    assert_eq!(
        (stored.charged, stored.voucher.as_ref()),
        (200, Some(&later.voucher)),
        "an earlier commit sent again changes nothing"
    );
    let done = Hold::new("e3", 1_000);
    assert!(matches!(
        ok(store.begin(&busy, &done, 170).await),
        Begin::Held(_)
    ));
    assert!(ok(store.remove(&busy, &done.id).await), "its removal");

    // A release changes nothing but the hold.
    let third = Hold::new("c", 1_000);
    assert!(matches!(
        ok(store.begin(&id, &third, 200).await),
        Begin::Held(_)
    ));
    assert!(
        ok(store.release(&id, &third.id).await),
        "release of its own hold"
    );
    let after = load(&*store, &id).await.expect("the channel");
    assert_eq!((after.charged, after.hold.as_ref()), (503, None), "release");
    assert_eq!(
        ok(store
            .commit(
                &id,
                &third.id,
                &Commit::new(503, 600, Voucher::new(1_503, "0xbb"))
            )
            .await),
        Committed::HoldLost,
        "a commit after its release"
    );

    // Mirroring keeps the newest reading.
    let older = OnChain {
        balance: 1,
        read_at: 5,
        ..on_chain
    };
    assert!(
        !ok(store.mirror(&id, &older).await),
        "an older reading is ignored"
    );
    let newer = OnChain {
        withdraw_requested_at: 1_750_000_000,
        read_at: 30,
        ..on_chain
    };
    assert!(
        ok(store.mirror(&id, &newer).await),
        "a newer reading is mirrored"
    );
    assert_eq!(
        load(&*store, &id).await.map(|channel| channel.on_chain),
        Some(newer)
    );

    // Listed while something is unclaimed; claimed once.
    let listed = |channels: Vec<Channel>| channels.iter().any(|channel| channel.id == id);
    assert!(
        listed(ok(store.unclaimed(usize::MAX).await)),
        "a channel with charges is listed"
    );
    let idle = fresh();
    assert!(ok(store
        .open(&Channel::new(
            &idle,
            Network::BASE,
            config(),
            OnChain::default()
        ))
        .await));
    assert!(
        !ok(store.unclaimed(usize::MAX).await)
            .iter()
            .any(|channel| channel.id == idle),
        "a channel without charges is not listed"
    );
    let lease = ClaimLease::new("claimer-a", 1_000);
    let ids = vec![id.clone(), idle.clone(), unknown.clone()];
    let taken = ok(store.begin_claim(&ids, &lease).await);
    assert_eq!(taken.len(), 1, "only the channel with charges is claimed");
    let claim = taken[0].claim.clone().expect("the claim written");
    assert_eq!(
        (claim.id.as_str(), claim.total, &claim.voucher),
        (lease.id.as_str(), 503, &commit.voucher),
        "the claim of the latest voucher for everything charged"
    );
    assert!(
        ok(store
            .begin_claim(&ids, &ClaimLease::new("claimer-b", 2_000))
            .await)
        .is_empty(),
        "a second claim while one is in flight"
    );
    assert!(
        listed(ok(store.unclaimed(usize::MAX).await)),
        "a claim in flight is listed"
    );
    let results = [(id.clone(), ClaimResult::Claimed { total_claimed: 503 })];
    assert_eq!(
        ok(store.finish_claim("another", &results).await),
        0,
        "another claim's finish"
    );
    assert_eq!(
        ok(store.finish_claim(&lease.id, &results).await),
        1,
        "finish"
    );
    assert_eq!(
        ok(store.finish_claim(&lease.id, &results).await),
        0,
        "finished once"
    );
    let claimed = load(&*store, &id).await.expect("the channel");
    assert_eq!(
        (claimed.claimed, claimed.claim.as_ref(), claimed.unclaimed()),
        (503, None, 0),
        "a finished claim"
    );
    assert!(
        !listed(ok(store.unclaimed(usize::MAX).await)),
        "nothing left to claim"
    );

    // Concurrent claimers: one per channel.
    let fourth = Hold::new("d", 1_000);
    assert!(matches!(
        ok(store.begin(&id, &fourth, 300).await),
        Begin::Held(_)
    ));
    let commit = Commit::new(503, 1_503, Voucher::new(1_503, "0xcc"));
    assert_eq!(
        ok(store.commit(&id, &fourth.id, &commit).await),
        Committed::Done
    );
    let racers = (0..RACERS).map(|n| {
        let store = Arc::clone(&store);
        let ids = vec![id.clone()];
        tokio::spawn(async move {
            let lease = ClaimLease::new(format!("claimer-{n}"), 5_000);
            ok(store.begin_claim(&ids, &lease).await).len()
        })
    });
    let won: usize = join(racers).await.into_iter().sum();
    assert_eq!(
        won, 1,
        "of concurrent claimers exactly one writes the claim"
    );
    let in_flight = load(&*store, &id)
        .await
        .and_then(|channel| channel.claim)
        .expect("a claim");
    assert_eq!(
        ok(store
            .finish_claim(&in_flight.id, &[(id.clone(), ClaimResult::NotClaimed)])
            .await),
        1
    );
    let back = load(&*store, &id).await.expect("the channel");
    assert_eq!(
        (back.claimed, back.unclaimed()),
        (503, 1_000),
        "a claim that did not happen"
    );

    // Concurrent requests: one holds; of concurrent commits from one base, one applies.
    let racers = (0..RACERS).map(|n| {
        let store = Arc::clone(&store);
        let id = id.clone();
        tokio::spawn(async move {
            let hold = Hold::new(format!("racer-{n}"), 10_000);
            matches!(ok(store.begin(&id, &hold, 400).await), Begin::Held(_))
        })
    });
    let held = join(racers).await.into_iter().filter(|held| *held).count();
    assert_eq!(held, 1, "of concurrent begins exactly one holds");
    let holder = load(&*store, &id)
        .await
        .and_then(|channel| channel.hold)
        .expect("a hold");
    let racers = (0..RACERS).map(|n| {
        let store = Arc::clone(&store);
        let (id, hold_id) = (id.clone(), holder.id.clone());
        tokio::spawn(async move {
            let charged = 1_503 + 1 + n as u128;
            let commit = Commit::new(1_503, charged, Voucher::new(charged, format!("0x{n:02x}")));
            ok(store.commit(&id, &hold_id, &commit).await) == Committed::Done
        })
    });
    let applied = join(racers).await.into_iter().filter(|done| *done).count();
    assert_eq!(
        applied, 1,
        "of concurrent commits from one base exactly one applies"
    );

    // Removal needs the hold.
    let last = Hold::new("e", 10_000);
    assert!(matches!(
        ok(store.begin(&id, &last, 500).await),
        Begin::Held(_)
    ));
    assert!(
        !ok(store.remove(&id, &holder.id).await),
        "remove without the hold"
    );
    assert!(
        ok(store.remove(&id, &last.id).await),
        "remove under the hold"
    );
    assert_eq!(load(&*store, &id).await, None, "a removed channel is gone");

    refused_claims(&*store, fresh()).await;
    states::withdrawal(&*store, &fresh()).await;
    states::refund_in_doubt(&*store, &fresh(), &fresh()).await;
}

/// A claim is capped at the balance last read; a claim refused alone marks the channel, which
/// stays listed, and a claim that succeeds clears the mark.
async fn refused_claims(store: &dyn ChannelStore, id: String) {
    let opened = Channel::new(&id, Network::BASE, config(), OnChain::new(2_000, 0, 10));
    assert!(ok(store.open(&opened).await));
    let hold = Hold::new("f", 10_000);
    assert!(matches!(
        ok(store.begin(&id, &hold, 600).await),
        Begin::Held(_)
    ));
    let commit = Commit::new(0, 3_000, Voucher::new(3_000, "0xdd"));
    assert_eq!(
        ok(store.commit(&id, &hold.id, &commit).await),
        Committed::Done
    );
    let ids = vec![id.clone()];
    let lease = ClaimLease::new("claimer-f", 1_000);
    let taken = ok(store.begin_claim(&ids, &lease).await);
    assert_eq!(
        taken
            .first()
            .and_then(|channel| channel.claim.as_ref())
            .map(|claim| claim.total),
        Some(2_000),
        "a claim asks no more than the balance last read"
    );
    let refused = [(id.clone(), ClaimResult::Refused { at: 700 })];
    assert_eq!(
        ok(store.finish_claim(&lease.id, &refused).await),
        1,
        "refused"
    );
    let marked = load(store, &id).await.expect("the channel");
    assert_eq!(
        (
            marked.refused.map(|refused| (refused.total, refused.at)),
            marked.claim.as_ref()
        ),
        (Some((2_000, 700)), None),
        "a refused claim marks the channel"
    );
    assert!(
        ok(store.unclaimed(usize::MAX).await)
            .iter()
            .any(|channel| channel.id == id && channel.refused.is_some()),
        "a refused channel is listed with its mark"
    );
    let again = ClaimLease::new("claimer-f", 2_000);
    assert_eq!(
        ok(store.begin_claim(&ids, &again).await).len(),
        1,
        "tried again alone"
    );
    let claimed = [(
        id.clone(),
        ClaimResult::Claimed {
            total_claimed: 2_000,
        },
    )];
    assert_eq!(ok(store.finish_claim(&again.id, &claimed).await), 1);
    let cleared = load(store, &id).await.expect("the channel");
    assert_eq!(
        (cleared.refused, cleared.claimed, cleared.over_balance()),
        (None, 2_000, 1_000),
        "a claim that succeeds clears the mark; the rest is beyond the balance"
    );
    assert!(
        ok(store
            .begin_claim(&ids, &ClaimLease::new("claimer-f", 3_000))
            .await)
        .is_empty(),
        "nothing claimable beyond the balance"
    );
    // The chain shows more: the rest is claimable, and claimed, leaving nothing to claim.
    assert!(ok(store.mirror(&id, &OnChain::new(3_000, 2_000, 20)).await));
    let last = ClaimLease::new("claimer-f", 4_000);
    assert_eq!(ok(store.begin_claim(&ids, &last).await).len(), 1);
    let rest = [(
        id.clone(),
        ClaimResult::Claimed {
            total_claimed: 3_000,
        },
    )];
    assert_eq!(ok(store.finish_claim(&last.id, &rest).await), 1);
    assert_eq!(
        load(store, &id).await.map(|channel| channel.unclaimed()),
        Some(0)
    );
}

async fn load(store: &dyn ChannelStore, id: &str) -> Option<Channel> {
    ok(store.load(id).await)
}

fn ok<T>(result: Result<T, StoreError>) -> T {
    result.unwrap_or_else(|error| panic!("the store failed: {error}"))
}

async fn join<T: Send + 'static>(
    tasks: impl Iterator<Item = tokio::task::JoinHandle<T>>,
) -> Vec<T> {
    let mut results = Vec::new();
    for task in tasks.collect::<Vec<_>>() {
        results.push(
            task.await
                .unwrap_or_else(|error| panic!("a racer panicked: {error}")),
        );
    }
    results
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

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}
