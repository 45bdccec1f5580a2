//! Claims no payer can block, on the memory store: a channel charged beyond its on-chain
//! balance beside honest ones (see `poisoned/scenario.rs`), with and without a chain reader.

use std::sync::Arc;

use tower_x402_channels::MemoryChannelStore;

#[path = "poisoned/scenario.rs"]
mod scenario;

#[tokio::test]
async fn a_poisoned_channel_leaves_the_honest_ones_claimed_in_the_first_round() {
    let store = Arc::new(MemoryChannelStore::default());
    scenario::a_poisoned_channel_leaves_the_honest_ones_claimed(store, false).await;
}

#[tokio::test]
async fn with_a_chain_reader_a_poisoned_claim_is_capped_at_the_balance_read() {
    let store = Arc::new(MemoryChannelStore::default());
    scenario::a_poisoned_channel_leaves_the_honest_ones_claimed(store, true).await;
}
