//! The `batch-settlement` scheme (payment channels) in the sandbox: the `x402BatchSettlement`
//! contract simulated over the sandbox's ledger, the facilitator's `/verify` and `/settle` for
//! it, its views over JSON-RPC, and the buyer's signing in [`SandboxWallet`](crate::SandboxWallet).
//!
//! A buyer deposits once (an ERC-3009 `receiveWithAuthorization` pulled into the channel), then
//! pays each request with a voucher: an EIP-712 signature over a cumulative ceiling. The server
//! claims the latest voucher of many channels in one `/settle` of `type: "claim"`, sweeps the
//! claimed funds to its receiver with `type: "settle"`, and refunds what is left on request. The
//! payer's escape hatch is the timed withdrawal ([`SandboxFacilitator::initiate_withdraw`],
//! then [`SandboxFacilitator::finalize_withdraw`] after `withdrawDelay` on the sandbox's clock).
//!
//! What is simulated of the contract: the channel id (the EIP-712 hash of `ChannelConfig` under
//! the `x402 Batch Settlement` domain, bound to the chain id and the canonical address), the
//! deposit's checks (non-zero parties, the delay's range, the payer's balance) and its collectors
//! (ERC-3009 `receiveWithAuthorization`: signature, time window, single-use nonce; Permit2
//! `permitWitnessTransferFrom` with the channel as witness: signature, deadline, single-use
//! nonce — every payer counts as having approved Permit2), claims (monotonic: a total at or
//! below the claimed one is a no-op; capped by the ceiling and the balance; the voucher's
//! signature checked against `payerAuthorizer`, or the payer's EIP-1271 wallet when it is zero;
//! the `ClaimBatch` signature of the first row's receiver authorizer, shared by every row), the
//! sweep, refunds (the nonce advances first, even when nothing moves; a pending withdrawal shrinks
//! or is cancelled), timed withdrawals, and `multicall` of a claim with a refund. Each call is
//! atomic. Not simulated: token allowances and the EIP-2612 / ERC-20 approval extensions,
//! ERC-6492 counterfactual wallets, events and transaction receipts.
//!
//! Over HTTP, `batch-settlement` requests follow the facilitator's script like the others (a
//! lost answer, a status, a delay…), except [`crate::Step::Trust`]: signatures
//! are always checked.
//!
//! ```
//! use x402_wire::Network;
//! use tower_x402_sandbox::SandboxFacilitator;
//!
//! let facilitator = SandboxFacilitator::new();
//! let supported = facilitator.supported_response();
//! let kind = supported.kinds.iter().find(|kind| kind.scheme == "batch-settlement").unwrap();
//! assert_eq!(kind.extra.as_ref().unwrap()["receiverAuthorizer"], facilitator.receiver_authorizer());
//! let id = format!("0x{}", "11".repeat(32));
//! assert_eq!(facilitator.channel_state(&Network::BASE, &id)?.balance, 0);
//! # Ok::<_, tower_x402_sandbox::batch::ChannelError>(())
//! ```

mod chain;
mod contract;
mod parse;
pub mod reason;
mod settle;
mod typed;
mod verify;
mod wallet;
mod wire;

use k256::ecdsa::SigningKey;
use tower_x402::facilitator::Endpoint;
use x402_wire::{AtomicAmount, FacilitatorRequest, Network, SettleResponse, VerifyResponse};

pub use typed::{
    BATCH_SETTLEMENT, ERC3009_DEPOSIT_COLLECTOR, MAX_WITHDRAW_DELAY, MIN_WITHDRAW_DELAY,
    PERMIT2_DEPOSIT_COLLECTOR,
};
pub use wire::{
    BATCH_SETTLEMENT_SCHEME, BatchPayload, BatchSettleResponse, BatchVerifyResponse, ChannelConfig,
    ChannelSnapshot, ClaimedVoucher, Deposit, DepositAuthorization, DepositWitness, Erc3009Deposit,
    Permit2Deposit, SignedVoucher, VoucherClaim,
};

pub(crate) use chain::is_contract;

/// Whether `request` is for `batch-settlement`, answered in that scheme's own format over HTTP.
pub(crate) fn is_batch(request: &FacilitatorRequest) -> bool {
    request.payment_requirements().scheme == BATCH_SETTLEMENT_SCHEME
}

/// A `batch-settlement` `/verify` answer as the core's [`VerifyResponse`], for the in-process
/// [`Facilitator`](tower_x402::Facilitator): validity, reason, payer, and the channel snapshot
/// in `extra`.
pub(crate) fn as_verify_response(answer: BatchVerifyResponse) -> VerifyResponse {
    VerifyResponse {
        is_valid: answer.is_valid,
        invalid_reason: answer.invalid_reason,
        invalid_message: answer.invalid_message,
        payer: answer.payer,
        extensions: None,
        extra: answer
            .extra
            .and_then(|snapshot| serde_json::to_value(snapshot).ok())
            .and_then(|value| value.as_object().cloned()),
    }
}

