//! On the memory store: no voucher is served once the payer's withdrawal may finalize before a
//! claim (with and without a withdrawal watch), and a stranger gets neither a channel's state
//! nor a refund of it. The same scenarios run on PostgreSQL in tower-x402-postgres.

#[path = "support/guard.rs"]
mod guard;
mod support;

use std::sync::Arc;

use tower_x402_channels::MemoryChannelStore;

#[tokio::test]
async fn no_voucher_is_served_once_a_watched_withdrawal_may_finalize() {
    guard::no_voucher_is_served_once_a_watched_withdrawal_may_finalize(Arc::new(
        MemoryChannelStore::default(),
    ))
    .await;
}

#[tokio::test]
async fn a_withdrawal_seen_by_verify_refuses_the_voucher_and_is_claimed_first() {
    guard::a_withdrawal_seen_by_verify_refuses_the_voucher_and_is_claimed_first(Arc::new(
        MemoryChannelStore::default(),
    ))
    .await;
}

#[tokio::test]
async fn a_stranger_gets_no_channel_state_and_refunds_nothing() {
    guard::a_stranger_gets_no_channel_state_and_refunds_nothing(Arc::new(
        MemoryChannelStore::default(),
    ))
    .await;
}
