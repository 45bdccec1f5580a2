//! Permit2 as the EVM `exact` (Permit2 method) and `upto` schemes use it on chain, declared
//! once with alloy's `sol!`: its address, the `exact` and `upto` proxies', and the `nonceBitmap`
//! view, which tells whether a permit's
//! nonce was consumed.
//!
//! `EvmRpcReconciler` (feature `rpc`) reads the chain with these; a stand-in chain
//! (`tower-x402-sandbox` has one) writes them. The token's `Transfer` event is
//! [`eip3009::Transfer`](crate::eip3009::Transfer). The `PermitWitnessTransferFrom` message a
//! payer signs, and its digest, are in [`typed_data`](crate::typed_data).
//!
//! ```
//! use alloy_primitives::{Address, U256};
//! use alloy_sol_types::SolCall;
//! use tower_x402_evm::permit2::nonceBitmapCall;
//!
//! assert_eq!(nonceBitmapCall::SELECTOR, [0x4f, 0xe0, 0x2b, 0x44]);
//! let call = nonceBitmapCall { owner: Address::ZERO, wordPos: U256::from(7) };
//! assert_eq!(call.abi_encode().len(), 4 + 32 + 32);
//! ```

use alloy_primitives::{Address, U256, address};

/// The canonical Permit2 contract (the same on every EVM chain), as an [`Address`].
pub const PERMIT2: Address = address!("000000000022D473030F116dDEE9F6B43aC78BA3");

/// The x402 `exact` Permit2 proxy (`x402ExactPermit2Proxy`), the `spender` of every `exact`
/// permit, as an [`Address`].
pub const EXACT_PROXY: Address = address!("402085c248EeA27D92E8b30b2C58ed07f9E20001");

/// The x402 `upto` proxy, the `spender` of every `upto` permit, as an [`Address`].
pub const UPTO_PROXY: Address = address!("4020A4f3b7b90ccA423B9fabCc0CE57C6C240002");

/// What `sol!` generates. Only `nonceBitmapCall` is public; the `nonceBitmapReturn` struct it
/// also generates is not, since `nonceBitmapCall` decodes its answer to a `U256`.
mod abi {
    alloy_sol_types::sol! {
        /// Permit2's used-nonce bitmap of `owner`: word `wordPos` holds nonces
        /// `wordPos << 8 ..= wordPos << 8 | 0xff`.
        function nonceBitmap(address owner, uint256 wordPos) external view returns (uint256);
    }
}

pub use abi::nonceBitmapCall;

/// Where Permit2 records `nonce`: the bitmap word and the bit in it.
///
/// ```
/// use alloy_primitives::U256;
///
/// let (word, bit) = tower_x402_evm::permit2::nonce_position(U256::from(0x1_05));
/// assert_eq!((word, bit), (U256::from(1), 5));
/// ```
pub fn nonce_position(nonce: U256) -> (U256, u8) {
    let bit = nonce.byte(0);
    (nonce >> 8, bit)
}

/// Whether `nonce` is marked used in its bitmap `word` (as [`nonceBitmap`](nonceBitmapCall)
/// answers it).
pub fn nonce_used(word: U256, nonce: U256) -> bool {
    word.bit(usize::from(nonce_position(nonce).1))
}
