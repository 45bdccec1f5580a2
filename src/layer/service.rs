//! [`X402`], the service the layer wraps around the inner one.

use std::mem;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response};
use tower_service::Service;

use super::body::ResponseBody;
use super::future::{Reading, ResponseFuture};
use super::gate::{Start, gate};
use super::paid_body::{self, BodySeen, Plan};
use super::{Config, X402Layer, responses};
use crate::facilitator::Facilitator;
use crate::pricing::{Price, Pricing};

/// The x402 paywall service; see [`X402Layer`](super::X402Layer) and the [module docs](super).
pub struct X402<S> {
    pub(crate) inner: S,
    pub(crate) config: Arc<Config>,
}

impl<S> X402<S> {
    /// The paywall `layer` in front of `inner`.
    pub fn new(inner: S, layer: X402Layer) -> Self {
        Self {
            inner,
            config: layer.config,
        }
    }

    /// The [`X402Layer`] that asks `pricing` what each request costs and has `facilitator`
    /// verify and settle the payments ([`X402Layer::new`]).
    pub fn layer(facilitator: impl Facilitator, pricing: impl Pricing) -> X402Layer {
        X402Layer::new(facilitator, pricing)
    }

    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// Unwraps the inner service.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S: Clone> Clone for X402<S> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            config: Arc::clone(&self.config),
        }
    }
}

impl<S: std::fmt::Debug> std::fmt::Debug for X402<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("X402")
            .field("inner", &self.inner)
            .field("config", &self.config)
            .finish()
    }
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for X402<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone,
    ReqBody: http_body::Body + From<Bytes>,
{
    type Response = Response<ResponseBody<ResBody>>;
    type Error = S::Error;
    type Future = ResponseFuture<S, ReqBody, ResBody>;

    #[inline]
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        let (parts, body) = request.into_parts();
        let price = self.config.pricing.price(&parts);
        let seen = match price {
            // Free: straight through, nothing allocated.
            Price::Free => {
                return ResponseFuture::passthrough(
                    self.inner.call(Request::from_parts(parts, body)),
                );
            }
            Price::NotSold { status, message } => {
                return ResponseFuture::respond(responses::not_sold(status, &message));
            }
            Price::Charge(_) | Price::Later(_) => {
                match paid_body::plan(&parts, &body, self.config.max_paid_body) {
                    Plan::Untouched => None,
                    Plan::Unread => Some(BodySeen::Unread),
                    Plan::Read => {
                        // The payment waits for the body: it buys these bytes.
                        let (service, config) = self.take_service();
                        return ResponseFuture::read_body(
                            body,
                            Reading::new(service, config, parts, price),
                        );
                    }
                }
            }
        };
        match gate(&self.config, price, &parts, seen.as_ref()) {
            Start::Respond(response) => ResponseFuture::respond(response),
            Start::Gate(gate) => {
                let (service, _) = self.take_service();
                ResponseFuture::authorize(gate, service, Request::from_parts(parts, body))
            }
        }
    }
}

impl<S: Clone> X402<S> {
    /// The service `poll_ready` prepared, for the future that calls it later, and the layer's
    /// settings; a fresh clone stays here.
    fn take_service(&mut self) -> (S, Arc<Config>) {
        // See https://docs.rs/tower/latest/tower/trait.Service.html#be-careful-when-cloning-inner-services
        let clone = self.inner.clone();
        (
            mem::replace(&mut self.inner, clone),
            Arc::clone(&self.config),
        )
    }
}
