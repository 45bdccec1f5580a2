use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, OnceLock};

use bytes::Bytes;

use serde::ser::SerializeStruct;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

use crate::money::AtomicAmount;
use crate::network::Network;
use crate::payment::{PaymentPayload, PaymentRequirements, X402Version};

/// Body of `POST /verify` and `POST /settle` on a facilitator.
///
/// A request does not change once made (a metered settlement's charged amount makes a new one,
/// [`with_requirements`](Self::with_requirements)), so its JSON is encoded once, on first use,
/// and shared by every call that sends it: an `exact` payment's `/verify` and `/settle` send the
/// same bytes.
///
/// ```
/// use x402_wire::{FacilitatorRequest, PaymentPayload, PaymentRequirements};
///
/// # fn example(payload: PaymentPayload, requirements: PaymentRequirements) -> Result<(), serde_json::Error> {
/// let request = FacilitatorRequest::new(payload, requirements);
/// let body = request.json()?;
/// assert_eq!(body, request.json()?); // encoded once, the same bytes again
/// assert_eq!(request.x402_version(), request.payment_payload().x402_version);
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FacilitatorRequest {
    x402_version: X402Version,
    payment_payload: Arc<PaymentPayload>,
    payment_requirements: Arc<PaymentRequirements>,
    /// Fields sent beside those three (a lifecycle hook's, for `/settle`). Sent, never read
    /// back: a request read from its JSON (a stored intent) has none.
    #[serde(skip)]
    fields: Option<Arc<Map<String, Value>>>,
    /// This request as JSON, once something has asked for it.
    #[serde(skip)]
    json: OnceLock<Bytes>,
}

impl FacilitatorRequest {
    /// A request for `payload` against the server's `requirements` (owned or already shared);
    /// its version is the payload's.
    pub fn new(
        payment_payload: impl Into<Arc<PaymentPayload>>,
        payment_requirements: impl Into<Arc<PaymentRequirements>>,
    ) -> Self {
        let payment_payload = payment_payload.into();
        Self {
            x402_version: payment_payload.x402_version,
            payment_payload,
            payment_requirements: payment_requirements.into(),
            fields: None,
            json: OnceLock::new(),
        }
    }

    /// The same request with `fields` beside its own (an extension's data for `/settle`), as a
    /// new request with its own encoding. A field named like one of the request's own is
    /// ignored.
    ///
    /// ```
    /// # use x402_wire::{FacilitatorRequest, PaymentPayload, PaymentRequirements};
    /// # fn check(request: FacilitatorRequest) -> Result<(), serde_json::Error> {
    /// let mut fields = serde_json::Map::new();
    /// fields.insert("voucher".into(), serde_json::json!({"id": 7}));
    /// let request = request.with_fields(fields);
    /// let json: serde_json::Value = serde_json::from_slice(&request.json()?)?;
    /// assert_eq!(json["voucher"]["id"], 7);
    /// # Ok(())
    /// # }
    /// ```
    pub fn with_fields(&self, mut fields: Map<String, Value>) -> Self {
        for own in ["x402Version", "paymentPayload", "paymentRequirements"] {
            fields.remove(own);
        }
        let mut all = self.fields.as_deref().cloned().unwrap_or_default();
        all.extend(fields);
        Self {
            x402_version: self.x402_version,
            payment_payload: Arc::clone(&self.payment_payload),
            payment_requirements: Arc::clone(&self.payment_requirements),
            fields: (!all.is_empty()).then(|| Arc::new(all)),
            json: OnceLock::new(),
        }
    }

    /// The fields sent beside the request's own ([`with_fields`](Self::with_fields)).
    pub fn fields(&self) -> Option<&Map<String, Value>> {
        self.fields.as_deref()
    }

    /// The same payment against other `requirements` (a metered settlement's charged amount),
    /// as a new request with its own encoding.
    pub fn with_requirements(
        &self,
        payment_requirements: impl Into<Arc<PaymentRequirements>>,
    ) -> Self {
        Self {
            x402_version: self.x402_version,
            payment_payload: Arc::clone(&self.payment_payload),
            payment_requirements: payment_requirements.into(),
            fields: self.fields.clone(),
            json: OnceLock::new(),
        }
    }

