//! The reason codes the sandbox facilitator answers with, in `invalidReason` (`/verify`) and
//! `errorReason` (`/settle`).
//!
//! The protocol's own list and the reference SDKs disagree on a few EVM names (the spec says
//! `invalid_exact_evm_payload_signature`, TypeScript and Go emit `invalid_exact_evm_signature`).
//! The sandbox uses **the TypeScript/Go names throughout**, because that is what the hosted
//! facilitators run and therefore what a server meets in production. Codes outside the
//! `exact` EVM mechanism (`invalid_payload`, `invalid_network`, …) are the spec's generic ones.
//!
//! The checks run in the reference facilitator's order, so the first failing check decides the
//! reason: version, scheme, network, EIP-712 domain, payload shape, signature, recipient,
//! `validBefore`, `validAfter`, value, token, nonce, balance.

/// `paymentPayload.x402Version` (or the request's) is not 2.
pub const INVALID_X402_VERSION: &str = "invalid_x402_version";
/// The payload is not an EIP-3009 `{signature, authorization}` with well-formed values.
pub const INVALID_PAYLOAD: &str = "invalid_payload";
/// The requirement's network is not one the sandbox settles on.
pub const INVALID_NETWORK: &str = "invalid_network";
/// The server's requirement itself is unusable (e.g. `payTo` is not an address).
pub const INVALID_PAYMENT_REQUIREMENTS: &str = "invalid_payment_requirements";
/// `accepted.scheme` or the requirement's scheme is not `exact`.
pub const INVALID_EXACT_EVM_SCHEME: &str = "invalid_exact_evm_scheme";
/// `accepted.network` differs from the requirement's network.
pub const INVALID_EXACT_EVM_NETWORK_MISMATCH: &str = "invalid_exact_evm_network_mismatch";
/// The requirement's `extra` lacks the token's EIP-712 `name` or `version`.
pub const INVALID_EXACT_EVM_MISSING_EIP712_DOMAIN: &str = "invalid_exact_evm_missing_eip712_domain";
/// The signature is malformed or does not recover to `authorization.from` under the domain.
pub const INVALID_EXACT_EVM_SIGNATURE: &str = "invalid_exact_evm_signature";
/// `authorization.to` is not the requirement's `payTo`.
pub const INVALID_EXACT_EVM_RECIPIENT_MISMATCH: &str = "invalid_exact_evm_recipient_mismatch";
/// `validBefore` has passed, or falls within the 6-second block-time buffer.
pub const INVALID_EXACT_EVM_PAYLOAD_AUTHORIZATION_VALID_BEFORE: &str =
    "invalid_exact_evm_payload_authorization_valid_before";
/// `validAfter` is still in the future.
pub const INVALID_EXACT_EVM_PAYLOAD_AUTHORIZATION_VALID_AFTER: &str =
    "invalid_exact_evm_payload_authorization_valid_after";
/// `authorization.value` is not exactly the requirement's `amount`.
pub const INVALID_EXACT_EVM_AUTHORIZATION_VALUE: &str = "invalid_exact_evm_authorization_value";
/// `asset` is not the USDC contract of the network, so `transferWithAuthorization` would fail.
pub const INVALID_EXACT_EVM_EIP3009_NOT_SUPPORTED: &str = "invalid_exact_evm_eip3009_not_supported";
/// `extra.name` is not the token's EIP-712 name (e.g. `USDC` on Base mainnet, where it is
/// `USD Coin`): the signature is self-consistent but the contract would reject it.
pub const INVALID_EXACT_EVM_TOKEN_NAME_MISMATCH: &str = "invalid_exact_evm_token_name_mismatch";
/// `extra.version` is not the token's EIP-712 version.
pub const INVALID_EXACT_EVM_TOKEN_VERSION_MISMATCH: &str =
    "invalid_exact_evm_token_version_mismatch";
/// The authorization's `(from, nonce)` was already used on this token.
pub const INVALID_EXACT_EVM_NONCE_ALREADY_USED: &str = "invalid_exact_evm_nonce_already_used";
/// The payer's balance is below the value.
pub const INVALID_EXACT_EVM_INSUFFICIENT_BALANCE: &str = "invalid_exact_evm_insufficient_balance";
/// The transfer could not be applied (the recipient's balance would overflow).
pub const INVALID_EXACT_EVM_TRANSACTION_FAILED: &str = "invalid_exact_evm_transaction_failed";

// The `upto` scheme (Permit2), with the reference facilitators' names.

