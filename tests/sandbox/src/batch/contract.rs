//! The `x402BatchSettlement` contract simulated over the sandbox ledger: deposits through the
//! ERC-3009 collector, claims (direct or with the receiver authorizer's batch signature),
//! sweeps, cooperative refunds with their nonce, and timed withdrawals on the sandbox clock.
//!
//! Every call either happens whole or reverts with the contract's error and changes nothing:
//! it runs on a copy of the chain's state, moves tokens in the ledger, then commits the copy.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Mutex, MutexGuard, PoisonError};

use alloy_primitives::{Address, B256, U256, keccak256};
use alloy_sol_types::{Eip712Domain, SolStruct as _};
use x402_wire::Network;

use super::typed::{
    self, BATCH_SETTLEMENT, ChannelConfig, ClaimEntry, DepositWitness, ERC3009_DEPOSIT_COLLECTOR,
    MAX_WITHDRAW_DELAY, MIN_WITHDRAW_DELAY, PERMIT2_DEPOSIT_COLLECTOR, PermitWitnessTransferFrom,
    ReceiveWithAuthorization, TokenPermissions,
};
use crate::ledger::Ledger;
use crate::typed_data::permit2_domain;
use crate::verify::parse_signature;
use tower_x402_evm::permit2::PERMIT2;

/// Why a call reverted: the contract's custom errors, plus the collector's failure to pull.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Revert {
    InvalidChannel,
    ZeroDeposit,
    DepositOverflow,
    InvalidSignature,
    NotReceiverAuthorizer,
    NotAuthorizedToClaim,
    NotAuthorizedToRefund,
    ClaimExceedsCeiling,
    ClaimExceedsBalance,
    WithdrawalAlreadyPending,
    WithdrawalNotPending,
    NotAuthorizedToFinalizeWithdraw,
    WithdrawDelayNotElapsed,
    NothingToWithdraw,
    WithdrawAmountExceedsAvailable,
    WithdrawDelayOutOfRange,
    EmptyBatch,
    InvalidRefundNonce,
    ZeroRefund,
    /// The collector could not pull the deposit (signature, time window, used nonce, balance).
    DepositCollectionFailed(String),
}

impl fmt::Display for Revert {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::DepositCollectionFailed(why) => write!(f, "DepositCollectionFailed: {why}"),
            other => write!(f, "{other:?}"),
        }
    }
}

/// A channel's escrow: `balance` (deposited minus withdrawn and refunded) and `total_claimed`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Escrow {
    pub(crate) balance: u128,
    pub(crate) total_claimed: u128,
}

/// A pending timed withdrawal.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Withdrawal {
    pub(crate) amount: u128,
    pub(crate) initiated_at: u64,
}

/// A receiver's totals in one token.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct ReceiverTotals {
    pub(crate) total_claimed: u128,
    pub(crate) total_settled: u128,
}

/// The contract's storage on one chain.
#[derive(Clone, Debug, Default)]
struct Storage {
    channels: HashMap<B256, Escrow>,
    refund_nonces: HashMap<B256, U256>,
    withdrawals: HashMap<B256, Withdrawal>,
    receivers: HashMap<(Address, Address), ReceiverTotals>,
    transactions: u64,
}

/// One claim row: the voucher's channel and ceiling, the payer's signature, the new total.
#[derive(Clone, Debug)]
pub(crate) struct ClaimRow {
    pub(crate) config: ChannelConfig,
    pub(crate) max_claimable: u128,
    pub(crate) signature: String,
    pub(crate) total_claimed: u128,
}

/// Who is allowed to run a claim or a refund.
#[derive(Clone, Debug)]
pub(crate) enum Authority {
    /// A direct call from this address (`claim`, `refund`).
    Sender(Address),
    /// The receiver authorizer's EIP-712 signature (`claimWithSignature`,
    /// `refundWithSignature`), relayed by anyone.
    Signature(String),
}

/// How a deposit's collector pulls the tokens.
#[derive(Clone, Debug)]
pub(crate) enum Pull {
    /// `ERC3009DepositCollector`: the token's `receiveWithAuthorization`.
    Erc3009(Erc3009Pull),
    /// `Permit2DepositCollector`: Permit2's `permitWitnessTransferFrom` with the channel as
    /// witness. Every payer counts as having approved Permit2 on the token.
    Permit2(Permit2Pull),
}

/// The Permit2 permit a deposit's collector spends.
#[derive(Clone, Debug)]
pub(crate) struct Permit2Pull {
    pub(crate) nonce: U256,
    pub(crate) deadline: U256,
    pub(crate) signature: String,
}

