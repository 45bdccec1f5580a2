//! An offer: the resource, its accepts and extensions, precomputed into the exact 402 challenge.

use std::sync::Arc;

use bytes::Bytes;
use http::HeaderValue;
use serde_json::{Map, Value};
use x402_wire::{
    Extension, PaymentRequired, PaymentRequirements, ResourceInfo, UPTO_SCHEME as UPTO, UsdAmount,
    UsdcDeployment, X402Version, header, is_metered,
};

use super::added::{AddedExtension, AddedValue};
pub use super::error::OfferError;
use super::spliced::{ExtensionTemplate, Prebuilt, Splices};

/// `extra` keys and values of a metered (`upto`) accept.
use x402_wire::ASSET_TRANSFER_METHOD;
pub(super) const PERMIT2: &str = x402_wire::PERMIT2_TRANSFER_METHOD;
const FACILITATOR_ADDRESS: &str = "facilitatorAddress";

/// The `error` text of the challenge sent when a request carries no payment.
pub(crate) const UNPAID_ERROR: &str = "PAYMENT-SIGNATURE header is required";

/// When the layer settles a verified payment, relative to running the inner service.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SettlementMode {
    /// Verify, run the inner service, then settle only if it answered with a status below 400.
    /// The buyer is never charged for an error; the inner service's work happens before the
    /// money moves, so use it for work that is cheap to repeat or to discard.
    #[default]
    After,
    /// Verify, settle, then run the inner service, which sees the settlement in
    /// [`VerifiedPayment`](crate::VerifiedPayment). Use it when the handler has lasting effects
    /// (issuing a receipt, recording an order) that must never happen unpaid.
    Before,
    /// Verify, run the inner service, send the response head and stream its body as it is
    /// produced, then settle once the body has ended: for a response whose cost is known only at
    /// its end, such as tokens streamed as server-sent events, metered through a
    /// [`Charge`](crate::Charge). The outcome travels in a `PAYMENT-RESPONSE` HTTP trailer
    /// (HTTP/2, or HTTP/1.1 chunked to a client that sent `TE: trailers`), and the same payment
    /// presented again is answered with it from the settlement record.
    ///
    /// The seller's risk: the content is served before the money moves. The payment was
    /// verified first and the buyer's authorization bounds the loss; a settlement that fails
    /// after the body is lost revenue, never a second charge. A client that disconnects
    /// mid-stream is charged for what was sent, once: the settlement runs on a task of its own.
    AfterBody,
}

impl SettlementMode {
    /// Whether payments settle after the inner service ran ([`After`](Self::After) and
    /// [`AfterBody`](Self::AfterBody)).
    pub fn settles_after_work(self) -> bool {
        !matches!(self, Self::Before)
    }
}

/// A priced resource: what is sold and the ways to pay for it.
///
/// Building an offer encodes its `PAYMENT-REQUIRED` header and JSON body once; serving a 402
/// afterwards only clones reference-counted bytes. A challenge whose header passes
/// [`WARN_LEN`](super::header_budget::WARN_LEN) bytes logs a warning: behind a stock nginx,
/// whose buffer for a response's headers is 4 KB, its 402 would become a 502
/// ([`header_budget`](super::header_budget)).
///
/// ```
/// use tower_x402::proto::{ResourceInfo, UsdcDeployment};
/// use tower_x402::{Offer, SettlementMode};
///
/// let offer = Offer::builder(ResourceInfo::new("https://shop.example/api/report"))
///     .usdc(&UsdcDeployment::BASE, "1.00".parse()?, "0x209693Bc6afc0C5328bA36FaF03C514EF312287C")
///     .settlement(SettlementMode::Before)
///     .build()?;
/// assert_eq!(offer.accepts()[0].amount.to_string(), "1000000");
/// # Ok::<_, Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
pub struct Offer {
    required: Arc<PaymentRequired>,
    /// An extension added for one request (a sign-in nonce), when `required` is the challenge
    /// without it; `header` and `body` carry it.
    added: Option<Arc<AddedExtension>>,
    mode: SettlementMode,
    header: HeaderValue,
    body: Bytes,
    /// The accepts of `required`, each shared with the payments made against it, so that a
    /// payment carries its requirement without copying it.
    shared_accepts: Arc<[Arc<PaymentRequirements>]>,
    /// The resource's URL, shared with the ledger's states and records of the payments made
    /// against it.
    resource_url: Arc<str>,
    /// The challenge prebuilt with the hooks' extension templates, shared by the offer's
    /// clones; `None` in an offer extended for one request.
    splices: Option<Arc<Splices>>,
}

