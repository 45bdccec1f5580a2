//! What a payer does on chain, over the sandbox's JSON-RPC: for trying a server against a payer
//! who withdraws from a channel behind its back (a test network's node would take the payer's
//! signed transactions; the sandbox takes the call by name, and moves its clock as a development
//! node's `evm_increaseTime` does).
//!
//! - `sandbox_initiateWithdraw` `[config, amount, sender]`: the contract's
//!   `initiateWithdraw(config, amount)` sent by `sender`; answers the transaction hash.
//! - `sandbox_finalizeWithdraw` `[config, sender]`: `finalizeWithdraw(config)` sent by `sender`;
//!   answers the amount returned to the payer, as a decimal string.
//! - `sandbox_approve` `[owner, amount]`: the token's `approve(Permit2, amount)` sent by
//!   `owner` (USDC of the chain); answers `true`. With `"0"`, a payer that never approved
//!   Permit2, who pays a Permit2 accept only through a gas-sponsoring extension.
//! - `evm_increaseTime` `[seconds]`: moves the sandbox's clock forward; answers the new time.
//!
//! `config` is the channel's `ChannelConfig` as JSON (as in a deposit's `channelConfig`), amounts
//! are decimal strings, a revert is JSON-RPC error -32000 with the contract's error.

use std::time::Instant;

use serde_json::{Value, json};

use super::Chain;
use crate::batch::ChannelConfig;

impl Chain {
    /// Answers the payer-side method `method`, if it is one (`None` otherwise).
    pub(super) fn payer_call(
        &self,
        method: &str,
        params: &Value,
    ) -> Option<Result<Value, (i64, String)>> {
        let config = || {
            serde_json::from_value::<ChannelConfig>(params[0].clone()).map_err(|error| {
                (
                    -32602,
                    format!("params[0] is not a channel config: {error}"),
                )
            })
        };
        let text = |index: usize| params[index].as_str().unwrap_or_default().to_owned();
        let reverted = |error: crate::batch::ChannelError| (-32000, error.to_string());
        Some(match method {
            "sandbox_initiateWithdraw" => config().and_then(|config| {
                let amount = text(1)
                    .parse::<u128>()
                    .map_err(|_| (-32602, "params[1] is not a decimal amount".to_owned()))?;
                self.sandbox
                    .initiate_withdraw(&self.network, &config, amount, &text(2))
                    .map(Value::String)
                    .map_err(reverted)
            }),
            "sandbox_finalizeWithdraw" => config().and_then(|config| {
                self.sandbox
                    .finalize_withdraw(&self.network, &config, &text(1))
                    .map(|amount| json!(amount.to_string()))
                    .map_err(reverted)
            }),
            "sandbox_approve" => match text(1).parse::<u128>() {
                Ok(amount) => self
                    .sandbox
                    .set_permit2_allowance(&self.network, &text(0), amount)
                    .map(|()| json!(true))
                    .map_err(|error| (-32602, format!("params[0]: {error}"))),
                Err(_) => Err((-32602, "params[1] is not a decimal amount".to_owned())),
            },
            "evm_increaseTime" => match params[0].as_u64() {
                Some(seconds) => {
                    let base = self.sandbox.now().saturating_add(seconds);
                    let started = Instant::now();
                    let _ = self
                        .sandbox
                        .clone()
                        .with_clock(move || base.saturating_add(started.elapsed().as_secs()));
                    Ok(json!(base))
                }
                None => Err((-32602, "params[0] is not a number of seconds".to_owned())),
            },
            _ => return None,
        })
    }
}
