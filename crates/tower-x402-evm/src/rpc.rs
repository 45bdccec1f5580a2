//! [`EvmRpcReconciler`]: tells whether an in-doubt EIP-3009 or Permit2 (`upto`) payment settled by asking any
//! standard Ethereum JSON-RPC node.
//!
//! Only `eth_chainId`, `eth_blockNumber`, `eth_getLogs`, `eth_getTransactionReceipt` and
//! `eth_call` are used, so public endpoints work. For an `exact` payment it reads
//! `authorizationState(authorizer, nonce)` on the token; an unused authorization is
//! [`NotSettled`](Reconciliation::NotSettled). A used one is looked for in the token's
//! `AuthorizationUsed(authorizer, nonce)` logs over the last
//! [`search_blocks`](EvmRpcReconciler::search_blocks) blocks, newest first, in chunks of
//! [`chunk_blocks`](EvmRpcReconciler::chunk_blocks) (providers cap `eth_getLogs` ranges); the
//! transaction's receipt must have succeeded and carry the payment's own
//! `Transfer(from, payTo, amount)`. Anything else — a chain id other than the payment's, a
//! used authorization without that transfer (cancelled, or paid elsewhere), a node error — is
//! [`Unknown`](Reconciliation::Unknown): the payment stays in doubt.
//!
//! For a Permit2 payment (`upto`, or `exact` with `extra.assetTransferMethod: "permit2"`) it reads Permit2's `nonceBitmap(owner, nonce >> 8)`
//! (the `upto` proxy's `Settled()` event has no indexed field to search by). An unconsumed nonce
//! is [`NotSettled`](Reconciliation::NotSettled) — the payment core releases it once the permit's
//! `deadline` has passed and keeps it in doubt before. A consumed one is looked for among the
//! token's `Transfer(from = payer, to = payTo)` logs over the same blocks: the newest with the
//! settled amount, whose receipt succeeded, is [`Settled`](Reconciliation::Settled); a consumed
//! nonce without such a transfer (the permit cancelled, used for another amount, or settled
//! before the searched blocks) is [`Unknown`](Reconciliation::Unknown), as a used EIP-3009
//! authorization without its transfer is: the permit can never be used again, but only the chain
//! beyond the searched range could say whether this payment was paid.

use std::sync::{Arc, OnceLock};

use alloy_primitives::{Address, B256, Bytes, U256};
use alloy_provider::{Provider, RootProvider};
use alloy_rpc_types_eth::{Filter, Log, TransactionInput, TransactionRequest};
use alloy_sol_types::{SolCall, SolEvent};
use tower_x402::settlement::{Reconciler, Reconciliation};
use tower_x402::{BoxError, BoxFuture};
use x402_wire::{FacilitatorRequest, Network};

use crate::code::AccountCode;

use crate::eip3009::{AuthorizationUsed, Transfer, authorizationStateCall};
use crate::permit2::{self, nonceBitmapCall};

/// Blocks searched by default: about 5.5 hours of Base blocks.
const DEFAULT_SEARCH_BLOCKS: u64 = 10_000;
/// Blocks per `eth_getLogs` by default, under the common provider caps.
const DEFAULT_CHUNK_BLOCKS: u64 = 1_000;

/// The endpoint URL is not an http(s) URL.
#[derive(Debug, thiserror::Error)]
#[error("invalid JSON-RPC URL `{0}`")]
pub struct InvalidRpcUrl(pub String);

/// A [`Reconciler`] that asks an Ethereum JSON-RPC node about EIP-3009 and Permit2 (`upto`) payments.
///
/// ```
/// use tower_x402_evm::EvmRpcReconciler;
///
/// let reconciler = EvmRpcReconciler::new("https://mainnet.base.org")?
///     .search_blocks(50_000)
///     .chunk_blocks(2_000);
/// # let _ = reconciler;
/// # Ok::<_, tower_x402_evm::InvalidRpcUrl>(())
/// ```
#[derive(Clone, Debug)]
pub struct EvmRpcReconciler {
    provider: RootProvider,
    /// The node's chain, asked once (`eth_chainId`) and kept: a URL's node stays on its chain.
    chain: Arc<OnceLock<u64>>,
    search_blocks: u64,
    chunk_blocks: u64,
}

