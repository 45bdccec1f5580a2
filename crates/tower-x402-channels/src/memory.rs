//! [`MemoryChannelStore`]: channels in the process's memory.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use tower_x402::BoxFuture;

use crate::channel::{
    Begin, Channel, ClaimLease, ClaimResult, Commit, Committed, Hold, OnChain, normalize_id,
};
use crate::store::{ChannelStore, StoreError};

/// A [`ChannelStore`] in memory: for one instance whose channels may be lost with it (tests,
/// demos). A restart forgets every accepted voucher not yet claimed, which is forfeited money:
/// a server that keeps channels across restarts or shares them between instances uses a durable
/// store (`PostgresChannelStore` in tower-x402-postgres).
///
/// ```
/// use tower_x402_channels::{Begin, Channel, ChannelStore as _, Commit, Committed, Hold, MemoryChannelStore, OnChain, Voucher};
/// # use tower_x402_channels::ChannelConfig;
/// # let config = ChannelConfig { payer: "0x1".into(), payer_authorizer: "0x1".into(), receiver: "0x2".into(), receiver_authorizer: "0x3".into(), token: "0x4".into(), withdraw_delay: 900, salt: "0x5".into() };
/// # tokio::runtime::Runtime::new()?.block_on(async {
/// let store = MemoryChannelStore::default();
/// let id = format!("0x{}", "ab".repeat(32));
/// store.open(&Channel::new(&id, x402_wire::Network::BASE, config, OnChain::default())).await?;
///
/// let hold = Hold::new("instance-1", 10_000);
/// let Begin::Held(channel) = store.begin(&id, &hold, 0).await? else { panic!("free") };
/// // ... the handler ran and charged 700 under a voucher for 1,000 ...
/// let commit = Commit::new(channel.charged, channel.charged + 700, Voucher::new(1_000, "0x…"));
/// assert_eq!(store.commit(&id, &hold.id, &commit).await?, Committed::Done);
/// assert_eq!(store.load(&id).await?.map(|channel| channel.charged), Some(700));
/// # Ok::<_, Box<dyn std::error::Error>>(()) })?;
/// # Ok::<_, Box<dyn std::error::Error>>(())
/// ```
///
/// # One store per receiver
///
/// Every server paid to one receiver (under one receiver authorizer, on one network) must share
/// one store: a second server with a memory store of its own does not know what the first
/// counted, and accepts a voucher the first already served again. A memory store is for a single
/// process; [`exclusive`](Self::exclusive) makes a second process on the same receiver refuse to
/// start instead of serving vouchers twice.
#[derive(Debug, Default)]
pub struct MemoryChannelStore {
    channels: Mutex<HashMap<String, Channel>>,
    /// The receiver's lock file, held open while the store lives.
    lock: Option<(std::fs::File, std::path::PathBuf)>,
}

impl MemoryChannelStore {
    /// A memory store that is the only one on this machine for the channels paid to `receiver`
    /// under `receiver_authorizer` on `network`: it holds an exclusive OS file lock (`flock`, in
    /// the temporary directory) until it is dropped or the process ends, however it ends.
    ///
    /// # Errors
    ///
    /// Another process holds the lock (its error names the lock file), or the lock file cannot
    /// be opened.
    ///
    /// ```
    /// use tower_x402_channels::MemoryChannelStore;
    /// use x402_wire::Network;
    ///
    /// let receiver = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";
    /// let authorizer = "0x3f1Eae7D46d88F08fc2F8ed27FCb2AB183EB2d0E";
    /// let store = MemoryChannelStore::exclusive(&Network::BASE, receiver, authorizer)?;
    /// // While it lives, no other store takes the same receiver (on Unix).
    /// # #[cfg(unix)]
    /// assert!(MemoryChannelStore::exclusive(&Network::BASE, receiver, authorizer).is_err());
    /// drop(store);
    /// assert!(MemoryChannelStore::exclusive(&Network::BASE, receiver, authorizer).is_ok());
    /// # Ok::<_, std::io::Error>(())
    /// ```
    pub fn exclusive(
        network: &x402_wire::Network,
        receiver: &str,
        receiver_authorizer: &str,
    ) -> std::io::Result<Self> {
        let path = crate::receiver_lock::path(network, receiver, receiver_authorizer);
        let file = crate::receiver_lock::take(&path).map_err(|error| {
            if error.kind() == std::io::ErrorKind::WouldBlock {
                std::io::Error::new(
                    std::io::ErrorKind::WouldBlock,
                    format!(
                        "another process keeps the channels of receiver {receiver} (authorizer {receiver_authorizer}, {network}) in its own memory (it holds {}): every server paid to one receiver must share one channel store, or vouchers are served twice",
                        path.display()
                    ),
                )
            } else {
                std::io::Error::new(error.kind(), format!("{}: {error}", path.display()))
            }
        })?;
        Ok(Self {
            channels: Mutex::default(),
            lock: Some((file, path)),
        })
    }

