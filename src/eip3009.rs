//! The EIP-3009 token ABI, as USDC implements it, declared once with alloy's `sol!`: the
//! `TransferWithAuthorization` message a payer signs (EIP-712 typed data), the
//! `authorizationState` view, and the `AuthorizationUsed` and `Transfer` events a settlement
//! emits.
//!
//! `evm_rpc::EvmRpcReconciler` (feature `evm-rpc`) reads the chain with these; a stand-in chain
//! or a wallet (`tower-x402-sandbox` has both) writes them. The traits that encode and decode them
//! (`SolStruct`, `SolCall`, `SolEvent`) are `alloy-sol-types`'.
//!
//! ```
//! use alloy_primitives::{Address, B256};
//! use alloy_sol_types::{SolCall, SolEvent};
//! use tower_x402::eip3009::{AuthorizationUsed, authorizationStateCall};
//!
//! let call = authorizationStateCall { authorizer: Address::ZERO, nonce: B256::ZERO };
//! assert_eq!(authorizationStateCall::SELECTOR, [0xe9, 0x4a, 0x01, 0x02]);
//! assert_eq!(call.abi_encode().len(), 4 + 32 + 32);
//! assert_eq!(AuthorizationUsed::SIGNATURE, "AuthorizationUsed(address,bytes32)");
//! ```

alloy_sol_types::sol! {
    /// The EIP-3009 message a payer signs: move `value` from `from` to `to`, usable from
    /// `validAfter` until before `validBefore`, once (`nonce`).
    #[derive(Debug, PartialEq, Eq)]
    struct TransferWithAuthorization {
        /// The payer.
        address from;
        /// The recipient.
        address to;
        /// Amount in the token's atomic units.
        uint256 value;
        /// Unix seconds after which the authorization may be used.
        uint256 validAfter;
        /// Unix seconds before which the authorization must be used.
        uint256 validBefore;
        /// 32 random bytes; each `(from, nonce)` can be used once per token.
        bytes32 nonce;
    }

    /// Whether `authorizer` has used (or cancelled) `nonce`.
    function authorizationState(address authorizer, bytes32 nonce) external view returns (bool);

    /// Emitted when an authorization is used.
    event AuthorizationUsed(address indexed authorizer, bytes32 indexed nonce);

    /// ERC-20: `value` moved from `from` to `to`.
    event Transfer(address indexed from, address indexed to, uint256 value);
}
