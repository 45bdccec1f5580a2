//! What identifies a payment, and what the layer remembers once it settled.

use std::borrow::Cow;
use std::cmp::Ordering;
use std::fmt;
use std::hash::{BuildHasher, Hash, Hasher, RandomState};
use std::sync::{Arc, OnceLock};

use x402_wire::{PaymentPayload, PaymentRequirements, SettleResponse};

/// Identifies one payment, whatever request carries it.
///
/// In order of preference: the `payment-identifier` extension id (`id:<id>`); for EIP-3009
/// payments the authorization that the chain itself deduplicates on
/// (`eip3009:<network>:<asset>:<from>:<nonce>`, lowercased); for Permit2 (`upto`) payments the
/// owner's nonce (`permit2:<network>:<from>:<nonce>`); otherwise the scheme, network and the
/// exact payload JSON.
///
/// A key is hashed once, when it is made (keyed by a random seed per process, so that keys
/// chosen by clients cannot be made to collide), and a map keyed by it hashes only that number.
#[derive(Clone)]
pub struct PaymentKey {
    text: Arc<str>,
    hash: u64,
}

impl PaymentKey {
    /// The key of `payload`.
    pub fn of(payload: &PaymentPayload) -> Self {
        Self::with_fingerprint(payload, &Fingerprint::of(payload))
    }

    /// The key of `payload`, whose fingerprint is already known.
    pub(crate) fn with_fingerprint(payload: &PaymentPayload, fingerprint: &Fingerprint) -> Self {
        match payload.payment_identifier() {
            Some(id) => Self::from_stored(format!("id:{id}")),
            None => Self::from_stored(fingerprint.shared()),
        }
    }

    /// A key from its stored text (for [`SettlementStore`](super::SettlementStore) implementations).
    pub fn from_stored(text: impl Into<Arc<str>>) -> Self {
        static SEED: OnceLock<RandomState> = OnceLock::new();
        let text = text.into();
        let hash = SEED.get_or_init(RandomState::new).hash_one(&*text);
        Self { text, hash }
    }

    /// The key as text, suitable for a unique database column.
    pub fn as_str(&self) -> &str {
        &self.text
    }
}

impl PartialEq for PaymentKey {
    fn eq(&self, other: &Self) -> bool {
        self.hash == other.hash && self.text == other.text
    }
}

impl Eq for PaymentKey {}

impl Hash for PaymentKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash);
    }
}

impl PartialOrd for PaymentKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for PaymentKey {
    fn cmp(&self, other: &Self) -> Ordering {
        self.text.cmp(&other.text)
    }
}

impl serde::Serialize for PaymentKey {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.text)
    }
}

impl<'de> serde::Deserialize<'de> for PaymentKey {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        <Arc<str>>::deserialize(deserializer).map(Self::from_stored)
    }
}

impl fmt::Debug for PaymentKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PaymentKey({})", self.text)
    }
}

impl fmt::Display for PaymentKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// What identifies the signed payment itself, independent of any client-chosen id: used as the
/// key when there is no id, and stored to detect one id reused for a different payment.
/// Computed once per request (it decodes the payload).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Fingerprint(Arc<str>);

impl Fingerprint {
    /// The fingerprint of `payload`.
    pub(crate) fn of(payload: &PaymentPayload) -> Self {
        Self::read(payload).0
    }

    /// The fingerprint of `payload`, and whether its proof is a Permit2 permit that signs
    /// another amount than the one its `accepted` names (read in the same pass).
    ///
    /// The proof is read in place, as the shape its scheme names (an `upto` payment's Permit2
    /// first, any other's EIP-3009), then as the other, and otherwise taken as it is.
    pub(crate) fn read(payload: &PaymentPayload) -> (Self, bool) {
        Self::read_first(payload, payload.accepted.scheme == x402_wire::UPTO_SCHEME)
    }

    /// [`read`](Self::read), a Permit2 permit tried first when `permit_first` (the shape of an
    /// `upto` payment), else an EIP-3009 authorization (the shape of an `exact` one).
    pub(crate) fn read_first(payload: &PaymentPayload, permit_first: bool) -> (Self, bool) {
        let shapes: [fn(&PaymentPayload) -> Option<(Self, bool)>; 2] = if permit_first {
            [Self::of_permit2, Self::of_eip3009]
        } else {
            [Self::of_eip3009, Self::of_permit2]
        };
        shapes
            .iter()
            .find_map(|read| read(payload))
            .unwrap_or_else(|| (Self::of_proof(payload), false))
    }

    /// Whether this is a Permit2 permit's fingerprint (an `exact` or `upto` one).
    pub(crate) fn is_permit2(&self) -> bool {
        self.0.starts_with("permit2:")
    }

    /// A fingerprint a payment scheme computed.
    pub(crate) fn from_text(text: Arc<str>) -> Self {
        Self(text)
    }

