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
use std::sync::Arc;

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

/// What one request costs; see the [module docs](self).
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
    /// Known once this future resolves: a price read from a database, asked of a quota
    /// service. Build it with [`Price::later`].
    Later(BoxFuture<'static, Price>),
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
        Self::Later(Box::pin(price))
    }

    /// [`Price::NotSold`] with 404 Not Found.
    pub fn not_found(message: impl Into<Cow<'static, str>>) -> Self {
        Self::NotSold {
            status: StatusCode::NOT_FOUND,
            message: message.into(),
        }
    }
}

impl fmt::Debug for Price {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Free => f.write_str("Free"),
            Self::Charge(offer) => f.debug_tuple("Charge").field(offer).finish(),
            Self::NotSold { status, message } => f
                .debug_struct("NotSold")
                .field("status", status)
                .field("message", message)
                .finish(),
            Self::Later(_) => f.write_str("Later(..)"),
        }
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
/// and `Offer` (one price for everything behind the layer) and for a `HashMap` of exact paths to
/// offers (see its implementation below). A price that
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

/// Offers by exact request path, whatever the method (a priced path is never free); unlisted
/// paths are free.
///
/// The path is compared byte for byte with `uri.path()` as received — not decoded, not
/// normalized — which is how axum's router matches routes too. So a variant such as
/// `/report/`, `//report` or `/%72eport` is neither priced here nor routed to the `/report`
/// handler. Use the table as a layer on a router that matches raw paths (axum does); when the
/// router in front decodes or normalizes paths, price with a closure that applies the same rule.
///
/// ```
/// use std::collections::HashMap;
/// use std::sync::Arc;
/// use tower_x402::pricing::{Price, Pricing};
/// # use tower_x402::{Offer, proto::{ResourceInfo, UsdcDeployment}};
/// # let offer = Arc::new(Offer::builder(ResourceInfo::new("https://shop.example/report"))
/// #     .usdc(&UsdcDeployment::BASE, "1.00".parse().unwrap(), "0x209693Bc6afc0C5328bA36FaF03C514EF312287C")
/// #     .build().unwrap());
/// let table = HashMap::from([("/report".to_owned(), offer)]);
/// let (report, _) = http::Request::get("/report").body(()).unwrap().into_parts();
/// let (home, _) = http::Request::get("/").body(()).unwrap().into_parts();
/// assert!(matches!(table.price(&report), Price::Charge(_)));
/// assert!(matches!(table.price(&home), Price::Free));
/// ```
impl<S: std::hash::BuildHasher + Send + Sync + 'static> Pricing for HashMap<String, Arc<Offer>, S> {
    fn price(&self, request: &Parts) -> Price {
        self.get(request.uri.path()).cloned().into()
    }
}
