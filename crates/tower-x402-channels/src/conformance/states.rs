//! The conformance checks of the states a channel passes through beside its charges: a pending
//! withdrawal, and a refund in doubt.

use super::{config, load, ok};
use crate::channel::{Begin, Channel, Hold, OnChain};
use crate::store::ChannelStore;
use x402_wire::Network;

/// A pending withdrawal is kept as read: mirrored, handed to the request that holds the
/// channel, and cleared by a newer reading without it.
pub(super) async fn withdrawal(store: &dyn ChannelStore, id: &str) {
    let channel = Channel::new(id, Network::BASE, config(), OnChain::new(90_000, 0, 10));
    assert!(ok(store.open(&channel).await), "open of a new channel");
    let big = u128::from(u64::MAX) + 11;
    let withdrawing = OnChain::new(big + 5, 0, 20).with_withdrawal(1_750_000_000, big);
    assert!(
        ok(store.mirror(id, &withdrawing).await),
        "a reading with a pending withdrawal is mirrored"
    );
    let hold = Hold::new("w", 1_000);
    let Begin::Held(held) = ok(store.begin(id, &hold, 30).await) else {
        panic!("begin on a free channel with a pending withdrawal")
    };
    assert_eq!(
        (held.on_chain, held.on_chain.spendable()),
        (withdrawing, 5),
        "a request holding the channel sees its pending withdrawal, beyond 64 bits"
    );
    assert!(ok(store.release(id, &hold.id).await), "release");
    let finalized = OnChain::new(5, 0, 40);
    assert!(
        ok(store.mirror(id, &finalized).await),
        "a newer reading is mirrored"
    );
    assert_eq!(
        load(store, id).await.map(|channel| channel.on_chain),
        Some(finalized),
        "a newer reading without a withdrawal clears it"
    );
}

/// A refund in doubt (its `/settle` answer lost, the chain not read): the channel stays held
/// while the refund's hold lasts, so no voucher is accepted on a balance the refund may have
/// emptied; the chain read meanwhile (the refund recovered by a process that does not hold the
/// channel) is mirrored without lifting the hold; once the lease ends, the next request takes
/// the channel over and sees the refund's outcome as read. A refund that emptied the channel
/// removes it, under its hold only.
pub(super) async fn refund_in_doubt(store: &dyn ChannelStore, id: &str, emptied: &str) {
    let channel = Channel::new(id, Network::BASE, config(), OnChain::new(90_000, 0, 10));
    assert!(ok(store.open(&channel).await), "open of a new channel");
    let refund = Hold::new("refund", 1_000);
    assert!(
        matches!(ok(store.begin(id, &refund, 20).await), Begin::Held(_)),
        "a refund holds its channel"
    );
    let voucher = Hold::new("voucher", 2_000);
    assert_eq!(
        ok(store.begin(id, &voucher, 500).await),
        Begin::Busy { until: 1_000 },
        "a channel whose refund is in doubt stays held while the refund's lease runs"
    );
    let mut refunded = OnChain::new(40_000, 0, 600);
    refunded.refund_nonce = 1;
    assert!(
        ok(store.mirror(id, &refunded).await),
        "the chain after a refund in doubt is mirrored while the channel is held"
    );
    assert_eq!(
        ok(store.begin(id, &voucher, 900).await),
        Begin::Busy { until: 1_000 },
        "mirroring the chain does not lift a refund's hold"
    );
    let Begin::Held(taken) = ok(store.begin(id, &voucher, 1_000).await) else {
        panic!("the hold of a refund in doubt is taken over once its lease ends")
    };
    assert_eq!(
        (taken.on_chain, taken.charged),
        (refunded, 0),
        "the request after a refund in doubt sees the refund as the chain was read"
    );
    assert!(
        !ok(store.release(id, &refund.id).await),
        "the hold of a refund in doubt, taken over, releases nothing"
    );
    assert!(ok(store.release(id, &voucher.id).await), "release");

    // A refund that emptied its channel removes it, under its hold only.
    let channel = Channel::new(emptied, Network::BASE, config(), OnChain::new(5_000, 0, 10));
    assert!(ok(store.open(&channel).await), "open of a new channel");
    let refund = Hold::new("refund", 1_000);
    assert!(matches!(
        ok(store.begin(emptied, &refund, 20).await),
        Begin::Held(_)
    ));
    assert!(
        !ok(store.remove(emptied, "another").await),
        "a refund's channel is not removed without its hold"
    );
    assert!(
        ok(store.remove(emptied, &refund.id).await),
        "a refund that emptied its channel removes it under its hold"
    );
    assert_eq!(
        load(store, emptied).await,
        None,
        "a removed channel is gone"
    );
}
