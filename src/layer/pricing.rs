//! Deciding what a request costs.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use http::request::Parts;

use super::Offer;

/// Decides what a request costs: `Some(offer)` to charge, `None` to let it through for free.
///
/// Implemented for closures over the request head, for `Arc<Offer>` (one price for everything
/// behind the layer) and for [`PriceTable`].
///
/// A free request passes to the inner service untouched, with no allocation by the layer.
///
/// ```
/// use std::sync::Arc;
/// use http::request::Parts;
/// use tower_x402::{Offer, Pricing};
///
/// fn premium_only(offer: Arc<Offer>) -> impl Pricing {
///     move |parts: &Parts| parts.uri.path().starts_with("/premium/").then(|| offer.clone())
/// }
/// ```
pub trait Pricing: Send + Sync + 'static {
    /// The offer `request` must pay for, or `None` when it is free.
    fn offer(&self, request: &Parts) -> Option<Arc<Offer>>;
}

impl<F> Pricing for F
where
    F: Fn(&Parts) -> Option<Arc<Offer>> + Send + Sync + 'static,
{
    fn offer(&self, request: &Parts) -> Option<Arc<Offer>> {
        self(request)
    }
}

/// One price for every request behind the layer. Put the layer on a single route.
///
/// The offer is shared, not copied: wrap a built [`Offer`] in an `Arc` once.
impl Pricing for Arc<Offer> {
    fn offer(&self, _request: &Parts) -> Option<Arc<Offer>> {
        Some(Arc::clone(self))
    }
}

/// Offers by exact request path, whatever the method (a priced path is never free).
///
/// The path is compared byte for byte with `uri.path()` as received — not decoded, not
/// normalized — which is how axum's router matches routes too. So a variant such as
/// `/report/`, `//report` or `/%72eport` is neither priced here nor routed to the `/report`
/// handler. Use the table as a layer on a router that matches raw paths (axum does); when the
/// router in front decodes or normalizes paths, price with a closure that applies the same rule.
///
/// ```
/// use tower_x402::layer::PriceTable;
/// # use tower_x402::{Offer, proto::{ResourceInfo, UsdcDeployment}};
/// # let offer = Offer::builder(ResourceInfo::new("https://shop.example/report"))
/// #     .usdc(&UsdcDeployment::BASE, "1.00".parse().unwrap(), "0x209693Bc6afc0C5328bA36FaF03C514EF312287C")
/// #     .build().unwrap();
/// let table = PriceTable::new().with("/report", offer);
/// assert_eq!(table.len(), 1);
/// ```
#[derive(Clone, Default)]
pub struct PriceTable {
    by_path: HashMap<String, Arc<Offer>>,
}

impl PriceTable {
    /// An empty table: everything is free.
    pub fn new() -> Self {
        Self::default()
    }

    /// Prices `path` (exact, raw) with `offer`.
    #[must_use]
    pub fn with(mut self, path: impl Into<String>, offer: impl Into<Arc<Offer>>) -> Self {
        self.insert(path, offer);
        self
    }

    /// Prices `path` (exact, raw) with `offer`, replacing any earlier price.
    pub fn insert(&mut self, path: impl Into<String>, offer: impl Into<Arc<Offer>>) {
        self.by_path.insert(path.into(), offer.into());
    }

    /// The offer for `path`, if priced.
    pub fn get(&self, path: &str) -> Option<&Arc<Offer>> {
        self.by_path.get(path)
    }

    /// How many paths are priced.
    pub fn len(&self) -> usize {
        self.by_path.len()
    }

    /// Whether nothing is priced.
    pub fn is_empty(&self) -> bool {
        self.by_path.is_empty()
    }

    /// Every priced path and its offer, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Arc<Offer>)> {
        self.by_path
            .iter()
            .map(|(path, offer)| (path.as_str(), offer))
    }
}

impl Pricing for PriceTable {
    fn offer(&self, request: &Parts) -> Option<Arc<Offer>> {
        self.by_path.get(request.uri.path()).cloned()
    }
}

impl fmt::Debug for PriceTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.by_path.keys()).finish()
    }
}