    /// The lock file this store holds, when made [`exclusive`](Self::exclusive).
    pub fn lock_file(&self) -> Option<&std::path::Path> {
        self.lock.as_ref().map(|(_, path)| path.as_path())
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Channel>> {
        self.channels.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Applies `rule` to channel `id`: `None` when unknown.
    fn with<T>(&self, id: &str, rule: impl FnOnce(&mut Channel) -> T) -> Option<T> {
        self.lock().get_mut(&normalize_id(id)).map(rule)
    }
}

impl ChannelStore for MemoryChannelStore {
    fn load<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Option<Channel>, StoreError>> {
        let channel = self.lock().get(&normalize_id(id)).cloned();
        Box::pin(std::future::ready(Ok(channel)))
    }

    fn open<'a>(&'a self, channel: &'a Channel) -> BoxFuture<'a, Result<bool, StoreError>> {
        let mut channels = self.lock();
        let id = normalize_id(&channel.id);
        let opened = !channels.contains_key(&id);
        if opened {
            let mut channel = channel.clone();
            channel.id.clone_from(&id);
            channels.insert(id, channel);
        }
        Box::pin(std::future::ready(Ok(opened)))
    }

    fn begin<'a>(
        &'a self,
        id: &'a str,
        hold: &'a Hold,
        now: u64,
    ) -> BoxFuture<'a, Result<Begin, StoreError>> {
        let begun = self
            .with(id, |channel| channel.begin(hold, now))
            .unwrap_or(Begin::NotFound);
        Box::pin(std::future::ready(Ok(begun)))
    }

    fn commit<'a>(
        &'a self,
        id: &'a str,
        hold_id: &'a str,
        commit: &'a Commit,
    ) -> BoxFuture<'a, Result<Committed, StoreError>> {
        let committed = self
            .with(id, |channel| channel.commit(hold_id, commit))
            .unwrap_or(Committed::NotFound);
        Box::pin(std::future::ready(Ok(committed)))
    }

    fn release<'a>(
        &'a self,
        id: &'a str,
        hold_id: &'a str,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        let released = self
            .with(id, |channel| channel.release(hold_id))
            .unwrap_or(false);
        Box::pin(std::future::ready(Ok(released)))
    }

    fn mirror<'a>(
        &'a self,
        id: &'a str,
        on_chain: &'a OnChain,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        let mirrored = self
            .with(id, |channel| channel.mirror(*on_chain))
            .unwrap_or(false);
        Box::pin(std::future::ready(Ok(mirrored)))
    }

    fn unclaimed(&self, limit: usize) -> BoxFuture<'_, Result<Vec<Channel>, StoreError>> {
        let mut found: Vec<Channel> = self
            .lock()
            .values()
            .filter(|channel| channel.needs_claim())
            .cloned()
            .collect();
        found.sort_by(|a, b| a.id.cmp(&b.id));
        found.truncate(limit);
        Box::pin(std::future::ready(Ok(found)))
    }

    fn begin_claim<'a>(
        &'a self,
        ids: &'a [String],
        lease: &'a ClaimLease,
    ) -> BoxFuture<'a, Result<Vec<Channel>, StoreError>> {
        let mut channels = self.lock();
        let mut taken = Vec::new();
        for id in ids {
            if let Some(channel) = channels.get_mut(&normalize_id(id))
                && channel.begin_claim(lease).is_some()
            {
                taken.push(channel.clone());
            }
        }
        Box::pin(std::future::ready(Ok(taken)))
    }

    fn finish_claim<'a>(
        &'a self,
        claim_id: &'a str,
        results: &'a [(String, ClaimResult)],
    ) -> BoxFuture<'a, Result<usize, StoreError>> {
        let mut channels = self.lock();
        let finished = results
            .iter()
            .filter(|(id, result)| {
                channels
                    .get_mut(&normalize_id(id))
                    .is_some_and(|channel| channel.finish_claim(claim_id, *result))
            })
            .count();
        Box::pin(std::future::ready(Ok(finished)))
    }

    fn remove<'a>(
        &'a self,
        id: &'a str,
        hold_id: &'a str,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        let mut channels = self.lock();
        let id = normalize_id(id);
        let removed = channels
            .get(&id)
            .is_some_and(|channel| channel.removable_by(hold_id))
            && channels.remove(&id).is_some();
        Box::pin(std::future::ready(Ok(removed)))
    }
}