/// `accepted.scheme` and the requirement's scheme disagree about `upto`.
pub const INVALID_UPTO_EVM_SCHEME: &str = "invalid_upto_evm_scheme";
/// `accepted.network` differs from the requirement's network.
pub const INVALID_UPTO_EVM_NETWORK_MISMATCH: &str = "invalid_upto_evm_network_mismatch";
/// The payload is not a Permit2 `{signature, permit2Authorization}` with well-formed values.
pub const INVALID_UPTO_EVM_PAYLOAD: &str = "invalid_upto_evm_payload";
/// `witness.facilitator` is not this facilitator: another one is the only party allowed to
/// settle.
pub const UPTO_FACILITATOR_MISMATCH: &str = "upto_facilitator_mismatch";
/// The amount to settle is above `permitted.amount`.
pub const UPTO_AMOUNT_EXCEEDS_PERMITTED: &str = "upto_amount_exceeds_permitted";
/// The permit's `spender` is not the `upto` proxy.
pub const INVALID_PERMIT2_SPENDER: &str = "invalid_permit2_spender";
/// `witness.to` is not the requirement's `payTo`.
pub const INVALID_PERMIT2_RECIPIENT_MISMATCH: &str = "invalid_permit2_recipient_mismatch";
/// The `deadline` has passed, or falls within the 6-second block-time buffer.
pub const PERMIT2_DEADLINE_EXPIRED: &str = "permit2_deadline_expired";
/// `witness.validAfter` is still in the future.
pub const PERMIT2_NOT_YET_VALID: &str = "permit2_not_yet_valid";
/// `permitted.token` is not the requirement's asset (the network's USDC).
pub const PERMIT2_TOKEN_MISMATCH: &str = "permit2_token_mismatch";
/// The signature is malformed or does not recover to `from` under the Permit2 domain.
pub const INVALID_PERMIT2_SIGNATURE: &str = "invalid_permit2_signature";
/// The permit's `(from, nonce)` was already consumed in Permit2.
pub const PERMIT2_INVALID_NONCE: &str = "permit2_invalid_nonce";
/// The payer's balance is below the amount to settle.
pub const INSUFFICIENT_FUNDS: &str = "insufficient_funds";

// `exact` through Permit2 and the gas-sponsoring extensions, with the reference facilitators'
// names.

/// `permitted.amount` of an `exact` permit is not the requirement's amount.
pub const PERMIT2_AMOUNT_MISMATCH: &str = "permit2_amount_mismatch";
/// The payer's allowance to Permit2 is below the amount, and no gas-sponsoring extension
/// approves it.
pub const PERMIT2_ALLOWANCE_REQUIRED: &str = "permit2_allowance_required";
/// `extensions.eip2612GasSponsoring.info` is not of the extension's shape.
pub const INVALID_EIP2612_EXTENSION_FORMAT: &str = "invalid_eip2612_extension_format";
/// The EIP-2612 permit's owner is not the payer.
pub const EIP2612_FROM_MISMATCH: &str = "eip2612_from_mismatch";
/// The EIP-2612 permit is for another token than the payment's.
pub const EIP2612_ASSET_MISMATCH: &str = "eip2612_asset_mismatch";
/// The EIP-2612 permit approves another spender than Permit2.
pub const EIP2612_SPENDER_NOT_PERMIT2: &str = "eip2612_spender_not_permit2";
/// The EIP-2612 permit's deadline has passed.
pub const EIP2612_DEADLINE_EXPIRED: &str = "eip2612_deadline_expired";
/// The EIP-2612 permit's signature does not recover to its owner under the token's domain, or
/// its nonce is not the owner's next one.
pub const EIP2612_INVALID_SIGNATURE: &str = "eip2612_invalid_signature";
/// The EIP-2612 permit approves less than the payment's amount.
pub const PERMIT2_2612_AMOUNT_MISMATCH: &str = "permit2_2612_amount_mismatch";
/// `extensions.erc20ApprovalGasSponsoring.info` is not of the extension's shape, or its
/// transaction is not a signed `approve`.
pub const INVALID_ERC20_APPROVAL_EXTENSION_FORMAT: &str = "invalid_erc20_approval_extension_format";
/// The approval transaction's signer is not the payer.
pub const ERC20_APPROVAL_FROM_MISMATCH: &str = "erc20_approval_from_mismatch";
/// The approval transaction calls another token than the payment's.
pub const ERC20_APPROVAL_ASSET_MISMATCH: &str = "erc20_approval_asset_mismatch";
/// The approval transaction approves another spender than Permit2.
pub const ERC20_APPROVAL_SPENDER_NOT_PERMIT2: &str = "erc20_approval_spender_not_permit2";
