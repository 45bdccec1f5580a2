//! [`Claimer`]: claims the latest voucher of every channel with unclaimed charges, many channels
//! in one facilitator `/settle` of `type: "claim"`, then sweeps the claimed funds to the
//! receiver (`type: "settle"`).

mod policy;
mod report;
pub(crate) mod request;
mod shutdown;
mod split;
mod sweep;
mod withdrawal;

pub use policy::ClaimPolicy;
pub use report::ClaimReport;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tower_x402::{BoxError, BoxFuture, Facilitator};
use x402_wire::{Network, SettleResponse};

use crate::chain::ChainReader;
use crate::channel::{Channel, ClaimInFlight, ClaimLease, ClaimResult, OnChain};
use crate::store::{ChannelStore, StoreError};
use crate::wire::{ServerPayload, VoucherClaim};

/// The facilitator's reason for an answer that does not tell whether the transaction ran.
const PENDING: &str = "settlement_pending";
/// How many channels one round looks at.
const ROUND_LIMIT: usize = 10_000;

/// The server's own receiver-authorizer key, when it has one: signs claim batches
/// (`claimAuthorizerSignature`) for the channels that name its [`address`](Self::address).
/// Channels naming another authorizer (the facilitator's) are claimed unsigned, and the
/// facilitator signs.
///
/// ```
/// use tower_x402::{BoxError, BoxFuture};
/// use tower_x402_channels::{ClaimAuthorizer, VoucherClaim};
/// use x402_wire::Network;
///
/// /// Signs with a key held by a signing service.
/// struct Kms { address: String }
///
/// impl ClaimAuthorizer for Kms {
///     fn address(&self) -> &str {
///         &self.address
///     }
///
///     fn sign<'a>(&'a self, network: &'a Network, claims: &'a [VoucherClaim]) -> BoxFuture<'a, Result<String, BoxError>> {
///         Box::pin(async move {
///             // Hash the EIP-712 `ClaimBatch` of `claims` on `network` and have the service sign it.
///             # let _ = (network, claims);
///             Err("the signing service is not configured".into())
///         })
///     }
/// }
/// # let _ = tower_x402_channels::Claimer::new(tower_x402_channels::MemoryChannelStore::default(), tower_x402_sandbox::SandboxFacilitator::new())
/// #     .authorizer(Kms { address: "0x3f1Eae7D46d88F08fc2F8ed27FCb2AB183EB2d0E".into() });
/// ```
pub trait ClaimAuthorizer: Send + Sync + 'static {
    /// The authorizer's address.
    fn address(&self) -> &str;

    /// The EIP-712 `ClaimBatch` signature of `claims` on `network`.
    fn sign<'a>(
        &'a self,
        network: &'a Network,
        claims: &'a [VoucherClaim],
    ) -> BoxFuture<'a, Result<String, BoxError>>;

    /// The EIP-712 `Refund(bytes32 channelId,uint256 nonce,uint128 amount)` signature
    /// (`refundAuthorizerSignature`) of refunding `amount` of channel `channel_id` at refund
    /// nonce `nonce` on `network`, for a cooperative refund
    /// ([`BatchSettlement::authorizer`](crate::BatchSettlement::authorizer)); `None` (the
    /// default) signs no refunds.
    fn sign_refund<'a>(
        &'a self,
        network: &'a Network,
        channel_id: &'a str,
        nonce: u128,
        amount: u128,
    ) -> BoxFuture<'a, Result<Option<String>, BoxError>> {
        let _ = (network, channel_id, nonce, amount);
        Box::pin(async { Ok(None) })
    }
}

/// A claim round could not run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClaimError {
    /// The channel store failed; claims written before the failure are resolved in a later
    /// round.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A claim request could not be encoded.
    #[error("encoding a claim: {0}")]
    Encode(#[from] serde_json::Error),
}

