//! [`ProtectedRequest`], a priced request as the hooks see it, in no transport's terms.

use std::sync::Arc;

use http::{HeaderMap, HeaderName, Method};
use serde_json::{Map, Value};

use crate::pricing::Offer;

/// A priced request as the hooks see it, in no transport's terms.
#[derive(Debug)]
pub struct ProtectedRequest<'a> {
    pub(super) offer: &'a Arc<Offer>,
    path: &'a str,
    fields: Fields<'a>,
    paying: bool,
}

#[derive(Clone, Copy, Debug)]
enum Fields<'a> {
    Headers(&'a Method, &'a HeaderMap),
    Meta(Option<&'a Map<String, Value>>),
}

impl<'a> ProtectedRequest<'a> {
    /// An HTTP request for `offer` at `path` (path and query) with `method` and `headers`;
    /// `paying` when it carries a payment.
    pub fn http(
        offer: &'a Arc<Offer>,
        path: &'a str,
        method: &'a Method,
        headers: &'a HeaderMap,
        paying: bool,
    ) -> Self {
        Self {
            offer,
            path,
            fields: Fields::Headers(method, headers),
            paying,
        }
    }

    /// A request without HTTP (an MCP tool call) for `offer` named `path`, whose metadata
    /// (`_meta`, without the payment) is `meta`; `paying` when it carries a payment.
    pub fn meta(
        offer: &'a Arc<Offer>,
        path: &'a str,
        meta: Option<&'a Map<String, Value>>,
        paying: bool,
    ) -> Self {
        Self {
            offer,
            path,
            fields: Fields::Meta(meta),
            paying,
        }
    }

    /// The same request, priced with `offer` (the offer with the hooks' challenge extensions).
    pub(crate) fn with_offer<'b>(&self, offer: &'b Arc<Offer>) -> ProtectedRequest<'b>
    where
        'a: 'b,
    {
        ProtectedRequest {
            offer,
            path: self.path,
            fields: self.fields,
            paying: self.paying,
        }
    }

    /// Whether the request carries a payment (which is read after the hooks let it go on).
    pub fn is_paying(&self) -> bool {
        self.paying
    }

    /// Whether the request can never pay or sign in: an HTTP `HEAD`, which has no body to
    /// deliver and is answered like an unpaid `GET`.
    pub fn is_head(&self) -> bool {
        matches!(self.fields, Fields::Headers(method, _) if *method == Method::HEAD)
    }

    /// The offer the request is priced with.
    pub fn offer(&self) -> &'a Arc<Offer> {
        self.offer
    }

    /// The path and query requested (HTTP), or the name of what is called (MCP).
    pub fn path(&self) -> &'a str {
        self.path
    }

    /// The request's field `name`: an HTTP header (names are case-insensitive), or a string
    /// entry of the MCP `_meta` object.
    pub fn field(&self, name: &str) -> Option<&'a [u8]> {
        match self.fields {
            Fields::Headers(_, headers) => headers.get(name).map(http::HeaderValue::as_bytes),
            Fields::Meta(meta) => meta?.get(name)?.as_str().map(str::as_bytes),
        }
    }

    /// [`field`](Self::field) for a name that is a header name already: the name is not
    /// parsed again (a hook asks for its field on every priced request).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use http::{HeaderMap, HeaderName, Method};
    /// use tower_x402::payment::ProtectedRequest;
    /// use tower_x402::pricing::Offer;
    /// use x402_wire::{ResourceInfo, UsdcDeployment};
    ///
    /// const PROOF: HeaderName = HeaderName::from_static("x-proof");
    /// let offer = Arc::new(
    ///     Offer::builder(ResourceInfo::new("https://shop.example/report"))
    ///         .usdc(&UsdcDeployment::BASE, "0.10".parse()?, "0x209693Bc6afc0C5328bA36FaF03C514EF312287C")
    ///         .build()?,
    /// );
    /// let mut headers = HeaderMap::new();
    /// headers.insert(PROOF, "signed".parse()?);
    /// let request = ProtectedRequest::http(&offer, "/report", &Method::GET, &headers, false);
    /// assert_eq!(request.header_field(&PROOF), Some(&b"signed"[..]));
    /// assert_eq!(request.header_field(&PROOF), request.field("X-Proof"));
    /// # Ok::<_, Box<dyn std::error::Error>>(())
    /// ```
    pub fn header_field(&self, name: &HeaderName) -> Option<&'a [u8]> {
        match self.fields {
            Fields::Headers(_, headers) => headers.get(name).map(http::HeaderValue::as_bytes),
            Fields::Meta(meta) => meta?.get(name.as_str())?.as_str().map(str::as_bytes),
        }
    }
}
