use std::mem;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Request, Response, StatusCode};
use tower_service::Service;

use super::config::{Config, X402Layer};
use super::events::PaymentEvent;
use super::future::ResponseFuture;
use super::{Offer, flow, respond};
use crate::proto::{PAYMENT_SIGNATURE, PaymentPayload, header};

/// The x402 paywall service; see [`X402Layer`] and the [module docs](super).
pub struct X402<S> {
    pub(super) inner: S,
    pub(super) config: Arc<Config>,
}

impl<S> X402<S> {
    /// Wraps `inner` with the paywall configured by `layer`.
    pub fn new(inner: S, layer: &X402Layer) -> Self {
        Self {
            inner,
            config: Arc::clone(&layer.config),
        }
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
    type Response = Response<super::ResponseBody<ResBody>>;
    type Error = S::Error;
    type Future = ResponseFuture<S, ReqBody, ResBody, S::Future>;

    #[inline]
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        let (parts, body) = request.into_parts();
        let Some(offer) = self.config.pricing.offer(&parts) else {
            // Free: straight through, nothing allocated.
            return ResponseFuture::passthrough(self.inner.call(Request::from_parts(parts, body)));
        };
        let config = &self.config;
        let Some(value) = parts.headers.get(PAYMENT_SIGNATURE) else {
            config.emit(|| PaymentEvent::ChallengeServed { offer: &offer });
            return ResponseFuture::respond(respond::challenge(config, &offer));
        };
        let payload = match header::decode_with_limit::<PaymentPayload>(
            value.as_bytes(),
            config.max_header_len,
        ) {
            Ok(payload) => payload,
            Err(error) => {
                let message = format!("invalid PAYMENT-SIGNATURE header: {error}");
                return refuse(config, &offer, StatusCode::BAD_REQUEST, &message);
            }
        };
        config.emit(|| PaymentEvent::PaymentReceived {
            offer: &offer,
            payload: &payload,
        });
        let Some(requirement) = offer.find_accept(&payload.accepted).cloned() else {
            let message = mismatch_message(&offer, &payload);
            return refuse(config, &offer, StatusCode::PAYMENT_REQUIRED, &message);
        };

        let gate = Box::pin(flow::authorize(
            Arc::clone(config),
            offer,
            payload,
            requirement,
        ));
        // The inner service is called later, from the future: move the service that `poll_ready`
        // prepared into it and keep a fresh clone here.
        // See https://docs.rs/tower/latest/tower/trait.Service.html#be-careful-when-cloning-inner-services
        let clone = self.inner.clone();
        let service = mem::replace(&mut self.inner, clone);
        ResponseFuture::authorize(gate, service, Request::from_parts(parts, body))
    }
}

fn refuse<S, ReqBody, ResBody, F>(
    config: &Config,
    offer: &Offer,
    status: StatusCode,
    message: &str,
) -> ResponseFuture<S, ReqBody, ResBody, F> {
    config.emit(|| PaymentEvent::Failed {
        offer,
        status,
        reason: message,
    });
    let response = if status == StatusCode::PAYMENT_REQUIRED {
        respond::payment_failed(config, offer, message)
    } else {
        respond::error(config, offer, status, message)
    };
    ResponseFuture::respond(response)
}

/// Says which field of the client's `accepted` differs from the closest accept on offer.
fn mismatch_message(offer: &Offer, payload: &PaymentPayload) -> String {
    let accepted = &payload.accepted;
    let closest = offer
        .accepts()
        .iter()
        .find(|own| own.network == accepted.network && own.scheme == accepted.scheme)
        .or_else(|| offer.accepts().first());
    match closest.and_then(|own| own.mismatch(accepted)) {
        Some(field) => format!(
            "no matching payment requirements: accepted {field} differs from this resource's"
        ),
        None => "no matching payment requirements".to_owned(),
    }
}
