//! What a request costs: [`Offer`]s, and [`Pricing`], which picks one for each request.
//!
//! [`Pricing`] answers every request with a [`Price`]:
//!
//! | price | the layer |
//! |---|---|
//! | [`Price::Free`] | passes the request to the inner service untouched, allocating nothing |
//! | [`Price::Charge`] | asks for payment of the offer, and lets the request through once paid |
//! | [`Price::NotSold`] | answers itself with the given status and a JSON `error`; the inner service is not called |
//! | [`Price::Later`] | waits for the price (read from a database, asked of a quota service), then as above |

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use http::StatusCode;
use http::request::Parts;

use crate::boxed::BoxFuture;

mod added;
mod error;
pub mod header_budget;
mod offer;
mod spliced;
mod stablecoin;

pub(crate) use offer::UNPAID_ERROR;
pub use offer::{Offer, OfferBuilder, OfferError, SettlementMode};
pub use spliced::ExtensionTemplate;
pub(crate) use spliced::{Cached, with_rest_buffer};
pub use stablecoin::{Stablecoin, Stablecoins, TransferMethod};

/// What one request costs; see the [module docs](self).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum Price {
    /// Free: straight to the inner service.
    Free,
    /// Paid for with this offer.
    Charge(Arc<Offer>),
    /// Nothing is sold here: the layer answers `status` with `{"error": message}` and the inner
    /// service is never called. For a priced path space where some names are unknown, such as
    /// `/api/products/{slug}` with a slug no product has.
    NotSold {
        /// The status to answer, e.g. 404.
        status: StatusCode,
        /// The `error` text of the JSON body.
        message: Cow<'static, str>,
    },
    /// Known once a future resolves: a price read from a database, asked of a quota service.
    /// Build it with [`Price::later`].
    Later(PendingPrice),
}

impl Price {
    /// A price known once `price` resolves ([`Price::Later`]); the request waits for it. A
    /// synchronous price costs nothing of this.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use http::request::Parts;
    /// use tower_x402::{Offer, Price, Pricing};
    ///
    /// /// Prices a product by its slug, read from wherever the catalog lives.
    /// async fn lookup(slug: String, offer: Arc<Offer>) -> Price {
    ///     match slug.as_str() {
    ///         "report" => Price::Charge(offer),
    ///         _ => Price::not_found("no such product"),
    ///     }
    /// }
    ///
    /// fn from_the_catalog(offer: Arc<Offer>) -> impl Pricing {
    ///     move |parts: &Parts| {
    ///         let slug = parts.uri.path().trim_start_matches('/').to_owned();
    ///         Price::later(lookup(slug, Arc::clone(&offer)))
    ///     }
    /// }
    /// ```
    pub fn later(price: impl Future<Output = Price> + Send + 'static) -> Self {
        Self::Later(PendingPrice(Arc::new(Mutex::new(Some(Box::pin(price))))))
    }

    /// [`Price::NotSold`] with 404 Not Found.
    pub fn not_found(message: impl Into<Cow<'static, str>>) -> Self {
        Self::NotSold {
            status: StatusCode::NOT_FOUND,
            message: message.into(),
        }
    }
}

/// The future of a [`Price::Later`]. Clones share it: the first to take it waits for it.
#[derive(Clone)]
pub struct PendingPrice(Arc<Mutex<Option<BoxFuture<'static, Price>>>>);

impl PendingPrice {
    /// The future, once: `None` when a clone took it already.
    pub(crate) fn take(&self) -> Option<BoxFuture<'static, Price>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).take()
    }
}

impl fmt::Debug for PendingPrice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PendingPrice")
    }
}

/// `Some(offer)` charges, `None` is free.
impl From<Option<Arc<Offer>>> for Price {
    fn from(offer: Option<Arc<Offer>>) -> Self {
        offer.map_or(Self::Free, Self::Charge)
    }
}

impl From<Arc<Offer>> for Price {
    fn from(offer: Arc<Offer>) -> Self {
        Self::Charge(offer)
    }
}

/// Decides what each request costs.
///
/// Implemented for closures over the request head that return a [`Price`] or an
/// `Option<Arc<Offer>>` (`None` is free) — dynamic pricing, see [`from_fn`] — for `Arc<Offer>`
/// and `Offer` (one price for everything behind the layer) and for [`PriceTable`]. A price that
/// must be looked up asynchronously is a [`Price::later`].
///
/// ```
/// use std::sync::Arc;
/// use http::request::Parts;
/// use tower_x402::{Offer, Price, Pricing};
///
/// fn premium_only(offer: Arc<Offer>) -> impl Pricing {
///     move |parts: &Parts| parts.uri.path().starts_with("/premium/").then(|| offer.clone())
/// }
///
/// fn only_the_report(offer: Arc<Offer>) -> impl Pricing {
///     move |parts: &Parts| match parts.uri.path() {
///         "/reports/2026" => Price::Charge(offer.clone()),
///         _ => Price::not_found("no such report"),
///     }
/// }
/// ```
pub trait Pricing: Send + Sync + 'static {
    /// What `request` costs.
    fn price(&self, request: &Parts) -> Price;
}