impl Offer {
    /// Starts an offer for `resource`.
    pub fn builder(resource: ResourceInfo) -> OfferBuilder {
        OfferBuilder {
            resource,
            accepts: Vec::new(),
            extensions: Map::new(),
            mode: SettlementMode::default(),
            max_timeout_seconds: DEFAULT_MAX_TIMEOUT_SECONDS,
            error: None,
        }
    }

    /// The challenge a 402 carries for this offer; its `error` is
    /// `"PAYMENT-SIGNATURE header is required"`.
    pub fn payment_required(&self) -> &PaymentRequired {
        if let Some(added) = &self.added {
            return added.challenge(&self.required);
        }
        &self.required
    }

    /// The resource sold.
    pub fn resource(&self) -> &ResourceInfo {
        &self.required.resource
    }

    /// The accepted ways to pay, in order of preference.
    pub fn accepts(&self) -> &[PaymentRequirements] {
        &self.required.accepts
    }

    /// The extensions declared in the challenge.
    pub fn extensions(&self) -> Option<&Map<String, Value>> {
        self.payment_required().extensions.as_ref()
    }

    /// When this offer's payments are settled.
    pub fn settlement_mode(&self) -> SettlementMode {
        self.mode
    }

    /// The same offer as a builder, to add accepts or extensions to a copy.
    ///
    /// ```
    /// # use tower_x402::proto::{Extension, ResourceInfo, UsdcDeployment};
    /// # use tower_x402::Offer;
    /// # let offer = Offer::builder(ResourceInfo::new("https://shop.example/report"))
    /// #     .usdc(&UsdcDeployment::BASE, "1.00".parse()?, "0x209693Bc6afc0C5328bA36FaF03C514EF312287C")
    /// #     .build()?;
    /// let with_bazaar = offer
    ///     .to_builder()
    ///     .extension("bazaar", Extension::new(serde_json::json!({"info": {}}), serde_json::json!({})))
    ///     .build()?;
    /// assert!(with_bazaar.extensions().is_some_and(|e| e.contains_key("bazaar")));
    /// assert_eq!(with_bazaar.accepts(), offer.accepts());
    /// # Ok::<_, Box<dyn std::error::Error>>(())
    /// ```
    pub fn to_builder(&self) -> OfferBuilder {
        let required = self.payment_required();
        OfferBuilder {
            resource: required.resource.clone(),
            accepts: required.accepts.clone(),
            extensions: required.extensions.clone().unwrap_or_default(),
            mode: self.mode,
            max_timeout_seconds: DEFAULT_MAX_TIMEOUT_SECONDS,
            error: None,
        }
    }

    /// The precomputed `PAYMENT-REQUIRED` header value.
    pub(crate) fn challenge_header(&self) -> &HeaderValue {
        &self.header
    }

    /// The precomputed JSON body of the 402 (the same object as the header).
    pub(crate) fn challenge_body(&self) -> &Bytes {
        &self.body
    }

    /// The resource's URL, shared rather than copied into what the ledger keeps of a payment.
    pub(crate) fn resource_url(&self) -> &Arc<str> {
        &self.resource_url
    }

    /// The first of the server's accepts that `pays` says a payment pays, if any.
    pub(crate) fn find_accept(
        &self,
        pays: impl Fn(&PaymentRequirements) -> bool,
    ) -> Option<&Arc<PaymentRequirements>> {
        self.shared_accepts.iter().find(|own| pays(own))
    }

    /// This offer with `extension` under `key` in its challenge: a per-request challenge such as
    /// a sign-in nonce. The encoded challenge is extended in place rather than encoded again
    /// whole (the rest of a challenge can be kilobytes of discovery schemas), and the object
    /// with the extension is only built if something asks for it. `None` if it cannot be
    /// encoded.
    ///
    /// ```
    /// use serde_json::value::to_raw_value;
    /// use tower_x402::Offer;
    /// use tower_x402::proto::{ResourceInfo, UsdcDeployment};
    ///
    /// let offer = Offer::builder(ResourceInfo::new("https://shop.example/report"))
    ///     .usdc(&UsdcDeployment::BASE, "1.00".parse()?, "0x209693Bc6afc0C5328bA36FaF03C514EF312287C")
    ///     .build()?;
    /// let once = offer.with_extension("nonce", to_raw_value(&"a1b2")?).expect("encodable");
    /// assert_eq!(once.payment_required().extensions.as_ref().unwrap()["nonce"], "a1b2");
    /// # Ok::<_, Box<dyn std::error::Error>>(())
    /// ```
    pub fn with_extension(
        &self,
        key: &str,
        extension: Box<serde_json::value::RawValue>,
    ) -> Option<Self> {
        let extensions = self.required.extensions.as_ref();
        if self.added.is_some() || extensions.is_some_and(|map| map.contains_key(key)) {
            // Adding a second one, or replacing one: the object, encoded whole.
            return self.with_extension_encoded_whole(key, &extension);
        }
        let body = super::added::append_extension(&self.body, extensions, key, &extension)?;
        Some(Self {
            required: Arc::clone(&self.required),
            added: Some(Arc::new(AddedExtension::new(
                key.into(),
                AddedValue::Raw(extension),
            ))),
            mode: self.mode,
            header: header::encode_json(&body).ok()?,
            body: body.into(),
            shared_accepts: Arc::clone(&self.shared_accepts),
            resource_url: Arc::clone(&self.resource_url),
            splices: None,
        })
    }

