//! [`ClaimPolicy`]: when a claimer claims on its own, and how it holds and splits its claims.

use std::time::Duration;

#[cfg(doc)]
use super::{Claimer, ClaimerTask};
#[cfg(doc)]
use crate::chain::ChainReader;

/// When a [`Claimer`] claims on its own ([`Claimer::tick`], [`Claimer::spawn`]).
///
/// ```
/// use std::time::Duration;
/// use tower_x402_channels::ClaimPolicy;
///
/// // Every minute, at once past 1 USDC unclaimed, and at once on a pending withdrawal.
/// let policy = ClaimPolicy::default()
///     .every(Duration::from_secs(60))
///     .unclaimed_over(1_000_000)
///     .on_withdrawal(true);
/// assert_eq!(policy.batch, 100);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClaimPolicy {
    /// Claim everything this often. Default: every minute.
    pub interval: Option<Duration>,
    /// Claim everything once this much (atomic units, summed over channels) is unclaimed.
    pub threshold: Option<u128>,
    /// With a [`ChainReader`], read each channel with unclaimed charges every
    /// [`watch_every`](Self::watch_every) and claim at once those with a pending withdrawal
    /// (the payer gets back whatever is unclaimed when the delay ends). Default: on.
    pub withdrawal: bool,
    /// How often withdrawals are looked for. Default: 30 s.
    pub watch_every: Duration,
    /// How often the spawned task evaluates the policy. Default: 1 s.
    pub check_every: Duration,
    /// How long a claim is its claimer's: after it, a claim whose outcome is unknown is
    /// resolved against the chain by any claimer. Longer than a claim transaction takes to be
    /// mined. Default: 2 minutes.
    pub lease: Duration,
    /// Channels per claim transaction. Default: 100.
    pub batch: usize,
    /// How often a channel whose claim was refused when sent alone is tried again, alone.
    /// Default: 10 minutes.
    pub retry_refused: Duration,
    /// How long [`ClaimerTask::shutdown`] waits, at most, for claims under a lease (another
    /// claimer's, or one of its own whose answer was lost) to end so it can resolve or take
    /// them over. Default: 2 minutes and 10 seconds (the default lease, and a margin).
    pub shutdown_wait: Duration,
}

impl Default for ClaimPolicy {
    fn default() -> Self {
        Self {
            interval: Some(Duration::from_secs(60)),
            threshold: None,
            withdrawal: true,
            watch_every: Duration::from_secs(30),
            check_every: Duration::from_secs(1),
            lease: Duration::from_secs(120),
            batch: 100,
            retry_refused: Duration::from_secs(600),
            shutdown_wait: Duration::from_secs(130),
        }
    }
}

impl ClaimPolicy {
    /// Claims everything every `interval`.
    pub fn every(mut self, interval: Duration) -> Self {
        self.interval = Some(interval);
        self
    }

    /// Claims everything once `amount` is unclaimed.
    pub fn unclaimed_over(mut self, amount: u128) -> Self {
        self.threshold = Some(amount);
        self
    }

    /// Claims a channel at once when its payer started a withdrawal (needs a [`ChainReader`]).
    pub fn on_withdrawal(mut self, on: bool) -> Self {
        self.withdrawal = on;
        self
    }

    /// Holds each claim under a lease of `lease` (see [`ClaimPolicy::lease`]).
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// Waits at most `wait` on shutdown for claims under a lease (see
    /// [`ClaimPolicy::shutdown_wait`]).
    pub fn shutdown_wait(mut self, wait: Duration) -> Self {
        self.shutdown_wait = wait;
        self
    }
}
