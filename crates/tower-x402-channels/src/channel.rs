//! One channel as the server keeps it, and the rules every operation of a
//! [`ChannelStore`](crate::store::ChannelStore) applies to it.
//!
//! The rules are plain functions of the record and the caller's clock: a store applies each one
//! atomically for its channel (under a lock, a row lock, or a compare-and-set on the whole
//! record) and persists the result before it answers.

use serde::{Deserialize, Serialize};
use x402_wire::Network;

use crate::chain::ChainChannel;
use crate::wire::ChannelConfig;

mod refused;
pub use refused::ClaimRefused;

/// A channel the server has accepted payments on: its configuration, what it charged, the
/// latest voucher it accepted, what it last read of the chain, and its claims.
///
/// Amounts are token atomic units; times are unix milliseconds of the caller's clock.
///
/// ```
/// use tower_x402_channels::{Channel, ChannelConfig, OnChain};
/// use x402_wire::Network;
///
/// let config = ChannelConfig {
///     payer: "0x2c7536E3605D9C16a7a3D7b1898e529396a65c23".into(),
///     payer_authorizer: "0x2c7536E3605D9C16a7a3D7b1898e529396a65c23".into(),
///     receiver: "0x209693Bc6afc0C5328bA36FaF03C514EF312287C".into(),
///     receiver_authorizer: "0x3f1Eae7D46d88F08fc2F8ed27FCb2AB183EB2d0E".into(),
///     token: "0x036CbD53842c5426634e7929541eC2318f3dCF7e".into(),
///     withdraw_delay: 900,
///     salt: format!("0x{}", "00".repeat(32)),
/// };
/// let on_chain = OnChain::new(50_000, 4_000, 0);
/// let id = format!("0x{}", "ab".repeat(32));
/// let channel = Channel::new(id, Network::BASE_SEPOLIA, config, on_chain);
/// // A channel first seen with claims on chain starts from them.
/// assert_eq!((channel.charged, channel.claimed, channel.unclaimed()), (4_000, 4_000, 0));
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct Channel {
    /// The channel id: `0x` and 32 bytes of lower-case hex.
    pub id: String,
    /// The chain the channel lives on.
    pub network: Network,
    /// The channel's immutable configuration.
    pub config: ChannelConfig,
    /// `chargedCumulativeAmount`: everything the server charged on this channel.
    #[serde(with = "amount")]
    pub charged: u128,
    /// The latest voucher accepted, the one a claim submits; none before the first.
    #[serde(default)]
    pub voucher: Option<Voucher>,
    /// What was last read of the channel on chain.
    pub on_chain: OnChain,
    /// Claimed on chain up to this cumulative amount, as far as this server knows.
    #[serde(with = "amount")]
    pub claimed: u128,
    /// A claim sent (or about to be) whose outcome is not recorded yet.
    #[serde(default)]
    pub claim: Option<ClaimInFlight>,
    /// The request being served on the channel, if any.
    #[serde(default)]
    pub hold: Option<Hold>,
    /// The commits applied last (at most [`RECENT_COMMITS`], the newest last), so a commit sent
    /// again after a lost answer is recognized instead of applied twice, even when other
    /// requests on the channel committed in between.
    #[serde(default)]
    pub recent_commits: Vec<AppliedCommit>,
    /// The channel's last claim, sent alone, was refused (a revert: a mirror that said more
    /// than the channel holds, a voucher the contract rejects): a claimer leaves it out of
    /// every batch and tries it again only alone. Cleared by a claim that succeeds.
    #[serde(default)]
    pub refused: Option<ClaimRefused>,
}

/// A commit a [`Channel`] applied: the request's hold, and the cumulative and voucher it set.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct AppliedCommit {
    /// The id of the hold the commit was made under.
    pub hold: String,
    /// The cumulative the commit set.
    #[serde(with = "amount")]
    pub charged: u128,
    /// The voucher the commit stored.
    pub voucher: Voucher,
}

/// How many applied commits a [`Channel`] remembers to recognize one sent again.
pub const RECENT_COMMITS: usize = 16;

/// A voucher the server accepted: the payer authorizer's signature over a cumulative ceiling.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct Voucher {
    /// The signed `maxClaimableAmount`.
    #[serde(with = "amount")]
    pub max_claimable: u128,
    /// The EIP-712 signature, `0x`-hex.
    pub signature: String,
}

impl Voucher {
    /// A voucher for `max_claimable` signed with `signature`.
    pub fn new(max_claimable: u128, signature: impl Into<String>) -> Self {
        Self {
            max_claimable,
            signature: signature.into(),
        }
    }
}