/// Claims and sweeps the channels of a [`ChannelStore`] through a facilitator, exactly once.
///
/// Each round lists the channels with unclaimed charges, writes a claim on each in the store (a
/// lease: another claimer, on this instance or another, leaves those channels alone), sends one
/// `/settle` of `type: "claim"` per network and receiver authorizer (up to
/// [`ClaimPolicy::batch`] channels each), records the outcome, then sweeps each receiver and
/// token it claimed for. A claim whose answer was lost (a transport error, a 5xx,
/// `settlement_pending`) is resolved by reading the channel's `totalClaimed` with the
/// [`ChainReader`]: claimed when the chain shows the claimed total; otherwise it stays under its
/// lease and is read again once the lease ended — never sent again unread. Without a chain
/// reader such a claim stays in doubt (listed in [`ClaimReport::in_doubt`]).
///
/// ```
/// use std::sync::Arc;
/// use tower_x402_channels::{Claimer, MemoryChannelStore};
/// use tower_x402_sandbox::SandboxFacilitator;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let store = Arc::new(MemoryChannelStore::default());
/// let claimer = Claimer::new(store, SandboxFacilitator::new());
/// // Nothing accepted yet: nothing to claim, no call made.
/// let report = claimer.claim_all().await?;
/// assert_eq!((report.claim_calls, report.sweep_calls), (0, 0));
/// # Ok(()) }
/// ```
pub struct Claimer {
    store: Arc<dyn ChannelStore>,
    facilitator: Arc<dyn Facilitator>,
    chain: Option<Arc<dyn ChainReader>>,
    authorizer: Option<Arc<dyn ClaimAuthorizer>>,
    owner: String,
    policy: ClaimPolicy,
    clock: Arc<dyn Fn() -> u64 + Send + Sync>,
    state: Mutex<Rounds>,
    on_refused: Option<RefusedHook>,
}

/// What [`Claimer::on_refused`] calls.
type RefusedHook = Arc<dyn Fn(&Channel, u128, &str) + Send + Sync>;

/// What the claimer remembers between rounds.
#[derive(Debug, Default)]
struct Rounds {
    /// When everything was last claimed, and withdrawals last looked for (clock milliseconds).
    last_claim: Option<u64>,
    last_watch: Option<u64>,
    /// Receivers and tokens claimed for and not swept yet, with what this claimer claimed.
    sweeps: BTreeMap<(String, String, String), u128>,
    /// Receivers and tokens swept on shutdown whether or not this claimer claimed for them.
    receivers: BTreeSet<(String, String, String)>,
    /// Channels reported as charged beyond their balance, with the amount reported.
    over_balance: BTreeMap<String, u128>,
    /// Whether a round ran: the first tries every refused channel again (alone), as a
    /// restarted, perhaps reconfigured, server should.
    started: bool,
}

impl std::fmt::Debug for Claimer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Claimer")
            .field("owner", &self.owner)
            .field("policy", &self.policy)
            .field("chain", &self.chain.is_some())
            .field(
                "authorizer",
                &self.authorizer.as_ref().map(|a| a.address().to_owned()),
            )
            .finish_non_exhaustive()
    }
}

impl Claimer {
    /// A claimer of `store`'s channels through `facilitator`, with the default [`ClaimPolicy`]
    /// and no chain reader.
    pub fn new(store: impl ChannelStore, facilitator: impl Facilitator) -> Self {
        let id: [u8; 6] = rand::random();
        Self {
            store: Arc::new(store),
            facilitator: Arc::new(facilitator),
            chain: None,
            authorizer: None,
            owner: format!(
                "claimer-{}",
                id.iter().map(|b| format!("{b:02x}")).collect::<String>()
            ),
            policy: ClaimPolicy::default(),
            clock: Arc::new(unix_millis),
            state: Mutex::new(Rounds::default()),
            on_refused: None,
        }
    }

