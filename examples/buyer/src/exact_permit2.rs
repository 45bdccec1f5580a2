//! [`Wallet`] paying `exact` through Permit2 (`extra.assetTransferMethod: "permit2"`): the
//! `PermitWitnessTransferFrom` to the x402 `exact` proxy with the `exact` witness
//! `Witness(address to,uint256 validAfter)`, hashed by hand as the rest of this crate's EIP-712.

use x402_wire::{
    ExactPermit2Authorization, ExactPermit2Payload, ExactWitness, PaymentRequirements,
    TokenPermissions,
};

use crate::Wallet;
use crate::eip712::{self, Address, Word, keccak, uint};
use crate::wallet::{VALID_AFTER_SKEW_SECS, WalletError, random_word};

/// The x402 `exact` Permit2 proxy, the only spender an `exact` permit names.
const EXACT_PROXY: Address = Address([
    0x40, 0x20, 0x85, 0xc2, 0x48, 0xee, 0xa2, 0x7d, 0x92, 0xe8, 0xb3, 0x0b, 0x2c, 0x58, 0xed, 0x07,
    0xf9, 0xe2, 0x00, 0x01,
]);

/// Whether `accept` is `exact` paid through Permit2.
pub(crate) fn is_exact_permit2(accept: &PaymentRequirements) -> bool {
    accept.scheme == "exact" && accept.pays_through_permit2()
}

/// The `exact` Permit2 message: the proxy may move `amount` of `token` to `to`, once
/// (`nonce`), from `valid_after` until `deadline`.
struct ExactPermit {
    token: Address,
    amount: u128,
    nonce: Word,
    deadline: u64,
    to: Address,
    valid_after: u64,
}

impl ExactPermit {
    /// `hashStruct` of the message, its `TokenPermissions` and `Witness` hashed as structs.
    fn struct_hash(&self) -> Word {
        let type_hash = keccak(&[
            b"PermitWitnessTransferFrom(TokenPermissions permitted,address spender,uint256 nonce,uint256 deadline,Witness witness)",
            b"TokenPermissions(address token,uint256 amount)",
            b"Witness(address to,uint256 validAfter)",
        ]);
        let permitted = keccak(&[
            &keccak(&[b"TokenPermissions(address token,uint256 amount)"]),
            &self.token.word(),
            &uint(self.amount),
        ]);
        let witness = keccak(&[
            &keccak(&[b"Witness(address to,uint256 validAfter)"]),
            &self.to.word(),
            &uint(self.valid_after.into()),
        ]);
        keccak(&[
            &type_hash,
            &permitted,
            &EXACT_PROXY.word(),
            &self.nonce,
            &uint(self.deadline.into()),
            &witness,
        ])
    }
}

impl Wallet {
    /// A signed `exact` Permit2 permit of `accept`'s amount at unix time `now`, as the
    /// reference TypeScript client builds it: spender the `exact` proxy, a random uint256
    /// nonce, `deadline = now + maxTimeoutSeconds`, witness `{to: payTo, validAfter: now -
    /// 600}`, signed under the Permit2 domain of the accept's chain.
    pub(crate) fn exact_permit(
        &self,
        accept: &PaymentRequirements,
        now: u64,
    ) -> Result<ExactPermit2Payload, String> {
        let chain_id = accept
            .network
            .evm_chain_id()
            .ok_or_else(|| format!("is on `{}`, not an EVM chain", accept.network))?;
        let to = Address::parse(&accept.pay_to)
            .ok_or_else(|| format!("pays to `{}`, not an EVM address", accept.pay_to))?;
        let token = Address::parse(&accept.asset)
            .ok_or_else(|| format!("asset `{}` is not an EVM address", accept.asset))?;
        let message = ExactPermit {
            token,
            amount: accept.amount.get(),
            nonce: random_word().map_err(|e| e.to_string())?,
            deadline: now.saturating_add(accept.max_timeout_seconds),
            to,
            valid_after: now.saturating_sub(VALID_AFTER_SKEW_SECS),
        };
        let digest =
            eip712::signing_hash(&eip712::permit2_domain(chain_id), &message.struct_hash());
        let signature = self
            .sign_digest(&digest)
            .map_err(|e: WalletError| e.to_string())?;
        Ok(ExactPermit2Payload {
            signature,
            permit2_authorization: ExactPermit2Authorization {
                from: self.address(),
                permitted: TokenPermissions {
                    token: token.to_string(),
                    amount: message.amount.to_string(),
                },
                spender: EXACT_PROXY.to_string(),
                nonce: eip712::decimal(&message.nonce),
                deadline: message.deadline.to_string(),
                witness: ExactWitness {
                    to: to.to_string(),
                    valid_after: message.valid_after.to_string(),
                },
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exact_proxy_is_the_protocols() {
        assert_eq!(
            EXACT_PROXY.to_string(),
            x402_wire::EXACT_PERMIT2_PROXY_ADDRESS
        );
    }
}