impl EvmRpcReconciler {
    /// A reconciler asking the node at `url` (http or https).
    ///
    /// # Errors
    ///
    /// When `url` is not an http(s) URL.
    pub fn new(url: &str) -> Result<Self, InvalidRpcUrl> {
        let parsed: reqwest::Url = url.parse().map_err(|_| InvalidRpcUrl(url.to_owned()))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(InvalidRpcUrl(url.to_owned()));
        }
        Ok(Self {
            provider: RootProvider::new_http(parsed),
            chain: Arc::default(),
            search_blocks: DEFAULT_SEARCH_BLOCKS,
            chunk_blocks: DEFAULT_CHUNK_BLOCKS,
        })
    }

    /// How many of the latest blocks to search for the payment's log (default 10,000; at least 1).
    #[must_use]
    pub fn search_blocks(mut self, blocks: u64) -> Self {
        self.search_blocks = blocks.max(1);
        self
    }

    /// How many blocks one `eth_getLogs` covers (default 1,000; at least 1).
    #[must_use]
    pub fn chunk_blocks(mut self, blocks: u64) -> Self {
        self.chunk_blocks = blocks.max(1);
        self
    }

    async fn find(&self, request: &FacilitatorRequest) -> Result<Reconciliation, String> {
        let payload = request.payment_payload();
        if let Ok(upto) = payload.upto_evm() {
            let permit = &upto.permit2_authorization;
            let permit = Permit::of(request, &permit.from, &permit.nonce)?;
            return self.find_permit(&permit).await;
        }
        if let Ok(exact) = payload.exact_permit2() {
            let permit = &exact.permit2_authorization;
            let permit = Permit::of(request, &permit.from, &permit.nonce)?;
            return self.find_permit(&permit).await;
        }
        let payment = Payment::of(request)?;
        self.check_chain(payment.chain_id).await?;
        let call = authorizationStateCall {
            authorizer: payment.from,
            nonce: payment.nonce,
        };
        let transaction = TransactionRequest::default()
            .to(payment.asset)
            .input(TransactionInput::new(Bytes::from(call.abi_encode())));
        let answer = self
            .provider
            .call(transaction)
            .await
            .map_err(|e| format!("eth_call authorizationState: {e}"))?;
        let used = authorizationStateCall::abi_decode_returns(&answer)
            .map_err(|e| format!("authorizationState answer: {e}"))?;
        if !used {
            return Ok(Reconciliation::NotSettled);
        }
        let filter = Filter::new()
            .address(payment.asset)
            .event_signature(AuthorizationUsed::SIGNATURE_HASH)
            .topic1(payment.from.into_word())
            .topic2(payment.nonce);
        match self.newest_log(filter, |_| true).await? {
            Some(hash) => self.confirm(&payment, hash).await,
            None => Err(format!(
                "the authorization is used, but no AuthorizationUsed log in the last {} blocks (cancelled, or older)",
                self.search_blocks
            )),
        }
    }

    async fn check_chain(&self, expected: u64) -> Result<(), String> {
        let chain = match self.chain.get() {
            Some(&chain) => chain,
            None => {
                let chain = self
                    .provider
                    .get_chain_id()
                    .await
                    .map_err(|e| format!("eth_chainId: {e}"))?;
                *self.chain.get_or_init(|| chain)
            }
        };
        if chain != expected {
            return Err(format!(
                "the node serves chain {chain}, the payment is on chain {expected}"
            ));
        }
        Ok(())
    }

    /// The transaction of the newest log matching `filter` and `wanted` over the searched
    /// blocks, newest chunk first.
    async fn newest_log(
        &self,
        filter: Filter,
        wanted: impl Fn(&Log) -> bool,
    ) -> Result<Option<B256>, String> {
        let latest = self
            .provider
            .get_block_number()
            .await
            .map_err(|e| format!("eth_blockNumber: {e}"))?;
        let lowest = latest.saturating_sub(self.search_blocks - 1);
        let mut high = latest;
        loop {
            let low = high.saturating_sub(self.chunk_blocks - 1).max(lowest);
            let chunk = filter.clone().from_block(low).to_block(high);
            let logs = self
                .provider
                .get_logs(&chunk)
                .await
                .map_err(|e| format!("eth_getLogs {low}..={high}: {e}"))?;
            let newest = logs.iter().rev().filter(|log| wanted(log));
            if let Some(hash) = newest.filter_map(|log| log.transaction_hash).next() {
                return Ok(Some(hash));
            }
            if low == lowest {
                return Ok(None);
            }
            high = low - 1;
        }
    }

    /// An `upto` payment: Permit2's `nonceBitmap` says whether the permit's nonce was consumed;
    /// if so, the token's `Transfer(from, payTo)` log gives the transaction, whose amount must be
    /// the one settled.
    async fn find_permit(&self, permit: &Permit) -> Result<Reconciliation, String> {
        self.check_chain(permit.chain_id).await?;
        let (word_pos, _) = permit2::nonce_position(permit.nonce);
        let call = nonceBitmapCall {
            owner: permit.from,
            wordPos: word_pos,
        };
        let transaction = TransactionRequest::default()
            .to(permit2::PERMIT2)
            .input(TransactionInput::new(Bytes::from(call.abi_encode())));
        let answer = self
            .provider
            .call(transaction)
            .await
            .map_err(|e| format!("eth_call nonceBitmap: {e}"))?;
        let word = nonceBitmapCall::abi_decode_returns(&answer)
            .map_err(|e| format!("nonceBitmap answer: {e}"))?;
        if !permit2::nonce_used(word, permit.nonce) {
            return Ok(Reconciliation::NotSettled);
        }
        let filter = Filter::new()
            .address(permit.payment.asset)
            .event_signature(Transfer::SIGNATURE_HASH)
            .topic1(permit.payment.from.into_word())
            .topic2(permit.payment.pay_to.into_word());
        // Transfers from the payer to payTo, newest first, until one carries this amount.
        let amount = permit.payment.amount;
        let carries_amount = |log: &Log| {
            Transfer::decode_log_data(log.data()).is_ok_and(|transfer| transfer.value == amount)
        };
        match self.newest_log(filter, carries_amount).await? {
            Some(hash) => self.confirm(&permit.payment, hash).await,
            // Consumed without this payment's transfer in the searched blocks: cancelled
            // (`invalidateUnorderedNonces`), used for another amount, or settled before the
            // searched range. Only the first two mean "not paid", so it stays in doubt.
            None => Err(format!(
                "the permit's nonce is consumed, but no Transfer of {} to payTo in the last {} blocks (cancelled, another amount, or older)",
                permit.payment.amount, self.search_blocks
            )),
        }
    }

    /// Settled when `hash` succeeded and moved the payment's amount from the payer to `payTo`.
    async fn confirm(&self, payment: &Payment, hash: B256) -> Result<Reconciliation, String> {
        let receipt = self
            .provider
            .get_transaction_receipt(hash)
            .await
            .map_err(|e| format!("eth_getTransactionReceipt: {e}"))?
            .ok_or_else(|| format!("no receipt for {hash}"))?;
        if !receipt.status() {
            return Err(format!("transaction {hash} reverted"));
        }
        let transferred = receipt.logs().iter().any(|log| {
            log.address() == payment.asset
                && Transfer::decode_log_data(log.data()).is_ok_and(|transfer| {
                    transfer.from == payment.from
                        && transfer.to == payment.pay_to
                        && transfer.value == payment.amount
                })
        });
        if transferred {
            Ok(Reconciliation::Settled {
                transaction: hash.to_string(),
            })
        } else {
            Err(format!(
                "transaction {hash} used the authorization without this payment's transfer"
            ))
        }
    }
}

