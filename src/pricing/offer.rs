//! An offer: the resource, its accepts and extensions, precomputed into the exact 402 challenge.

use bytes::Bytes;
use http::HeaderValue;

use crate::proto::{
    Extension, Extensions, MoneyError, PaymentRequired, PaymentRequirements, ResourceInfo,
    UsdAmount, UsdcDeployment, X402Version, header,
};

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
}

/// Why an [`Offer`] could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OfferError {
    /// An offer needs at least one accept.
    #[error("offer for {url} has no accepts")]
    NoAccepts {
        /// The resource URL.
        url: String,
    },
    /// The resource URL is not absolute.
    #[error("resource URL `{url}` is not an absolute http(s) URL")]
    RelativeUrl {
        /// The URL given.
        url: String,
    },
    /// A price could not be converted to the asset's units.
    #[error("price of {url}: {source}")]
    Money {
        /// The resource URL.
        url: String,
        /// The money error.
        #[source]
        source: MoneyError,
    },
    /// The challenge could not be encoded.
    #[error("challenge of {url} could not be encoded: {source}")]
    Encode {
        /// The resource URL.
        url: String,
        /// The encoding error.
        #[source]
        source: header::HeaderError,
    },
}

/// A priced resource: what is sold and the ways to pay for it.
///
/// Building an offer encodes its `PAYMENT-REQUIRED` header and JSON body once; serving a 402
/// afterwards only clones reference-counted bytes.
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
    required: PaymentRequired,
    mode: SettlementMode,
    header: HeaderValue,
    body: Bytes,
}

impl Offer {
    /// Starts an offer for `resource`.
    pub fn builder(resource: ResourceInfo) -> OfferBuilder {
        OfferBuilder {
            resource,
            accepts: Vec::new(),
            extensions: Extensions::new(),
            mode: SettlementMode::default(),
            max_timeout_seconds: DEFAULT_MAX_TIMEOUT_SECONDS,
            error: None,
        }
    }

    /// The challenge a 402 carries for this offer; its `error` is
    /// `"PAYMENT-SIGNATURE header is required"`.
    pub fn payment_required(&self) -> &PaymentRequired {
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
    pub fn extensions(&self) -> Option<&Extensions> {
        self.required.extensions.as_ref()
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
        let required = &self.required;
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

    /// The server's accept that the client's `accepted` names, if any.
    pub(crate) fn find_accept(
        &self,
        accepted: &PaymentRequirements,
    ) -> Option<&PaymentRequirements> {
        self.required
            .accepts
            .iter()
            .find(|own| own.matches(accepted))
    }

    /// The challenge with a different `error` text, for rejections that explain themselves.
    pub(crate) fn challenge_with_error(&self, error: impl Into<String>) -> PaymentRequired {
        let mut required = self.required.clone();
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
    resource: ResourceInfo,
    accepts: Vec<PaymentRequirements>,
    extensions: Extensions,
    mode: SettlementMode,
    max_timeout_seconds: u64,
    error: Option<OfferError>,
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

    /// Validates the offer and precomputes its challenge.
    ///
    /// # Errors
    ///
    /// No accepts, a relative resource URL, or a price the asset cannot represent.
    pub fn build(self) -> Result<Offer, OfferError> {
        if let Some(error) = self.error {
            return Err(error);
        }
        let url = &self.resource.url;
        if !(url.starts_with("https://") || url.starts_with("http://")) {
            return Err(OfferError::RelativeUrl { url: url.clone() });
        }
        if self.accepts.is_empty() {
            return Err(OfferError::NoAccepts { url: url.clone() });
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
        let header = header::encode(&required).map_err(encode_error)?;
        let body = serde_json::to_vec(&required)
            .map_err(|e| encode_error(header::HeaderError::Encode(e)))?
            .into();
        Ok(Offer {
            required,
            mode: self.mode,
            header,
            body,
        })
    }
}