    /// Calls `hook` with the channel, the amount left unclaimed and the facilitator's reason
    /// each time a channel's claim, sent alone, is refused (besides the `error` log and
    /// [`ClaimReport::refused`]): for a metric or an alert.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::sync::atomic::{AtomicU64, Ordering};
    /// use tower_x402_channels::{Claimer, MemoryChannelStore};
    /// use tower_x402_sandbox::SandboxFacilitator;
    ///
    /// let refused = Arc::new(AtomicU64::new(0));
    /// let counter = Arc::clone(&refused);
    /// let claimer = Claimer::new(MemoryChannelStore::default(), SandboxFacilitator::new())
    ///     .on_refused(move |_channel, _amount, _reason| {
    ///         counter.fetch_add(1, Ordering::Relaxed);
    ///     });
    /// # let _ = claimer;
    /// ```
    pub fn on_refused(
        mut self,
        hook: impl Fn(&Channel, u128, &str) + Send + Sync + 'static,
    ) -> Self {
        self.on_refused = Some(Arc::new(hook));
        self
    }

    /// Also sweeps `receiver`'s claimed `token` on `network` on shutdown, whether or not this
    /// claimer claimed for it: what a cooperative refund claimed (in the refund's own
    /// transaction) is swept then at the latest, and so is what a claimer that stopped before
    /// its sweep left behind.
    pub fn sweeps_for(self, network: &Network, receiver: &str, token: &str) -> Self {
        self.rounds().receivers.insert((
            network.to_string(),
            receiver.to_owned(),
            token.to_owned(),
        ));
        self
    }

    /// Reads the chain with `chain`: resolves claims whose answer was lost and watches for
    /// withdrawals.
    pub fn chain(mut self, chain: impl ChainReader) -> Self {
        self.chain = Some(Arc::new(chain));
        self
    }

    /// Signs claim batches with the server's own receiver-authorizer key.
    pub fn authorizer(mut self, authorizer: impl ClaimAuthorizer) -> Self {
        self.authorizer = Some(Arc::new(authorizer));
        self
    }

