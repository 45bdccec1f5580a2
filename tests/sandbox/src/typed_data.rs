//! The EIP-712 messages a payer signs, declared with alloy's `sol!`: EIP-3009
//! `TransferWithAuthorization` (`exact`) and Permit2 `PermitWitnessTransferFrom` with the `upto`
//! witness (`upto`). The wallet signs them and the stand-in facilitator checks them; what the
//! chain view answers (`authorizationState`, `nonceBitmap`, the settlement events) is
//! `tower_x402_evm::eip3009`'s and `tower_x402_evm::permit2`'s.

use std::borrow::Cow;

use alloy_primitives::U256;
use alloy_sol_types::Eip712Domain;
use tower_x402_evm::permit2::PERMIT2;

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
}

/// The `exact` scheme's Permit2 message and the EIP-2612 permit that approves Permit2: a
/// module of their own, since the `exact` witness has the `upto` one's name and other fields.
pub(crate) mod exact {
    alloy_sol_types::sol! {
        /// Permit2's `TokenPermissions`: which token, and exactly how much of it.
        #[derive(Debug, PartialEq, Eq)]
        struct TokenPermissions {
            /// The token contract.
            address token;
            /// The amount, in the token's atomic units.
            uint256 amount;
        }

        /// The `exact` witness: who receives, and from when.
        #[derive(Debug, PartialEq, Eq)]
        struct Witness {
            /// The recipient (`payTo`).
            address to;
            /// Unix seconds before which the permit is not valid.
            uint256 validAfter;
        }

        /// The message an `exact` Permit2 payer signs: the `exact` proxy may move
        /// `permitted.amount` of `permitted.token` to `witness.to`, once (`nonce`), until
        /// `deadline`.
        #[derive(Debug, PartialEq, Eq)]
        struct PermitWitnessTransferFrom {
            /// Token and amount.
            TokenPermissions permitted;
            /// Who may use the permit: the `exact` proxy.
            address spender;
            /// Permit2 unordered nonce: bit `nonce & 0xff` of word `nonce >> 8`.
            uint256 nonce;
            /// Unix seconds after which the permit can no longer be used.
            uint256 deadline;
            /// The `exact` terms the proxy enforces.
            Witness witness;
        }

        /// EIP-2612's `Permit`, signed under the token's own EIP-712 domain: `spender` may move
        /// up to `value` of `owner`'s tokens from now on (an allowance), usable once (`nonce`)
        /// until `deadline`.
        #[derive(Debug, PartialEq, Eq)]
        struct Permit {
            /// The token holder.
            address owner;
            /// Who is approved: Permit2.
            address spender;
            /// The allowance.
            uint256 value;
            /// The owner's EIP-2612 nonce on the token.
            uint256 nonce;
            /// Unix seconds after which the permit can no longer be submitted.
            uint256 deadline;
        }
    }
}

/// The Permit2 EIP-712 domain on `chain_id`: `{name: "Permit2", chainId, verifyingContract}`.
pub(crate) fn permit2_domain(chain_id: u64) -> Eip712Domain {
    Eip712Domain::new(
        Some(Cow::Borrowed("Permit2")),
        None,
        Some(U256::from(chain_id)),
        Some(PERMIT2),
        None,
    )
}

#[cfg(test)]
mod tests {
    use alloy_sol_types::SolStruct;

    use super::*;

    #[test]
    fn the_permit_type_string_is_the_upto_schemes() {
        assert_eq!(
            PermitWitnessTransferFrom::eip712_encode_type(),
            "PermitWitnessTransferFrom(TokenPermissions permitted,address spender,uint256 nonce,uint256 deadline,Witness witness)TokenPermissions(address token,uint256 amount)Witness(address to,address facilitator,uint256 validAfter)",
        );
    }

    #[test]
    fn the_exact_permit_and_eip2612_type_strings_are_the_specs() {
        assert_eq!(
            exact::PermitWitnessTransferFrom::eip712_encode_type(),
            "PermitWitnessTransferFrom(TokenPermissions permitted,address spender,uint256 nonce,uint256 deadline,Witness witness)TokenPermissions(address token,uint256 amount)Witness(address to,uint256 validAfter)",
        );
        assert_eq!(
            exact::Permit::eip712_encode_type(),
            "Permit(address owner,address spender,uint256 value,uint256 nonce,uint256 deadline)",
        );
    }

    #[test]
    fn the_permit2_domain_has_a_name_and_no_version() {
        let domain = permit2_domain(8453);
        assert_eq!(domain.name.as_deref(), Some("Permit2"));
        assert!(domain.version.is_none());
    }
}