/// A `batch-settlement` `/settle` answer as the core's [`SettleResponse`]: an empty `amount`
/// (a claim's) becomes none; `extra` (`channelState`) is kept.
pub(crate) fn as_settle_response(answer: BatchSettleResponse, network: Network) -> SettleResponse {
    SettleResponse {
        success: answer.success,
        error_reason: answer.error_reason,
        error_message: answer.error_message,
        transaction: answer.transaction,
        network,
        payer: answer.payer,
        amount: answer.amount.parse().ok().map(AtomicAmount),
        extensions: None,
        extra: answer.extra,
    }
}

use crate::SandboxFacilitator;
use crate::script::{Reply, Step};

/// The contract and the facilitator's receiver-authorizer key.
pub(crate) struct BatchState {
    pub(crate) contract: contract::Contract,
    pub(crate) authorizer: SigningKey,
}

impl BatchState {
    pub(crate) fn new() -> Self {
        let authorizer = loop {
            // Fails only for zero or a value at or above the curve order: probability ~2^-128.
            if let Ok(key) = SigningKey::from_slice(&rand::random::<[u8; 32]>()) {
                break key;
            }
        };
        Self {
            contract: contract::Contract::default(),
            authorizer,
        }
    }
}

/// A channel as the contract's views show it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ChannelView {
    /// `channels(id).balance`: deposited minus withdrawn and refunded.
    pub balance: u128,
    /// `channels(id).totalClaimed`.
    pub total_claimed: u128,
    /// `pendingWithdrawals(id).amount`.
    pub pending_withdrawal: u128,
    /// `pendingWithdrawals(id).initiatedAt`, 0 when none is pending.
    pub withdraw_requested_at: u64,
    /// `refundNonce(id)`.
    pub refund_nonce: u128,
}

/// Why a direct call on the simulated contract failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ChannelError {
    /// An argument is malformed.
    #[error("{0}")]
    Malformed(String),
    /// The contract reverted, with its error's name.
    #[error("reverted: {0}")]
    Reverted(String),
}

impl SandboxFacilitator {
    /// `/verify` of a `batch-settlement` request as the script says: the standing or queued
    /// [`Step`] decides whether the sandbox answers, refuses, or fails on the wire.
    pub(crate) async fn scripted_batch_verify(
        &self,
        request: &FacilitatorRequest,
    ) -> Reply<BatchVerifyResponse> {
        let (step, trusting) = self.script().next(Endpoint::Verify);
        match crate::script::arrive(step, trusting).await {
            (Step::Refuse(reason), _) => Reply::Answer(BatchVerifyResponse {
                is_valid: false,
                invalid_reason: Some(reason),
                ..BatchVerifyResponse::default()
            }),
            (step, _) => crate::script::transport(&step, || self.verify_batch(request)),
        }
    }

    /// `/settle` of a `batch-settlement` request as the script says: a lost answer
    /// ([`Step::AnswerLost`], [`Step::ConnectionReset`], [`Step::NoAnswer`]) and
    /// [`Step::PendingThenSettled`] (`settlement_pending` with the transaction) come after the
    /// operation ran on the contract; [`Step::Pending`] runs nothing. Sent again, the same
    /// request meets the chain as it is then (a spent deposit nonce, a claim already applied).
    pub(crate) async fn scripted_batch_settle(
        &self,
        request: &FacilitatorRequest,
    ) -> Reply<BatchSettleResponse> {
        let (step, trusting) = self.script().next(Endpoint::Settle);
        match crate::script::arrive(step, trusting).await {
            (Step::Refuse(reason), _) => Reply::Answer(refusal(request, reason)),
            (Step::Pending, _) => {
                let mut pending = refusal(request, "settlement_pending".to_owned());
                pending.transaction = format!("0x{}", "0".repeat(64));
                Reply::Answer(pending)
            }
            (Step::PendingThenSettled, _) => {
                let settled = self.settle_batch(request);
                if !settled.success {
                    return Reply::Answer(settled);
                }
                let mut pending = refusal(request, "settlement_pending".to_owned());
                pending.transaction = settled.transaction;
                Reply::Answer(pending)
            }
            (step, _) => crate::script::transport(&step, || self.settle_batch(request)),
        }
    }
}

/// A refusal of `request` with `reason`, nothing done.
fn refusal(request: &FacilitatorRequest, reason: String) -> BatchSettleResponse {
    BatchSettleResponse {
        success: false,
        error_reason: Some(reason),
        error_message: None,
        transaction: String::new(),
        network: request.payment_requirements().network.to_string(),
        payer: None,
        amount: String::new(),
        asset: None,
        extra: None,
    }
}