    /// Claims by `policy`.
    pub fn policy(mut self, policy: ClaimPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// Names this claimer in the store's claim leases (default: `claimer-` and random hex).
    pub fn owner(mut self, owner: impl Into<String>) -> Self {
        self.owner = owner.into();
        self
    }

    /// Reads leases' time from `clock` (unix milliseconds) instead of the system clock.
    pub fn clock(mut self, clock: impl Fn() -> u64 + Send + Sync + 'static) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// Claims every channel with unclaimed charges now, then sweeps: what a server calls on
    /// graceful shutdown, after it stopped taking requests.
    ///
    /// # Errors
    ///
    /// The store failed.
    pub async fn claim_all(&self) -> Result<ClaimReport, ClaimError> {
        self.round(|_| true, false).await
    }

    /// Claims the channels `pick` chooses among those with unclaimed charges, then sweeps.
    ///
    /// # Errors
    ///
    /// The store failed.
    pub async fn claim_where(
        &self,
        pick: impl Fn(&Channel) -> bool + Send + Sync,
    ) -> Result<ClaimReport, ClaimError> {
        self.round(pick, false).await
    }

    /// Evaluates the policy once: claims everything when the interval has passed or the
    /// threshold is reached; otherwise, when withdrawals are watched and it is time, reads the
    /// chain for each channel with unclaimed charges and claims those with a pending
    /// withdrawal. `None` when nothing was due.
    ///
    /// # Errors
    ///
    /// The store failed.
    pub async fn tick(&self) -> Result<Option<ClaimReport>, ClaimError> {
        let now = (self.clock)();
        let channels = self.store.unclaimed(ROUND_LIMIT).await?;
        // What a claim could collect now: not the channels refused, nor charges beyond a balance.
        let unclaimed: u128 = channels
            .iter()
            .filter(|channel| channel.refused.is_none())
            .map(|channel| channel.claimable().saturating_sub(channel.claimed))
            .sum();
        let (interval_due, watch_due) = {
            let rounds = self.rounds();
            let since = |last: Option<u64>| last.map(|last| now.saturating_sub(last));
            let interval_due = self.policy.interval.is_some_and(|interval| {
                since(rounds.last_claim).is_none_or(|elapsed| elapsed >= millis(interval))
            });
            let watch_due = since(rounds.last_watch)
                .is_none_or(|elapsed| elapsed >= millis(self.policy.watch_every));
            (interval_due, watch_due)
        };
        let threshold_due = self
            .policy
            .threshold
            .is_some_and(|threshold| unclaimed >= threshold && unclaimed > 0);
        if interval_due || threshold_due {
            self.rounds().last_claim = Some(now);
            return self.claim_all().await.map(Some);
        }
        if let Some(report) = self
            .claim_mirrored_withdrawals(&channels, now, watch_due)
            .await?
        {
            return Ok(Some(report));
        }
        let Some(chain) = self
            .chain
            .as_ref()
            .filter(|_| self.policy.withdrawal && watch_due)
        else {
            return Ok(None);
        };
        self.rounds().last_watch = Some(now);
        let mut withdrawing = BTreeSet::new();
        for channel in channels.iter().filter(|channel| channel.unclaimed() > 0) {
            match chain.read(&channel.network, &channel.id).await {
                Ok(read) => {
                    let reading = OnChain::from_chain(&read, now);
                    self.store.mirror(&channel.id, &reading).await?;
                    if read.withdraw_requested_at != 0 {
                        tracing::info!(channel = %channel.id, "withdrawal pending: claiming now");
                        withdrawing.insert(channel.id.clone());
                    }
                }
                Err(error) => {
                    tracing::warn!(channel = %channel.id, %error, "could not read the channel")
                }
            }
        }
        if withdrawing.is_empty() {
            return Ok(None);
        }
        self.round(|channel| withdrawing.contains(&channel.id), false)
            .await
            .map(Some)
    }

    /// Runs [`tick`](Self::tick) every [`ClaimPolicy::check_every`] on a task of its own,
    /// until [`ClaimerTask::shutdown`], which then claims everything once more.
    pub fn spawn(self) -> ClaimerTask {
        let claimer = Arc::new(self);
        let (stop, mut stopped) = tokio::sync::watch::channel(false);
        let looping = Arc::clone(&claimer);
        let task = tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(looping.policy.check_every) => {}
                    _ = stopped.changed() => return,
                }
                if let Err(error) = looping.tick().await {
                    tracing::warn!(%error, "claim round failed");
                }
            }
        });
        ClaimerTask {
            claimer,
            stop,
            task,
        }
    }

    fn rounds(&self) -> std::sync::MutexGuard<'_, Rounds> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A claim round over the channels `pick` chooses; `retry_refused` (and on this claimer's
    /// first round): the channels refused before are tried again (alone) now, whenever they
    /// were refused.
    async fn round(
        &self,
        pick: impl Fn(&Channel) -> bool + Send + Sync,
        retry_refused: bool,
    ) -> Result<ClaimReport, ClaimError> {
        let retry_refused = retry_refused || !std::mem::replace(&mut self.rounds().started, true);
        let mut report = ClaimReport::default();
        let now = (self.clock)();
        let mut channels = self.store.unclaimed(ROUND_LIMIT).await?;
        // Claims left by a claimer whose lease ended (a crash, a lost answer): resolved first.
        let mut resolved = false;
        for channel in &channels {
            if let Some(claim) = channel
                .claim
                .as_ref()
                .filter(|claim| claim.lease_until <= now)
            {
                self.resolve(channel, claim, true, &mut report).await?;
                resolved = true;
            }
        }
        if resolved {
            channels = self.store.unclaimed(ROUND_LIMIT).await?;
        }
        let mut groups: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
        let mut alone = Vec::new();
        for channel in channels.iter().filter(|channel| {
            channel.claim.is_none() && channel.claimable() > channel.claimed && pick(channel)
        }) {
            match channel.refused {
                // Refused when sent alone: never batched again, tried again alone when due.
                Some(refused) => {
                    let due = refused.at.saturating_add(millis(self.policy.retry_refused));
                    if retry_refused || due <= now {
                        alone.push(channel.id.clone());
                    }
                }
                None => {
                    let key = (
                        channel.network.to_string(),
                        channel.config.receiver_authorizer.to_ascii_lowercase(),
                    );
                    groups.entry(key).or_default().push(channel.id.clone());
                }
            }
        }
        for ids in groups.values() {
            for batch in ids.chunks(self.policy.batch.max(1)) {
                self.claim_split(batch, &mut report).await?;
            }
        }
        for id in alone {
            self.claim_split(std::slice::from_ref(&id), &mut report)
                .await?;
        }
        self.sweep(&mut report).await?;
        self.tally(&mut report).await?;
        Ok(report)
    }

    /// Writes the claim on `ids`, sends it, and records its outcome. `Some`: the batch of
    /// several channels was refused whole; nothing happened, and these channels are free to be
    /// claimed in smaller batches.
    async fn claim_batch(
        &self,
        ids: &[String],
        report: &mut ClaimReport,
    ) -> Result<Option<Vec<String>>, ClaimError> {
        let now = (self.clock)();
        let lease = ClaimLease::new(&self.owner, now.saturating_add(millis(self.policy.lease)));
        let taken = self.store.begin_claim(ids, &lease).await?;
        let Some(first) = taken.first() else {
            return Ok(None);
        };
        let claims: Vec<(&Channel, &ClaimInFlight)> = taken
            .iter()
            .filter_map(|channel| channel.claim.as_ref().map(|claim| (channel, claim)))
            .collect();
        let rows: Vec<VoucherClaim> = claims
            .iter()
            .map(|(channel, claim)| request::row(channel, claim))
            .collect();
        let signature = match &self.authorizer {
            Some(authorizer)
                if authorizer
                    .address()
                    .eq_ignore_ascii_case(&first.config.receiver_authorizer) =>
            {
                match authorizer.sign(&first.network, &rows).await {
                    Ok(signature) => Some(signature),
                    Err(error) => {
                        tracing::warn!(%error, "could not sign the claim batch");
                        self.not_claimed(&claims, &lease.id, "unsigned", report)
                            .await?;
                        return Ok(None);
                    }
                }
            }
            _ => None,
        };
        let payload = ServerPayload::Claim {
            claims: rows,
            claim_authorizer_signature: signature,
        };
        let request = request::settle_request(
            &first.network,
            &first.config.receiver,
            &first.config.token,
            &payload,
        )?;
        report.claim_calls += 1;
        match self.facilitator.settle(&request).await {
            Ok(answer) if answer.success => {
                let results: Vec<(String, ClaimResult)> = claims
                    .iter()
                    .map(|(channel, claim)| {
                        (
                            channel.id.clone(),
                            ClaimResult::Claimed {
                                total_claimed: claim.total,
                            },
                        )
                    })
                    .collect();
                self.store.finish_claim(&lease.id, &results).await?;
                for (channel, claim) in &claims {
                    report.claimed.push((channel.id.clone(), claim.total));
                    self.owe_sweep(channel, claim.total.saturating_sub(channel.claimed));
                }
                tracing::info!(channels = claims.len(), transaction = %answer.transaction, "claimed");
            }
            Ok(answer) if answer.error_reason.as_deref() != Some(PENDING) => {
                let reason = reason_of(&answer);
                return self.refused(&claims, &lease.id, &reason, report).await;
            }
            outcome => {
                match &outcome {
                    Ok(answer) => {
                        tracing::warn!(reason = %reason_of(answer), "claim pending: reading the chain")
                    }
                    Err(error) => tracing::warn!(%error, "claim answer lost: reading the chain"),
                }
                for (channel, claim) in &claims {
                    self.resolve(channel, claim, false, report).await?;
                }
            }
        }
        Ok(None)
    }

    async fn not_claimed(
        &self,
        claims: &[(&Channel, &ClaimInFlight)],
        claim_id: &str,
        reason: &str,
        report: &mut ClaimReport,
    ) -> Result<(), ClaimError> {
        let results: Vec<(String, ClaimResult)> = claims
            .iter()
            .map(|(channel, _)| (channel.id.clone(), ClaimResult::NotClaimed))
            .collect();
        self.store.finish_claim(claim_id, &results).await?;
        report.refused.extend(
            claims
                .iter()
                .map(|(channel, _)| (channel.id.clone(), reason.to_owned())),
        );
        Ok(())
    }

    /// Resolves `claim` on `channel` against the chain: claimed when the chain shows its total;
    /// not claimed when it does not and the claim's lease has `expired` (it was mined by then
    /// or never will be); in doubt otherwise.
    async fn resolve(
        &self,
        channel: &Channel,
        claim: &ClaimInFlight,
        expired: bool,
        report: &mut ClaimReport,
    ) -> Result<(), ClaimError> {
        let read = match &self.chain {
            Some(chain) => chain.read(&channel.network, &channel.id).await,
            None if expired => return self.take_over(channel, claim).await,
            None => {
                report.in_doubt.push(channel.id.clone());
                tracing::warn!(channel = %channel.id, "a claim's outcome is unknown and no chain reader is set");
                return Ok(());
            }
        };
        let read = match read {
            Ok(read) => read,
            Err(error) => {
                tracing::warn!(channel = %channel.id, %error, "could not read the channel");
                report.in_doubt.push(channel.id.clone());
                return Ok(());
            }
        };
        let result = if read.total_claimed >= claim.total {
            ClaimResult::Claimed {
                total_claimed: read.total_claimed,
            }
        } else if expired {
            ClaimResult::NotClaimed
        } else {
            report.in_doubt.push(channel.id.clone());
            return Ok(());
        };
        let finished = self
            .store
            .finish_claim(&claim.id, &[(channel.id.clone(), result)])
            .await?;
        self.store
            .mirror(&channel.id, &OnChain::from_chain(&read, (self.clock)()))
            .await?;
        if finished == 1 {
            match result {
                ClaimResult::Claimed { total_claimed } => {
                    report.claimed.push((channel.id.clone(), total_claimed));
                    self.owe_sweep(channel, total_claimed.saturating_sub(channel.claimed));
                }
                _ => report.refused.push((
                    channel.id.clone(),
                    "not on chain when its lease ended".into(),
                )),
            }
        }
        Ok(())
    }
}

