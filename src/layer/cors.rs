//! [`payment_cors`]: the CORS policy that lets a web page on another origin pay a route.
//!
//! Payment is the authorization (no cookies, no credentials), so any origin may ask by default.
//! The preflight for a `GET` carrying `PAYMENT-SIGNATURE` is answered `204 No Content` with the
//! `Access-Control-Allow-*` headers; every other answer, the 402 challenge included, carries
//! `Access-Control-Allow-Origin` and exposes `PAYMENT-REQUIRED` and `PAYMENT-RESPONSE`.
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
//! assert_eq!(response.status(), 204);
//! assert_eq!(response.headers()["access-control-allow-origin"], "*");
//! # Ok(())
//! # }
//! ```

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use http::header::{self, HeaderName};
use http::{Method, Request, Response, StatusCode};
use tower_http::cors::{AllowOrigin, Any, Cors, CorsLayer};
use tower_layer::Layer;
use tower_service::Service;

use crate::proto::{PAYMENT_REQUIRED, PAYMENT_RESPONSE, PAYMENT_SIGNATURE};

/// The request headers a paying browser may send: the payment (v2 and v1 names), a referral
/// citation, `Access-Control-Expose-Headers` (which the official TypeScript clients set on the
/// paid retry) and `Content-Type`.
pub const PAYMENT_REQUEST_HEADERS: [HeaderName; 5] = [
    PAYMENT_SIGNATURE,
    HeaderName::from_static("x-payment"),
    HeaderName::from_static("x-referrer-passport"),
    header::ACCESS_CONTROL_EXPOSE_HEADERS,
    header::CONTENT_TYPE,
];

/// How long a browser may cache the preflight answer.
const PREFLIGHT_MAX_AGE: Duration = Duration::from_secs(600);

/// The CORS policy for paid routes, allowing any origin; see the [module docs](self).
///
/// Put it outside the [`X402Layer`](crate::X402Layer) so the preflight never reaches the paywall.
pub fn payment_cors() -> PaymentCorsLayer {
    PaymentCorsLayer::new(Any)
}

/// A [`Layer`] answering CORS for a paid route: [`CorsLayer`] with the payment headers, and
/// `204` for the preflight. Build it with [`payment_cors`].
#[derive(Clone, Debug)]
#[must_use]
pub struct PaymentCorsLayer {
    cors: CorsLayer,
}

impl PaymentCorsLayer {
    /// The payment policy for the origins `origin` allows (e.g. [`Any`], or a list of
    /// `HeaderValue`s).
    pub fn new(origin: impl Into<AllowOrigin>) -> Self {
        Self {
            cors: CorsLayer::new()
                .allow_origin(origin)
                .allow_methods([Method::GET, Method::HEAD])
                .allow_headers(PAYMENT_REQUEST_HEADERS)
                .expose_headers([PAYMENT_REQUIRED, PAYMENT_RESPONSE])
                .max_age(PREFLIGHT_MAX_AGE),
        }
    }

    /// Narrows the origins allowed to `origin`.
    ///
    /// ```
    /// use http::HeaderValue;
    /// let cors = tower_x402::payment_cors()
    ///     .allow_origin([HeaderValue::from_static("https://shop.example")]);
    /// # drop(cors);
    /// ```
    pub fn allow_origin(self, origin: impl Into<AllowOrigin>) -> Self {
        Self {
            cors: self.cors.allow_origin(origin),
        }
    }
}

impl<S> Layer<S> for PaymentCorsLayer {
    type Service = PaymentCors<S>;

    fn layer(&self, inner: S) -> Self::Service {
        PaymentCors {
            inner: self.cors.layer(inner),
        }
    }
}

/// The service built by [`PaymentCorsLayer`].
#[derive(Clone, Debug)]
pub struct PaymentCors<S> {
    inner: Cors<S>,
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for PaymentCors<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    ResBody: Default,
{
    type Response = Response<ResBody>;
    type Error = S::Error;
    type Future = PreflightFuture<<Cors<S> as Service<Request<ReqBody>>>::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        let preflight = request.method() == Method::OPTIONS
            && request
                .headers()
                .contains_key(header::ACCESS_CONTROL_REQUEST_METHOD);
        PreflightFuture {
            inner: self.inner.call(request),
            preflight,
        }
    }
}

pin_project_lite::pin_project! {
    /// The response future of [`PaymentCors`]: a preflight's answer becomes `204`.
    #[derive(Debug)]
    pub struct PreflightFuture<F> {
        #[pin]
        inner: F,
        preflight: bool,
    }
}

impl<F, B, E> Future for PreflightFuture<F>
where
    F: Future<Output = Result<Response<B>, E>>,
{
    type Output = Result<Response<B>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let mut response = std::task::ready!(this.inner.poll(cx))?;
        if *this.preflight && response.status() == StatusCode::OK {
            *response.status_mut() = StatusCode::NO_CONTENT;
        }
        Poll::Ready(Ok(response))
    }
}
