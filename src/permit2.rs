//! The Permit2 ABI of the EVM `upto` scheme, declared once with alloy's `sol!`: the
//! `PermitWitnessTransferFrom` message a payer signs with the `upto` witness (EIP-712 typed data
//! under the domain `{name: "Permit2", chainId, verifyingContract: Permit2}`), and Permit2's
//! `nonceBitmap` view, which tells whether a permit's nonce was consumed.
//!
//! `evm_rpc::EvmRpcReconciler` (feature `evm-rpc`) reads the chain with these; a stand-in chain
//! or a wallet (`tower-x402-sandbox` has both) writes them. The token's `Transfer` event is
//! [`eip3009::Transfer`](crate::eip3009::Transfer).
//!
//! ```
//! use alloy_primitives::{Address, U256};
//! use alloy_sol_types::{SolCall, SolStruct};
//! use tower_x402::permit2::{PermitWitnessTransferFrom, nonceBitmapCall};
//!
//! assert_eq!(nonceBitmapCall::SELECTOR, [0x4f, 0xe0, 0x2b, 0x44]);
//! let call = nonceBitmapCall { owner: Address::ZERO, wordPos: U256::from(7) };
//! assert_eq!(call.abi_encode().len(), 4 + 32 + 32);
//! assert_eq!(
//!     PermitWitnessTransferFrom::eip712_encode_type(),
//!     "PermitWitnessTransferFrom(TokenPermissions permitted,address spender,uint256 nonce,uint256 deadline,Witness witness)TokenPermissions(address token,uint256 amount)Witness(address to,address facilitator,uint256 validAfter)",
//! );
//! ```

use std::borrow::Cow;

use alloy_primitives::{Address, U256, address};
use alloy_sol_types::Eip712Domain;

/// The canonical Permit2 contract (the same on every EVM chain), as an [`Address`].
pub const PERMIT2: Address = address!("000000000022D473030F116dDEE9F6B43aC78BA3");

/// The x402 `upto` proxy, the `spender` of every `upto` permit, as an [`Address`].
pub const UPTO_PROXY: Address = address!("4020A4f3b7b90ccA423B9fabCc0CE57C6C240002");

alloy_sol_types::sol! {
    /// Permit2's `TokenPermissions`: which token, and at most how much of it.
    #[derive(Debug, PartialEq, Eq)]
    struct TokenPermissions {
        /// The token contract.
        address token;
        /// The maximum amount, in the token's atomic units.
        uint256 amount;
    }

    /// The `upto` witness: who receives, which facilitator may settle, and from when.
    #[derive(Debug, PartialEq, Eq)]
    struct Witness {
        /// The recipient (`payTo`).
        address to;
        /// The only facilitator allowed to settle.
        address facilitator;
        /// Unix seconds before which the permit is not valid.
        uint256 validAfter;
    }

    /// The message an `upto` payer signs: `spender` may move up to `permitted.amount` of
    /// `permitted.token`, once (`nonce`), until `deadline`, under `witness`.
    #[derive(Debug, PartialEq, Eq)]
    struct PermitWitnessTransferFrom {
        /// Token and maximum amount.
        TokenPermissions permitted;
        /// Who may use the permit: the `upto` proxy.
        address spender;
        /// Permit2 unordered nonce: bit `nonce & 0xff` of word `nonce >> 8`.
        uint256 nonce;
        /// Unix seconds after which the permit can no longer be used.
        uint256 deadline;
        /// The `upto` terms the proxy enforces.
        Witness witness;
    }

    /// Permit2's used-nonce bitmap of `owner`: word `wordPos` holds nonces
    /// `wordPos << 8 ..= wordPos << 8 | 0xff`.
    function nonceBitmap(address owner, uint256 wordPos) external view returns (uint256);
}

/// The Permit2 EIP-712 domain on `chain_id`: `{name: "Permit2", chainId, verifyingContract}`.
///
/// ```
/// let domain = tower_x402::permit2::domain(8453);
/// assert_eq!(domain.name.as_deref(), Some("Permit2"));
/// assert!(domain.version.is_none());
/// ```
pub fn domain(chain_id: u64) -> Eip712Domain {
    Eip712Domain::new(
        Some(Cow::Borrowed("Permit2")),
        None,
        Some(U256::from(chain_id)),
        Some(PERMIT2),
        None,
    )
}

/// Where Permit2 records `nonce`: the bitmap word and the bit in it.
///
/// ```
/// use alloy_primitives::U256;
///
/// let (word, bit) = tower_x402::permit2::nonce_position(U256::from(0x1_05));
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