    /// The protocol version, the payload's when the request was made with [`new`](Self::new).
    pub fn x402_version(&self) -> X402Version {
        self.x402_version
    }

    /// The client's payment, as received; shared with what the server keeps of the payment.
    pub fn payment_payload(&self) -> &Arc<PaymentPayload> {
        &self.payment_payload
    }

    /// The server's own requirement that the payment matched (not the client's echo); shared
    /// with the offer it belongs to.
    pub fn payment_requirements(&self) -> &Arc<PaymentRequirements> {
        &self.payment_requirements
    }

    /// The request as the JSON body of `/verify` and `/settle`, encoded on the first call and
    /// shared after it.
    ///
    /// # Errors
    ///
    /// The encoder's error, which the wire types do not produce in practice.
    pub fn json(&self) -> Result<Bytes, serde_json::Error> {
        if let Some(json) = self.json.get() {
            return Ok(json.clone());
        }
        // Sized for a typical request (1.2 to 1.6 KB) so encoding does not grow the buffer.
        let mut body = Vec::with_capacity(REQUEST_CAPACITY);
        serde_json::to_writer(&mut body, self)?;
        Ok(self.json.get_or_init(|| Bytes::from(body)).clone())
    }
}

/// The three fields of the protocol, then any [`with_fields`](FacilitatorRequest::with_fields)
/// added.
impl Serialize for FacilitatorRequest {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{SerializeMap as _, SerializeStruct as _};
        let Some(fields) = &self.fields else {
            let mut request = serializer.serialize_struct("FacilitatorRequest", 3)?;
            request.serialize_field("x402Version", &self.x402_version)?;
            request.serialize_field("paymentPayload", &self.payment_payload)?;
            request.serialize_field("paymentRequirements", &self.payment_requirements)?;
            return request.end();
        };
        let mut request = serializer.serialize_map(Some(3 + fields.len()))?;
        request.serialize_entry("x402Version", &self.x402_version)?;
        request.serialize_entry("paymentPayload", &self.payment_payload)?;
        request.serialize_entry("paymentRequirements", &self.payment_requirements)?;
        for (name, value) in fields.iter() {
            request.serialize_entry(name, value)?;
        }
        request.end()
    }
}

/// Bytes reserved for a request's JSON before encoding it.
const REQUEST_CAPACITY: usize = 2048;

impl PartialEq for FacilitatorRequest {
    /// Requests are equal when they say the same; whether one is encoded yet does not count.
    fn eq(&self, other: &Self) -> bool {
        self.x402_version == other.x402_version
            && self.payment_payload == other.payment_payload
            && self.payment_requirements == other.payment_requirements
            && self.fields == other.fields
    }
}

impl fmt::Debug for FacilitatorRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FacilitatorRequest")
            .field("x402_version", &self.x402_version)
            .field("payment_payload", &self.payment_payload)
            .field("payment_requirements", &self.payment_requirements)
            .finish_non_exhaustive()
    }
}

/// A facilitator's answer to `/verify`. `isValid: false` is an answer, not an error.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VerifyResponse {
    /// Whether the payment would settle.
    pub is_valid: bool,
    /// Machine-readable reason when not valid, e.g. `invalid_exact_evm_signature`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invalid_reason: Option<String>,
    /// Human-readable detail when not valid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invalid_message: Option<String>,
    /// The payer address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payer: Option<String>,
    /// Per-extension data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extensions: Option<Map<String, Value>>,
    /// Scheme-specific data (`batch-settlement`: the channel's on-chain snapshot).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra: Option<Map<String, Value>>,
}