    /// An EIP-3009 authorization's fingerprint: the same shape `exact_evm` accepts, read
    /// without copying its strings.
    fn of_eip3009(payload: &PaymentPayload) -> Option<(Self, bool)> {
        let accepted = &payload.accepted;
        let evm = serde_json::from_str::<ExactEvmView<'_>>(payload.payload.get()).ok()?;
        let authorization = evm.authorization;
        let fingerprint = Self::joined(
            "eip3009",
            accepted.network.as_str(),
            [&accepted.asset, &authorization.from, &authorization.nonce],
        );
        Some((fingerprint, false))
    }

    /// A Permit2 permit's fingerprint (`upto`, or `exact` whose witness has no `facilitator`):
    /// the same shape `upto_evm` and `exact_permit2` accept, read without copying its strings. Permit2 nonces belong to the owner, whatever the token: the chain
    /// spends each once.
    fn of_permit2(payload: &PaymentPayload) -> Option<(Self, bool)> {
        let upto = serde_json::from_str::<UptoEvmView<'_>>(payload.payload.get()).ok()?;
        let permit = upto.permit2_authorization;
        // Strictly decimal digits: `+500000` is not the maximum's spelling.
        let signed = x402_wire::AtomicAmount::parse_u128(&permit.permitted.amount).ok();
        let differs = signed != Some(payload.accepted.amount.0);
        let fingerprint = Self::joined(
            "permit2",
            payload.accepted.network.as_str(),
            [&permit.from, &permit.nonce],
        );
        Some((fingerprint, differs))
    }

    /// `kind:network:part:…`, each part lowercased (hex addresses and nonces are the same
    /// whatever their case), built in one allocation.
    fn joined<const N: usize>(kind: &str, network: &str, parts: [&str; N]) -> Self {
        let len = kind.len() + 1 + network.len() + parts.iter().map(|p| p.len() + 1).sum::<usize>();
        let mut text = String::with_capacity(len);
        text.push_str(kind);
        text.push(':');
        text.push_str(network);
        for part in parts {
            text.push(':');
            let start = text.len();
            text.push_str(part);
            text[start..].make_ascii_lowercase();
        }
        Self(text.into())
    }

    /// Any other scheme's: its proof in compact form, so that the same proof sent with other
    /// spacing is the same payment.
    pub(crate) fn of_proof(payload: &PaymentPayload) -> Self {
        let accepted = &payload.accepted;
        let raw = payload.payload.get();
        let proof = serde_json::from_str::<serde_json::Value>(raw)
            .map_or_else(|_| raw.to_owned(), |proof| proof.to_string());
        Self(format!("raw:{}:{}:{proof}", accepted.scheme, accepted.network).into())
    }

    /// The fingerprint, shared.
    pub(crate) fn shared(&self) -> Arc<str> {
        Arc::clone(&self.0)
    }

    /// The fingerprint as text shared by every state and record of the payment.
    pub(crate) fn into_shared(self) -> Arc<str> {
        self.0
    }
}

/// An EIP-3009 `exact` payload borrowed from its JSON: the shape of
/// [`ExactEvmPayload`](x402_wire::ExactEvmPayload), every string left where it is (copied
/// only when it holds an escape).
#[derive(serde::Deserialize)]
#[allow(dead_code)] // Every field is read, to accept exactly what `exact_evm` accepts.
struct ExactEvmView<'a> {
    #[serde(borrow)]
    signature: Cow<'a, str>,
    #[serde(borrow)]
    authorization: AuthorizationView<'a>,
}

/// An `upto` Permit2 payload borrowed from its JSON: the shape of
/// [`UptoEvmPayload`](x402_wire::UptoEvmPayload), every string left where it is.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
#[allow(dead_code)] // Every field is read, to accept exactly what `upto_evm` accepts.
struct UptoEvmView<'a> {
    #[serde(borrow)]
    signature: Cow<'a, str>,
    #[serde(borrow)]
    permit2_authorization: Permit2View<'a>,
}

/// [`Permit2Authorization`](x402_wire::Permit2Authorization), borrowed.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
#[allow(dead_code)]
struct Permit2View<'a> {
    #[serde(borrow)]
    from: Cow<'a, str>,
    #[serde(borrow)]
    permitted: TokenPermissionsView<'a>,
    #[serde(borrow)]
    spender: Cow<'a, str>,
    #[serde(borrow)]
    nonce: Cow<'a, str>,
    #[serde(borrow)]
    deadline: Cow<'a, str>,
    #[serde(borrow)]
    witness: UptoWitnessView<'a>,
}

