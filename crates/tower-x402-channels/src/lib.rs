//! Payment channels for [tower-x402](tower_x402): the server side of the x402
//! `batch-settlement` scheme's bookkeeping.
//!
//! A buyer deposits once into an on-chain channel, then pays each request with a voucher, an
//! off-chain signature over a cumulative ceiling. The server is the sole keeper of what it
//! charged on each channel and of the latest voucher, which it later claims on chain, many
//! channels in one transaction, then sweeps to its receiver. An accepted voucher that is lost
//! before it is claimed is forfeited money, and one counted twice overcharges the buyer: this
//! crate keeps both from happening.
//!
//! - [`ChannelStore`]: the channel state contract, with [`MemoryChannelStore`] and, in
//!   tower-x402-postgres (feature `channels`), a PostgreSQL store shared by instances;
//!   `check_conformance` (feature `test-util`) tests any store against it.
//! - [`Claimer`]: claims the latest voucher of every channel with unclaimed charges in one
//!   facilitator `/settle` of `type: "claim"`, then sweeps (`type: "settle"`); by interval, by
//!   unclaimed amount, on a pending withdrawal read from the chain (`RpcChainReader`, feature
//!   `rpc`), and on shutdown.
//!
//! # One request at a time per channel
//!
//! A request holds its channel from before its voucher is checked until its charge is committed
//! (or released on failure). A second request arriving meanwhile is answered at once as busy
//! ([`Begin::Busy`], `invalid_batch_settlement_evm_channel_busy` on the wire), not made to
//! wait: a buyer signs each voucher on the cumulative the previous answer reported, so a second
//! request in flight was signed on the same base as the first and can only pass if the first
//! fails. Waiting would tie a connection to another request's handler (which may stream for
//! minutes) to answer, most of the time, a corrective 402 anyway; the official clients do not
//! send concurrent requests on one channel. A hold has a lease, so an instance that dies while
//! holding a channel blocks it only until the lease ends.
//!
//! # Exactly once
//!
//! - A request's charge is committed only after its handler succeeded, by a compare-and-set on
//!   the cumulative the request started from, under the request's own hold: of two requests
//!   on one base (a hold taken over after its lease ran out) one commits. A commit sent again
//!   after a lost database answer is recognized, not applied twice.
//! - A claim is written into the store (the claim intent, with a lease) before `/settle` is
//!   sent, and resolved after it. When the answer is lost, the claim is resolved by reading the
//!   channel's `totalClaimed` on chain, never by sending it again unread; while its lease runs,
//!   no other claimer touches the channel.
//!
//! # Claims no payer can block
//!
//! The contract reverts a claim batch whole when any one channel in it cannot be claimed (a
//! channel charged beyond its balance, say after its payer withdrew). A claim therefore never
//! asks more than the balance last read ([`Channel::claimable`]); a batch refused whole is split
//! in halves (the channels read again from the chain first, with a [`ChainReader`]) until the
//! refused channels are alone, so every honest channel is claimed in the same round. A channel
//! refused alone is marked in the store ([`Channel::refused`]), logged at `error` with its id and
//! amount, passed to [`Claimer::on_refused`], and never batched again: it is tried again alone
//! every [`ClaimPolicy::retry_refused`], on a claimer's first round, and on shutdown.
//!
//! # Shutdown
//!
//! [`ClaimerTask::shutdown`] claims everything, waits (up to [`ClaimPolicy::shutdown_wait`]) for
//! claims under a live lease (another instance's, one killed mid-claim) and then resolves or
//! takes them over, tries each refused channel once more, and sweeps every receiver it claimed
//! for or was told of ([`Claimer::sweeps_for`]: what cooperative refunds claimed). Its
//! [`ClaimReport`] names what is left ([`ClaimReport::left`], [`ClaimReport::unswept`]); a
//! server exits non-zero, naming the amounts, unless [`ClaimReport::is_settled`].

#![cfg_attr(docsrs, feature(doc_cfg))]
#![cfg_attr(not(test), warn(clippy::unwrap_used))]

mod chain;
mod channel;
mod claim;
#[cfg(any(test, feature = "test-util"))]
mod conformance;
#[cfg(feature = "rpc")]
mod deposit;
mod memory;
mod receiver_lock;
mod scheme;
mod store;
mod typed;
mod wire;

#[cfg(feature = "rpc")]
#[cfg_attr(docsrs, doc(cfg(feature = "rpc")))]
pub use chain::RpcChainReader;
pub use chain::{ChainChannel, ChainError, ChainReader};
pub use channel::{
    Begin, Channel, ClaimInFlight, ClaimLease, ClaimRefused, ClaimResult, Commit, Committed, Hold,
    OnChain, RECENT_COMMITS, Voucher, normalize_id,
};
pub use claim::{ClaimAuthorizer, ClaimError, ClaimPolicy, ClaimReport, Claimer, ClaimerTask};
#[cfg(any(test, feature = "test-util"))]
#[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
pub use conformance::check as check_conformance;
#[cfg(feature = "rpc")]
#[cfg_attr(docsrs, doc(cfg(feature = "rpc")))]
pub use deposit::DepositReconciler;
pub use memory::MemoryChannelStore;
pub use scheme::{
    BatchSettlement, ChannelOffer, ChannelOfferError, MAX_WITHDRAW_DELAY, MIN_WITHDRAW_DELAY,
    WITHDRAWAL_MARGIN,
};
pub use store::{ChannelStore, StoreError};
pub use typed::{BATCH_SETTLEMENT_ADDRESS, TypedDataError, claim_batch_digest};
pub use wire::{
    BATCH_SETTLEMENT_SCHEME, ChannelConfig, ClaimedVoucher, ServerPayload, VoucherClaim,
};

/// The README's example, compiled as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