/// The channel on chain as last read (the contract's `channels`, `pendingWithdrawals` and
/// `refundNonce` views, or a facilitator's channel snapshot).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct OnChain {
    /// Deposited minus withdrawn and refunded.
    #[serde(with = "amount")]
    pub balance: u128,
    /// `totalClaimed`.
    #[serde(with = "amount")]
    pub total_claimed: u128,
    /// When a timed withdrawal was started (unix seconds), 0 when none is pending.
    pub withdraw_requested_at: u64,
    /// The pending withdrawal's amount (`pendingWithdrawals(id).amount`), 0 when none is
    /// pending. A reading that names a withdrawal but not its amount (a facilitator's channel
    /// snapshot) counts everything unclaimed as withdrawn.
    #[serde(default, with = "amount")]
    pub pending_withdrawal: u128,
    /// The refund nonce.
    #[serde(with = "amount")]
    pub refund_nonce: u128,
    /// When this was read, unix milliseconds.
    pub read_at: u64,
}

impl OnChain {
    /// A reading at `read_at` of `balance` and `total_claimed`, with no withdrawal pending and
    /// refund nonce 0.
    pub fn new(balance: u128, total_claimed: u128, read_at: u64) -> Self {
        Self {
            balance,
            total_claimed,
            read_at,
            ..Self::default()
        }
    }

    /// The channel as the contract's views showed it (`read`), read at `read_at`.
    pub(crate) fn from_chain(read: &ChainChannel, read_at: u64) -> Self {
        Self {
            balance: read.balance,
            total_claimed: read.total_claimed,
            withdraw_requested_at: read.withdraw_requested_at,
            pending_withdrawal: read.pending_withdrawal,
            refund_nonce: read.refund_nonce,
            read_at,
        }
    }

    /// The same reading with a timed withdrawal of `amount` started at `requested_at` (unix
    /// seconds) pending.
    pub fn with_withdrawal(mut self, requested_at: u64, amount: u128) -> Self {
        self.withdraw_requested_at = requested_at;
        self.pending_withdrawal = amount;
        self
    }

    /// When the pending withdrawal, if any, may be finalized (unix milliseconds): `delay`
    /// seconds (the channel's `withdrawDelay`) after it was started. Until then the receiver can
    /// still claim what it charged; after it, the payer takes back whatever is unclaimed.
    ///
    /// ```
    /// use tower_x402_channels::OnChain;
    ///
    /// let reading = OnChain::new(50_000, 0, 0);
    /// assert_eq!(reading.withdrawal_finalizes_at(900), None);
    /// let withdrawing = reading.with_withdrawal(1_000, 20_000);
    /// assert_eq!(withdrawing.withdrawal_finalizes_at(900), Some(1_900_000));
    /// // What a voucher may still reach: the balance less the withdrawal.
    /// assert_eq!(withdrawing.spendable(), 30_000);
    /// ```
    pub fn withdrawal_finalizes_at(&self, delay: u64) -> Option<u64> {
        (self.withdraw_requested_at != 0).then(|| {
            self.withdraw_requested_at
                .saturating_add(delay)
                .saturating_mul(1000)
        })
    }

    /// The balance less the pending withdrawal: the most a voucher may be accepted for on this
    /// reading.
    pub fn spendable(&self) -> u128 {
        self.balance.saturating_sub(self.pending_withdrawal)
    }
}

/// A request holding a channel: requests on one channel are served one at a time.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct Hold {
    /// Unique per request (random).
    pub id: String,
    /// The instance serving the request, for operators.
    pub owner: String,
    /// Until when the hold stands; after it another request may take the channel (a crashed
    /// instance never blocks a channel longer).
    pub lease_until: u64,
}

impl Hold {
    /// A hold with a fresh random id for `owner`, until `lease_until`.
    pub fn new(owner: impl Into<String>, lease_until: u64) -> Self {
        Self {
            id: random_id(),
            owner: owner.into(),
            lease_until,
        }
    }
}

/// A claim of the channel's voucher, written before the facilitator's `/settle` is sent.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct ClaimInFlight {
    /// The claim batch's id (shared by every channel of the batch).
    pub id: String,
    /// The claiming instance.
    pub owner: String,
    /// Until when the claimer owns the claim; after it, any claimer resolves the claim against
    /// the chain (never by sending it again unread).
    pub lease_until: u64,
    /// The cumulative total claimed (`totalClaimed` of the claim row).
    #[serde(with = "amount")]
    pub total: u128,
    /// The voucher claimed.
    pub voucher: Voucher,
}

