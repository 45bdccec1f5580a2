//! [`X402`], the service the layer wraps around the inner one.

use std::mem;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Method, Request, Response};
use tower_service::Service;

use super::body::ResponseBody;
use super::future::{Gate, Pass, ResponseFuture};
use super::{Config, X402Layer, responses};
use crate::facilitator::Facilitator;
use crate::payment::{Outcome, PaymentEvent, Payments, Refusal};
use crate::paywall_page;
use crate::pricing::{Offer, Price, Pricing};
use crate::proto::{PAYMENT_SIGNATURE, PaymentPayload, header};

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
        let offer = match self.config.pricing.price(&parts) {
            // Free: straight through, nothing allocated.
            Price::Free => {
                return ResponseFuture::passthrough(
                    self.inner.call(Request::from_parts(parts, body)),
                );
            }
            Price::Charge(offer) => offer,
            Price::NotSold { status, message } => {
                return ResponseFuture::respond(responses::not_sold(status, &message));
            }
        };
        let config = &self.config;
        // A HEAD has no body to deliver, so it never pays: it is answered like an unpaid GET,
        // whatever it carries.
        let signature = match parts.method {
            Method::HEAD => None,
            _ => parts.headers.get(PAYMENT_SIGNATURE),
        };
        let Some(value) = signature else {
            if let Some(page) = &config.paywall_page
                && parts.method == Method::GET
                && paywall_page::prefers_html(&parts.headers)
            {
                let payments = &config.payments;
                payments.emit(|| PaymentEvent::ChallengeServed { offer: &offer });
                let mut response = page.challenge(&offer);
                if let Some(expose) = &config.expose_headers {
                    response
                        .headers_mut()
                        .insert(http::header::ACCESS_CONTROL_EXPOSE_HEADERS, expose.clone());
                }
                return ResponseFuture::respond(response);
            }
            return refuse(config, &offer, Refusal::PaymentMissing);
        };
        let payload = match header::decode_with_limit::<PaymentPayload>(
            value.as_bytes(),
            config.max_header_len,
        ) {
            Ok(payload) => payload,
            Err(error) => return refuse(config, &offer, Refusal::InvalidHeader(error)),
        };
        config.payments.emit(|| PaymentEvent::PaymentReceived {
            offer: &offer,
            payload: &payload,
        });
        let requirement = match Payments::accepted(&offer, &payload) {
            Ok(requirement) => requirement.clone(),
            Err(refusal) => return refuse(config, &offer, refusal),
        };

        let config = Arc::clone(config);
        let gate = Box::pin(async move {
            let outcome = config
                .payments
                .authorize(&offer, payload, requirement)
                .await;
            let pass = match outcome {
                Outcome::Settled(paid) | Outcome::Replayed(paid) => Pass::Paid(paid),
                Outcome::Cleared(cleared) => Pass::Cleared(cleared),
                Outcome::InDoubt(refusal) | Outcome::Refused(refusal) => {
                    return Gate::Refuse(responses::refusal(&config, &offer, &refusal));
                }
            };
            Gate::Proceed(config, pass)
        });
        // The inner service is called later, from the future: move the service that `poll_ready`
        // prepared into it and keep a fresh clone here.
        // See https://docs.rs/tower/latest/tower/trait.Service.html#be-careful-when-cloning-inner-services
        let clone = self.inner.clone();
        let service = mem::replace(&mut self.inner, clone);
        ResponseFuture::authorize(gate, service, Request::from_parts(parts, body))
    }
}

/// Reports `refusal` and answers it.
fn refuse<S, ReqBody, ResBody>(
    config: &Config,
    offer: &Offer,
    refusal: Refusal,
) -> ResponseFuture<S, ReqBody, ResBody>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
{
    config.payments.report_refusal(offer, &refusal);
    ResponseFuture::respond(responses::refusal(config, offer, &refusal))
}
