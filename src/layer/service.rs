//! [`X402`], the service the layer wraps around the inner one.

use std::mem;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response};
use tower_service::Service;
use x402_wire::{PAYMENT_SIGNATURE, PaymentPayload, header};

use super::body::ResponseBody;
use super::future::{Gate, ResponseFuture};
use super::{Config, X402Layer, responses};
use crate::boxed::BoxFuture;
use crate::facilitator::Facilitator;
#[cfg(doc)]
use crate::payment::Payments;
use crate::payment::{Considering, Opening, Prelude, ProtectedRequest, Refusal, RequestDigest};
use crate::paywall_page;
use crate::pricing::{Offer, PendingPrice, Price, Pricing};

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
            Price::Later(pending) => {
                let gate = priced_later(&self.config, pending, &parts);
                return self.authorize(gate, Request::from_parts(parts, body));
            }
        };
        let start = begin(&self.config, offer, &parts);
        let gate = match start {
            Start::Respond(response) => return ResponseFuture::respond(response),
            Start::Gate(gate) => gate,
        };
        self.authorize(gate, Request::from_parts(parts, body))
    }
}

impl<S> X402<S> {
    /// The future that calls the inner service with `request` once `gate` lets it through.
    fn authorize<ReqBody, ResBody>(
        &mut self,
        gate: BoxFuture<'static, Gate>,
        request: Request<ReqBody>,
    ) -> ResponseFuture<S, ReqBody, ResBody>
    where
        S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone,
    {
        // The inner service is called later, from the future: move the service that `poll_ready`
        // prepared into it and keep a fresh clone here.
        // See https://docs.rs/tower/latest/tower/trait.Service.html#be-careful-when-cloning-inner-services
        let clone = self.inner.clone();
        let service = mem::replace(&mut self.inner, clone);
        ResponseFuture::authorize(gate, service, request)
    }
}

/// The gate of a request whose price is known later ([`Price::Later`]): once the price is
/// known, the request goes on as a synchronous price would have sent it.
#[cold]
fn priced_later(
    config: &Arc<Config>,
    pending: PendingPrice,
    parts: &http::request::Parts,
) -> BoxFuture<'static, Gate> {
    let config = Arc::clone(config);
    let (mut head, ()) = Request::new(()).into_parts();
    head.method = parts.method.clone();
    head.uri = parts.uri.clone();
    head.version = parts.version;
    head.headers = parts.headers.clone();
    Box::pin(async move {
        let price = match pending.take() {
            Some(price) => price.await,
            None => Price::NotSold {
                status: http::StatusCode::INTERNAL_SERVER_ERROR,
                message: "this request's price was already used by another request".into(),
            },
        };
        match price {
            Price::Free => Gate::Granted(http::Extensions::new()),
            Price::Charge(offer) => match begin(&config, offer, &head) {
                Start::Respond(response) => Gate::Refuse(response),
                Start::Gate(gate) => gate.await,
            },
            Price::NotSold { status, message } => {
                Gate::Refuse(responses::not_sold(status, &message))
            }
            Price::Later(_) => Gate::Refuse(responses::not_sold(
                http::StatusCode::INTERNAL_SERVER_ERROR,
                "this request's price could not be decided",
            )),
        }
    })
}

