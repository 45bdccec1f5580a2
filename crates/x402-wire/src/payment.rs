use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::money::AtomicAmount;
use crate::network::Network;
use crate::permit2::ExactPermit2Payload;
use crate::upto::{UPTO_SCHEME, UptoEvmPayload};

/// The protocol version number carried as `x402Version`.
///
/// This crate speaks version 2; decoding keeps whatever number arrived so that a caller can say
/// precisely that the version was wrong (see [`header::decode`](crate::header::decode)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct X402Version(pub u32);

impl X402Version {
    /// x402 protocol version 2, the version this crate implements.
    pub const V2: Self = Self(2);
}

impl Default for X402Version {
    fn default() -> Self {
        Self::V2
    }
}

/// The challenge a server sends with a 402: what the resource is and how it may be paid.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PaymentRequired {
    /// Always 2.
    pub x402_version: X402Version,
    /// Human-readable reason the request was not served.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The resource being sold.
    pub resource: ResourceInfo,
    /// The ways the resource may be paid, one per scheme and network.
    pub accepts: Vec<PaymentRequirements>,
    /// Extension declarations (e.g. `bazaar`), echoed by the client in its payload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extensions: Option<Map<String, Value>>,
}

/// Describes the resource a challenge or payment is about.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceInfo {
    /// Absolute URL of the resource.
    pub url: String,
    /// What the buyer gets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Media type of the paid response.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
    /// Further metadata (`serviceName`, `tags`, `iconUrl`, …), preserved as received.
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

impl ResourceInfo {
    /// A resource with only its URL.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            ..Self::default()
        }
    }

    /// The resource, described for the buyer (`description`).
    ///
    /// ```
    /// use x402_wire::ResourceInfo;
    ///
    /// let report = ResourceInfo::new("https://api.example.com/report")
    ///     .description("The quarterly report")
    ///     .mime_type("application/pdf");
    /// assert_eq!(report.description.as_deref(), Some("The quarterly report"));
    /// ```
    #[must_use]
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.description = Some(description.into());
        self
    }

    /// The resource, with the media type of the paid response (`mimeType`).
    ///
    /// ```
    /// use x402_wire::ResourceInfo;
    ///
    /// let rows = ResourceInfo::new("https://api.example.com/v1/rows").mime_type("application/json");
    /// assert_eq!(rows.mime_type.as_deref(), Some("application/json"));
    /// assert_eq!(serde_json::to_value(&rows)?["mimeType"], "application/json");
    /// # Ok::<_, serde_json::Error>(())
    /// ```
    #[must_use]
    pub fn mime_type(mut self, mime_type: impl Into<String>) -> Self {
        self.mime_type = Some(mime_type.into());
        self
    }
}

/// One accepted way to pay: scheme, network, amount, asset and recipient.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PaymentRequirements {
    /// Payment scheme, e.g. `exact`.
    pub scheme: String,
    /// CAIP-2 network.
    pub network: Network,
    /// Amount in the asset's atomic units.
    pub amount: AtomicAmount,
    /// Token contract address, mint or asset id.
    pub asset: String,
    /// Recipient address.
    pub pay_to: String,
    /// How long a signed payment stays usable.
    pub max_timeout_seconds: u64,
    /// Scheme-specific data; for EVM `exact` the token's EIP-712 `name` and `version`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra: Option<Map<String, Value>>,
}

impl PaymentRequirements {
    /// Whether `accepted` (what a client echoed) names the same payment as `self`.
    ///
    /// Compares scheme, network, amount, asset and payTo — the fields that decide who is paid
    /// what, where. `0x` addresses compare case-insensitively (EIP-55 checksums are only a
    /// spelling); everything else compares exactly. `extra` and `maxTimeoutSeconds` are not
    /// compared: the facilitator re-checks the signature against the server's own requirement.
    pub fn matches(&self, accepted: &PaymentRequirements) -> bool {
        self.scheme == accepted.scheme
            && self.network == accepted.network
            && self.amount == accepted.amount
            && same_address(&self.asset, &accepted.asset)
            && same_address(&self.pay_to, &accepted.pay_to)
    }

    /// How an EVM payment of this requirement moves the token: `extra.assetTransferMethod`
    /// (`"permit2"`, `"eip3009"`), when the requirement names one. `extra`'s few entries are
    /// scanned, not its key looked up: this is asked of every accept a payment is matched against.
    ///
    /// ```
    /// use x402_wire::PaymentRequirements;
    ///
    /// let requirement: PaymentRequirements = serde_json::from_value(serde_json::json!({
    ///     "scheme": "exact", "network": "eip155:8453", "amount": "10000",
    ///     "asset": "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913",
    ///     "payTo": "0x209693Bc6afc0C5328bA36FaF03C514EF312287C", "maxTimeoutSeconds": 60,
    ///     "extra": {"assetTransferMethod": "permit2"}
    /// }))?;
    /// assert_eq!(requirement.asset_transfer_method(), Some("permit2"));
    /// assert!(requirement.pays_through_permit2());
    /// # Ok::<_, serde_json::Error>(())
    /// ```
    pub fn asset_transfer_method(&self) -> Option<&str> {
        self.extra
            .as_ref()?
            .iter()
            .find(|(key, _)| *key == crate::ASSET_TRANSFER_METHOD)?
            .1
            .as_str()
    }