impl Pull {
    /// The digest the payer signed for depositing `amount` into channel `id`, and the
    /// single-use nonce it spends with the contract that keeps it (the token or Permit2).
    pub(crate) fn authorization(
        &self,
        config: &ChannelConfig,
        id: B256,
        amount: u128,
        chain_id: u64,
    ) -> (B256, Address, B256) {
        match self {
            Self::Erc3009(pull) => {
                let nonce = typed::deposit_nonce(id, pull.salt);
                let message = ReceiveWithAuthorization {
                    from: config.payer,
                    to: ERC3009_DEPOSIT_COLLECTOR,
                    value: U256::from(amount),
                    validAfter: pull.valid_after,
                    validBefore: pull.valid_before,
                    nonce,
                };
                (
                    message.eip712_signing_hash(&pull.token_domain),
                    config.token,
                    nonce,
                )
            }
            Self::Permit2(pull) => {
                let message = PermitWitnessTransferFrom {
                    permitted: TokenPermissions {
                        token: config.token,
                        amount: U256::from(amount),
                    },
                    spender: PERMIT2_DEPOSIT_COLLECTOR,
                    nonce: pull.nonce,
                    deadline: pull.deadline,
                    witness: DepositWitness { channelId: id },
                };
                let digest = message.eip712_signing_hash(&permit2_domain(chain_id));
                (digest, PERMIT2, B256::from(pull.nonce))
            }
        }
    }

    /// The payer's signature.
    pub(crate) fn signature(&self) -> &str {
        match self {
            Self::Erc3009(pull) => &pull.signature,
            Self::Permit2(pull) => &pull.signature,
        }
    }

    /// Why the authorization cannot be used at unix time `now`, as the token or Permit2 would
    /// refuse it.
    fn outside_window(&self, now: u64) -> Option<&'static str> {
        let now = U256::from(now);
        match self {
            Self::Erc3009(pull) if now <= pull.valid_after => {
                Some("authorization is not yet valid")
            }
            Self::Erc3009(pull) if now >= pull.valid_before => Some("authorization is expired"),
            Self::Permit2(pull) if now > pull.deadline => Some("permit signature expired"),
            _ => None,
        }
    }
}

/// The ERC-3009 authorization a deposit's collector spends.
#[derive(Clone, Debug)]
pub(crate) struct Erc3009Pull {
    pub(crate) valid_after: U256,
    pub(crate) valid_before: U256,
    pub(crate) salt: U256,
    pub(crate) signature: String,
    /// The token's EIP-712 domain.
    pub(crate) token_domain: Eip712Domain,
}

/// What a call runs against: the ledger, the contract wallets, the time and the chain.
pub(crate) struct Env<'a> {
    pub(crate) ledger: &'a Ledger,
    /// The owner key of a smart-contract wallet (EIP-1271), if `address` is one.
    pub(crate) wallet_owner: &'a dyn Fn(Address) -> Option<Address>,
    pub(crate) now: u64,
    pub(crate) network: &'a Network,
    pub(crate) chain_id: u64,
}

impl Env<'_> {
    /// OpenZeppelin's `SignatureChecker.isValidSignatureNow`: EIP-1271 for a contract wallet,
    /// else ECDSA recovery.
    fn signed_by(&self, signer: Address, digest: B256, signature: &str) -> bool {
        match (self.wallet_owner)(signer) {
            Some(owner) => recovers_to(digest, signature, owner),
            None => recovers_to(digest, signature, signer),
        }
    }
}

/// Whether `signature` (65 bytes, `v` 27/28, low `s`) recovers to `signer` over `digest`.
pub(crate) fn recovers_to(digest: B256, signature: &str, signer: Address) -> bool {
    parse_signature(signature)
        .ok()
        .and_then(|signature| signature.recover_address_from_prehash(&digest).ok())
        == Some(signer)
}

/// A transfer of the token a call makes, applied in the ledger when the call commits.
struct Transfer {
    from: Address,
    to: Address,
    amount: u128,
    nonce: Option<B256>,
    /// The contract keeping `nonce`: the token (ERC-3009) or Permit2.
    nonce_space: Address,
}

/// What a committed call returns: its value and its transaction hash.
#[derive(Debug)]
pub(crate) struct Receipt<T> {
    pub(crate) value: T,
    pub(crate) transaction: B256,
}

/// The contract on every chain the sandbox serves.
#[derive(Debug, Default)]
pub(crate) struct Contract {
    chains: Mutex<HashMap<Network, Storage>>,
}