/// A facilitator's answer to `/settle`, also the JSON inside `PAYMENT-RESPONSE`.
///
/// `success: false` is an answer, not an error. Fields serialize in the order of the
/// specification's `PAYMENT-RESPONSE` examples (`payer` after `network`).
///
/// A successful settlement that moved nothing on chain (an empty `transaction`, as a
/// `batch-settlement` voucher's) and names no amount is written with `"amount": ""`, as that
/// scheme's `PAYMENT-RESPONSE` reads; any other settlement without an amount omits the field.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SettleResponse {
    /// Whether the funds moved.
    pub success: bool,
    /// Machine-readable reason when settlement failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_reason: Option<String>,
    /// Human-readable detail when settlement failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_message: Option<String>,
    /// Transaction hash; empty on failure.
    #[serde(default)]
    pub transaction: String,
    /// CAIP-2 network the settlement happened on.
    pub network: Network,
    /// The payer address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payer: Option<String>,
    /// Amount actually settled, in atomic units. An empty string reads as none: the
    /// `batch-settlement` scheme answers a claim (which moves nothing) with `"amount": ""`.
    #[serde(default, deserialize_with = "empty_amount_as_none")]
    pub amount: Option<AtomicAmount>,
    /// Per-extension data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extensions: Option<Map<String, Value>>,
    /// Scheme-specific data (`batch-settlement`: the channel's on-chain snapshot).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra: Option<Map<String, Value>>,
}

impl SettleResponse {
    /// A failed settlement on `network` with the given reason.
    pub fn failure(network: Network, reason: impl Into<String>) -> Self {
        Self {
            success: false,
            error_reason: Some(reason.into()),
            error_message: None,
            transaction: String::new(),
            network,
            payer: None,
            amount: None,
            extensions: None,
            extra: None,
        }
    }
}

impl Serialize for SettleResponse {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let moved_nothing = self.success && self.transaction.is_empty() && self.amount.is_none();
        let mut fields = serializer.serialize_struct("SettleResponse", 9)?;
        fields.serialize_field("success", &self.success)?;
        if let Some(reason) = &self.error_reason {
            fields.serialize_field("errorReason", reason)?;
        }
        if let Some(message) = &self.error_message {
            fields.serialize_field("errorMessage", message)?;
        }
        fields.serialize_field("transaction", &self.transaction)?;
        fields.serialize_field("network", &self.network)?;
        if let Some(payer) = &self.payer {
            fields.serialize_field("payer", payer)?;
        }
        match &self.amount {
            Some(amount) => fields.serialize_field("amount", amount)?,
            None if moved_nothing => fields.serialize_field("amount", "")?,
            None => {}
        }
        if let Some(extensions) = &self.extensions {
            fields.serialize_field("extensions", extensions)?;
        }
        if let Some(extra) = &self.extra {
            fields.serialize_field("extra", extra)?;
        }
        fields.end()
    }
}

/// An amount that may be written as `""` (none), as `null`, or as a decimal string.
fn empty_amount_as_none<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<AtomicAmount>, D::Error> {
    match Option::<String>::deserialize(deserializer)? {
        None => Ok(None),
        Some(text) if text.is_empty() => Ok(None),
        Some(text) => text.parse().map(Some).map_err(serde::de::Error::custom),
    }
}

/// A facilitator's `GET /supported`: the kinds of payment it can verify and settle.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SupportedResponse {
    /// Supported (version, scheme, network) combinations.
    ///
    /// Entries this crate cannot represent are skipped when decoding: real facilitators also
    /// list version 1 kinds with legacy network names such as `base-sepolia`, which are not
    /// CAIP-2 and would otherwise make the whole answer unreadable.
    #[serde(deserialize_with = "representable_kinds")]
    pub kinds: Vec<SupportedKind>,
    /// Extension keys the facilitator implements.
    #[serde(default)]
    pub extensions: Vec<String>,
    /// Signer addresses by CAIP family pattern, e.g. `eip155:*`.
    #[serde(default)]
    pub signers: BTreeMap<String, Vec<String>>,
}

impl SupportedResponse {
    /// Whether the facilitator lists `scheme` on `network` for protocol version 2.
    pub fn supports(&self, scheme: &str, network: &Network) -> bool {
        self.kinds.iter().any(|kind| {
            kind.x402_version == X402Version::V2
                && kind.scheme == scheme
                && &kind.network == network
        })
    }