/// A claim lease a claimer asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClaimLease {
    /// The claim batch's id.
    pub id: String,
    /// The claiming instance.
    pub owner: String,
    /// Until when.
    pub lease_until: u64,
}

impl ClaimLease {
    /// A lease with a fresh random id for `owner`, until `lease_until`.
    pub fn new(owner: impl Into<String>, lease_until: u64) -> Self {
        Self {
            id: random_id(),
            owner: owner.into(),
            lease_until,
        }
    }
}

/// What a request commits once its handler succeeded.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Commit {
    /// The `chargedCumulativeAmount` the request started from; the commit applies only if the
    /// channel still stands there.
    pub previous: u128,
    /// The new `chargedCumulativeAmount`: `previous` plus what the request was charged.
    pub charged: u128,
    /// The request's voucher, whose ceiling is at least `charged`.
    pub voucher: Voucher,
    /// The chain as the request saw it (a deposit's answer), if newer than the record's.
    pub on_chain: Option<OnChain>,
}

impl Commit {
    /// A commit from `previous` to `charged` under `voucher`.
    pub fn new(previous: u128, charged: u128, voucher: Voucher) -> Self {
        Self {
            previous,
            charged,
            voucher,
            on_chain: None,
        }
    }

    /// The same commit, mirroring `on_chain` too.
    pub fn with_on_chain(mut self, on_chain: OnChain) -> Self {
        self.on_chain = Some(on_chain);
        self
    }
}

/// The answer to [`ChannelStore::begin`](crate::store::ChannelStore::begin).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Begin {
    /// The request holds the channel; the record as it stands.
    Held(Box<Channel>),
    /// Another request holds the channel until `until` (unix milliseconds).
    Busy {
        /// When the other hold's lease ends.
        until: u64,
    },
    /// No such channel.
    NotFound,
}

/// The answer to [`ChannelStore::commit`](crate::store::ChannelStore::commit).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Committed {
    /// Applied and durable (or had been, when the same commit is sent again).
    Done,
    /// The hold is not this request's any more (its lease ran out and another request took
    /// the channel): nothing changed.
    HoldLost,
    /// The channel's cumulative is not the one the request started from: nothing changed.
    Moved {
        /// The cumulative the channel stands at.
        charged: u128,
    },
    /// The commit contradicts itself (a cumulative going down, or above the voucher's
    /// ceiling): nothing changed.
    Invalid(String),
    /// No such channel.
    NotFound,
}

/// How a claim ended, for [`ChannelStore::finish_claim`](crate::store::ChannelStore::finish_claim).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ClaimResult {
    /// The chain shows the channel claimed up to `total_claimed`.
    Claimed {
        /// The channel's `totalClaimed` after the claim.
        total_claimed: u128,
    },
    /// The claim did not happen (refused, or reverted): the charges are still unclaimed.
    NotClaimed,
    /// The claim, sent for this channel alone, was refused at `at` (unix milliseconds): nothing
    /// happened, and the channel is marked ([`Channel::refused`]) so that it is never sent
    /// again in a batch with others.
    Refused {
        /// When the claim was refused.
        at: u64,
    },
}

impl Channel {
    /// A channel first seen with `on_chain`: charged and claimed start at the chain's
    /// `totalClaimed` (whatever was charged before and not claimed is unknown here).
    pub fn new(
        id: impl Into<String>,
        network: Network,
        config: ChannelConfig,
        on_chain: OnChain,
    ) -> Self {
        Self {
            id: normalize_id(&id.into()),
            network,
            config,
            charged: on_chain.total_claimed,
            voucher: None,
            on_chain,
            claimed: on_chain.total_claimed,
            claim: None,
            hold: None,
            recent_commits: Vec::new(),
            refused: None,
        }
    }

    /// Charged and not yet known to be claimed: what is lost if the payer withdraws first.
    pub fn unclaimed(&self) -> u128 {
        match self.voucher {
            Some(_) => self.charged.saturating_sub(self.claimed),
            None => 0,
        }
    }

    /// Whether a claimer has something to do here: unclaimed charges or a claim to resolve.
    pub fn needs_claim(&self) -> bool {
        self.unclaimed() > 0 || self.claim.is_some()
    }