/// Whether a payer holds code, for [`EvmExact`](crate::EvmExact): `eth_getCode` at the latest
/// block, once the node's chain is the network's (`eth_chainId`, asked once and kept). A node on
/// another chain is an `Err`, and the payment is left to the facilitator.
impl AccountCode for EvmRpcReconciler {
    fn has_code<'a>(
        &'a self,
        network: &'a Network,
        address: Address,
    ) -> BoxFuture<'a, Result<bool, BoxError>> {
        Box::pin(async move {
            self.check_chain(evm_chain_id(network)?).await?;
            let code = self
                .provider
                .get_code_at(address)
                .await
                .map_err(|e| format!("eth_getCode: {e}"))?;
            Ok(!code.is_empty())
        })
    }
}

impl Reconciler for EvmRpcReconciler {
    fn reconcile<'a>(&'a self, request: &'a FacilitatorRequest) -> BoxFuture<'a, Reconciliation> {
        Box::pin(async move {
            self.find(request)
                .await
                .unwrap_or_else(|reason| Reconciliation::Unknown { reason })
        })
    }
}

/// The facts of a Permit2 payment (`exact` or `upto`) the chain is asked about.
struct Permit {
    chain_id: u64,
    payment: Payment,
    from: Address,
    nonce: U256,
}