/// One call in progress on a copy of the storage.
struct Call<'a, 'e> {
    env: &'a Env<'e>,
    storage: Storage,
    transfers: Vec<Transfer>,
}

impl Contract {
    fn lock(&self) -> MutexGuard<'_, HashMap<Network, Storage>> {
        self.chains.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `call` on a copy of the chain's storage; commits it, with its transfers, only if it
    /// and every transfer succeed.
    fn transact<T>(
        &self,
        env: &Env<'_>,
        call: impl FnOnce(&mut Call<'_, '_>) -> Result<T, Revert>,
    ) -> Result<Receipt<T>, Revert> {
        let mut chains = self.lock();
        let storage = chains.get(env.network).cloned().unwrap_or_default();
        let mut running = Call {
            env,
            storage,
            transfers: Vec::new(),
        };
        let value = call(&mut running)?;
        let Call {
            mut storage,
            transfers,
            ..
        } = running;
        for transfer in &transfers {
            let nonce = transfer
                .nonce
                .map(|nonce| (env.network.clone(), transfer.nonce_space, nonce));
            env.ledger
                .transfer(transfer.from, transfer.to, transfer.amount, nonce)
                .map_err(Revert::DepositCollectionFailed)?;
        }
        storage.transactions += 1;
        let mut preimage = env.network.as_str().as_bytes().to_vec();
        preimage.extend_from_slice(BATCH_SETTLEMENT.as_slice());
        preimage.extend_from_slice(&storage.transactions.to_be_bytes());
        chains.insert(env.network.clone(), storage);
        Ok(Receipt {
            value,
            transaction: keccak256(preimage),
        })
    }

    /// `deposit(config, amount, ERC3009DepositCollector, data)`.
    pub(crate) fn deposit(
        &self,
        env: &Env<'_>,
        config: &ChannelConfig,
        amount: u128,
        pull: &Pull,
    ) -> Result<Receipt<Escrow>, Revert> {
        self.transact(env, |call| call.deposit(config, amount, pull))
    }

    /// `claim(rows)` from `Authority::Sender`, `claimWithSignature(rows, signature)` otherwise.
    pub(crate) fn claim(
        &self,
        env: &Env<'_>,
        rows: &[ClaimRow],
        authority: &Authority,
    ) -> Result<Receipt<()>, Revert> {
        self.transact(env, |call| call.claim(rows, authority))
    }

    /// `settle(receiver, token)`: answers the amount swept.
    pub(crate) fn settle(
        &self,
        env: &Env<'_>,
        receiver: Address,
        token: Address,
    ) -> Result<Receipt<u128>, Revert> {
        self.transact(env, |call| Ok(call.settle(receiver, token)))
    }

    /// `multicall([claimWithSignature(rows), refundWithSignature(config, amount, nonce, sig)])`
    /// (the claim is skipped when `rows` is empty), or a direct `refund` from
    /// `Authority::Sender`: answers the amount refunded.
    pub(crate) fn claim_and_refund(
        &self,
        env: &Env<'_>,
        claim: Option<(&[ClaimRow], &Authority)>,
        config: &ChannelConfig,
        amount: u128,
        nonce: U256,
        authority: &Authority,
    ) -> Result<Receipt<u128>, Revert> {
        self.transact(env, |call| {
            if let Some((rows, claim_authority)) = claim {
                call.claim(rows, claim_authority)?;
            }
            call.refund(config, amount, nonce, authority)
        })
    }

    /// `initiateWithdraw(config, amount)` sent by `sender`.
    pub(crate) fn initiate_withdraw(
        &self,
        env: &Env<'_>,
        config: &ChannelConfig,
        amount: u128,
        sender: Address,
    ) -> Result<Receipt<()>, Revert> {
        self.transact(env, |call| call.initiate_withdraw(config, amount, sender))
    }

    /// `finalizeWithdraw(config)` sent by `sender`: answers the amount withdrawn.
    pub(crate) fn finalize_withdraw(
        &self,
        env: &Env<'_>,
        config: &ChannelConfig,
        sender: Address,
    ) -> Result<Receipt<u128>, Revert> {
        self.transact(env, |call| call.finalize_withdraw(config, sender))
    }

    /// `channels(id)`, `pendingWithdrawals(id)` and `refundNonce(id)` on `network`.
    pub(crate) fn channel(&self, network: &Network, id: B256) -> (Escrow, Withdrawal, U256) {
        let chains = self.lock();
        let Some(storage) = chains.get(network) else {
            return Default::default();
        };
        (
            storage.channels.get(&id).copied().unwrap_or_default(),
            storage.withdrawals.get(&id).copied().unwrap_or_default(),
            storage.refund_nonces.get(&id).copied().unwrap_or_default(),
        )
    }

