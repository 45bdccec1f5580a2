//! The last round of a claimer, on shutdown: claims under a lease waited for (bounded) and then
//! resolved or taken over, refused claims tried once more, every receiver swept, and the report
//! telling what is left.

use std::time::Duration;

use super::{ClaimError, ClaimReport, Claimer, ROUND_LIMIT, millis};

impl Claimer {
    /// Claims everything, then, while a claim is under a live lease (another claimer's, one
    /// that died, or this one's whose answer was lost) and [`ClaimPolicy::shutdown_wait`]
    /// allows, waits for the lease to end and claims again (the claim is then resolved against
    /// the chain, or taken over); tries once more, alone, every channel whose claim was
    /// refused; sweeps every receiver registered with [`Claimer::sweeps_for`]. The report's
    /// [`left`](ClaimReport::left) and [`unswept`](ClaimReport::unswept) say what is left.
    ///
    /// [`ClaimPolicy::shutdown_wait`]: super::ClaimPolicy::shutdown_wait
    pub(super) async fn finish(&self) -> Result<ClaimReport, ClaimError> {
        let started = (self.clock)();
        let deadline = started.saturating_add(millis(self.policy.shutdown_wait));
        let mut report = self.round(|_| true, true).await?;
        loop {
            let now = (self.clock)();
            let leased = self
                .store
                .unclaimed(ROUND_LIMIT)
                .await?
                .into_iter()
                .filter_map(|channel| channel.claim.map(|claim| claim.lease_until))
                .min();
            let Some(until) = leased else { break };
            if now >= deadline {
                tracing::warn!("claims still under a lease when the shutdown wait ended");
                break;
            }
            // At least a second apart: a claim whose lease ended but could not be resolved (the
            // chain unreadable) is tried again each second, not in a busy loop.
            let wake = until.clamp(now.saturating_add(1_000), deadline.max(now));
            tracing::info!(
                wait_ms = wake - now,
                "waiting for a claim's lease to end before claiming it"
            );
            tokio::time::sleep(Duration::from_millis(wake - now)).await;
            report.merge(self.round(|_| true, false).await?);
        }
        // The receivers told of, unless swept already on this shutdown.
        let receivers: Vec<_> = self
            .rounds()
            .receivers
            .iter()
            .filter(|(network, receiver, token)| {
                !report.swept.iter().any(|(swept, to, asset, _)| {
                    swept.as_str() == network.as_str() && to == receiver && asset == token
                })
            })
            .cloned()
            .collect();
        let mut swept = ClaimReport::default();
        self.sweep_each(receivers, &mut swept).await?;
        self.tally(&mut swept).await?;
        swept.in_doubt = report.in_doubt.clone();
        report.merge(swept);
        if !report.is_settled() {
            tracing::error!(
                unclaimed = report.left_unclaimed(),
                unswept = report.left_unswept(),
                in_doubt = report.in_doubt.len(),
                "charges left unclaimed or unswept on shutdown"
            );
        }
        Ok(report)
    }
}
