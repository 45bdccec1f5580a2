//! The reason codes of the `batch-settlement` scheme on EVM that the sandbox facilitator answers
//! with (the specification's names, prefix `invalid_batch_settlement_evm_`).

/// `scheme` is not `batch-settlement` on both sides.
pub const SCHEME: &str = "invalid_batch_settlement_evm_scheme";
/// `accepted.network` differs from the requirement's.
pub const NETWORK_MISMATCH: &str = "invalid_batch_settlement_evm_network_mismatch";
/// The requirement lacks the token's EIP-712 `name` or `version`.
pub const MISSING_EIP712_DOMAIN: &str = "invalid_batch_settlement_evm_missing_eip712_domain";
/// The payload's `type` is not one this call takes.
pub const PAYLOAD_TYPE: &str = "invalid_batch_settlement_evm_payload_type";
/// No channel with a positive balance has this id.
pub const CHANNEL_NOT_FOUND: &str = "invalid_batch_settlement_evm_channel_not_found";
/// The configuration does not hash to the voucher's channel id.
pub const CHANNEL_ID_MISMATCH: &str = "invalid_batch_settlement_evm_channel_id_mismatch";
/// The channel's receiver is not `payTo`.
pub const RECEIVER_MISMATCH: &str = "invalid_batch_settlement_evm_receiver_mismatch";
/// The channel's receiver authorizer is not `extra.receiverAuthorizer` (or that is missing or
/// zero).
pub const RECEIVER_AUTHORIZER_MISMATCH: &str =
    "invalid_batch_settlement_evm_receiver_authorizer_mismatch";
/// No authorizer signature was sent and the channel's receiver authorizer is not this
/// facilitator's key, so it cannot sign.
pub const AUTHORIZER_ADDRESS_MISMATCH: &str =
    "invalid_batch_settlement_evm_authorizer_address_mismatch";
/// The channel's token is not the requirement's asset.
pub const TOKEN_MISMATCH: &str = "invalid_batch_settlement_evm_token_mismatch";
/// The channel's withdrawal delay is not `extra.withdrawDelay`.
pub const WITHDRAW_DELAY_MISMATCH: &str = "invalid_batch_settlement_evm_withdraw_delay_mismatch";
/// The withdrawal delay is outside 15 minutes to 30 days.
pub const WITHDRAW_DELAY_OUT_OF_RANGE: &str =
    "invalid_batch_settlement_evm_withdraw_delay_out_of_range";
/// The voucher signature does not recover to the payer authorizer (or the payer's wallet
/// rejects it).
pub const VOUCHER_SIGNATURE: &str = "invalid_batch_settlement_evm_voucher_signature";
/// The voucher's ceiling is above the channel's balance (plus the deposit).
pub const CUMULATIVE_EXCEEDS_BALANCE: &str =
    "invalid_batch_settlement_evm_cumulative_exceeds_balance";
/// The voucher's ceiling is not above what was claimed (a refund's may equal it).
pub const CUMULATIVE_BELOW_CLAIMED: &str = "invalid_batch_settlement_evm_cumulative_below_claimed";
/// The payer holds less than the deposit.
pub const INSUFFICIENT_BALANCE: &str = "invalid_batch_settlement_evm_insufficient_balance";
/// The deposit payload is malformed.
pub const DEPOSIT_PAYLOAD: &str = "invalid_batch_settlement_evm_deposit_payload";
/// The deposit would revert (its authorization nonce is used).
pub const DEPOSIT_SIMULATION_FAILED: &str =
    "invalid_batch_settlement_evm_deposit_simulation_failed";
/// The deposit transaction reverted.
pub const DEPOSIT_TRANSACTION_FAILED: &str =
    "invalid_batch_settlement_evm_deposit_transaction_failed";
/// The voucher payload is malformed.
pub const VOUCHER_PAYLOAD: &str = "invalid_batch_settlement_evm_voucher_payload";
/// The claim payload is malformed.
pub const CLAIM_PAYLOAD: &str = "invalid_batch_settlement_evm_claim_payload";
/// The claim would revert (ceiling, balance, signature, authorizer).
pub const CLAIM_SIMULATION_FAILED: &str = "invalid_batch_settlement_evm_claim_simulation_failed";
/// The settle payload is malformed.
pub const SETTLE_PAYLOAD: &str = "invalid_batch_settlement_evm_settle_payload";
/// Nothing is claimed and unsettled for the receiver and token.
pub const NOTHING_TO_SETTLE: &str = "invalid_batch_settlement_evm_nothing_to_settle";
/// The refund payload is malformed (or not completed by the server).
pub const REFUND_PAYLOAD: &str = "invalid_batch_settlement_evm_refund_payload";
/// The refund amount is not a positive decimal.
pub const REFUND_AMOUNT_INVALID: &str = "invalid_batch_settlement_evm_refund_amount_invalid";
/// Nothing unclaimed remains to refund.
pub const REFUND_NO_BALANCE: &str = "invalid_batch_settlement_evm_refund_no_balance";
/// The refund would revert (nonce, signature, claims).
pub const REFUND_SIMULATION_FAILED: &str = "invalid_batch_settlement_evm_refund_simulation_failed";
/// The ERC-3009 `validAfter` is in the future.
pub const VALID_AFTER: &str = "invalid_batch_settlement_evm_payload_authorization_valid_after";
/// The ERC-3009 `validBefore` has passed (or is within 6 s).
pub const VALID_BEFORE: &str = "invalid_batch_settlement_evm_payload_authorization_valid_before";
/// The ERC-3009 `receiveWithAuthorization` signature is not the payer's under the token's
/// domain.
pub const RECEIVE_AUTHORIZATION_SIGNATURE: &str =
    "invalid_batch_settlement_evm_receive_authorization_signature";
/// The deposit's transfer method is Permit2 but it has no `permit2Authorization`.
pub const PERMIT2_AUTHORIZATION_REQUIRED: &str =
    "invalid_batch_settlement_evm_permit2_authorization_required";
/// The permit's `spender` is not the `Permit2DepositCollector`.
pub const PERMIT2_INVALID_SPENDER: &str = "invalid_batch_settlement_evm_permit2_invalid_spender";
/// The permitted amount is not the deposit.
pub const PERMIT2_AMOUNT_MISMATCH: &str = "invalid_batch_settlement_evm_permit2_amount_mismatch";
/// The permit's deadline has passed (or is within 6 s).
pub const PERMIT2_DEADLINE_EXPIRED: &str = "invalid_batch_settlement_evm_permit2_deadline_expired";
/// The permit is not signed by the payer under the Permit2 domain (or `from` is not the payer).
pub const PERMIT2_INVALID_SIGNATURE: &str =
    "invalid_batch_settlement_evm_permit2_invalid_signature";
/// The deposit has no `erc3009Authorization`.
pub const ERC3009_AUTHORIZATION_REQUIRED: &str =
    "invalid_batch_settlement_evm_erc3009_authorization_required";