impl Permit {
    fn of(request: &FacilitatorRequest, from: &str, nonce: &str) -> Result<Self, String> {
        let requirement = request.payment_requirements();
        let chain_id = evm_chain_id(&requirement.network)?;
        let from = address("payer", from)?;
        Ok(Self {
            chain_id,
            payment: Payment {
                chain_id,
                asset: address("asset", &requirement.asset)?,
                from,
                pay_to: address("payTo", &requirement.pay_to)?,
                amount: U256::from(requirement.amount.get()),
                nonce: B256::ZERO,
            },
            from,
            nonce: nonce
                .parse()
                .map_err(|_| format!("the Permit2 nonce `{nonce}` is not a uint256"))?,
        })
    }
}

/// The facts of an `exact` EIP-3009 payment the chain is asked about.
struct Payment {
    chain_id: u64,
    asset: Address,
    from: Address,
    pay_to: Address,
    amount: U256,
    nonce: B256,
}

impl Payment {
    fn of(request: &FacilitatorRequest) -> Result<Self, String> {
        let requirement = request.payment_requirements();
        let evm = request
            .payment_payload()
            .exact_evm()
            .map_err(|_| "not an exact EIP-3009 payment".to_owned())?;
        Ok(Self {
            chain_id: evm_chain_id(&requirement.network)?,
            asset: address("asset", &requirement.asset)?,
            from: address("payer", &evm.authorization.from)?,
            pay_to: address("payTo", &requirement.pay_to)?,
            amount: U256::from(requirement.amount.get()),
            nonce: evm
                .authorization
                .nonce
                .parse()
                .map_err(|_| "the nonce is not 32 bytes of hex".to_owned())?,
        })
    }
}

/// The chain id of an `eip155:<id>` network, or why there is none.
fn evm_chain_id(network: &Network) -> Result<u64, String> {
    network
        .evm_chain_id()
        .ok_or_else(|| format!("{network} is not an EVM network"))
}

/// `text`, the payment's `what`, as an address, or why it is not one.
fn address(what: &str, text: &str) -> Result<Address, String> {
    text.parse()
        .map_err(|_| format!("{what} `{text}` is not an address"))
}
