//! The EIP-3009 token ABI that tells a settlement on chain, as USDC implements it, declared once
//! with alloy's `sol!`: the `authorizationState` view and the `AuthorizationUsed` and `Transfer`
//! events a settlement emits.
//!
//! `EvmRpcReconciler` (feature `rpc`) reads the chain with these; a stand-in chain
//! (`tower-x402-sandbox` has one) writes them. The `TransferWithAuthorization` message a payer
//! signs, and its digest, are in [`typed_data`](crate::typed_data). The traits that encode and decode them (`SolCall`, `SolEvent`) are
//! `alloy-sol-types`'.
//!
//! ```
//! use alloy_primitives::{Address, B256};
//! use alloy_sol_types::{SolCall, SolEvent};
//! use tower_x402_evm::eip3009::{AuthorizationUsed, authorizationStateCall};
//!
//! let call = authorizationStateCall { authorizer: Address::ZERO, nonce: B256::ZERO };
//! assert_eq!(authorizationStateCall::SELECTOR, [0xe9, 0x4a, 0x01, 0x02]);
//! assert_eq!(call.abi_encode().len(), 4 + 32 + 32);
//! assert_eq!(AuthorizationUsed::SIGNATURE, "AuthorizationUsed(address,bytes32)");
//! ```

/// What `sol!` generates. Only the types named below are public; the `authorizationStateReturn`
/// struct it also generates is not, since `authorizationStateCall` decodes its answer to a `bool`.
mod abi {
    alloy_sol_types::sol! {
        /// Whether `authorizer` has used (or cancelled) `nonce`.
        function authorizationState(address authorizer, bytes32 nonce) external view returns (bool);

        /// Emitted when an authorization is used.
        event AuthorizationUsed(address indexed authorizer, bytes32 indexed nonce);

        /// ERC-20: `value` moved from `from` to `to`.
        event Transfer(address indexed from, address indexed to, uint256 value);
    }
}

pub use abi::{AuthorizationUsed, Transfer, authorizationStateCall};
