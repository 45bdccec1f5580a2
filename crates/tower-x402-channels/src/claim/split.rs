//! Claims no payer can block: a batch the facilitator refuses whole is split until the channels
//! it refuses are alone; those are marked refused in the store, reported, and never batched
//! again. What is left unclaimed after a round is tallied for the report.

use crate::channel::{Channel, ClaimInFlight, ClaimResult, OnChain};

use super::{ClaimError, ClaimReport, Claimer, ROUND_LIMIT};

impl Claimer {
    /// Claims `ids` in one batch; when the facilitator refuses it whole (a contract reverts a
    /// claim batch when any one channel in it cannot be claimed), reads the chain again for the
    /// channels of the batch (with a chain reader), and claims each half again, until the
    /// refused channels are alone. One poisoned channel among `n` costs about `2 log2 n` more
    /// claim calls, in the same round; the honest channels are claimed.
    pub(super) async fn claim_split(
        &self,
        ids: &[String],
        report: &mut ClaimReport,
    ) -> Result<(), ClaimError> {
        let mut batches = vec![ids.to_vec()];
        while let Some(batch) = batches.pop() {
            let Some(refused) = self.claim_batch(&batch, report).await? else {
                continue;
            };
            tracing::warn!(
                channels = refused.len(),
                "a claim batch was refused whole: claiming its halves"
            );
            self.refresh(&refused).await?;
            let (first, second) = refused.split_at(refused.len() / 2);
            batches.push(second.to_vec());
            batches.push(first.to_vec());
        }
        Ok(())
    }

    /// The facilitator refused the claim of `claims` (lease `claim_id`): a batch of several is
    /// freed to be split (`Some`); a channel alone is marked refused and reported.
    pub(super) async fn refused(
        &self,
        claims: &[(&Channel, &ClaimInFlight)],
        claim_id: &str,
        reason: &str,
        report: &mut ClaimReport,
    ) -> Result<Option<Vec<String>>, ClaimError> {
        if claims.len() > 1 {
            let results: Vec<(String, ClaimResult)> = claims
                .iter()
                .map(|(channel, _)| (channel.id.clone(), ClaimResult::NotClaimed))
                .collect();
            self.store.finish_claim(claim_id, &results).await?;
            tracing::warn!(%reason, channels = claims.len(), "claim batch refused");
            return Ok(Some(
                claims
                    .iter()
                    .map(|(channel, _)| channel.id.clone())
                    .collect(),
            ));
        }
        let at = (self.clock)();
        for (channel, claim) in claims {
            let result = [(channel.id.clone(), ClaimResult::Refused { at })];
            if self.store.finish_claim(claim_id, &result).await? == 0 {
                continue;
            }
            let amount = claim.total.saturating_sub(channel.claimed);
            tracing::error!(
                channel = %channel.id,
                amount,
                %reason,
                "claim refused: the channel is left out of every claim batch and tried again alone"
            );
            if let Some(hook) = &self.on_refused {
                hook(channel, amount, reason);
            }
            report.refused.push((channel.id.clone(), reason.to_owned()));
        }
        Ok(None)
    }

    /// Mirrors the chain's reading of each of `ids`, so the claims written next are capped at
    /// what each channel holds. Nothing without a chain reader.
    async fn refresh(&self, ids: &[String]) -> Result<(), ClaimError> {
        let Some(chain) = &self.chain else {
            return Ok(());
        };
        for id in ids {
            let Some(channel) = self.store.load(id).await? else {
                continue;
            };
            match chain.read(&channel.network, &channel.id).await {
                Ok(read) => {
                    let reading = OnChain::from_chain(&read, (self.clock)());
                    self.store.mirror(&channel.id, &reading).await?;
                }
                Err(error) => {
                    tracing::warn!(channel = %channel.id, %error, "could not read the channel")
                }
            }
        }
        Ok(())
    }

    /// A claim whose lease ended, with no chain reader to read its outcome: taken over, to be
    /// claimed again in this round. Safe to send again: a claim names a cumulative total, and the
    /// contract claims nothing for a channel already claimed up to it.
    pub(super) async fn take_over(
        &self,
        channel: &Channel,
        claim: &ClaimInFlight,
    ) -> Result<(), ClaimError> {
        let freed = self
            .store
            .finish_claim(&claim.id, &[(channel.id.clone(), ClaimResult::NotClaimed)])
            .await?;
        if freed == 1 {
            tracing::warn!(
                channel = %channel.id,
                owner = %claim.owner,
                total = claim.total,
                "a claim's lease ended with its outcome unknown and no chain reader set: claiming it again"
            );
        }
        Ok(())
    }

    /// Fills the report's [`left`](ClaimReport::left) and [`unswept`](ClaimReport::unswept),
    /// and reports (once per amount) the channels charged beyond the balance last read.
    pub(super) async fn tally(&self, report: &mut ClaimReport) -> Result<(), ClaimError> {
        let channels = self.store.unclaimed(ROUND_LIMIT).await?;
        report.left = channels
            .iter()
            .filter(|channel| channel.unclaimed() > 0)
            .map(|channel| (channel.id.clone(), channel.unclaimed()))
            .collect();
        let mut rounds = self.rounds();
        for channel in &channels {
            let over = channel.over_balance();
            if over > 0 && rounds.over_balance.get(&channel.id) != Some(&over) {
                tracing::error!(
                    channel = %channel.id,
                    amount = over,
                    balance = channel.on_chain.balance,
                    "charged beyond the channel's balance on chain: not claimable"
                );
                rounds.over_balance.insert(channel.id.clone(), over);
            }
        }
        report.unswept = rounds
            .sweeps
            .iter()
            .filter_map(|((network, receiver, token), amount)| {
                Some((
                    network.parse().ok()?,
                    receiver.clone(),
                    token.clone(),
                    *amount,
                ))
            })
            .collect();
        Ok(())
    }
}
