//! The token's own views on the sandbox's chain, for a payer's wallet deciding how to pay a
//! Permit2 accept: ERC-20 `allowance(owner, spender)` (what the owner approved Permit2 for) and
//! EIP-2612 `nonces(owner)` (the nonce its next `permit` signs).

use alloy_primitives::{Address, U256};
use alloy_sol_types::SolCall;
use tower_x402_evm::permit2;

use super::Chain;
use crate::eip712::parse_address;

alloy_sol_types::sol! {
    /// ERC-20: how much of `owner`'s tokens `spender` may move.
    function allowance(address owner, address spender) external view returns (uint256);
    /// EIP-2612: `owner`'s next permit nonce.
    function nonces(address owner) external view returns (uint256);
}

impl Chain {
    /// The answer to `input` when it calls `allowance` (Permit2's allowance; zero for another
    /// spender) or `nonces` on the chain's USDC at `to`.
    pub(super) fn token_view(&self, to: Option<Address>, input: &[u8]) -> Option<Vec<u8>> {
        let usdc = crate::verify::DEPLOYMENTS
            .iter()
            .find(|usdc| usdc.network == self.network)
            .and_then(|usdc| parse_address(usdc.asset));
        if to.is_none() || to != usdc {
            return None;
        }
        if let Ok(allowanceCall { owner, spender }) = allowanceCall::abi_decode(input) {
            let allowance = if spender == permit2::PERMIT2 {
                let allowance = self
                    .sandbox
                    .permit2_allowance(&self.network, &owner.to_checksum(None))
                    .unwrap_or_default();
                if allowance == u128::MAX {
                    U256::MAX
                } else {
                    U256::from(allowance)
                }
            } else {
                U256::ZERO
            };
            return Some(allowanceCall::abi_encode_returns(&allowance));
        }
        if let Ok(noncesCall { owner }) = noncesCall::abi_decode(input) {
            let nonce = self
                .sandbox
                .eip2612_nonce(&self.network, &owner.to_checksum(None))
                .unwrap_or_default();
            return Some(noncesCall::abi_encode_returns(&U256::from(nonce)));
        }
        None
    }
}
