//! [`ChannelStore`]: where a server keeps its channels, shaped so that every accepted voucher is
//! counted exactly once and claimed exactly once, across restarts and instances.

use std::sync::Arc;

use tower_x402::{BoxError, BoxFuture};

use crate::channel::{Begin, Channel, ClaimLease, ClaimResult, Commit, Committed, Hold, OnChain};

/// The store could not be read or written. The operation may or may not have happened: the
/// caller reads the channel again rather than guess.
#[derive(Debug, thiserror::Error)]
#[error("channel store: {0}")]
pub struct StoreError(#[source] pub BoxError);

/// The server's channel state: one [`Channel`] per channel id.
///
/// A request on a channel goes `begin` → (handler runs) → `commit` on success or `release` on
/// failure; a claimer goes `unclaimed` → `begin_claim` (the claim intent, written before
/// `/settle`) → `finish_claim` (after the answer, or after reading the chain when the answer was
/// lost). Each operation applies the rule of the same name on [`Channel`] atomically for each
/// channel it names and is durable when it answers `Ok`.
///
/// The contract, which `check_conformance` (feature `test-util`) tests:
///
/// - **one request at a time per channel**: `begin` answers [`Begin::Busy`] while another hold's
///   lease runs, across every instance sharing the store; of concurrent `begin`s exactly one
///   holds;
/// - **counted once**: `commit` applies only under its own hold and only from the cumulative the
///   request started from ([`Commit::previous`]); the same commit sent again (after a lost
///   answer) answers [`Committed::Done`] without applying twice;
/// - **nothing on failure**: `release` changes only the hold;
/// - **claimed once**: `begin_claim` writes a claim on a channel only when none is in flight (of
///   concurrent claimers, one per channel wins); `finish_claim` clears only its own claim;
/// - `unclaimed` lists every channel with unclaimed charges or a claim in flight;
/// - an `Err` means the operation may or may not have happened.
///
/// Times are the caller's unix milliseconds; the store compares them only as the rules say.
///
/// [`MemoryChannelStore`](crate::MemoryChannelStore) keeps channels in the process;
/// `PostgresChannelStore` in tower-x402-postgres (feature `channels`) shares them between
/// instances.
///
/// **One store per receiver**: every server paid to one receiver (under one receiver authorizer,
/// on one network) must share one store. A server with a store of its own does not know what the
/// others charged, and accepts again a voucher another already served: the channel is credited
/// once and served twice. Instances share a durable store (PostgreSQL); a memory store is for a
/// single process, and [`MemoryChannelStore::exclusive`](crate::MemoryChannelStore::exclusive)
/// makes a second process on the same receiver fail to start.
///
/// A request's life on a channel, as a scheme serves it:
///
/// ```
/// use tower_x402_channels::{Begin, Channel, ChannelStore, Commit, Committed, Hold, MemoryChannelStore, OnChain, Voucher};
/// # use tower_x402_channels::ChannelConfig;
/// # let config = ChannelConfig { payer: "0x1".into(), payer_authorizer: "0x1".into(), receiver: "0x2".into(), receiver_authorizer: "0x3".into(), token: "0x4".into(), withdraw_delay: 900, salt: "0x5".into() };
/// # tokio::runtime::Runtime::new()?.block_on(async {
/// let store = MemoryChannelStore::default();
/// let id = format!("0x{}", "ab".repeat(32));
/// store.open(&Channel::new(&id, x402_wire::Network::BASE, config, OnChain::new(50_000, 0, 0))).await?;
///
/// let now = 1_000; // unix milliseconds
/// let request = Hold::new("instance-1", now + 30_000);
/// let Begin::Held(channel) = store.begin(&id, &request, now).await? else { panic!("free") };
/// // A second request meanwhile is told busy, at once.
/// let other = Hold::new("instance-2", now + 30_000);
/// assert_eq!(store.begin(&id, &other, now).await?, Begin::Busy { until: now + 30_000 });
/// // The handler failed: nothing changes but the hold.
/// assert!(store.release(&id, &request.id).await?);
///
/// // The other request's handler succeeded and charged 400 under a voucher for 1,000.
/// let Begin::Held(channel) = store.begin(&id, &other, now).await? else { panic!("released") };
/// let commit = Commit::new(channel.charged, channel.charged + 400, Voucher::new(1_000, "0x…"));
/// assert_eq!(store.commit(&id, &other.id, &commit).await?, Committed::Done);
/// // Sent again after a lost answer: recognized, not counted twice.
/// assert_eq!(store.commit(&id, &other.id, &commit).await?, Committed::Done);
/// let stored = store.load(&id).await?.expect("the channel");
/// assert_eq!((stored.charged, stored.unclaimed()), (400, 400));
/// # Ok::<_, Box<dyn std::error::Error>>(()) })?;
/// # Ok::<_, Box<dyn std::error::Error>>(())
/// ```
pub trait ChannelStore: Send + Sync + 'static {
    /// The channel `id`, if known.
    fn load<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Option<Channel>, StoreError>>;

    /// Stores `channel` if its id is unknown. `Ok(false)`: known already, nothing changed.
    fn open<'a>(&'a self, channel: &'a Channel) -> BoxFuture<'a, Result<bool, StoreError>>;

    /// [`Channel::begin`]: the request `hold` takes channel `id` at `now`.
    fn begin<'a>(
        &'a self,
        id: &'a str,
        hold: &'a Hold,
        now: u64,
    ) -> BoxFuture<'a, Result<Begin, StoreError>>;

    /// [`Channel::commit`]: the request `hold_id` succeeded; its charge and voucher become the
    /// channel's, durably, and the hold is released.
    fn commit<'a>(
        &'a self,
        id: &'a str,
        hold_id: &'a str,
        commit: &'a Commit,
    ) -> BoxFuture<'a, Result<Committed, StoreError>>;

    /// [`Channel::release`]: the request `hold_id` failed; nothing but the hold changes.
    /// `Ok(false)`: no such channel or not its hold.
    fn release<'a>(
        &'a self,
        id: &'a str,
        hold_id: &'a str,
    ) -> BoxFuture<'a, Result<bool, StoreError>>;

    /// [`Channel::mirror`]: a newer reading of the chain. `Ok(false)`: unknown channel or an
    /// older reading.
    fn mirror<'a>(
        &'a self,
        id: &'a str,
        on_chain: &'a OnChain,
    ) -> BoxFuture<'a, Result<bool, StoreError>>;

    /// Up to `limit` channels that [need a claim](Channel::needs_claim) (unclaimed charges, or
    /// a claim in flight), in no promised order.
    fn unclaimed(&self, limit: usize) -> BoxFuture<'_, Result<Vec<Channel>, StoreError>>;

    /// [`Channel::begin_claim`] on each of `ids` in one atomic step: the channels on which the
    /// claim `lease` was written, each with its [`claim`](Channel::claim) set.
    fn begin_claim<'a>(
        &'a self,
        ids: &'a [String],
        lease: &'a ClaimLease,
    ) -> BoxFuture<'a, Result<Vec<Channel>, StoreError>>;

    /// [`Channel::finish_claim`] of claim `claim_id` on each channel named: how many it
    /// resolved.
    fn finish_claim<'a>(
        &'a self,
        claim_id: &'a str,
        results: &'a [(String, ClaimResult)],
    ) -> BoxFuture<'a, Result<usize, StoreError>>;

    /// Removes channel `id` (after a full refund), only under the request `hold_id`'s hold.
    fn remove<'a>(
        &'a self,
        id: &'a str,
        hold_id: &'a str,
    ) -> BoxFuture<'a, Result<bool, StoreError>>;
}