    #[cold]
    fn with_extension_encoded_whole(
        &self,
        key: &str,
        extension: &serde_json::value::RawValue,
    ) -> Option<Self> {
        let mut required = self.payment_required().clone();
        required
            .extensions
            .get_or_insert_with(Map::new)
            .insert(key.to_owned(), serde_json::from_str(extension.get()).ok()?);
        let body = serde_json::to_vec(&required).ok()?;
        Some(Self {
            required: Arc::new(required),
            added: None,
            mode: self.mode,
            header: header::encode_json(&body).ok()?,
            body: body.into(),
            shared_accepts: Arc::clone(&self.shared_accepts),
            resource_url: Arc::clone(&self.resource_url),
            splices: None,
        })
    }

    /// The challenges this offer keeps prebuilt with hooks' extension templates; `None` for an
    /// offer already extended for one request.
    pub(crate) fn splices(&self) -> Option<&Splices> {
        self.splices.as_deref()
    }

    /// This offer's challenge prebuilt up to `template`'s head; `None` when the offer was
    /// extended already, or holds the template's key.
    pub(crate) fn prebuild(&self, template: &ExtensionTemplate) -> Option<Prebuilt> {
        let extensions = self.required.extensions.as_ref();
        if self.added.is_some() || extensions.is_some_and(|map| map.contains_key(template.key())) {
            return None;
        }
        super::spliced::prebuild(&self.body, extensions, template)
    }

    /// This offer with the extension `prebuilt` (from this offer) completed by `rest`: the
    /// prebuilt bytes copied, only `rest` encoded.
    pub(crate) fn with_spliced(&self, prebuilt: &Prebuilt, rest: &[u8]) -> Option<Self> {
        let (buffer, json_len) = prebuilt.complete(rest)?;
        let header = HeaderValue::from_maybe_shared(buffer.slice(json_len..)).ok()?;
        let body = buffer.slice(..json_len);
        let rest_start = prebuilt.json.len();
        let added = AddedValue::Spliced {
            head: Arc::clone(&prebuilt.head),
            rest: body.slice(rest_start..rest_start + rest.len()),
        };
        Some(Self {
            required: Arc::clone(&self.required),
            added: Some(Arc::new(AddedExtension::new(
                Arc::clone(&prebuilt.key),
                added,
            ))),
            mode: self.mode,
            header,
            body,
            shared_accepts: Arc::clone(&self.shared_accepts),
            resource_url: Arc::clone(&self.resource_url),
            splices: None,
        })
    }

    /// The challenge with a different `error` text, for rejections that explain themselves.
    pub(crate) fn challenge_with_error(&self, error: impl Into<String>) -> PaymentRequired {
        let mut required = self.payment_required().clone();
        required.error = Some(error.into());
        required
    }
}

/// How long a signed payment stays usable unless an offer says otherwise (the value the
/// TypeScript and Python reference servers use).
const DEFAULT_MAX_TIMEOUT_SECONDS: u64 = 300;

/// Builds an [`Offer`]; see [`Offer::builder`].
#[derive(Debug)]
#[must_use]
pub struct OfferBuilder {
    pub(super) resource: ResourceInfo,
    pub(super) accepts: Vec<PaymentRequirements>,
    extensions: Map<String, Value>,
    mode: SettlementMode,
    pub(super) max_timeout_seconds: u64,
    pub(super) error: Option<OfferError>,
}

impl OfferBuilder {
    /// Adds an accept exactly as given.
    pub fn accept(mut self, requirement: PaymentRequirements) -> Self {
        self.accepts.push(requirement);
        self
    }