/// A [`Claimer`] running on its own task ([`Claimer::spawn`]).
#[derive(Debug)]
pub struct ClaimerTask {
    claimer: Arc<Claimer>,
    stop: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl ClaimerTask {
    /// The claimer, for a round of one's own.
    pub fn claimer(&self) -> &Claimer {
        &self.claimer
    }

    /// Stops the policy loop (after the round under way, if any), then claims everything and
    /// sweeps: call it once the server has drained its requests.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use tower_x402_channels::{Claimer, MemoryChannelStore};
    /// use tower_x402_sandbox::SandboxFacilitator;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let task = Claimer::new(MemoryChannelStore::default(), SandboxFacilitator::new()).spawn();
    /// // ... serve until SIGTERM, let the server drain ...
    /// let report = task.shutdown().await?;
    /// assert!(report.in_doubt.is_empty(), "every accepted voucher claimed before exit");
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// The store failed.
    pub async fn shutdown(self) -> Result<ClaimReport, ClaimError> {
        let _ = self.stop.send(true);
        if let Err(error) = self.task.await {
            tracing::warn!(%error, "the claim loop ended abnormally");
        }
        self.claimer.finish().await
    }
}

fn reason_of(answer: &SettleResponse) -> String {
    let reason = answer.error_reason.as_deref().unwrap_or("refused");
    match &answer.error_message {
        Some(message) => format!("{reason}: {message}"),
        None => reason.to_owned(),
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

fn unix_millis() -> u64 {
    millis(x402_wire::unix_time())
}
