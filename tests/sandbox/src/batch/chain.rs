//! The simulated contract as the rest of the chain sees it: its views (in process and over
//! `eth_call`), the payer's timed withdrawal, the receiver's direct refund, and the environment
//! the facilitator's calls run in.

use alloy_primitives::{Address, B256, U256};
use x402_wire::Network;

use super::contract::{Authority, Env, Escrow, Revert};
use super::parse::typed_config;
use super::typed::{self, BATCH_SETTLEMENT};
use super::wire::{self, ChannelSnapshot};
use super::{ChannelError, ChannelView};
use crate::SandboxFacilitator;
use crate::eip712::parse_address;

impl SandboxFacilitator {
    /// The contract's environment on `network` now.
    pub(super) fn env<'a>(
        &'a self,
        network: &'a Network,
        wallet_owner: &'a dyn Fn(Address) -> Option<Address>,
    ) -> Env<'a> {
        Env {
            ledger: &self.inner.ledger,
            wallet_owner,
            now: self.now(),
            network,
            chain_id: network.evm_chain_id().unwrap_or_default(),
        }
    }

    pub(crate) fn wallet_owner(&self, address: Address) -> Option<Address> {
        self.inner
            .contract_wallets
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&address)
            .copied()
    }

    pub(super) fn snapshot(&self, network: &Network, id: B256) -> (Escrow, ChannelSnapshot) {
        let (escrow, withdrawal, nonce) = self.inner.batch.contract.channel(network, id);
        let snapshot = ChannelSnapshot {
            channel_id: id.to_string(),
            balance: escrow.balance.to_string(),
            total_claimed: escrow.total_claimed.to_string(),
            withdraw_requested_at: withdrawal.initiated_at,
            refund_nonce: nonce.to_string(),
        };
        (escrow, snapshot)
    }

    /// Answers an `eth_call` to the contract on `network`: `channels`, `pendingWithdrawals`,
    /// `refundNonce`, `receivers`.
    pub(crate) fn batch_call(&self, network: &Network, input: &[u8]) -> Result<Vec<u8>, String> {
        use alloy_sol_types::SolCall as _;
        let contract = &self.inner.batch.contract;
        if let Ok(call) = typed::channelsCall::abi_decode(input) {
            let (escrow, _, _) = contract.channel(network, call.channelId);
            return Ok(typed::channelsCall::abi_encode_returns(
                &typed::channelsReturn {
                    balance: escrow.balance,
                    totalClaimed: escrow.total_claimed,
                },
            ));
        }
        if let Ok(call) = typed::pendingWithdrawalsCall::abi_decode(input) {
            let (_, withdrawal, _) = contract.channel(network, call.channelId);
            return Ok(typed::pendingWithdrawalsCall::abi_encode_returns(
                &typed::pendingWithdrawalsReturn {
                    amount: withdrawal.amount,
                    initiatedAt: alloy_primitives::aliases::U40::saturating_from(
                        withdrawal.initiated_at,
                    ),
                },
            ));
        }
        if let Ok(call) = typed::refundNonceCall::abi_decode(input) {
            let (_, _, nonce) = contract.channel(network, call.channelId);
            return Ok(typed::refundNonceCall::abi_encode_returns(&nonce));
        }
        if let Ok(call) = typed::receiversCall::abi_decode(input) {
            let totals = contract.receiver(network, call.receiver, call.token);
            return Ok(typed::receiversCall::abi_encode_returns(
                &typed::receiversReturn {
                    totalClaimed: totals.total_claimed,
                    totalSettled: totals.total_settled,
                },
            ));
        }
        Err("execution reverted: x402BatchSettlement serves channels, pendingWithdrawals, refundNonce and receivers".to_owned())
    }

    /// The sandbox's `receiverAuthorizer` for `batch-settlement`, listed in `/supported`: the
    /// facilitator signs claims and refunds with it for the channels that name it.
    pub fn receiver_authorizer(&self) -> String {
        Address::from_private_key(&self.inner.batch.authorizer).to_checksum(None)
    }

    /// The on-chain state of channel `channel_id` on `network`, as the contract's views
    /// `channels`, `pendingWithdrawals` and `refundNonce` show it.
    ///
    /// # Errors
    ///
    /// When `channel_id` is not 32 bytes of `0x`-hex.
    pub fn channel_state(
        &self,
        network: &Network,
        channel_id: &str,
    ) -> Result<ChannelView, ChannelError> {
        let id = channel_id.parse::<B256>().map_err(|_| {
            ChannelError::Malformed(format!(
                "channel id `{channel_id}` is not 32 bytes of 0x-hex"
            ))
        })?;
        let (escrow, withdrawal, nonce) = self.inner.batch.contract.channel(network, id);
        Ok(ChannelView {
            balance: escrow.balance,
            total_claimed: escrow.total_claimed,
            pending_withdrawal: withdrawal.amount,
            withdraw_requested_at: withdrawal.initiated_at,
            refund_nonce: nonce.to::<u128>(),
        })
    }

    /// The contract's `receivers(receiver, token)` on `network`: what was claimed for the
    /// receiver in the token, and how much of it was swept to it.
    ///
    /// # Errors
    ///
    /// When `receiver` or `token` is not an address.
    pub fn receiver_totals(
        &self,
        network: &Network,
        receiver: &str,
        token: &str,
    ) -> Result<(u128, u128), ChannelError> {
        let receiver = address(receiver)?;
        let token = address(token)?;
        let totals = self.inner.batch.contract.receiver(network, receiver, token);
        Ok((totals.total_claimed, totals.total_settled))
    }

    /// The payer side's `initiateWithdraw(config, amount)`, sent by `sender` (the payer or its
    /// authorizer) on `network` now: starts the timed withdrawal that
    /// [`finalize_withdraw`](Self::finalize_withdraw) completes after `withdrawDelay`.
    ///
    /// ```
    /// use x402_wire::Network;
    /// use tower_x402_sandbox::batch::ChannelConfig;
    /// use tower_x402_sandbox::SandboxFacilitator;
    ///
    /// let facilitator = SandboxFacilitator::new();
    /// let payer = "0x2c7536E3605D9C16a7a3D7b1898e529396a65c23";
    /// let config = ChannelConfig {
    ///     payer: payer.into(),
    ///     payer_authorizer: payer.into(),
    ///     receiver: "0x209693Bc6afc0C5328bA36FaF03C514EF312287C".into(),
    ///     receiver_authorizer: facilitator.receiver_authorizer(),
    ///     token: "0x036CbD53842c5426634e7929541eC2318f3dCF7e".into(),
    ///     withdraw_delay: 900,
    ///     salt: format!("0x{}", "00".repeat(32)),
    /// };
    /// // Nothing deposited: nothing to withdraw.
    /// let refused = facilitator.initiate_withdraw(&Network::BASE_SEPOLIA, &config, 1, payer);
    /// assert_eq!(refused.unwrap_err().to_string(), "reverted: WithdrawAmountExceedsAvailable");
    /// ```
    ///
    /// # Errors
    ///
    /// A malformed configuration or the contract's revert.
    pub fn initiate_withdraw(
        &self,
        network: &Network,
        config: &wire::ChannelConfig,
        amount: u128,
        sender: &str,
    ) -> Result<String, ChannelError> {
        let (config, sender) = (typed_config(config)?, address(sender)?);
        let owner = |address| self.wallet_owner(address);
        let receipt = self.inner.batch.contract.initiate_withdraw(
            &self.env(network, &owner),
            &config,
            amount,
            sender,
        )?;
        Ok(receipt.transaction.to_string())
    }

    /// The payer side's `finalizeWithdraw(config)`, sent by `sender` on `network` now: answers
    /// the amount returned to the payer, capped by what is still unclaimed.
    ///
    /// # Errors
    ///
    /// A malformed configuration or the contract's revert (`WithdrawDelayNotElapsed` before the
    /// delay).
    pub fn finalize_withdraw(
        &self,
        network: &Network,
        config: &wire::ChannelConfig,
        sender: &str,
    ) -> Result<u128, ChannelError> {
        let (config, sender) = (typed_config(config)?, address(sender)?);
        let owner = |address| self.wallet_owner(address);
        let receipt = self.inner.batch.contract.finalize_withdraw(
            &self.env(network, &owner),
            &config,
            sender,
        )?;
        Ok(receipt.value)
    }

    /// The receiver side's direct `refund(config, amount)`, sent by `sender` (the receiver or
    /// its authorizer) on `network`: answers the amount returned, capped by what is unclaimed.
    /// The refund nonce advances even when nothing moves.
    ///
    /// # Errors
    ///
    /// A malformed configuration or the contract's revert.
    pub fn refund_directly(
        &self,
        network: &Network,
        config: &wire::ChannelConfig,
        amount: u128,
        sender: &str,
    ) -> Result<u128, ChannelError> {
        let (config, sender) = (typed_config(config)?, address(sender)?);
        let owner = |address| self.wallet_owner(address);
        let receipt = self.inner.batch.contract.claim_and_refund(
            &self.env(network, &owner),
            None,
            &config,
            amount,
            U256::ZERO,
            &Authority::Sender(sender),
        )?;
        Ok(receipt.value)
    }
}

impl From<Revert> for ChannelError {
    fn from(revert: Revert) -> Self {
        Self::Reverted(revert.to_string())
    }
}

fn address(text: &str) -> Result<Address, ChannelError> {
    parse_address(text)
        .ok_or_else(|| ChannelError::Malformed(format!("`{text}` is not an address")))
}

/// Is `BATCH_SETTLEMENT` the contract `to` names?
pub(crate) fn is_contract(to: Option<Address>) -> bool {
    to == Some(BATCH_SETTLEMENT)
}