    /// Takes the channel for the request `hold` at `now`, unless another request's hold is
    /// still valid. Taking it again with the same hold renews it.
    pub fn begin(&mut self, hold: &Hold, now: u64) -> Begin {
        if let Some(current) = &self.hold
            && current.id != hold.id
            && current.lease_until > now
        {
            return Begin::Busy {
                until: current.lease_until,
            };
        }
        self.hold = Some(hold.clone());
        Begin::Held(Box::new(self.clone()))
    }

    /// Applies the request `hold_id`'s commit and releases its hold.
    pub fn commit(&mut self, hold_id: &str, commit: &Commit) -> Committed {
        if self.recent_commits.iter().any(|applied| {
            applied.hold == hold_id
                && applied.charged == commit.charged
                && applied.voucher == commit.voucher
        }) {
            return Committed::Done;
        }
        if self.hold.as_ref().map(|hold| hold.id.as_str()) != Some(hold_id) {
            return Committed::HoldLost;
        }
        if self.charged != commit.previous {
            return Committed::Moved {
                charged: self.charged,
            };
        }
        if commit.charged < commit.previous {
            return Committed::Invalid(format!(
                "the cumulative cannot go down from {} to {}",
                commit.previous, commit.charged
            ));
        }
        if commit.charged > commit.voucher.max_claimable {
            return Committed::Invalid(format!(
                "charged {} is above the voucher's ceiling {}",
                commit.charged, commit.voucher.max_claimable
            ));
        }
        self.charged = commit.charged;
        self.voucher = Some(commit.voucher.clone());
        if let Some(on_chain) = commit.on_chain {
            self.mirror(on_chain);
        }
        self.hold = None;
        if self.recent_commits.len() == RECENT_COMMITS {
            self.recent_commits.remove(0);
        }
        self.recent_commits.push(AppliedCommit {
            hold: hold_id.to_owned(),
            charged: commit.charged,
            voucher: commit.voucher.clone(),
        });
        Committed::Done
    }

    /// Releases the request `hold_id`'s hold, changing nothing else. `false`: not its hold.
    pub fn release(&mut self, hold_id: &str) -> bool {
        if self.hold.as_ref().map(|hold| hold.id.as_str()) != Some(hold_id) {
            return false;
        }
        self.hold = None;
        true
    }

    /// Mirrors `on_chain` unless the record holds a newer reading. `false`: older, ignored.
    pub fn mirror(&mut self, on_chain: OnChain) -> bool {
        if on_chain.read_at < self.on_chain.read_at {
            return false;
        }
        self.on_chain = on_chain;
        true
    }

    /// Writes the claim `lease` of the latest voucher for the charged amount capped at the
    /// balance last read ([`claimable`](Self::claimable)), unless a claim is already in flight
    /// (live or not: an expired one is resolved first) or nothing claimable is unclaimed. The
    /// claim written, if any.
    pub fn begin_claim(&mut self, lease: &ClaimLease) -> Option<ClaimInFlight> {
        let total = self.claimable();
        if self.claim.is_some() || self.unclaimed() == 0 || total <= self.claimed {
            return None;
        }
        let voucher = self.voucher.clone()?;
        let claim = ClaimInFlight {
            id: lease.id.clone(),
            owner: lease.owner.clone(),
            lease_until: lease.lease_until,
            total,
            voucher,
        };
        self.claim = Some(claim.clone());
        Some(claim)
    }

    /// Records how the claim `claim_id` ended and clears it. `false`: no such claim in flight.
    pub fn finish_claim(&mut self, claim_id: &str, result: ClaimResult) -> bool {
        if self.claim.as_ref().map(|claim| claim.id.as_str()) != Some(claim_id) {
            return false;
        }
        match result {
            ClaimResult::Claimed { total_claimed } => {
                self.claimed = self.claimed.max(total_claimed);
                self.on_chain.total_claimed = self.on_chain.total_claimed.max(total_claimed);
                self.refused = None;
            }
            ClaimResult::Refused { at } => {
                let total = self
                    .claim
                    .as_ref()
                    .map_or(self.charged, |claim| claim.total);
                self.refused = Some(ClaimRefused { total, at });
            }
            ClaimResult::NotClaimed => {}
        }
        self.claim = None;
        true
    }

    /// Whether the request `hold_id` may remove the channel (after a full refund).
    pub fn removable_by(&self, hold_id: &str) -> bool {
        self.hold.as_ref().map(|hold| hold.id.as_str()) == Some(hold_id)
    }
}

/// A channel id as stored: lower-case, as the contract's `bytes32` prints.
pub fn normalize_id(id: &str) -> String {
    id.to_ascii_lowercase()
}