    /// Adds an `exact` USDC accept for `price` on `usdc`'s network, paid to `pay_to`, with the
    /// token's EIP-712 domain in `extra` on EVM networks.
    pub fn usdc(
        mut self,
        usdc: &UsdcDeployment,
        price: UsdAmount,
        pay_to: impl Into<String>,
    ) -> Self {
        match price.to_atomic(usdc.decimals) {
            Ok(amount) => {
                self.accepts.push(PaymentRequirements {
                    scheme: "exact".to_owned(),
                    network: usdc.network.clone(),
                    amount,
                    asset: usdc.asset.to_owned(),
                    pay_to: pay_to.into(),
                    max_timeout_seconds: self.max_timeout_seconds,
                    extra: usdc.eip712.map(|domain| domain.to_extra()),
                });
            }
            Err(source) => {
                self.error.get_or_insert(OfferError::Money {
                    url: self.resource.url.clone(),
                    source,
                });
            }
        }
        self
    }

    /// Adds a metered `upto` USDC accept of at most `maximum` on `usdc`'s network (EVM only),
    /// paid to `pay_to`: the buyer signs a Permit2 authorization of the maximum, the handler
    /// decides what the request cost through a [`Charge`](crate::Charge), and the layer settles
    /// that amount after the work.
    ///
    /// `extra` carries the token's EIP-712 `name` and `version`, `assetTransferMethod:
    /// "permit2"`, and — once the offer is built with [`build_for`](Self::build_for) — the
    /// `facilitatorAddress` the facilitator lists for `upto` on that network in `/supported`.
    ///
    /// ```
    /// use tower_x402::proto::{ResourceInfo, UsdcDeployment};
    /// use tower_x402::Offer;
    ///
    /// let builder = Offer::builder(ResourceInfo::new("https://api.example.com/v1/rows"))
    ///     .usdc_upto(&UsdcDeployment::BASE, "0.50".parse()?, "0x209693Bc6afc0C5328bA36FaF03C514EF312287C");
    /// // Without the facilitator's address no buyer could sign: `build` refuses it.
    /// assert!(builder.build().is_err());
    /// # Ok::<_, Box<dyn std::error::Error>>(())
    /// ```
    pub fn usdc_upto(
        mut self,
        usdc: &UsdcDeployment,
        maximum: UsdAmount,
        pay_to: impl Into<String>,
    ) -> Self {
        let Some(domain) = usdc
            .eip712
            .filter(|_| usdc.network.evm_chain_id().is_some())
        else {
            self.error.get_or_insert(OfferError::Metered {
                url: self.resource.url.clone(),
                reason: format!(
                    "`upto` is offered on EVM networks only, not {}",
                    usdc.network
                ),
            });
            return self;
        };
        match maximum.to_atomic(usdc.decimals) {
            Ok(amount) => {
                let mut extra = domain.to_extra();
                extra.insert(ASSET_TRANSFER_METHOD.into(), PERMIT2.into());
                self.accepts.push(PaymentRequirements {
                    scheme: UPTO.to_owned(),
                    network: usdc.network.clone(),
                    amount,
                    asset: usdc.asset.to_owned(),
                    pay_to: pay_to.into(),
                    max_timeout_seconds: self.max_timeout_seconds,
                    extra: Some(extra),
                });
            }
            Err(source) => {
                self.error.get_or_insert(OfferError::Money {
                    url: self.resource.url.clone(),
                    source,
                });
            }
        }
        self
    }

    /// `maxTimeoutSeconds` for accepts added by [`usdc`](Self::usdc) after this call
    /// (default 300, the value the TypeScript and Python reference servers use).
    pub fn max_timeout_seconds(mut self, seconds: u64) -> Self {
        self.max_timeout_seconds = seconds;
        self
    }

    /// Declares an extension (e.g. `bazaar`) in the challenge.
    pub fn extension(mut self, key: impl Into<String>, extension: Extension) -> Self {
        self.extensions.insert(key.into(), extension.into_value());
        self
    }

    /// Chooses when payments for this offer settle (default [`SettlementMode::After`]).
    pub fn settlement(mut self, mode: SettlementMode) -> Self {
        self.mode = mode;
        self
    }