impl<T: ChannelStore + ?Sized> ChannelStore for Arc<T> {
    fn load<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Option<Channel>, StoreError>> {
        (**self).load(id)
    }

    fn open<'a>(&'a self, channel: &'a Channel) -> BoxFuture<'a, Result<bool, StoreError>> {
        (**self).open(channel)
    }

    fn begin<'a>(
        &'a self,
        id: &'a str,
        hold: &'a Hold,
        now: u64,
    ) -> BoxFuture<'a, Result<Begin, StoreError>> {
        (**self).begin(id, hold, now)
    }

    fn commit<'a>(
        &'a self,
        id: &'a str,
        hold_id: &'a str,
        commit: &'a Commit,
    ) -> BoxFuture<'a, Result<Committed, StoreError>> {
        (**self).commit(id, hold_id, commit)
    }

    fn release<'a>(
        &'a self,
        id: &'a str,
        hold_id: &'a str,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        (**self).release(id, hold_id)
    }

    fn mirror<'a>(
        &'a self,
        id: &'a str,
        on_chain: &'a OnChain,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        (**self).mirror(id, on_chain)
    }

    fn unclaimed(&self, limit: usize) -> BoxFuture<'_, Result<Vec<Channel>, StoreError>> {
        (**self).unclaimed(limit)
    }

    fn begin_claim<'a>(
        &'a self,
        ids: &'a [String],
        lease: &'a ClaimLease,
    ) -> BoxFuture<'a, Result<Vec<Channel>, StoreError>> {
        (**self).begin_claim(ids, lease)
    }

    fn finish_claim<'a>(
        &'a self,
        claim_id: &'a str,
        results: &'a [(String, ClaimResult)],
    ) -> BoxFuture<'a, Result<usize, StoreError>> {
        (**self).finish_claim(claim_id, results)
    }

    fn remove<'a>(
        &'a self,
        id: &'a str,
        hold_id: &'a str,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        (**self).remove(id, hold_id)
    }
}
