//! What identifies a payment, and what the layer remembers once it settled.

use std::fmt;
use std::sync::Arc;

use serde::Deserialize as _;

use crate::proto::{PaymentPayload, PaymentRequirements, SettleResponse};

/// Identifies one payment, whatever request carries it.
///
/// In order of preference: the `payment-identifier` extension id (`id:<id>`); for EIP-3009
/// payments the authorization that the chain itself deduplicates on
/// (`eip3009:<network>:<asset>:<from>:<nonce>`, lowercased); for Permit2 (`upto`) payments the
/// owner's nonce (`permit2:<network>:<from>:<nonce>`); otherwise the scheme, network and the
/// exact payload JSON.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct PaymentKey(Arc<str>);

impl PaymentKey {
    /// The key of `payload`.
    pub fn of(payload: &PaymentPayload) -> Self {
        Self::with_fingerprint(payload, &Fingerprint::of(payload))
    }

    /// The key of `payload`, whose fingerprint is already known.
    pub(crate) fn with_fingerprint(payload: &PaymentPayload, fingerprint: &Fingerprint) -> Self {
        match payload.payment_identifier() {
            Some(id) => Self(format!("id:{id}").into()),
            None => Self(fingerprint.as_str().into()),
        }
    }

    /// A key from its stored text (for [`SettlementStore`](super::SettlementStore) implementations).
    pub fn from_stored(text: impl Into<Arc<str>>) -> Self {
        Self(text.into())
    }

    /// The key as text, suitable for a unique database column.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for PaymentKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PaymentKey({})", self.0)
    }
}

impl fmt::Display for PaymentKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What identifies the signed payment itself, independent of any client-chosen id: used as the
/// key when there is no id, and stored to detect one id reused for a different payment.
/// Computed once per request (it decodes the payload).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Fingerprint(String);

impl Fingerprint {
    /// The fingerprint of `payload`.
    pub(crate) fn of(payload: &PaymentPayload) -> Self {
        let accepted = &payload.accepted;
        // Read in place: the same shape `exact_evm` accepts, without copying its strings.
        if let Ok(evm) = ExactEvmView::deserialize(&payload.payload) {
            let authorization = evm.authorization;
            let parts = [
                accepted.asset.as_str(),
                authorization.from,
                authorization.nonce,
            ];
            let network = accepted.network.as_str();
            let len =
                "eip3009:".len() + network.len() + parts.iter().map(|p| p.len() + 1).sum::<usize>();
            let mut text = String::with_capacity(len);
            text.push_str("eip3009:");
            text.push_str(network);
            for part in parts {
                text.push(':');
                let start = text.len();
                text.push_str(part);
                text[start..].make_ascii_lowercase();
            }
            return Self(text);
        }
        if let Ok(upto) = payload.upto_evm() {
            // Permit2 nonces belong to the owner, whatever the token: the chain spends each once.
            let permit = upto.permit2_authorization;
            return Self(format!(
                "permit2:{}:{}:{}",
                accepted.network,
                permit.from.to_ascii_lowercase(),
                permit.nonce.to_ascii_lowercase(),
            ));
        }
        Self(format!(
            "raw:{}:{}:{}",
            accepted.scheme, accepted.network, payload.payload
        ))
    }

    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }

    pub(crate) fn into_string(self) -> String {
        self.0
    }
}

/// An EIP-3009 `exact` payload borrowed from its JSON: the shape of
/// [`ExactEvmPayload`](crate::proto::ExactEvmPayload), every string left where it is.
#[derive(serde::Deserialize)]
#[allow(dead_code)] // Every field is read, to accept exactly what `exact_evm` accepts.
struct ExactEvmView<'a> {
    signature: &'a str,
    #[serde(borrow)]
    authorization: AuthorizationView<'a>,
}

/// [`Eip3009Authorization`](crate::proto::Eip3009Authorization), borrowed.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
#[allow(dead_code)]
struct AuthorizationView<'a> {
    from: &'a str,
    to: &'a str,
    value: &'a str,
    valid_after: &'a str,
    valid_before: &'a str,
    nonce: &'a str,
}

impl PartialEq<str> for Fingerprint {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

/// A settled payment, as the layer remembers it.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub struct SettlementRecord {
    /// The payment's key.
    pub key: PaymentKey,
    /// What identifies the signed payment itself, whatever id the client chose: for EIP-3009
    /// payments `eip3009:<network>:<asset>:<from>:<nonce>`. A record whose fingerprint differs
    /// from a new payment's under the same key means one `payment-identifier` was reused.
    pub fingerprint: String,
    /// URL of the resource the payment bought; a payment never buys a second resource.
    pub resource: String,
    /// The server's requirement that was paid.
    pub requirement: PaymentRequirements,
    /// The facilitator's successful settlement.
    pub settlement: SettleResponse,
}

impl SettlementRecord {
    /// The record of `settlement` for the payment `intent` sent, under `key`: what the layer
    /// computed for the intent is reused, not derived again.
    pub(crate) fn of_intent(
        key: PaymentKey,
        intent: &super::SettlementIntent,
        settlement: SettleResponse,
    ) -> Self {
        Self {
            key,
            fingerprint: intent.fingerprint.clone(),
            resource: intent.resource.clone(),
            requirement: intent.request.payment_requirements.clone(),
            settlement,
        }
    }

    /// A record of `settlement` for `payload` bought at `resource` under `requirement`.
    pub fn new(
        payload: &PaymentPayload,
        resource: impl Into<String>,
        requirement: PaymentRequirements,
        settlement: SettleResponse,
    ) -> Self {
        Self {
            key: PaymentKey::of(payload),
            fingerprint: Fingerprint::of(payload).into_string(),
            resource: resource.into(),
            requirement,
            settlement,
        }
    }

    /// A record rebuilt from storage.
    pub fn from_parts(
        key: PaymentKey,
        fingerprint: String,
        resource: String,
        requirement: PaymentRequirements,
        settlement: SettleResponse,
    ) -> Self {
        Self {
            key,
            fingerprint,
            resource,
            requirement,
            settlement,
        }
    }
}
