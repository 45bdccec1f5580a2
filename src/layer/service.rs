//! [`X402`], the service the layer wraps around the inner one.

use std::mem;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Method, Request, Response};
use tower_service::Service;

use super::body::ResponseBody;
use super::future::{Gate, Pass, ResponseFuture};
use super::{Config, X402Layer, responses};
use crate::boxed::BoxFuture;
use crate::facilitator::Facilitator;
use crate::payment::{Outcome, PaymentEvent, Payments, Refusal, RequestDigest};
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
        #[cfg(feature = "siwx")]
        let (offer, proof) = match &self.config.siwx {
            Some(siwx) => {
                let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
                let offer = siwx
                    .decorate(&offer, path)
                    .map_or(offer, std::sync::Arc::new);
                // A HEAD never signs in, as it never pays.
                let proof = match parts.method {
                    Method::HEAD => None,
                    _ => parts
                        .headers
                        .get(crate::siwx::SIGN_IN_WITH_X)
                        .map(|value| (Arc::clone(siwx), value.clone(), path.to_owned())),
                };
                (offer, proof)
            }
            None => (offer, None),
        };
        #[cfg(feature = "siwx")]
        let start = match proof {
            // Without a payment there is nothing to start unless the proof fails.
            Some((siwx, proof, path)) => {
                let paying = parts.headers.contains_key(PAYMENT_SIGNATURE);
                let payment = paying.then(|| start(&self.config, Arc::clone(&offer), &parts));
                Start::Gate(sign_in(
                    Arc::clone(&self.config),
                    siwx,
                    offer,
                    SignInRequest { proof, path },
                    payment,
                ))
            }
            None => start(&self.config, offer, &parts),
        };
        #[cfg(not(feature = "siwx"))]
        let start = start(&self.config, offer, &parts);
        let gate = match start {
            Start::Respond(response) => return ResponseFuture::respond(response),
            Start::Gate(gate) => gate,
        };
        // The inner service is called later, from the future: move the service that `poll_ready`
        // prepared into it and keep a fresh clone here.
        // See https://docs.rs/tower/latest/tower/trait.Service.html#be-careful-when-cloning-inner-services
        let clone = self.inner.clone();
        let service = mem::replace(&mut self.inner, clone);
        ResponseFuture::authorize(gate, service, Request::from_parts(parts, body))
    }
}

/// How a priced request goes on: answered at once, or through a gate that decides.
enum Start {
    Respond(Response<Bytes>),
    Gate(BoxFuture<'static, Gate>),
}

/// The payment side of a priced request: the challenge (JSON or the paywall page) without a
/// payment, a refusal of an unusable one, or the gate that authorizes it.
fn start(config: &Arc<Config>, offer: Arc<Offer>, parts: &http::request::Parts) -> Start {
    // A HEAD has no body to deliver, so it never pays: it is answered like an unpaid GET,
    // whatever it carries.
    let signature = match parts.method {
        // Said as it is: the payment was neither verified nor spent, and a GET buys.
        Method::HEAD if parts.headers.contains_key(PAYMENT_SIGNATURE) => {
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
    config.payments.emit(|| PaymentEvent::PaymentReceived {
        offer: &offer,
        payload: &payload,
    });
    let requirement = match Payments::accepted(&offer, &payload) {
        Ok(requirement) => requirement.clone(),
        Err(refusal) => return refuse(config, &offer, refusal),
    };

    // What the payment buys: this method, path and query, delivered once.
    let request = RequestDigest::http(&parts.method, &parts.uri);
    let config = Arc::clone(config);
    Start::Gate(Box::pin(async move {
        let outcome = config
            .payments
            .authorize(&offer, payload, requirement, request)
            .await;
        let pass = match outcome {
            // The core lets a repeat through only for the request it bought, at a fixed price.
            Outcome::Settled(paid) | Outcome::Replayed(paid) => Pass::Paid(paid),
            Outcome::Cleared(cleared) => Pass::Cleared(cleared),
            Outcome::InDoubt(refusal) | Outcome::Refused(refusal) => {
                return Gate::Refuse(responses::refusal(&config, &offer, &refusal));
            }
        };
        Gate::Proceed(config, pass)
    }))
}

/// What a request carrying a sign-in proof brings.
#[cfg(feature = "siwx")]
struct SignInRequest {
    proof: http::HeaderValue,
    /// The path and query the challenge was issued for.
    path: String,
}

/// The gate of a request carrying a sign-in proof: the proof first; when it fails, the payment
/// the request also carries (`payment`), else the 402 whose `error` says why the proof failed.
#[cfg(feature = "siwx")]
fn sign_in(
    config: Arc<Config>,
    siwx: Arc<crate::siwx::SignInWithX>,
    offer: Arc<Offer>,
    request: SignInRequest,
    payment: Option<Start>,
) -> BoxFuture<'static, Gate> {
    Box::pin(async move {
        let rejection = match siwx
            .check(&offer, request.proof.as_bytes(), &request.path)
            .await
        {
            Ok(signed_in) => {
                tracing::debug!(address = %signed_in.address(), resource = %signed_in.resource(), "signed in");
                return Gate::SignedIn(signed_in);
            }
            Err(rejection) => rejection,
        };
        tracing::debug!(%rejection, "sign-in proof refused");
        match payment {
            Some(Start::Gate(gate)) => gate.await,
            Some(Start::Respond(response)) => Gate::Refuse(response),
            // The entitlements could not be read: the buyer may own this, so never a 402.
            None if rejection.is_unavailable() => Gate::Refuse(responses::unavailable_explained(
                &config,
                &offer,
                config.retry_after,
                &rejection.to_string(),
            )),
            None => {
                config
                    .payments
                    .report_refusal(&offer, &Refusal::PaymentMissing);
                Gate::Refuse(responses::challenge_explained(
                    &config,
                    &offer,
                    &rejection.to_string(),
                ))
            }
        }
    })
}

/// Reports `refusal` and answers it.
fn refuse(config: &Config, offer: &Offer, refusal: Refusal) -> Start {
    config.payments.report_refusal(offer, &refusal);
    Start::Respond(responses::refusal(config, offer, &refusal))
}
