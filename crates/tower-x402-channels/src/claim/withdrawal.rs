//! Claims on a withdrawal a request's `/verify` read: the claimer claims them at once, whether
//! or not it watches the chain itself.

use std::collections::BTreeSet;

use super::{ClaimError, ClaimReport, Claimer};
use crate::channel::Channel;

impl Claimer {
    /// Claims at once, when withdrawals are due to be looked at, the channels with unclaimed
    /// charges whose mirror shows a pending withdrawal (read by a request's `/verify`, which
    /// refused a voucher for it), chain reader or not.
    pub(super) async fn claim_mirrored_withdrawals(
        &self,
        channels: &[Channel],
        now: u64,
        watch_due: bool,
    ) -> Result<Option<ClaimReport>, ClaimError> {
        let withdrawing: BTreeSet<String> = channels
            .iter()
            .filter(|channel| {
                channel.unclaimed() > 0
                    && channel.claim.is_none()
                    && channel.on_chain.withdraw_requested_at != 0
            })
            .map(|channel| channel.id.clone())
            .collect();
        if !watch_due || withdrawing.is_empty() {
            return Ok(None);
        }
        self.rounds().last_watch = Some(now);
        tracing::info!(
            channels = withdrawing.len(),
            "withdrawal pending: claiming now"
        );
        self.round(|channel| withdrawing.contains(&channel.id), false)
            .await
            .map(Some)
    }
}