    /// `receivers(receiver, token)` on `network`.
    pub(crate) fn receiver(
        &self,
        network: &Network,
        receiver: Address,
        token: Address,
    ) -> ReceiverTotals {
        self.lock()
            .get(network)
            .and_then(|storage| storage.receivers.get(&(receiver, token)).copied())
            .unwrap_or_default()
    }
}

impl Call<'_, '_> {
    fn id(&self, config: &ChannelConfig) -> B256 {
        typed::channel_id(config, self.env.chain_id)
    }

    fn escrow(&mut self, id: B256) -> &mut Escrow {
        self.storage.channels.entry(id).or_default()
    }

    fn deposit(
        &mut self,
        config: &ChannelConfig,
        amount: u128,
        pull: &Pull,
    ) -> Result<Escrow, Revert> {
        let zero = Address::ZERO;
        if [
            config.payer,
            config.receiver,
            config.receiverAuthorizer,
            config.token,
        ]
        .contains(&zero)
        {
            return Err(Revert::InvalidChannel);
        }
        if !(MIN_WITHDRAW_DELAY..=MAX_WITHDRAW_DELAY).contains(&config.withdrawDelay.to::<u64>()) {
            return Err(Revert::WithdrawDelayOutOfRange);
        }
        if amount == 0 {
            return Err(Revert::ZeroDeposit);
        }
        let id = self.id(config);
        let escrow = self.escrow(id);
        escrow.balance = escrow
            .balance
            .checked_add(amount)
            .ok_or(Revert::DepositOverflow)?;
        let after = *escrow;

        // The collector: the token's or Permit2's own checks.
        if let Some(why) = pull.outside_window(self.env.now) {
            return Err(Revert::DepositCollectionFailed(why.into()));
        }
        let (digest, nonce_space, nonce) =
            pull.authorization(config, id, amount, self.env.chain_id);
        if !self.env.signed_by(config.payer, digest, pull.signature()) {
            return Err(Revert::DepositCollectionFailed("invalid signature".into()));
        }
        self.transfers.push(Transfer {
            from: config.payer,
            to: BATCH_SETTLEMENT,
            amount,
            nonce: Some(nonce),
            nonce_space,
        });
        Ok(after)
    }

    fn claim(&mut self, rows: &[ClaimRow], authority: &Authority) -> Result<(), Revert> {
        let Some(first) = rows.first() else {
            return Err(Revert::EmptyBatch);
        };
        match authority {
            Authority::Sender(sender) => {
                for row in rows {
                    if *sender != row.config.receiver && *sender != row.config.receiverAuthorizer {
                        return Err(Revert::NotAuthorizedToClaim);
                    }
                    self.claim_row(row)?;
                }
            }
            Authority::Signature(signature) => {
                let authorizer = first.config.receiverAuthorizer;
                let entries = rows
                    .iter()
                    .map(|row| ClaimEntry {
                        channelId: self.id(&row.config),
                        maxClaimableAmount: row.max_claimable,
                        totalClaimed: row.total_claimed,
                    })
                    .collect();
                let digest = typed::claim_batch_digest(entries, self.env.chain_id);
                if !self.env.signed_by(authorizer, digest, signature) {
                    return Err(Revert::InvalidSignature);
                }
                for row in rows {
                    if row.config.receiverAuthorizer != authorizer {
                        return Err(Revert::NotReceiverAuthorizer);
                    }
                    self.claim_row(row)?;
                }
            }
        }
        Ok(())
    }

    fn claim_row(&mut self, row: &ClaimRow) -> Result<(), Revert> {
        let id = self.id(&row.config);
        let escrow = *self.escrow(id);
        if row.total_claimed <= escrow.total_claimed {
            return Ok(());
        }
        if row.total_claimed > row.max_claimable {
            return Err(Revert::ClaimExceedsCeiling);
        }
        if row.total_claimed > escrow.balance {
            return Err(Revert::ClaimExceedsBalance);
        }
        let digest = typed::voucher_digest(id, row.max_claimable, self.env.chain_id);
        let valid = if row.config.payerAuthorizer == Address::ZERO {
            self.env.signed_by(row.config.payer, digest, &row.signature)
        } else {
            recovers_to(digest, &row.signature, row.config.payerAuthorizer)
        };
        if !valid {
            return Err(Revert::InvalidSignature);
        }
        let delta = row.total_claimed - escrow.total_claimed;
        self.escrow(id).total_claimed = row.total_claimed;
        let totals = self
            .storage
            .receivers
            .entry((row.config.receiver, row.config.token))
            .or_default();
        totals.total_claimed += delta;
        Ok(())
    }

