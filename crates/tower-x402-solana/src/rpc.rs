//! [`SolanaRpcReconciler`]: tells whether an in-doubt Solana `exact` payment landed by asking a
//! Solana JSON-RPC node.
//!
//! A transaction's id on chain is its first signature, the fee payer's, which the server never
//! sees when the settlement's answer is lost; the payment is found by what it is instead. The
//! reconciler lists the payer's latest signatures (`getSignaturesForAddress`, up to
//! [`search_signatures`](SolanaRpcReconciler::search_signatures)), reads each transaction
//! (`getTransaction`) and compares its message with the payment's, byte for byte. Found, its
//! status (`getSignatureStatuses`) decides: confirmed or finalized without error is
//! [`Settled`](Reconciliation::Settled), with the transaction's signature; failed is
//! [`NotSettled`](Reconciliation::NotSettled) (a processed transaction never runs again).
//! Not found, the blockhash decides (`isBlockhashValid`): expired, the transaction can never
//! land — [`NotSettled`](Reconciliation::NotSettled); still valid, it may land yet —
//! [`Unknown`](Reconciliation::Unknown). A node error, another network's genesis, a payment
//! that is not a Solana transfer: [`Unknown`](Reconciliation::Unknown), the payment stays in
//! doubt.

use std::sync::Arc;

use serde_json::{Value, json};
use tower_x402::BoxFuture;
use tower_x402::settlement::{Reconciler, Reconciliation};
use x402_wire::FacilitatorRequest;

use crate::exact::ExactTransfer;
use crate::{Transaction, is_solana, payload_transaction};

/// Signatures listed by default: `getSignaturesForAddress`'s own maximum.
const DEFAULT_SEARCH_SIGNATURES: u64 = 1_000;

/// The endpoint URL is not an http(s) URL.
#[derive(Debug, thiserror::Error)]
#[error("invalid Solana JSON-RPC URL `{0}`")]
pub struct InvalidRpcUrl(pub String);

/// A [`Reconciler`] that asks a Solana JSON-RPC node about Solana `exact` payments.
///
/// ```
/// use tower_x402_solana::SolanaRpcReconciler;
///
/// let reconciler = SolanaRpcReconciler::new("https://api.mainnet-beta.solana.com")?
///     .search_signatures(200);
/// # let _ = reconciler;
/// # Ok::<_, tower_x402_solana::rpc::InvalidRpcUrl>(())
/// ```
#[derive(Clone, Debug)]
pub struct SolanaRpcReconciler {
    client: reqwest::Client,
    url: reqwest::Url,
    search_signatures: u64,
}