    /// Whether the facilitator lists `network` for any scheme under version 2.
    pub fn supports_network(&self, network: &Network) -> bool {
        self.kinds
            .iter()
            .any(|kind| kind.x402_version == X402Version::V2 && &kind.network == network)
    }
}

/// Decodes `kinds`, dropping the entries that do not decode as a [`SupportedKind`].
fn representable_kinds<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Vec<SupportedKind>, D::Error> {
    let entries = Vec::<Value>::deserialize(deserializer)?;
    Ok(entries
        .into_iter()
        .filter_map(|entry| SupportedKind::deserialize(entry).ok())
        .collect())
}

/// One entry of [`SupportedResponse::kinds`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SupportedKind {
    /// Protocol version.
    pub x402_version: X402Version,
    /// Scheme, e.g. `exact`.
    pub scheme: String,
    /// CAIP-2 network.
    pub network: Network,
    /// Scheme data a server copies into its requirements (e.g. SVM `feePayer`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra: Option<Map<String, Value>>,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn supported_skips_kinds_with_legacy_network_names() {
        let supported: SupportedResponse = serde_json::from_value(json!({
            "kinds": [
                {"x402Version": 1, "scheme": "exact", "network": "base-sepolia"},
                {"x402Version": 2, "scheme": "exact", "network": "eip155:84532"},
                {"x402Version": 2, "scheme": "exact", "network": "solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1", "extra": {"feePayer": "CKPKJWNdJEqa81x7CkZ14BVPiY6y16Sxs7owznqtWYp5"}}
            ],
            "extensions": ["bazaar"],
            "signers": {"eip155:*": ["0x1234567890abcdef1234567890abcdef12345678"]}
        }))
        .unwrap();
        assert_eq!(supported.kinds.len(), 2);
        assert!(supported.supports("exact", &Network::BASE_SEPOLIA));
        assert!(supported.supports_network(&Network::SOLANA_DEVNET));
        assert!(serde_json::from_value::<SupportedResponse>(json!({"kinds": "exact"})).is_err());
        assert!(
            serde_json::from_value::<SupportedResponse>(json!({})).is_err(),
            "kinds is required"
        );
    }

    #[test]
    fn settle_response_serializes_in_the_specification_order() {
        let mut settled = SettleResponse::failure(Network::BASE_SEPOLIA, "insufficient_funds");
        settled.payer = Some("0x857b06519E91e3A54538791bDbb0E22373e36b66".into());
        assert_eq!(
            serde_json::to_string(&settled).unwrap(),
            r#"{"success":false,"errorReason":"insufficient_funds","transaction":"","network":"eip155:84532","payer":"0x857b06519E91e3A54538791bDbb0E22373e36b66"}"#
        );
    }

    #[test]
    fn settle_response_reads_an_empty_amount_as_none() {
        let claimed: SettleResponse = serde_json::from_value(json!({
            "success": true, "transaction": "0x01", "network": "eip155:84532", "amount": ""
        }))
        .unwrap();
        assert_eq!(claimed.amount, None);
        let swept: SettleResponse = serde_json::from_value(json!({
            "success": true, "transaction": "0x01", "network": "eip155:84532", "amount": "2500"
        }))
        .unwrap();
        assert_eq!(swept.amount, Some(AtomicAmount(2_500)));
        let absent: SettleResponse = serde_json::from_value(json!({
            "success": false, "network": "eip155:84532", "amount": null
        }))
        .unwrap();
        assert_eq!(absent.amount, None);
        assert!(
            serde_json::from_value::<SettleResponse>(json!({
                "success": true, "network": "eip155:84532", "amount": "-1"
            }))
            .is_err(),
            "a malformed amount is still refused"
        );
    }

    #[test]
    fn settle_response_writes_an_empty_amount_only_when_nothing_moved() {
        let mut voucher = SettleResponse {
            success: true,
            error_reason: None,
            error_message: None,
            transaction: String::new(),
            network: "eip155:8453".parse().unwrap(),
            payer: Some("0xab".into()),
            amount: None,
            extensions: None,
            extra: None,
        };
        assert_eq!(
            serde_json::to_string(&voucher).unwrap(),
            r#"{"success":true,"transaction":"","network":"eip155:8453","payer":"0xab","amount":""}"#
        );
        voucher.transaction = "0x01".into();
        assert_eq!(
            serde_json::to_string(&voucher).unwrap(),
            r#"{"success":true,"transaction":"0x01","network":"eip155:8453","payer":"0xab"}"#
        );
        let failed = SettleResponse::failure("eip155:8453".parse().unwrap(), "insufficient_funds");
        assert_eq!(
            serde_json::to_string(&failed).unwrap(),
            r#"{"success":false,"errorReason":"insufficient_funds","transaction":"","network":"eip155:8453"}"#
        );
        voucher.amount = Some(AtomicAmount(7));
        let back: SettleResponse =
            serde_json::from_str(&serde_json::to_string(&voucher).unwrap()).unwrap();
        assert_eq!(back, voucher);
    }

    #[test]
    fn verify_response_tolerates_nulls_and_unknown_fields() {
        let verified: VerifyResponse = serde_json::from_value(json!({
            "isValid": false, "invalidReason": "insufficient_funds", "invalidMessage": null, "payer": null, "future": 1
        }))
        .unwrap();
        assert!(!verified.is_valid);
        assert_eq!(
            verified.invalid_reason.as_deref(),
            Some("insufficient_funds")
        );
        assert!(
            serde_json::from_value::<VerifyResponse>(json!({"invalidReason": "x"})).is_err(),
            "isValid is required"
        );
    }

    #[test]
    fn facilitator_request_takes_the_payload_version() {
        let requirements: PaymentRequirements = serde_json::from_value(json!({
            "scheme": "exact", "network": "eip155:84532", "amount": "10000",
            "asset": "0x036CbD53842c5426634e7929541eC2318f3dCF7e",
            "payTo": "0x209693Bc6afc0C5328bA36FaF03C514EF312287C", "maxTimeoutSeconds": 60
        }))
        .unwrap();
        let payload = PaymentPayload {
            x402_version: X402Version::V2,
            resource: None,
            accepted: requirements.clone(),
            payload: serde_json::value::to_raw_value(&json!({})).expect("a JSON payload"),
            extensions: None,
        };
        let request = FacilitatorRequest::new(payload, requirements.clone());
        let json = serde_json::to_value(&request).unwrap();
        assert_eq!(json["x402Version"], 2);
        assert_eq!(json["paymentPayload"]["x402Version"], 2);
        assert_eq!(
            json["paymentRequirements"]["payTo"],
            "0x209693Bc6afc0C5328bA36FaF03C514EF312287C"
        );

        // The body is encoded once and is the request's JSON; a copy made before or after
        // encoding says the same.
        let body = request.json().unwrap();
        assert_eq!(serde_json::from_slice::<Value>(&body).unwrap(), json);
        assert_eq!(request.json().unwrap().as_ptr(), body.as_ptr());
        assert_eq!(request.clone(), request);
        let decoded: FacilitatorRequest = serde_json::from_slice(&body).unwrap();
        assert_eq!(decoded, request);
        assert_eq!(decoded.json().unwrap(), body);

        // Other requirements make another request with its own body.
        let mut charged = requirements;
        charged.amount = AtomicAmount(2_500);
        let metered = request.with_requirements(charged);
        let metered_json: Value = serde_json::from_slice(&metered.json().unwrap()).unwrap();
        assert_eq!(metered_json["paymentRequirements"]["amount"], "2500");
        assert_eq!(metered_json["paymentPayload"], json["paymentPayload"]);
        assert_ne!(metered, request);
        assert!(Arc::ptr_eq(
            metered.payment_payload(),
            request.payment_payload()
        ));
    }
}