/// 16 random bytes as hex.
fn random_id() -> String {
    let bytes: [u8; 16] = rand::random();
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// Amounts as decimal strings: a `uint128` does not fit a JSON number every reader can parse.
mod amount {
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(value: &u128, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(value)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<u128, D::Error> {
        let text = String::deserialize(deserializer)?;
        x402_wire::AtomicAmount::parse_u128(&text)
            .map_err(|_| serde::de::Error::custom(format!("`{text}` is not a decimal uint128")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn channel() -> Channel {
        let config = ChannelConfig {
            payer: "0x01".into(),
            payer_authorizer: "0x01".into(),
            receiver: "0x02".into(),
            receiver_authorizer: "0x03".into(),
            token: "0x04".into(),
            withdraw_delay: 900,
            salt: "0x00".into(),
        };
        Channel::new("0xAB", Network::BASE, config, OnChain::default())
    }

    #[test]
    fn a_record_round_trips_through_json_with_amounts_as_strings() {
        let mut channel = channel();
        let hold = Hold::new("a", 10);
        channel.begin(&hold, 0);
        let voucher = Voucher::new(u128::MAX, "0xsig");
        assert_eq!(
            channel.commit(&hold.id, &Commit::new(0, u128::MAX, voucher)),
            Committed::Done
        );
        let text = serde_json::to_string(&channel).unwrap();
        assert!(
            text.contains(&format!("\"charged\":\"{}\"", u128::MAX)),
            "{text}"
        );
        assert_eq!(serde_json::from_str::<Channel>(&text).unwrap(), channel);
        assert_eq!(channel.id, "0xab");
    }

    #[test]
    fn a_commit_applies_once_from_its_base_and_within_its_voucher() {
        let mut channel = channel();
        let hold = Hold::new("a", 10);
        assert!(matches!(channel.begin(&hold, 0), Begin::Held(_)));
        assert_eq!(
            channel.begin(&Hold::new("b", 10), 5),
            Begin::Busy { until: 10 }
        );
        let over = Commit::new(0, 2_000, Voucher::new(1_000, "0x1"));
        assert!(matches!(
            channel.commit(&hold.id, &over),
            Committed::Invalid(_)
        ));
        let wrong_base = Commit::new(7, 1_000, Voucher::new(1_000, "0x1"));
        assert_eq!(
            channel.commit(&hold.id, &wrong_base),
            Committed::Moved { charged: 0 }
        );
        let good = Commit::new(0, 700, Voucher::new(1_000, "0x1"));
        assert_eq!(channel.commit(&hold.id, &good), Committed::Done);
        assert_eq!(
            channel.commit(&hold.id, &good),
            Committed::Done,
            "sent again"
        );
        assert_eq!((channel.charged, channel.hold.as_ref()), (700, None));
        // An expired hold is taken over; the first request's commit then changes nothing.
        let late = Hold::new("a", 20);
        channel.begin(&late, 0);
        let taker = Hold::new("b", 40);
        assert!(matches!(channel.begin(&taker, 20), Begin::Held(_)));
        let stale = Commit::new(700, 1_700, Voucher::new(1_700, "0x2"));
        assert_eq!(channel.commit(&late.id, &stale), Committed::HoldLost);
        assert_eq!(channel.charged, 700);
    }

    #[test]
    fn a_claim_is_written_once_and_resolved_once() {
        let mut channel = channel();
        let hold = Hold::new("a", 10);
        channel.begin(&hold, 0);
        channel.commit(&hold.id, &Commit::new(0, 900, Voucher::new(1_000, "0x1")));
        assert_eq!(
            channel.begin_claim(&ClaimLease::new("c", 100)),
            None,
            "no balance read"
        );
        assert!(channel.mirror(OnChain::new(1_000, 0, 1)));
        let lease = ClaimLease::new("c", 100);
        let claim = channel.begin_claim(&lease).unwrap();
        assert_eq!((claim.total, claim.voucher.max_claimable), (900, 1_000));
        assert_eq!(channel.begin_claim(&ClaimLease::new("d", 100)), None);
        assert!(!channel.finish_claim("other", ClaimResult::NotClaimed));
        assert!(channel.finish_claim(&lease.id, ClaimResult::Claimed { total_claimed: 900 }));
        assert_eq!((channel.claimed, channel.unclaimed()), (900, 0));
        assert_eq!(
            channel.begin_claim(&ClaimLease::new("d", 100)),
            None,
            "nothing left"
        );
    }
}