impl SolanaRpcReconciler {
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
            client: reqwest::Client::new(),
            url: parsed,
            search_signatures: DEFAULT_SEARCH_SIGNATURES,
        })
    }

    /// How many of the payer's latest signatures to search (default 1,000; 1 to 1,000).
    #[must_use]
    pub fn search_signatures(mut self, count: u64) -> Self {
        self.search_signatures = count.clamp(1, DEFAULT_SEARCH_SIGNATURES);
        self
    }

    async fn call(&self, method: &str, params: Value) -> Result<Value, String> {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        let answer: Value = self
            .client
            .post(self.url.clone())
            .json(&body)
            .send()
            .await
            .map_err(|e| format!("{method}: {e}"))?
            .error_for_status()
            .map_err(|e| format!("{method}: {e}"))?
            .json()
            .await
            .map_err(|e| format!("{method}: the answer is not JSON: {e}"))?;
        if let Some(error) = answer.get("error") {
            return Err(format!("{method}: {error}"));
        }
        answer
            .get("result")
            .cloned()
            .ok_or_else(|| format!("{method}: no result"))
    }

    async fn find(&self, request: &FacilitatorRequest) -> Result<Reconciliation, String> {
        let network = &request.payment_requirements().network;
        if !is_solana(network) {
            return Err(format!("{network} is not a Solana network"));
        }
        let transaction = payload_transaction(request.payment_payload())
            .map_err(|e| format!("the payment's transaction: {e}"))?;
        let transfer = ExactTransfer::read(&transaction)
            .map_err(|refused| format!("not an exact transfer: {}", refused.message))?;
        let listed = self
            .call(
                "getSignaturesForAddress",
                json!([transfer.payer.to_string(), {"limit": self.search_signatures, "commitment": "confirmed"}]),
            )
            .await?;
        let signatures = listed
            .as_array()
            .ok_or("getSignaturesForAddress: not a list")?
            .iter()
            .filter_map(|entry| entry.get("signature")?.as_str().map(str::to_owned));
        for signature in signatures {
            let found = self
                .call(
                    "getTransaction",
                    json!([signature, {"encoding": "base64", "maxSupportedTransactionVersion": 0, "commitment": "confirmed"}]),
                )
                .await?;
            let landed = found["transaction"][0]
                .as_str()
                .and_then(|text| Transaction::from_base64(text).ok());
            if landed.is_some_and(|landed| landed.message_bytes == transaction.message_bytes) {
                return self.status(&signature).await;
            }
        }
        let blockhash = bs58::encode(transaction.message.recent_blockhash).into_string();
        let valid = self
            .call(
                "isBlockhashValid",
                json!([blockhash, {"commitment": "processed"}]),
            )
            .await?;
        match valid["value"].as_bool() {
            Some(false) => Ok(Reconciliation::NotSettled),
            Some(true) => Ok(Reconciliation::Unknown {
                reason: "not landed yet, and its blockhash is still valid".to_owned(),
            }),
            None => Err("isBlockhashValid: no boolean value".to_owned()),
        }
    }

    async fn status(&self, signature: &str) -> Result<Reconciliation, String> {
        let statuses = self
            .call(
                "getSignatureStatuses",
                json!([[signature], {"searchTransactionHistory": true}]),
            )
            .await?;
        let status = &statuses["value"][0];
        if status.is_null() {
            return Ok(Reconciliation::Unknown {
                reason: format!("{signature} has no status yet"),
            });
        }
        if !status["err"].is_null() {
            return Ok(Reconciliation::NotSettled);
        }
        match status["confirmationStatus"].as_str() {
            Some("confirmed" | "finalized") => Ok(Reconciliation::Settled {
                transaction: signature.to_owned(),
            }),
            other => Ok(Reconciliation::Unknown {
                reason: format!("{signature} is {}", other.unwrap_or("without a status")),
            }),
        }
    }
}

impl SolanaRpcReconciler {
    /// This reconciler for Solana payments and `other` for every other payment (an EVM
    /// reconciler reading Base, say): one reconciler for a payment core that sells on both.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use tower_x402::Reconciler;
    /// use tower_x402_sandbox::SandboxFacilitator;
    /// use tower_x402_solana::SolanaRpcReconciler;
    ///
    /// let evm: Arc<dyn Reconciler> = Arc::new(SandboxFacilitator::new());
    /// let both = SolanaRpcReconciler::new("https://api.mainnet-beta.solana.com")?.beside(evm);
    /// # let _ = both;
    /// # Ok::<_, tower_x402_solana::rpc::InvalidRpcUrl>(())
    /// ```
    pub fn beside(self, other: Arc<dyn Reconciler>) -> BySolana {
        BySolana {
            solana: self,
            other,
        }
    }
}

/// A reconciler that asks [`SolanaRpcReconciler`] about Solana payments and another about the
/// rest ([`SolanaRpcReconciler::beside`]).
#[derive(Clone)]
pub struct BySolana {
    solana: SolanaRpcReconciler,
    other: Arc<dyn Reconciler>,
}

impl std::fmt::Debug for BySolana {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BySolana")
            .field("solana", &self.solana)
            .finish_non_exhaustive()
    }
}

impl Reconciler for BySolana {
    fn reconcile<'a>(&'a self, request: &'a FacilitatorRequest) -> BoxFuture<'a, Reconciliation> {
        if is_solana(&request.payment_requirements().network) {
            self.solana.reconcile(request)
        } else {
            self.other.reconcile(request)
        }
    }
}

impl Reconciler for SolanaRpcReconciler {
    fn reconcile<'a>(&'a self, request: &'a FacilitatorRequest) -> BoxFuture<'a, Reconciliation> {
        Box::pin(async move {
            self.find(request)
                .await
                .unwrap_or_else(|reason| Reconciliation::Unknown { reason })
        })
    }
}