    /// Whether a payment of this requirement moves the token through Permit2
    /// (`extra.assetTransferMethod: "permit2"`).
    pub fn pays_through_permit2(&self) -> bool {
        self.asset_transfer_method() == Some(crate::PERMIT2_TRANSFER_METHOD)
    }

    /// The first field in which `accepted` differs from `self`, for error messages.
    pub fn mismatch(&self, accepted: &PaymentRequirements) -> Option<&'static str> {
        if self.scheme != accepted.scheme {
            Some("scheme")
        } else if self.network != accepted.network {
            Some("network")
        } else if self.amount != accepted.amount {
            Some("amount")
        } else if !same_address(&self.asset, &accepted.asset) {
            Some("asset")
        } else if !same_address(&self.pay_to, &accepted.pay_to) {
            Some("payTo")
        } else {
            None
        }
    }
}

fn same_address(a: &str, b: &str) -> bool {
    if a.starts_with("0x") && b.starts_with("0x") {
        a.eq_ignore_ascii_case(b)
    } else {
        a == b
    }
}

/// What a client sends in `PAYMENT-SIGNATURE`: the chosen requirement and its signed proof.
///
/// The scheme's proof (`payload`) stays the JSON text the client sent: it is read in place where
/// the middleware needs a field of it, and forwarded to the facilitator byte for byte. Two
/// payments are equal when their proofs are the same text.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PaymentPayload {
    /// Always 2.
    pub x402_version: X402Version,
    /// The resource the client believes it pays for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource: Option<ResourceInfo>,
    /// The requirement the client chose, echoed from the challenge.
    pub accepted: PaymentRequirements,
    /// Scheme-specific proof as the client wrote it; [`exact_evm`](Self::exact_evm) and
    /// [`upto_evm`](Self::upto_evm) read it as EVM `exact` or `upto`. Build one with
    /// [`serde_json::value::to_raw_value`].
    pub payload: Box<RawValue>,
    /// The server's extensions, echoed, plus anything the client adds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extensions: Option<Map<String, Value>>,
}

impl PartialEq for PaymentPayload {
    fn eq(&self, other: &Self) -> bool {
        self.x402_version == other.x402_version
            && self.resource == other.resource
            && self.accepted == other.accepted
            && self.payload.get() == other.payload.get()
            && self.extensions == other.extensions
    }
}

impl PaymentPayload {
    /// The payload as an EVM `exact` EIP-3009 authorization.
    ///
    /// # Errors
    ///
    /// When `payload` does not have that shape.
    pub fn exact_evm(&self) -> Result<ExactEvmPayload, serde_json::Error> {
        serde_json::from_str(self.payload.get())
    }

    /// The payload as an EVM `upto` Permit2 permit with its witness.
    ///
    /// # Errors
    ///
    /// When `payload` does not have that shape.
    pub fn upto_evm(&self) -> Result<UptoEvmPayload, serde_json::Error> {
        serde_json::from_str(self.payload.get())
    }

    /// The payload as an EVM `exact` payment by Permit2 (a permit to the `exact` proxy). An
    /// `upto` permit has this shape too, with one more witness field: tell them apart by the
    /// requirement's scheme, or try [`upto_evm`](Self::upto_evm) first.
    ///
    /// # Errors
    ///
    /// When `payload` does not have that shape.
    pub fn exact_permit2(&self) -> Result<ExactPermit2Payload, serde_json::Error> {
        serde_json::from_str(self.payload.get())
    }

    /// A gas-sponsoring extension's `info` the buyer put in the payment's `extensions`
    /// (`key` is [`EIP2612_GAS_SPONSORING`](crate::EIP2612_GAS_SPONSORING) or
    /// [`ERC20_APPROVAL_GAS_SPONSORING`](crate::ERC20_APPROVAL_GAS_SPONSORING)): `None` when
    /// absent or when its `info` has no `from` (the server's declaration, echoed unfilled),
    /// `Some(Err)` when filled in but not of the shape `T`.
    pub fn sponsoring<T: serde::de::DeserializeOwned>(
        &self,
        key: &str,
    ) -> Option<Result<T, serde_json::Error>> {
        let info = self.extensions.as_ref()?.get(key)?.get("info")?;
        info.get("from")?;
        Some(T::deserialize(info))
    }