/// [`TokenPermissions`](x402_wire::TokenPermissions), borrowed.
#[derive(serde::Deserialize)]
#[allow(dead_code)]
struct TokenPermissionsView<'a> {
    #[serde(borrow)]
    token: Cow<'a, str>,
    #[serde(borrow)]
    amount: Cow<'a, str>,
}

/// [`UptoWitness`](x402_wire::UptoWitness), borrowed.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
#[allow(dead_code)]
struct UptoWitnessView<'a> {
    #[serde(borrow)]
    to: Cow<'a, str>,
    /// `upto`'s; an `exact` permit's witness has none.
    #[serde(borrow, default)]
    facilitator: Option<Cow<'a, str>>,
    #[serde(borrow)]
    valid_after: Cow<'a, str>,
}

/// [`Eip3009Authorization`](x402_wire::Eip3009Authorization), borrowed.
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
        *self.0 == *other
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
    pub fingerprint: Arc<str>,
    /// URL of the resource the payment bought; a payment never buys a second resource.
    pub resource: Arc<str>,
    /// The server's requirement that was paid.
    pub requirement: Arc<PaymentRequirements>,
    /// The facilitator's successful settlement.
    pub settlement: SettleResponse,
    /// The request the payment bought
    /// ([`RequestDigest`](crate::payment::RequestDigest)): a payment is delivered again only
    /// for that request. `None` (a record written before requests were recorded) means any
    /// request for [`resource`](Self::resource).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_digest: Option<Arc<str>>,
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
            requirement: Arc::clone(intent.request.payment_requirements()),
            settlement,
            request_digest: intent.request_digest.clone(),
        }
    }

    /// A record of `settlement` for `payload` bought at `resource` under `requirement`.
    pub fn new(
        payload: &PaymentPayload,
        resource: impl Into<Arc<str>>,
        requirement: impl Into<Arc<PaymentRequirements>>,
        settlement: SettleResponse,
    ) -> Self {
        Self {
            key: PaymentKey::of(payload),
            fingerprint: Fingerprint::of(payload).into_shared(),
            resource: resource.into(),
            requirement: requirement.into(),
            settlement,
            request_digest: None,
        }
    }

    /// The same record, for the request whose digest is `digest`
    /// ([`RequestDigest::as_str`](crate::payment::RequestDigest::as_str)).
    pub fn for_request(mut self, digest: impl Into<Arc<str>>) -> Self {
        self.request_digest = Some(digest.into());
        self
    }

    /// A record rebuilt from storage.
    pub fn from_parts(
        key: PaymentKey,
        fingerprint: impl Into<Arc<str>>,
        resource: impl Into<Arc<str>>,
        requirement: impl Into<Arc<PaymentRequirements>>,
        settlement: SettleResponse,
    ) -> Self {
        Self {
            key,
            fingerprint: fingerprint.into(),
            resource: resource.into(),
            requirement: requirement.into(),
            settlement,
            request_digest: None,
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

    fn permit2(from: &str, nonce: &str) -> String {
        format!(
            r#"{{"signature":"0x01","permit2Authorization":{{"from":"{from}",
            "permitted":{{"token":"0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913","amount":"1000"}},
            "spender":"0x4020A4f3b7b90ccA423B9fabCc0CE57C6C240002","nonce":"{nonce}",
            "deadline":"1900000000","witness":{{"to":"0x209693Bc6afc0C5328bA36FaF03C514EF312287C",
            "facilitator":"0x1111111111111111111111111111111111111111","validAfter":"0"}}}}}}"#
        )
    }

    #[test]
    fn a_permit2_payment_is_keyed_by_its_owner_and_nonce_under_either_scheme_name() {
        let from = "0x857b06519E91e3A54538791bDbb0E22373e36b66";
        let upto = PaymentKey::of(&paid("upto", &permit2(from, "7")));
        assert_eq!(
            upto.as_str(),
            "permit2:eip155:8453:0x857b06519e91e3a54538791bdbb0e22373e36b66:7"
        );
        // An escape in the proof, or the shape under another scheme's name: the same payment.
        let escaped = PaymentKey::of(&paid(
            "upto",
            &permit2(&from.replacen('8', "\\u0038", 1), "7"),
        ));
        assert_eq!(upto, escaped);
        assert_eq!(upto, PaymentKey::of(&paid("exact", &permit2(from, "7"))));
        // An EIP-3009 proof sent as `upto` is still keyed by its authorization.
        let nonce = format!("0x{}", "ab".repeat(32));
        assert!(
            PaymentKey::of(&paid("upto", &exact(&nonce)))
                .as_str()
                .starts_with("eip3009:")
        );
        // A permit missing a field is not the Permit2 shape: keyed by the proof as sent.
        let partial = permit2(from, "7").replace(r#""spender""#, r#""spender_""#);
        assert!(
            PaymentKey::of(&paid("upto", &partial))
                .as_str()
                .starts_with("raw:upto:")
        );
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
