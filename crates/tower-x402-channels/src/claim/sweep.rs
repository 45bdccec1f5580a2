//! Sweeping: moving what was claimed for a receiver and token to the receiver (`/settle` of
//! `type: "settle"`), once per receiver and token claimed for, and on shutdown for every receiver
//! the claimer was told of.

use x402_wire::Network;

use crate::channel::Channel;
use crate::wire::ServerPayload;

use super::{ClaimError, ClaimReport, Claimer, reason_of, request};

/// A sweep with nothing claimed and unswept: nothing to do.
const NOTHING_TO_SETTLE: &str = "invalid_batch_settlement_evm_nothing_to_settle";

impl Claimer {
    pub(super) fn owe_sweep(&self, channel: &Channel, amount: u128) {
        let key = (
            channel.network.to_string(),
            channel.config.receiver.clone(),
            channel.config.token.clone(),
        );
        let mut rounds = self.rounds();
        let owed = rounds.sweeps.entry(key).or_default();
        *owed = owed.saturating_add(amount);
    }

    /// Sweeps every receiver and token claimed for and not swept yet. A sweep moves everything
    /// claimed and unswept on chain, so sending one again after a lost answer moves nothing twice.
    pub(super) async fn sweep(&self, report: &mut ClaimReport) -> Result<(), ClaimError> {
        let owed: Vec<(String, String, String)> = self.rounds().sweeps.keys().cloned().collect();
        self.sweep_each(owed, report).await
    }

    /// Sweeps each of `owed` (network, receiver, token); those done are owed no more.
    pub(super) async fn sweep_each(
        &self,
        owed: Vec<(String, String, String)>,
        report: &mut ClaimReport,
    ) -> Result<(), ClaimError> {
        for (network_name, receiver, token) in owed {
            let Ok(network) = network_name.parse::<Network>() else {
                continue;
            };
            let payload = ServerPayload::Settle {
                receiver: receiver.clone(),
                token: token.clone(),
            };
            let request = request::settle_request(&network, &receiver, &token, &payload)?;
            report.sweep_calls += 1;
            let done = match self.facilitator.settle(&request).await {
                Ok(answer) if answer.success => {
                    report.swept.push((
                        network.clone(),
                        receiver.clone(),
                        token.clone(),
                        answer.amount.map(|amount| amount.get()),
                    ));
                    true
                }
                Ok(answer) if answer.error_reason.as_deref() == Some(NOTHING_TO_SETTLE) => true,
                Ok(answer) => {
                    tracing::warn!(reason = %reason_of(&answer), %receiver, "sweep refused");
                    false
                }
                Err(error) => {
                    tracing::warn!(%error, %receiver, "sweep answer lost: sweeping again later");
                    false
                }
            };
            if done {
                self.rounds()
                    .sweeps
                    .remove(&(network_name, receiver, token));
            }
        }
        Ok(())
    }
}
