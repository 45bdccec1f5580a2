//! [`AccountCode`]: whether an account holds code, the one thing [`EvmExact`](crate::EvmExact)
//! asks a chain before it refuses a signature that does not recover to the payer.
//!
//! A contract wallet (EIP-1271), an account delegated to code (EIP-7702) or one the payment
//! deploys (ERC-6492) signs in its own way: only the chain, through the facilitator, can tell
//! whether its signature is good. An account without code can only sign as its key does.

use alloy_primitives::Address;
use tower_x402::{BoxError, BoxFuture};
use x402_wire::Network;

/// A source of account code: whether `address` on `network` holds code (`eth_getCode` is not
/// empty). Implemented by `EvmRpcReconciler` (feature `rpc`), by
/// `tower-x402-sandbox`'s facilitator over its simulated chain, or by your own.
///
/// ```
/// use alloy_primitives::Address;
/// use tower_x402::{BoxError, BoxFuture};
/// use tower_x402_evm::AccountCode;
/// use x402_wire::Network;
///
/// /// Knows one contract wallet, on every network.
/// struct OneWallet(Address);
///
/// impl AccountCode for OneWallet {
///     fn has_code<'a>(
///         &'a self,
///         _network: &'a Network,
///         address: Address,
///     ) -> BoxFuture<'a, Result<bool, BoxError>> {
///         Box::pin(async move { Ok(address == self.0) })
///     }
/// }
/// # let _ = OneWallet(Address::ZERO);
/// ```
pub trait AccountCode: Send + Sync + 'static {
    /// Whether `address` holds code on `network`. An `Err` (a node that does not answer, a
    /// network it does not serve) leaves the payment to the facilitator.
    fn has_code<'a>(
        &'a self,
        network: &'a Network,
        address: Address,
    ) -> BoxFuture<'a, Result<bool, BoxError>>;
}

/// A shared source, as an application keeps it (`Arc<dyn AccountCode>`).
impl<T: AccountCode + ?Sized> AccountCode for std::sync::Arc<T> {
    fn has_code<'a>(
        &'a self,
        network: &'a Network,
        address: Address,
    ) -> BoxFuture<'a, Result<bool, BoxError>> {
        (**self).has_code(network, address)
    }
}
