//! What identifies a payment, and what the layer remembers once it settled.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

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
        if let Ok(evm) = serde_json::from_str::<ExactEvmView<'_>>(payload.payload.get()) {
            let authorization = evm.authorization;
            let parts = [
                accepted.asset.as_str(),
                &authorization.from,
                &authorization.nonce,
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
        // Any other scheme: its proof in compact form, so that the same proof sent with other
        // spacing is the same payment.
        let raw = payload.payload.get();
        let proof = serde_json::from_str::<serde_json::Value>(raw)
            .map_or_else(|_| raw.to_owned(), |proof| proof.to_string());
        Self(format!(
            "raw:{}:{}:{proof}",
            accepted.scheme, accepted.network
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
/// [`ExactEvmPayload`](crate::proto::ExactEvmPayload), every string left where it is (copied
/// only when it holds an escape).
#[derive(serde::Deserialize)]
#[allow(dead_code)] // Every field is read, to accept exactly what `exact_evm` accepts.
struct ExactEvmView<'a> {
    #[serde(borrow)]
    signature: Cow<'a, str>,
    #[serde(borrow)]
    authorization: AuthorizationView<'a>,
}

/// [`Eip3009Authorization`](crate::proto::Eip3009Authorization), borrowed.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
#[allow(dead_code)]
struct AuthorizationView<'a> {
    #[serde(borrow)]
    from: Cow<'a, str>,
    #[serde(borrow)]
    to: Cow<'a, str>,
    #[serde(borrow)]
    value: Cow<'a, str>,
    #[serde(borrow)]
    valid_after: Cow<'a, str>,
    #[serde(borrow)]
    valid_before: Cow<'a, str>,
    #[serde(borrow)]
    nonce: Cow<'a, str>,
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A payment whose proof is `proof`, written as a client wrote it.
    fn paid(scheme: &str, proof: &str) -> PaymentPayload {
        let text = format!(
            r#"{{"x402Version":2,"accepted":{{"scheme":"{scheme}","network":"eip155:8453",
            "amount":"1000","asset":"0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913",
            "payTo":"0x209693Bc6afc0C5328bA36FaF03C514EF312287C","maxTimeoutSeconds":60}},
            "payload":{proof}}}"#
        );
        serde_json::from_str(&text).unwrap()
    }

    fn exact(nonce: &str) -> String {
        format!(
            r#"{{"signature":"0x01","authorization":{{
            "from":"0x857b06519E91e3A54538791bDbb0E22373e36b66",
            "to":"0x209693Bc6afc0C5328bA36FaF03C514EF312287C","value":"1000",
            "validAfter":"0","validBefore":"9999999999","nonce":"{nonce}"}}}}"#
        )
    }

    #[test]
    fn an_escaped_character_in_the_proof_does_not_change_the_key() {
        let nonce = format!("0x{}", "ab".repeat(32));
        let plain = PaymentKey::of(&paid("exact", &exact(&nonce)));
        // `\u0030` is `0`: the same nonce, written with an escape.
        let escaped = PaymentKey::of(&paid("exact", &exact(&nonce.replacen('0', "\\u0030", 1))));
        assert!(
            plain.as_str().starts_with("eip3009:eip155:8453:"),
            "{plain}"
        );
        assert_eq!(plain, escaped);
    }

    #[test]
    fn another_schemes_proof_is_the_same_payment_whatever_its_spacing() {
        let tight = PaymentKey::of(&paid("batch", r#"{"transaction":"AQID","n":1}"#));
        let spaced = PaymentKey::of(&paid("batch", "{ \"transaction\" : \"AQID\",\n \"n\": 1 }"));
        assert_eq!(
            tight.as_str(),
            r#"raw:batch:eip155:8453:{"transaction":"AQID","n":1}"#
        );
        assert_eq!(tight, spaced);
        let other = PaymentKey::of(&paid("batch", r#"{"transaction":"AQIE","n":1}"#));
        assert_ne!(tight, other);
    }
}
