//! [`ClaimReport`]: what a claim round did, and what it left behind.

use x402_wire::Network;

/// What a claim round did.
///
/// After the round, [`left`](Self::left) names every channel whose charges are still not
/// claimed and [`unswept`](Self::unswept) every receiver whose claimed funds were not swept:
/// a server shutting down exits non-zero, naming the amount, when either is not empty
/// ([`ClaimReport::is_settled`]).
///
/// ```
/// use tower_x402_channels::ClaimReport;
///
/// let report = ClaimReport::default();
/// assert!(report.is_settled());
/// assert_eq!((report.left_unclaimed(), report.left_unswept()), (0, 0));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClaimReport {
    /// Channels claimed, with the cumulative total now claimed.
    pub claimed: Vec<(String, u128)>,
    /// Channels whose claim, sent for the channel alone, the facilitator refused (nothing
    /// happened), with its reason. A batch refused whole is split until the refused channels
    /// are alone; those are marked in the store ([`Channel::refused`](crate::Channel::refused)),
    /// left out of every later batch, and tried again only alone, every
    /// [`ClaimPolicy::retry_refused`](crate::ClaimPolicy::retry_refused), on a claimer's first
    /// round (a restarted server) and once on shutdown.
    pub refused: Vec<(String, String)>,
    /// Channels whose claim's outcome is still unknown: left under its lease, resolved against
    /// the chain (or claimed again, when no chain reader is set) once the lease ended.
    pub in_doubt: Vec<String>,
    /// Sweeps done: network, receiver, token and the amount moved, when the facilitator said.
    pub swept: Vec<(Network, String, String, Option<u128>)>,
    /// `/settle` calls of `type: "claim"` sent.
    pub claim_calls: usize,
    /// `/settle` calls of `type: "settle"` sent.
    pub sweep_calls: usize,
    /// After the round: every channel with charges not claimed, and how much (refused, in
    /// doubt, under another claimer's lease, charged beyond the balance last read, or not
    /// picked by the round).
    pub left: Vec<(String, u128)>,
    /// After the round: network, receiver, token and the amount this claimer claimed for them
    /// and could not sweep yet.
    pub unswept: Vec<(Network, String, String, u128)>,
}

impl ClaimReport {
    /// Charges left unclaimed after the round, summed over [`left`](Self::left).
    pub fn left_unclaimed(&self) -> u128 {
        self.left.iter().map(|(_, amount)| *amount).sum()
    }

    /// Claimed and not swept after the round, summed over [`unswept`](Self::unswept).
    pub fn left_unswept(&self) -> u128 {
        self.unswept.iter().map(|(.., amount)| *amount).sum()
    }

    /// Nothing charged is left unclaimed, nothing claimed is left unswept, and no claim is in
    /// doubt.
    pub fn is_settled(&self) -> bool {
        self.left.is_empty() && self.unswept.is_empty() && self.in_doubt.is_empty()
    }

    /// Adds `later`'s work to this report; `left` and `unswept` become `later`'s.
    pub(crate) fn merge(&mut self, later: ClaimReport) {
        self.claimed.extend(later.claimed);
        self.refused.extend(later.refused);
        self.in_doubt = later.in_doubt;
        self.swept.extend(later.swept);
        self.claim_calls += later.claim_calls;
        self.sweep_calls += later.sweep_calls;
        self.left = later.left;
        self.unswept = later.unswept;
    }
}
