//! Reading a channel on chain: the `x402BatchSettlement` contract's views, through
//! [`ChainReader`]; [`RpcChainReader`] (feature `rpc`) asks an Ethereum JSON-RPC node.

use tower_x402::{BoxError, BoxFuture};
use x402_wire::Network;

/// A channel as the contract's views show it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ChainChannel {
    /// `channels(id).balance`.
    pub balance: u128,
    /// `channels(id).totalClaimed`.
    pub total_claimed: u128,
    /// `pendingWithdrawals(id).amount`.
    pub pending_withdrawal: u128,
    /// `pendingWithdrawals(id).initiatedAt` (unix seconds), 0 when none is pending.
    pub withdraw_requested_at: u64,
    /// `refundNonce(id)`.
    pub refund_nonce: u128,
}

impl ChainChannel {
    /// A reading of `balance` and `total_claimed`, with no withdrawal pending.
    pub fn new(balance: u128, total_claimed: u128) -> Self {
        Self {
            balance,
            total_claimed,
            ..Self::default()
        }
    }
}

/// The chain could not be read.
#[derive(Debug, thiserror::Error)]
#[error("reading the channel contract: {0}")]
pub struct ChainError(#[source] pub BoxError);

/// Reads a channel's state on chain. `RpcChainReader` (feature `rpc`) asks a JSON-RPC node;
/// an application can read through an indexer of its own.
///
/// ```
/// use tower_x402::BoxFuture;
/// use tower_x402_channels::{ChainChannel, ChainError, ChainReader};
/// use x402_wire::Network;
///
/// /// The chain as an indexer the application runs sees it.
/// struct Indexer;
///
/// impl ChainReader for Indexer {
///     fn read<'a>(&'a self, _network: &'a Network, _id: &'a str) -> BoxFuture<'a, Result<ChainChannel, ChainError>> {
///         Box::pin(async { Ok(ChainChannel::new(50_000, 4_000)) })
///     }
/// }
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// let read = Indexer.read(&Network::BASE, "0x…").await?;
/// assert_eq!((read.total_claimed, read.withdraw_requested_at), (4_000, 0));
/// # Ok::<_, ChainError>(()) }).unwrap();
/// ```
pub trait ChainReader: Send + Sync + 'static {
    /// Channel `id` (`0x` and 32 bytes of hex) on `network`.
    fn read<'a>(
        &'a self,
        network: &'a Network,
        id: &'a str,
    ) -> BoxFuture<'a, Result<ChainChannel, ChainError>>;
}

#[cfg(feature = "rpc")]
pub use rpc::RpcChainReader;

#[cfg(feature = "rpc")]
mod rpc {
    use alloy_primitives::{Address, B256, Bytes};
    use alloy_provider::{Provider, RootProvider};
    use alloy_rpc_types_eth::{TransactionInput, TransactionRequest};
    use alloy_sol_types::{SolCall, sol};
    use tokio::sync::OnceCell;
    use tower_x402::BoxFuture;
    use x402_wire::Network;

    use super::{ChainChannel, ChainError, ChainReader};

    sol! {
        function channels(bytes32 channelId) external view returns (uint128 balance, uint128 totalClaimed);
        function pendingWithdrawals(bytes32 channelId) external view returns (uint128 amount, uint40 initiatedAt);
        function refundNonce(bytes32 channelId) external view returns (uint256);
    }

    use crate::typed::BATCH_SETTLEMENT_ADDRESS;

    /// A [`ChainReader`] over an Ethereum JSON-RPC node (`eth_call` of `channels`,
    /// `pendingWithdrawals` and `refundNonce`; public endpoints serve them). One node serves one
    /// chain: the first read checks `eth_chainId` against the network asked for, and a reader
    /// asked about another network refuses.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// use tower_x402_channels::{ChainReader as _, RpcChainReader};
    /// use x402_wire::Network;
    ///
    /// let chain = RpcChainReader::new("https://mainnet.base.org")?;
    /// let id = format!("0x{}", "ab".repeat(32));
    /// let channel = chain.read(&Network::BASE, &id).await?;
    /// println!("claimed so far: {}", channel.total_claimed);
    /// # Ok(()) }
    /// ```
    #[derive(Debug)]
    pub struct RpcChainReader {
        provider: RootProvider,
        contract: Address,
        chain_id: OnceCell<u64>,
    }

    impl RpcChainReader {
        /// A reader asking the node at `url` (http or https).
        ///
        /// # Errors
        ///
        /// When `url` is not an http(s) URL.
        pub fn new(url: &str) -> Result<Self, ChainError> {
            let parsed: reqwest::Url = url
                .parse()
                .map_err(|_| ChainError(format!("`{url}` is not a URL").into()))?;
            if !matches!(parsed.scheme(), "http" | "https") {
                return Err(ChainError(format!("`{url}` is not an http(s) URL").into()));
            }
            Ok(Self {
                provider: RootProvider::new_http(parsed),
                contract: BATCH_SETTLEMENT_ADDRESS,
                chain_id: OnceCell::new(),
            })
        }

        /// The same reader for the contract at `contract` instead of the canonical address.
        pub fn contract(mut self, contract: Address) -> Self {
            self.contract = contract;
            self
        }

        async fn call<C: SolCall>(&self, call: C) -> Result<C::Return, ChainError> {
            let request = TransactionRequest::default()
                .to(self.contract)
                .input(TransactionInput::new(Bytes::from(call.abi_encode())));
            let output = self.provider.call(request).await.map_err(|error| {
                ChainError(format!("eth_call {}: {error}", C::SIGNATURE).into())
            })?;
            C::abi_decode_returns(&output)
                .map_err(|error| ChainError(format!("{}: {error}", C::SIGNATURE).into()))
        }

        async fn check_chain(&self, network: &Network) -> Result<(), ChainError> {
            let expected = network
                .evm_chain_id()
                .ok_or_else(|| ChainError(format!("`{network}` is not an EVM chain").into()))?;
            let actual = self
                .chain_id
                .get_or_try_init(|| async {
                    self.provider
                        .get_chain_id()
                        .await
                        .map_err(|error| ChainError(format!("eth_chainId: {error}").into()))
                })
                .await?;
            if *actual != expected {
                return Err(ChainError(
                    format!("the node serves chain {actual}, not {network}").into(),
                ));
            }
            Ok(())
        }
    }

    impl ChainReader for RpcChainReader {
        fn read<'a>(
            &'a self,
            network: &'a Network,
            id: &'a str,
        ) -> BoxFuture<'a, Result<ChainChannel, ChainError>> {
            Box::pin(async move {
                self.check_chain(network).await?;
                let channel_id: B256 = id
                    .parse()
                    .map_err(|_| ChainError(format!("`{id}` is not a channel id").into()))?;
                let escrow = self
                    .call(channelsCall {
                        channelId: channel_id,
                    })
                    .await?;
                let withdrawal = self
                    .call(pendingWithdrawalsCall {
                        channelId: channel_id,
                    })
                    .await?;
                let nonce = self
                    .call(refundNonceCall {
                        channelId: channel_id,
                    })
                    .await?;
                Ok(ChainChannel {
                    balance: escrow.balance,
                    total_claimed: escrow.totalClaimed,
                    pending_withdrawal: withdrawal.amount,
                    withdraw_requested_at: withdrawal.initiatedAt.to::<u64>(),
                    refund_nonce: nonce.saturating_to::<u128>(),
                })
            })
        }
    }
}