impl<F, P> Pricing for F
where
    F: Fn(&Parts) -> P + Send + Sync + 'static,
    P: Into<Price>,
{
    #[inline]
    fn price(&self, request: &Parts) -> Price {
        self(request).into()
    }
}

/// One price for every request behind the layer. Put the layer on a single route.
///
/// The offer is shared, not copied: wrap a built [`Offer`] in an `Arc` once.
impl Pricing for Arc<Offer> {
    fn price(&self, _request: &Parts) -> Price {
        Price::Charge(Arc::clone(self))
    }
}

/// One price for every request behind the layer, as `Arc<Offer>` is. Each request gets a clone
/// of the offer (its parts are shared: reference counts and one allocation); an `Arc<Offer>`
/// costs none of that, and is what to pass where the same offer serves several routes.
///
/// ```
/// use axum::{Router, routing::get};
/// use tower_x402::proto::{ResourceInfo, UsdcDeployment};
/// use tower_x402::{HttpFacilitator, Offer, X402Layer};
///
/// let offer = Offer::builder(ResourceInfo::new("https://api.example.com/report"))
///     .usdc(&UsdcDeployment::BASE, "0.10".parse()?, "0x209693Bc6afc0C5328bA36FaF03C514EF312287C")
///     .build()?;
/// let facilitator = HttpFacilitator::new("https://x402.org/facilitator")?;
/// let app: Router = Router::new()
///     .route("/report", get(|| async { "the report" }))
///     .layer(X402Layer::new(facilitator, offer));
/// # Ok::<_, Box<dyn std::error::Error>>(())
/// ```
impl Pricing for Offer {
    fn price(&self, _request: &Parts) -> Price {
        Price::Charge(Arc::new(self.clone()))
    }
}

/// Dynamic pricing: a closure that prices each request from its head (path, query, headers),
/// returning a [`Price`] or an `Option<Arc<Offer>>` (`None` is free).
///
/// A closure is a [`Pricing`] as it is; passing it through `from_fn` lets Rust infer its
/// argument's type, so `|parts| …` needs no `: &Parts` annotation. Build the offers once, outside
/// the closure, and hand out clones of their `Arc`s: an [`Offer`] encodes its challenge when it
/// is built, so one built per request pays that encoding on every request.
///
/// ```
/// use std::sync::Arc;
/// use axum::extract::Query;
/// use tower_x402::pricing::{self, Pricing};
/// use tower_x402::proto::{ResourceInfo, UsdcDeployment};
/// use tower_x402::{Offer, Price};
///
/// #[derive(serde::Deserialize)]
/// struct Report {
///     tier: String,
/// }
///
/// let pay_to = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";
/// let premium = Arc::new(
///     Offer::builder(ResourceInfo::new("https://api.example.com/report?tier=premium"))
///         .usdc(&UsdcDeployment::BASE, "0.25".parse()?, pay_to)
///         .build()?,
/// );
/// let pricing = pricing::from_fn(move |parts| match Query::<Report>::try_from_uri(&parts.uri) {
///     Ok(Query(report)) if report.tier == "premium" => Price::Charge(Arc::clone(&premium)),
///     Ok(_) => Price::Free,
///     Err(_) => Price::NotSold {
///         status: http::StatusCode::BAD_REQUEST,
///         message: "`tier` is required".into(),
///     },
/// });
///
/// let request = http::Request::get("/report?tier=premium").body(())?;
/// assert!(matches!(pricing.price(&request.into_parts().0), Price::Charge(_)));
/// # Ok::<_, Box<dyn std::error::Error>>(())
/// ```
pub fn from_fn<F, P>(price: F) -> F
where
    F: Fn(&Parts) -> P + Send + Sync + 'static,
    P: Into<Price>,
{
    price
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
/// use tower_x402::pricing::PriceTable;
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

/// Unlisted paths are free.
impl Pricing for PriceTable {
    fn price(&self, request: &Parts) -> Price {
        self.by_path.get(request.uri.path()).cloned().into()
    }
}

impl fmt::Debug for PriceTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.by_path.keys()).finish()
    }
}
