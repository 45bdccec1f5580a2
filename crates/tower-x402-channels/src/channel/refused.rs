//! What a claimer may ask of a channel: its claim capped at the balance last read, and the mark
//! a claim refused alone leaves.

use serde::{Deserialize, Serialize};

use super::{Channel, amount};

/// A channel's claim refused when sent alone ([`ClaimResult::Refused`](super::ClaimResult::Refused)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct ClaimRefused {
    /// The cumulative total the refused claim asked for.
    #[serde(with = "amount")]
    pub total: u128,
    /// When it was refused, unix milliseconds.
    pub at: u64,
}

impl Channel {
    /// The most a claim of this channel may ask for as its cumulative total: what was charged,
    /// capped at the balance the chain was last read to hold (the contract reverts a claim above
    /// it, and with it every channel of its batch). Zero before the first voucher.
    pub fn claimable(&self) -> u128 {
        match self.voucher {
            Some(_) => self.charged.min(self.on_chain.balance),
            None => 0,
        }
    }

    /// Charged beyond what the channel was last read to hold: not claimable unless the chain
    /// shows more.
    pub fn over_balance(&self) -> u128 {
        self.charged
            .saturating_sub(self.claimable().max(self.claimed))
    }
}
