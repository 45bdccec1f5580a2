//! The gate of a priced request: its price, the lifecycle hooks' decision, the challenge or the
//! payment's authorization by the core, in the layer's terms ([`Gate`]).

use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response};
use x402_wire::{PAYMENT_SIGNATURE, PaymentPayload, header};

use super::paid_body::BodySeen;
use super::{Config, responses};
use crate::boxed::BoxFuture;
#[cfg(doc)]
use crate::payment::Payments;
use crate::payment::{
    Considering, Opening, Pass, Prelude, ProtectedRequest, Refusal, RequestDigest,
};
use crate::paywall_page;
use crate::pricing::{Offer, Price};

/// What the payment core decided, in the layer's terms.
pub(super) enum Gate {
    Proceed(Arc<Config>, Pass),
    Refuse(Response<Bytes>),
    /// A lifecycle hook granted the request: served without payment, with these extensions.
    Granted(http::Extensions),
}

/// How a priced request goes on, once what is known of its body is: answered at once, or
/// through the gate that decides.
pub(super) fn gate(
    config: &Arc<Config>,
    price: Price,
    parts: &http::request::Parts,
    body: Option<&BodySeen>,
) -> Start {
    match price {
        Price::Charge(offer) => begin(config, offer, parts, body),
        Price::Later(pending) => Start::Gate(priced_later(config, pending, parts, body)),
        Price::NotSold { status, message } => Start::Respond(responses::not_sold(status, &message)),
        // Answered before any body is read; kept whole should it come here.
        Price::Free => Start::Gate(Box::pin(std::future::ready(Gate::Granted(
            http::Extensions::new(),
        )))),
    }
}

/// The gate of a request whose price is known later ([`Price::Later`]): once the price is
/// known, the request goes on as a synchronous price would have sent it.
#[cold]
fn priced_later(
    config: &Arc<Config>,
    pending: BoxFuture<'static, Price>,
    parts: &http::request::Parts,
    body: Option<&BodySeen>,
) -> BoxFuture<'static, Gate> {
    let config = Arc::clone(config);
    // Made now, while the request's head is here, when there is a payment to buy it.
    let request = if parts.headers.contains_key(PAYMENT_SIGNATURE) {
        digest(parts, body)
    } else {
        Digest::Later(None)
    };
    let (mut head, ()) = Request::new(()).into_parts();
    head.method = parts.method.clone();
    head.uri = parts.uri.clone();
    head.version = parts.version;
    head.headers = parts.headers.clone();
    Box::pin(async move {
        match pending.await {
            Price::Free => Gate::Granted(http::Extensions::new()),
            Price::Charge(offer) => match begin_digested(&config, offer, &head, request) {
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
pub(super) enum Start {
    Respond(Response<Bytes>),
    Gate(BoxFuture<'static, Gate>),
}

/// The payment side of a priced request: [`start`], after the lifecycle hooks when there are
/// some.
#[inline]
fn begin(
    config: &Arc<Config>,
    offer: Arc<Offer>,
    parts: &http::request::Parts,
    body: Option<&BodySeen>,
) -> Start {
    begin_digested(config, offer, parts, Digest::Later(body))
}

/// [`begin`] with the request's digest, or what makes it.
#[inline]
fn begin_digested(
    config: &Arc<Config>,
    offer: Arc<Offer>,
    parts: &http::request::Parts,
    request: Digest<'_>,
) -> Start {
    if config.payments.has_hooks() {
        hooked(config, offer, parts, request)
    } else {
        start(
            config,
            offer,
            &parts.method,
            &parts.uri,
            &parts.headers,
            request,
        )
    }
}

/// The request a payment buys ([`RequestDigest`]): made now, or when a payment is found (a
/// request without one needs none).
enum Digest<'a> {
    Made(RequestDigest),
    Later(Option<&'a BodySeen>),
}

impl Digest<'_> {
    fn make(self, method: &Method, uri: &http::Uri) -> RequestDigest {
        match self {
            Self::Made(digest) => digest,
            Self::Later(None) => RequestDigest::http(method, uri),
            Self::Later(Some(body)) => body.digest(method, uri),
        }
    }
}

/// The digest of the request `parts` with `body`.
fn digest(parts: &http::request::Parts, body: Option<&BodySeen>) -> Digest<'static> {
    Digest::Made(Digest::Later(body).make(&parts.method, &parts.uri))
}

/// The hooks' part of a priced request ([`Payments::open`], then [`Payments::decide`]): the offer
/// with their challenge extensions, then, when a hook considers the request, its decision
/// (serve it without payment, refuse it, or go on) in [`decided`]; otherwise on to [`start`]
/// at once, as without hooks.
fn hooked(
    config: &Arc<Config>,
    offer: Arc<Offer>,
    parts: &http::request::Parts,
    digest: Digest<'_>,
) -> Start {
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let paying = parts.headers.contains_key(PAYMENT_SIGNATURE);
    let request = ProtectedRequest::http(&offer, path, &parts.method, &parts.headers, paying);
    match config.payments.open(&request) {
        Opening::Continue(offer) => start(
            config,
            offer,
            &parts.method,
            &parts.uri,
            &parts.headers,
            digest,
        ),
        Opening::Ask(offer, considering) => decided(config, offer, considering, parts, digest),
    }
}

/// The gate of a request a hook considers: its decision, awaited, then on to [`start`].
#[cold]
fn decided(
    config: &Arc<Config>,
    offer: Arc<Offer>,
    considering: Considering,
    parts: &http::request::Parts,
    digest: Digest<'_>,
) -> Start {
    // Made now, while the body's digest is at hand, when there is a payment to buy it.
    let digest = parts
        .headers
        .contains_key(PAYMENT_SIGNATURE)
        .then(|| digest.make(&parts.method, &parts.uri));
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
            Prelude::Continue(offer) => match start(
                &config,
                offer,
                &method,
                &uri,
                &headers,
                digest.map_or(Digest::Later(None), Digest::Made),
            ) {
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
    digest: Digest<'_>,
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
    // What the payment buys: this method, path, query and body, delivered once.
    let request = digest.make(method, uri);
    let config = Arc::clone(config);
    Start::Gate(Box::pin(async move {
        match config
            .payments
            .pay(&offer, payload, request)
            .await
            .into_pass()
        {
            Ok(Pass::Answered(paid)) => Gate::Refuse(responses::answered(&config, paid.payment())),
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
