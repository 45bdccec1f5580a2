//! The simulated chain's account code: which addresses are contracts, for a server's
//! [`AccountCode`] check ([`EvmExact`](tower_x402_evm::EvmExact)) and `eth_getCode`.

use alloy_primitives::Address;
use tower_x402::{BoxError, BoxFuture};
use tower_x402_evm::AccountCode;
use tower_x402_evm::permit2::{EXACT_PROXY, PERMIT2, UPTO_PROXY};
use x402_wire::Network;

use crate::SandboxFacilitator;
use crate::eip712::parse_address;
use crate::verify::DEPLOYMENTS;

impl SandboxFacilitator {
    /// Whether `address` holds code on the simulated chain: a contract wallet
    /// ([`deploy_contract_wallet`](Self::deploy_contract_wallet)), Permit2, the x402 proxies,
    /// the `x402BatchSettlement` contract or a USDC deployment. Every other address is a key's.
    pub fn is_contract(&self, address: Address) -> bool {
        self.inner
            .contract_wallets
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .contains_key(&address)
            || [PERMIT2, EXACT_PROXY, UPTO_PROXY].contains(&address)
            || crate::batch::is_contract(Some(address))
            || DEPLOYMENTS
                .iter()
                .any(|usdc| parse_address(usdc.asset) == Some(address))
    }
}

/// The simulated chain as a source of account code, on every EVM network it settles.
///
/// ```
/// use tower_x402_evm::EvmExact;
/// use tower_x402_sandbox::SandboxFacilitator;
///
/// let sandbox = SandboxFacilitator::new();
/// let scheme = EvmExact::new().account_code(sandbox.clone());
/// # let _ = scheme;
/// ```
impl AccountCode for SandboxFacilitator {
    fn has_code<'a>(
        &'a self,
        network: &'a Network,
        address: Address,
    ) -> BoxFuture<'a, Result<bool, BoxError>> {
        Box::pin(async move {
            if network.evm_chain_id().is_none() {
                return Err(format!("network `{network}` is not an EVM chain").into());
            }
            Ok(self.is_contract(address))
        })
    }
}