    /// Completes the metered (`upto`) accepts from `facilitator`'s `GET /supported`, then
    /// [`build`](Self::build)s the offer: each gets the `facilitatorAddress` the facilitator
    /// lists for `upto` on its network. A metered accept whose network the facilitator does not
    /// list for `upto` (or lists without an address) is left out of the offer, and why is
    /// logged once, here — a challenge never names a way to pay the facilitator cannot settle.
    /// Build offers once, at start-up; without metered accepts `/supported` is not read.
    ///
    /// # Errors
    ///
    /// As [`build`](Self::build), [`OfferError::NoAccepts`] when every accept was left out, and
    /// [`OfferError::Supported`] when `/supported` could not be read.
    pub async fn build_for<F>(mut self, facilitator: &F) -> Result<Offer, OfferError>
    where
        F: crate::facilitator::Facilitator + ?Sized,
    {
        if self.error.is_none() && self.accepts.iter().any(is_metered) {
            let supported =
                facilitator
                    .supported()
                    .await
                    .map_err(|source| OfferError::Supported {
                        url: self.resource.url.clone(),
                        source,
                    })?;
            let url = &self.resource.url;
            self.accepts.retain_mut(|accept| {
                if !is_metered(accept) {
                    return true;
                }
                let address = supported
                    .kinds
                    .iter()
                    .find(|kind| {
                        kind.x402_version == X402Version::V2
                            && kind.scheme == UPTO
                            && kind.network == accept.network
                    })
                    .map(|kind| {
                        kind.extra
                            .as_ref()
                            .and_then(|extra| extra.get(FACILITATOR_ADDRESS))
                            .and_then(|address| address.as_str())
                    });
                match address {
                    Some(Some(address)) => {
                        accept
                            .extra
                            .get_or_insert_with(Default::default)
                            .insert(FACILITATOR_ADDRESS.into(), address.into());
                        true
                    }
                    Some(None) => {
                        tracing::warn!(resource = %url, network = %accept.network, "the facilitator lists `upto` without a facilitatorAddress; the metered accept is not offered");
                        false
                    }
                    None => {
                        tracing::warn!(resource = %url, network = %accept.network, "the facilitator does not list `upto` on this network in /supported; the metered accept is not offered");
                        false
                    }
                }
            });
        }
        self.build()
    }

    /// Validates the offer and precomputes its challenge.
    ///
    /// # Errors
    ///
    /// No accepts, a resource URL that is neither absolute `http(s)` nor `mcp://`, a price the asset cannot represent, or a metered
    /// (`upto`) accept that cannot be paid as built: without an `extra.facilitatorAddress`
    /// (build it with [`build_for`](Self::build_for)) or in [`SettlementMode::Before`] (its
    /// amount is known only after the work).
    pub fn build(self) -> Result<Offer, OfferError> {
        if let Some(error) = self.error {
            return Err(error);
        }
        let url = &self.resource.url;
        // `mcp://tool/{name}` names a paid MCP tool (the MCP transport's default).
        if !["https://", "http://", "mcp://"]
            .iter()
            .any(|scheme| url.starts_with(scheme))
        {
            return Err(OfferError::RelativeUrl { url: url.clone() });
        }
        if self.accepts.is_empty() {
            return Err(OfferError::NoAccepts { url: url.clone() });
        }
        for accept in self.accepts.iter().filter(|accept| is_metered(accept)) {
            let reason = if self.mode == SettlementMode::Before {
                "a metered payment settles after the work, never in SettlementMode::Before"
            } else if !accept
                .extra
                .as_ref()
                .and_then(|extra| extra.get(FACILITATOR_ADDRESS))
                .is_some_and(serde_json::Value::is_string)
            {
                "no extra.facilitatorAddress, without which no buyer can sign: build the offer \
                 with `build_for(&facilitator)`"
            } else {
                continue;
            };
            return Err(OfferError::Metered {
                url: url.clone(),
                reason: format!("{} on {}: {reason}", accept.scheme, accept.network),
            });
        }
        let required = PaymentRequired {
            x402_version: X402Version::V2,
            error: Some(UNPAID_ERROR.to_owned()),
            resource: self.resource,
            accepts: self.accepts,
            extensions: (!self.extensions.is_empty()).then_some(self.extensions),
        };
        let encode_error = |source| OfferError::Encode {
            url: required.resource.url.clone(),
            source,
        };
        // Serialized once: the body is the JSON, the header its base64.
        let body = serde_json::to_vec(&required)
            .map_err(|e| encode_error(header::HeaderError::Encode(e)))?;
        let header = header::encode_json(&body).map_err(encode_error)?;
        super::header_budget::check(&required.resource.url, header.len(), "");
        let shared_accepts = required.accepts.iter().cloned().map(Arc::new).collect();
        Ok(Offer {
            shared_accepts,
            resource_url: required.resource.url.as_str().into(),
            required: Arc::new(required),
            added: None,
            mode: self.mode,
            header,
            body: body.into(),
            splices: Some(Arc::default()),
        })
    }
}