/// How a priced request goes on: answered at once, or through a gate that decides.
enum Start {
    Respond(Response<Bytes>),
    Gate(BoxFuture<'static, Gate>),
}

/// The payment side of a priced request: [`start`], after the lifecycle hooks when there are
/// some.
#[inline]
fn begin(config: &Arc<Config>, offer: Arc<Offer>, parts: &http::request::Parts) -> Start {
    if config.payments.has_hooks() {
        hooked(config, offer, parts)
    } else {
        start(config, offer, &parts.method, &parts.uri, &parts.headers)
    }
}

/// The hooks' part of a priced request ([`Payments::open`], then [`Payments::decide`]): the offer
/// with their challenge extensions, then, when a hook considers the request, its decision
/// (serve it without payment, refuse it, or go on) in [`decided`]; otherwise on to [`start`]
/// at once, as without hooks.
fn hooked(config: &Arc<Config>, offer: Arc<Offer>, parts: &http::request::Parts) -> Start {
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let paying = parts.headers.contains_key(PAYMENT_SIGNATURE);
    let request = ProtectedRequest::http(&offer, path, &parts.method, &parts.headers, paying);
    match config.payments.open(&request) {
        Opening::Continue(offer) => start(config, offer, &parts.method, &parts.uri, &parts.headers),
        Opening::Ask(offer, considering) => decided(config, offer, considering, parts),
    }
}

/// The gate of a request a hook considers: its decision, awaited, then on to [`start`].
#[cold]
fn decided(
    config: &Arc<Config>,
    offer: Arc<Offer>,
    considering: Considering,
    parts: &http::request::Parts,
) -> Start {
    let (config, method, uri, headers) = (
        Arc::clone(config),
        parts.method.clone(),
        parts.uri.clone(),
        parts.headers.clone(),
    );
    Start::Gate(Box::pin(async move {
        let path = uri.path_and_query().map_or("/", |p| p.as_str());
        let paying = headers.contains_key(PAYMENT_SIGNATURE);
        let request = ProtectedRequest::http(&offer, path, &method, &headers, paying);
        match config.payments.decide(&request, considering).await {
            Prelude::Granted(extensions) => Gate::Granted(extensions),
            Prelude::Refused(offer, refusal) => {
                Gate::Refuse(responses::refusal(&config, &offer, &refusal))
            }
            Prelude::Continue(offer) => match start(&config, offer, &method, &uri, &headers) {
                Start::Respond(response) => Gate::Refuse(response),
                Start::Gate(gate) => gate.await,
            },
        }
    }))
}

/// The payment side of a priced request: the challenge (JSON or the paywall page) without a
/// payment, a refusal of an unusable one, or the gate that authorizes it.
fn start(
    config: &Arc<Config>,
    offer: Arc<Offer>,
    method: &Method,
    uri: &http::Uri,
    headers: &HeaderMap,
) -> Start {
    // A HEAD has no body to deliver, so it never pays: it is answered like an unpaid GET,
    // whatever it carries.
    let signature = match *method {
        // Said as it is: the payment was neither verified nor spent, and a GET buys.
        Method::HEAD if headers.contains_key(PAYMENT_SIGNATURE) => {
            config
                .payments
                .report_refusal(&offer, &Refusal::PaymentMissing);
            return Start::Respond(responses::challenge_explained(
                config,
                &offer,
                "a HEAD request is never paid: this payment was neither verified nor spent; \
                 send it with a GET to buy",
            ));
        }
        Method::HEAD => None,
        _ => headers.get(PAYMENT_SIGNATURE),
    };
    let Some(value) = signature else {
        if let Some(page) = &config.paywall_page
            && method == Method::GET
            && paywall_page::prefers_html(headers)
        {
            config
                .payments
                .report_refusal(&offer, &Refusal::PaymentMissing);
            let mut response = page.challenge(&offer);
            if let Some(expose) = &config.expose_headers {
                response
                    .headers_mut()
                    .insert(http::header::ACCESS_CONTROL_EXPOSE_HEADERS, expose.clone());
            }
            return Start::Respond(response);
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
    // Shared from here on: the gate's future carries a pointer, not the decoded payment.
    let payload = Arc::new(payload);
    // What the payment buys: this method, path and query, delivered once.
    let request = RequestDigest::http(method, uri);
    let config = Arc::clone(config);
    Start::Gate(Box::pin(async move {
        match config
            .payments
            .pay(&offer, payload, request)
            .await
            .into_pass()
        {
            Ok(crate::payment::Pass::Answered(paid)) => {
                Gate::Refuse(responses::answered(&config, paid.payment()))
            }
            Ok(pass) => Gate::Proceed(config, pass),
            Err(refusal) => Gate::Refuse(responses::refusal(&config, &offer, &refusal)),
        }
    }))
}

/// Reports `refusal` and answers it.
fn refuse(config: &Config, offer: &Offer, refusal: Refusal) -> Start {
    config.payments.report_refusal(offer, &refusal);
    Start::Respond(responses::refusal(config, offer, &refusal))
}