    fn settle(&mut self, receiver: Address, token: Address) -> u128 {
        let totals = self.storage.receivers.entry((receiver, token)).or_default();
        let amount = totals.total_claimed - totals.total_settled;
        if amount == 0 {
            return 0;
        }
        totals.total_settled = totals.total_claimed;
        self.transfers.push(Transfer {
            from: BATCH_SETTLEMENT,
            to: receiver,
            amount,
            nonce: None,
            nonce_space: token,
        });
        amount
    }

    fn refund(
        &mut self,
        config: &ChannelConfig,
        amount: u128,
        nonce: U256,
        authority: &Authority,
    ) -> Result<u128, Revert> {
        let id = self.id(config);
        match authority {
            Authority::Sender(sender) => {
                if *sender != config.receiver && *sender != config.receiverAuthorizer {
                    return Err(Revert::NotAuthorizedToRefund);
                }
            }
            Authority::Signature(signature) => {
                let current = self
                    .storage
                    .refund_nonces
                    .get(&id)
                    .copied()
                    .unwrap_or_default();
                if nonce != current {
                    return Err(Revert::InvalidRefundNonce);
                }
                let digest = typed::refund_digest(id, nonce, amount, self.env.chain_id);
                if !self
                    .env
                    .signed_by(config.receiverAuthorizer, digest, signature)
                {
                    return Err(Revert::InvalidSignature);
                }
            }
        }
        if amount == 0 {
            return Err(Revert::ZeroRefund);
        }
        let counter = self.storage.refund_nonces.entry(id).or_default();
        *counter = counter.wrapping_add(U256::from(1));
        let escrow = self.escrow(id);
        let available = escrow.balance - escrow.total_claimed;
        let refunded = amount.min(available);
        if refunded == 0 {
            return Ok(0);
        }
        escrow.balance -= refunded;
        if let Some(pending) = self.storage.withdrawals.get_mut(&id) {
            if refunded >= pending.amount {
                self.storage.withdrawals.remove(&id);
            } else {
                pending.amount -= refunded;
            }
        }
        self.transfers.push(Transfer {
            from: BATCH_SETTLEMENT,
            to: config.payer,
            amount: refunded,
            nonce: None,
            nonce_space: config.token,
        });
        Ok(refunded)
    }

    fn initiate_withdraw(
        &mut self,
        config: &ChannelConfig,
        amount: u128,
        sender: Address,
    ) -> Result<(), Revert> {
        if sender != config.payer && sender != config.payerAuthorizer {
            return Err(Revert::InvalidChannel);
        }
        if amount == 0 {
            return Err(Revert::NothingToWithdraw);
        }
        let id = self.id(config);
        if self.storage.withdrawals.contains_key(&id) {
            return Err(Revert::WithdrawalAlreadyPending);
        }
        let escrow = *self.escrow(id);
        if amount > escrow.balance - escrow.total_claimed {
            return Err(Revert::WithdrawAmountExceedsAvailable);
        }
        let now = self.env.now;
        self.storage.withdrawals.insert(
            id,
            Withdrawal {
                amount,
                initiated_at: now,
            },
        );
        Ok(())
    }

    fn finalize_withdraw(
        &mut self,
        config: &ChannelConfig,
        sender: Address,
    ) -> Result<u128, Revert> {
        if sender != config.payer && sender != config.payerAuthorizer {
            return Err(Revert::NotAuthorizedToFinalizeWithdraw);
        }
        let id = self.id(config);
        let Some(pending) = self.storage.withdrawals.get(&id).copied() else {
            return Err(Revert::WithdrawalNotPending);
        };
        if self.env.now < pending.initiated_at + config.withdrawDelay.to::<u64>() {
            return Err(Revert::WithdrawDelayNotElapsed);
        }
        self.storage.withdrawals.remove(&id);
        let escrow = self.escrow(id);
        let amount = pending.amount.min(escrow.balance - escrow.total_claimed);
        escrow.balance -= amount;
        if amount > 0 {
            self.transfers.push(Transfer {
                from: BATCH_SETTLEMENT,
                to: config.payer,
                amount,
                nonce: None,
                nonce_space: config.token,
            });
        }
        Ok(amount)
    }
}
