//! [`DepositReconciler`]: tells the payment core whether a `batch-settlement` deposit whose
//! `/settle` answer was lost moved, by asking the token on chain whether the deposit's ERC-3009
//! authorization was spent.

use alloy_primitives::{Address, B256, Bytes, U256, keccak256};
use alloy_provider::{Provider as _, RootProvider};
use alloy_rpc_types_eth::{TransactionInput, TransactionRequest};
use alloy_sol_types::SolCall as _;
use tower_x402::BoxFuture;
use tower_x402::proto::FacilitatorRequest;
use tower_x402::settlement::{Reconciler, Reconciliation};

use crate::chain::ChainError;
use crate::scheme::deposit_facts;

alloy_sol_types::sol! {
    /// ERC-3009: whether `authorizer`'s `nonce` was used.
    function authorizationState(address authorizer, bytes32 nonce) external view returns (bool);
}

/// A [`Reconciler`] for `batch-settlement` deposits (feature `rpc`): a deposit whose `/settle`
/// answer was lost settled when the token's `authorizationState(payer, nonce)` says its ERC-3009
/// authorization was spent. The nonce is `keccak256(channelId ‖ salt)`, so only a deposit into
/// that channel spends it, and only the channel contract's collector can (the authorization
/// names it as `to`). Register it on the core with
/// [`Payments::reconciler`](tower_x402::payment::Payments::reconciler): the buyer's retry of the
/// same deposit is then served (the request's voucher committed once) instead of answered 503
/// until the buyer deposits again.
///
/// Answers [`Reconciliation::Settled`] with an empty transaction (the token names no
/// transaction; the spent authorization is the proof), [`Reconciliation::NotSettled`] while the
/// authorization is unspent (the core keeps such a payment in doubt), and
/// [`Reconciliation::Unknown`] for anything else: a Permit2 deposit, another scheme, a node
/// that does not answer.
///
/// ```no_run
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use tower_x402::payment::Payments;
/// use tower_x402::HttpFacilitator;
/// use tower_x402_channels::DepositReconciler;
///
/// let facilitator = HttpFacilitator::new("https://facilitator.example")?;
/// let payments = Payments::new(facilitator)
///     .reconciler(DepositReconciler::new("https://mainnet.base.org")?);
/// # let _ = payments;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct DepositReconciler {
    provider: RootProvider,
}

impl DepositReconciler {
    /// A reconciler asking the node at `url` (http or https).
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
        })
    }

    async fn find(&self, request: &FacilitatorRequest) -> Result<Reconciliation, String> {
        let facts = deposit_facts(request.payment_payload())
            .ok_or("not a batch-settlement deposit with an ERC-3009 authorization")?;
        let token: Address = facts
            .token
            .parse()
            .map_err(|_| format!("token `{}` is not an address", facts.token))?;
        let payer: Address = facts
            .payer
            .parse()
            .map_err(|_| format!("payer `{}` is not an address", facts.payer))?;
        let channel: B256 = facts
            .channel_id
            .parse()
            .map_err(|_| format!("channel id `{}` is not 32 bytes", facts.channel_id))?;
        let salt = parse_u256(&facts.salt).ok_or_else(|| format!("salt `{}`", facts.salt))?;
        let mut preimage = [0u8; 64];
        preimage[..32].copy_from_slice(channel.as_slice());
        preimage[32..].copy_from_slice(&salt.to_be_bytes::<32>());
        let nonce = keccak256(preimage);
        let call = authorizationStateCall {
            authorizer: payer,
            nonce,
        };
        let input = TransactionRequest::default()
            .to(token)
            .input(TransactionInput::new(Bytes::from(call.abi_encode())));
        let output = self
            .provider
            .call(input)
            .await
            .map_err(|error| format!("eth_call authorizationState: {error}"))?;
        let spent = authorizationStateCall::abi_decode_returns(&output)
            .map_err(|error| format!("authorizationState answer: {error}"))?;
        Ok(if spent {
            Reconciliation::Settled {
                transaction: String::new(),
            }
        } else {
            Reconciliation::NotSettled
        })
    }
}

/// A `uint256` written in decimal or `0x`-hex.
fn parse_u256(text: &str) -> Option<U256> {
    match text.strip_prefix("0x") {
        Some(hex) => U256::from_str_radix(hex, 16).ok(),
        None => U256::from_str_radix(text, 10).ok(),
    }
}

impl Reconciler for DepositReconciler {
    fn reconcile<'a>(&'a self, request: &'a FacilitatorRequest) -> BoxFuture<'a, Reconciliation> {
        Box::pin(async move {
            self.find(request)
                .await
                .unwrap_or_else(|reason| Reconciliation::Unknown { reason })
        })
    }
}