    /// The address that signed the payment: an `exact` EIP-3009 authorization's `from`, or a
    /// Permit2 permit's owner (`exact` or `upto`); `None` for a payload of another shape.
    ///
    /// ```
    /// use x402_wire::PaymentPayload;
    ///
    /// let payload: PaymentPayload = serde_json::from_value(serde_json::json!({
    ///     "x402Version": 2,
    ///     "accepted": {
    ///         "scheme": "exact", "network": "eip155:8453", "amount": "10000",
    ///         "asset": "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913",
    ///         "payTo": "0x209693Bc6afc0C5328bA36FaF03C514EF312287C", "maxTimeoutSeconds": 60,
    ///     },
    ///     "payload": { "signature": "0x01", "authorization": {
    ///         "from": "0x857b06519E91e3A54538791bDbb0E22373e36b66",
    ///         "to": "0x209693Bc6afc0C5328bA36FaF03C514EF312287C", "value": "10000",
    ///         "validAfter": "0", "validBefore": "1900000000",
    ///         "nonce": "0x0000000000000000000000000000000000000000000000000000000000000001",
    ///     } },
    /// }))?;
    /// assert_eq!(payload.payer().as_deref(), Some("0x857b06519E91e3A54538791bDbb0E22373e36b66"));
    /// # Ok::<_, serde_json::Error>(())
    /// ```
    pub fn payer(&self) -> Option<String> {
        match self.exact_evm() {
            Ok(evm) => Some(evm.authorization.from),
            Err(_) => self
                .exact_permit2()
                .ok()
                .map(|permit| permit.permit2_authorization.from),
        }
    }

    /// The `payment-identifier` extension id, when the client supplied one.
    pub fn payment_identifier(&self) -> Option<&str> {
        self.extensions
            .as_ref()?
            .get("payment-identifier")?
            .get("info")?
            .get("id")?
            .as_str()
    }
}

/// The `payload` of an EVM `exact` payment made with EIP-3009 `transferWithAuthorization`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExactEvmPayload {
    /// 65-byte ECDSA signature, 0x-hex.
    pub signature: String,
    /// The signed authorization.
    pub authorization: Eip3009Authorization,
}

/// The EIP-3009 `TransferWithAuthorization` message; every value is a string on the wire.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Eip3009Authorization {
    /// Payer address.
    pub from: String,
    /// Recipient address; must equal the requirement's `payTo`.
    pub to: String,
    /// Amount in atomic units, decimal.
    pub value: String,
    /// Unix seconds before which the authorization is not valid, decimal.
    pub valid_after: String,
    /// Unix seconds from which the authorization is no longer valid, decimal.
    pub valid_before: String,
    /// 32 random bytes, 0x-hex.
    pub nonce: String,
}

/// Whether payments of `requirement` settle a metered amount (scheme `upto`): an amount the
/// work decides, up to the signed maximum.
///
/// ```
/// use x402_wire::{is_metered, PaymentRequirements};
///
/// let requirement: PaymentRequirements = serde_json::from_value(serde_json::json!({
///     "scheme": "upto", "network": "eip155:8453", "amount": "500000",
///     "asset": "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913",
///     "payTo": "0x209693Bc6afc0C5328bA36FaF03C514EF312287C", "maxTimeoutSeconds": 60
/// }))?;
/// assert!(is_metered(&requirement));
/// # Ok::<_, serde_json::Error>(())
/// ```
pub fn is_metered(requirement: &PaymentRequirements) -> bool {
    requirement.scheme == UPTO_SCHEME
}

#[cfg(test)]
mod tests {
    use super::*;

    const PROOF: &str = "{ \"signature\": \"0x01\",\n  \"authorization\": {\"nonce\": \"0x02\", \"from\": \"0x03\"} }";

    fn payment(proof: &str) -> PaymentPayload {
        serde_json::from_str(&format!(
            r#"{{"x402Version":2,"accepted":{{"scheme":"exact","network":"eip155:8453",
            "amount":"1000","asset":"0xa","payTo":"0xb","maxTimeoutSeconds":60}},
            "payload":{proof}}}"#
        ))
        .unwrap()
    }

    #[test]
    fn the_proof_is_forwarded_as_the_client_wrote_it() {
        let payment = payment(PROOF);
        assert_eq!(payment.payload.get(), PROOF);
        let forwarded = serde_json::to_string(&payment).unwrap();
        assert!(forwarded.contains(PROOF), "{forwarded}");
        assert_eq!(
            serde_json::from_str::<PaymentPayload>(&forwarded).unwrap(),
            payment
        );
    }

    #[test]
    fn payments_are_equal_when_their_proofs_are_the_same_text() {
        assert_eq!(payment(PROOF), payment(PROOF));
        assert_ne!(payment(PROOF), payment(&PROOF.replace("0x02", "0x04")));
    }

    #[test]
    fn a_proof_is_read_from_a_json_value_too() {
        let value = serde_json::to_value(payment(PROOF)).unwrap();
        let payment: PaymentPayload = serde_json::from_value(value).unwrap();
        let proof: Value = serde_json::from_str(payment.payload.get()).unwrap();
        assert_eq!(proof["authorization"]["nonce"], "0x02");
    }
}
