//! [`payment_cors`]: the CORS policy that lets a web page on another origin pay a route.
//!
//! Payment is the authorization (no cookies, no credentials), so any origin may ask by default.
//! The preflight for a `GET` carrying `PAYMENT-SIGNATURE` is answered `200 OK` with the
//! `Access-Control-Allow-*` headers (`fetch` accepts any 2xx); every other answer, the 402 challenge included, carries
//! `Access-Control-Allow-Origin` and exposes `PAYMENT-REQUIRED` and `PAYMENT-RESPONSE`.
//!
//! The preset is tower-http's [`CorsLayer`]: narrow the origins with
//! [`allow_origin`](CorsLayer::allow_origin), and an application that takes request headers of
//! its own adds them to [`PAYMENT_REQUEST_HEADERS`] with [`allow_headers`](CorsLayer::allow_headers).
//!
//! # Example
//!
//! ```
//! use axum::{Router, body::Body, routing::get};
//! use tower::ServiceExt;
//! use tower_x402::proto::{ResourceInfo, UsdcDeployment};
//! use tower_x402::{HttpFacilitator, Offer, X402Layer, payment_cors};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let offer = Offer::builder(ResourceInfo::new("https://api.example.com/report"))
//! #     .usdc(&UsdcDeployment::BASE, "0.10".parse()?, "0x209693Bc6afc0C5328bA36FaF03C514EF312287C")
//! #     .build()?;
//! # let facilitator = HttpFacilitator::new("https://x402.org/facilitator")?;
//! use axum::handler::Handler;
//!
//! async fn report() -> &'static str {
//!     "the report"
//! }
//! let paywall = X402Layer::new(facilitator, std::sync::Arc::new(offer));
//! let app = Router::new().route("/report", get(report.layer(paywall)).layer(payment_cors()));
//!
//! let preflight = http::Request::options("/report")
//!     .header("origin", "https://shop.example")
//!     .header("access-control-request-method", "GET")
//!     .header("access-control-request-headers", "payment-signature")
//!     .body(Body::empty())?;
//! let response = app.oneshot(preflight).await?;
//! assert_eq!(response.status(), 200);
//! assert_eq!(response.headers()["access-control-allow-origin"], "*");
//! # Ok(())
//! # }
//! ```

use std::time::Duration;

use http::Method;
use http::header::{self, HeaderName};
use tower_http::cors::{Any, CorsLayer};
use x402_wire::{PAYMENT_REQUIRED, PAYMENT_RESPONSE, PAYMENT_SIGNATURE};

/// The request headers a paying browser may send: the payment (v2 and v1 names),
/// `Access-Control-Expose-Headers` (which the official TypeScript clients set on the paid retry)
/// and `Content-Type`.
///
/// ```
/// use http::HeaderName;
/// use tower_x402::cors::PAYMENT_REQUEST_HEADERS;
///
/// // An application whose pages also send a header of its own.
/// let headers: Vec<HeaderName> = PAYMENT_REQUEST_HEADERS
///     .into_iter()
///     .chain([HeaderName::from_static("x-order-note")])
///     .collect();
/// let cors = tower_x402::payment_cors().allow_headers(headers);
/// # drop(cors);
/// ```
pub const PAYMENT_REQUEST_HEADERS: [HeaderName; 4] = [
    PAYMENT_SIGNATURE,
    HeaderName::from_static("x-payment"),
    header::ACCESS_CONTROL_EXPOSE_HEADERS,
    header::CONTENT_TYPE,
];

/// How long a browser may cache the preflight answer.
const PREFLIGHT_MAX_AGE: Duration = Duration::from_secs(600);

/// The CORS policy for paid routes, allowing any origin; see the [module docs](self).
///
/// Put it outside the [`X402Layer`](crate::X402Layer) so the preflight never reaches the paywall.
///
/// ```
/// use http::HeaderValue;
/// let cors = tower_x402::payment_cors()
///     .allow_origin([HeaderValue::from_static("https://shop.example")]);
/// # drop(cors);
/// ```
pub fn payment_cors() -> CorsLayer {
    CorsLayer::new()
        .allow_origin(Any)
        .allow_methods([Method::GET, Method::HEAD])
        .allow_headers(PAYMENT_REQUEST_HEADERS)
        .expose_headers([PAYMENT_REQUIRED, PAYMENT_RESPONSE])
        .max_age(PREFLIGHT_MAX_AGE)
}
