//! [`ResponseFuture`]: the state machine of one request through the layer.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use bytes::{Bytes, BytesMut};
use http::{Request, Response};
use pin_project_lite::pin_project;
use tower_service::Service;

use super::Config;
use super::body::ResponseBody;
use super::gate::{self, Gate, Start};
use super::metered::{Meter, header_amount, take_overrides};
use super::paid_body::{self, BodySeen, Unreadable};
use super::responses::{self, into_body, mark_paid};
use crate::boxed::BoxFuture;
use crate::payment::{Charge, Conclusion, Paid, Pass, Refusal};
use crate::pricing::{Offer, Price, SettlementMode};

/// The payment's resolution once the inner service answered: settled (`Some`), released
/// (`None`), or the response that refuses it.
type SettleFuture = BoxFuture<'static, (Arc<Config>, Result<Option<Paid>, Response<Bytes>>)>;

pin_project! {
    /// Response future for [`X402`](super::X402).
    ///
    /// Free requests only wrap the inner future. Paid requests go through verification (and
    /// settlement) in a boxed facilitator future, then the unboxed inner future.
    pub struct ResponseFuture<S, ReqBody, ResBody>
    where
        S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    {
        #[pin]
        state: State<S, ReqBody, ResBody>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<S, ReqBody, ResBody>
    where
        S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    {
        Respond { response: Option<Response<Bytes>> },
        Read { #[pin] body: ReqBody, reading: Option<Box<Reading<S>>> },
        Authorize {
            gate: BoxFuture<'static, Gate>,
            service: Option<S>,
            request: Option<Request<ReqBody>>,
        },
        Inner { #[pin] future: S::Future, passed: Option<Passed> },
        Settle { settle: SettleFuture, response: Option<Response<ResBody>> },
    }
}

impl<S, ReqBody, ResBody> ResponseFuture<S, ReqBody, ResBody>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
{
    pub(super) fn passthrough(future: S::Future) -> Self {
        Self {
            state: State::Inner {
                future,
                passed: None,
            },
        }
    }

    pub(super) fn respond(response: Response<Bytes>) -> Self {
        Self {
            state: State::Respond {
                response: Some(response),
            },
        }
    }

    /// Reads `body` first, then goes on as [`gate`](super::gate::gate) decides.
    pub(super) fn read_body(body: ReqBody, reading: Box<Reading<S>>) -> Self {
        Self {
            state: State::Read {
                body,
                reading: Some(reading),
            },
        }
    }

    pub(super) fn authorize(
        gate: BoxFuture<'static, Gate>,
        service: S,
        request: Request<ReqBody>,
    ) -> Self {
        Self {
            state: State::Authorize {
                gate,
                service: Some(service),
                request: Some(request),
            },
        }
    }
}

const POLLED_AFTER_COMPLETION: &str = "ResponseFuture polled after completion";

/// A paid request whose body is being read: everything needed to go on once it is.
pub(super) struct Reading<S> {
    service: S,
    config: Arc<Config>,
    parts: http::request::Parts,
    price: Price,
    bytes: BytesMut,
}

impl<S> Reading<S> {
    pub(super) fn new(
        service: S,
        config: Arc<Config>,
        parts: http::request::Parts,
        price: Price,
    ) -> Box<Self> {
        Box::new(Self {
            service,
            config,
            parts,
            price,
            bytes: BytesMut::new(),
        })
    }
}

impl<S, ReqBody, ResBody> Future for ResponseFuture<S, ReqBody, ResBody>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    ReqBody: http_body::Body + From<Bytes>,
{
    type Output = Result<Response<ResponseBody<ResBody>>, S::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            match this.state.as_mut().project() {
                StateProj::Respond { response } => {
                    let response = response.take().expect(POLLED_AFTER_COMPLETION);
                    return Poll::Ready(Ok(into_body(response)));
                }
                StateProj::Read { body, reading } => {
                    let read = {
                        let reading = reading.as_mut().expect(POLLED_AFTER_COMPLETION);
                        let limit = reading.config.max_paid_body;
                        ready!(paid_body::poll_read(body, &mut reading.bytes, limit, cx))
                    };
                    let reading = *reading.take().expect(POLLED_AFTER_COMPLETION);
                    this.state.set(read_state(reading, read));
                }
                StateProj::Authorize {
                    gate,
                    service,
                    request,
                } => {
                    let gate = ready!(gate.as_mut().poll(cx));
                    let mut request = request.take().expect(POLLED_AFTER_COMPLETION);
                    match admit(gate, &mut request) {
                        Err(response) => this.state.set(State::Respond {
                            response: Some(response),
                        }),
                        Ok(passed) => {
                            let mut service = service.take().expect(POLLED_AFTER_COMPLETION);
                            let future = service.call(request);
                            this.state.set(State::Inner { future, passed });
                        }
                    }
                }
                StateProj::Inner { future, passed } => {
                    let response = ready!(future.poll(cx))?;
                    let Some(passed) = passed.take() else {
                        return Poll::Ready(Ok(response.map(ResponseBody::inner)));
                    };
                    match after_work(passed, response) {
                        Next::Done(response) => return Poll::Ready(Ok(response)),
                        Next::Settle(settle, response) => this.state.set(State::Settle {
                            settle,
                            response: Some(response),
                        }),
                    }
                }
                StateProj::Settle { settle, response } => {
                    let (config, outcome) = ready!(settle.as_mut().poll(cx));
                    let mut response = response.take().expect(POLLED_AFTER_COMPLETION);
                    return Poll::Ready(Ok(match outcome {
                        Ok(paid) => {
                            let settled = paid.as_ref().map(|paid| &paid.payment().settlement);
                            if let Some(Some(settlement)) = settled {
                                mark_paid(&config, response.headers_mut(), settlement);
                            }
                            response.map(ResponseBody::inner)
                        }
                        // Not settled: the handler's response is dropped unsent.
                        Err(refusal) => into_body(refusal),
                    }));
                }
            }
        }
    }
}

/// The state after a paid request's body was read: on to the gate with its digest, or the
/// answer that refuses an unreadable body.
fn read_state<S, ReqBody, ResBody>(
    reading: Reading<S>,
    read: Result<(), Unreadable>,
) -> State<S, ReqBody, ResBody>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    ReqBody: From<Bytes>,
{
    let Reading {
        service,
        config,
        parts,
        price,
        bytes,
    } = reading;
    if let Err(unreadable) = read {
        let response = responses::body_refused(&config, unreadable.status(), &unreadable.message());
        return State::Respond {
            response: Some(response),
        };
    }
    let bytes = paid_body::freeze(bytes);
    let seen = BodySeen::of(&bytes);
    match gate::gate(&config, price, &parts, seen.as_ref()) {
        Start::Respond(response) => State::Respond {
            response: Some(response),
        },
        Start::Gate(gate) => State::Authorize {
            gate,
            service: Some(service),
            request: Some(Request::from_parts(parts, ReqBody::from(bytes))),
        },
    }
}

/// A payment let through, with the [`Charge`] of a metered one: what is left to do once the
/// inner service answered.
type Passed = (Arc<Config>, Pass, Option<Charge>);

/// What the gate decided, applied to the request: its extensions (a hook's grant, the payment
/// and its charge), or the response that refuses it.
// The refusal is answered at once, never passed along: not worth a box.
#[allow(clippy::result_large_err)]
fn admit<B>(gate: Gate, request: &mut Request<B>) -> Result<Option<Passed>, Response<Bytes>> {
    match gate {
        Gate::Refuse(response) => Err(response),
        Gate::Granted(extensions) => {
            request.extensions_mut().extend(extensions);
            Ok(None)
        }
        Gate::Proceed(config, pass) => {
            let payment = pass.payment();
            let charge = config.payments.charge(payment);
            if let Some(charge) = &charge {
                request.extensions_mut().insert(charge.clone());
            }
            request.extensions_mut().insert(payment.clone());
            Ok(Some((config, pass, charge)))
        }
    }
}

/// What follows the inner service's answer to a paid request.
enum Next<B> {
    /// Answer now: settled already, or metered after the body.
    Done(Response<ResponseBody<B>>),
    /// Resolve the payment (the core settles what the work charged, or releases it when the
    /// work failed), then answer (or refuse).
    Settle(SettleFuture, Response<B>),
}

fn after_work<B>((config, pass, charge): Passed, mut response: Response<B>) -> Next<B> {
    // Never shown to the client, whatever happens next.
    let overrides = take_overrides(response.headers_mut());
    let cleared = match pass {
        Pass::Paid(paid) | Pass::Answered(paid) => {
            // Settled before the handler, or a repeat answered from its record.
            if let Some(settlement) = &paid.payment().settlement {
                mark_paid(&config, response.headers_mut(), settlement);
            }
            return Next::Done(response.map(ResponseBody::inner));
        }
        Pass::Cleared(cleared) => cleared,
    };
    // A handler that failed is not charged: the payment is released, usable again.
    let served = response.status().as_u16() < 400;
    let named = match &charge {
        Some(charge) if served => header_amount(charge, overrides, cleared.payment()),
        _ => Ok(None),
    };
    let after_body = cleared.payment().offer.settlement_mode() == SettlementMode::AfterBody;
    if let (true, Ok(named)) = (served && after_body, &named) {
        // The head goes out now, the body streams as produced, and the payment settles once it
        // has ended.
        responses::mark_metered(&config, response.headers_mut());
        let meter = Meter::new(cleared, charge, *named);
        return Next::Done(response.map(|body| ResponseBody::metered(body, meter)));
    }
    let offer = Arc::clone(&cleared.payment().offer);
    // What `Cleared::conclude` does, one boxed future per step: each carries only its own, so
    // that the common one (settling a fixed price) stays small.
    let conclusion = match named {
        Ok(named) => Conclusion::of(served, charge.as_ref(), named),
        Err(refusal) => {
            let refused = async move { Err(cleared.refuse(*refusal).await) };
            return Next::Settle(resolving(config, offer, refused), response);
        }
    };
    let settle = match conclusion {
        Conclusion::Release => resolving(config, offer, async move {
            cleared.release().await;
            Ok(None)
        }),
        Conclusion::Settle => resolving(
            config,
            offer,
            async move { cleared.settle().await.map(Some) },
        ),
        Conclusion::SettleAmount(amount) => resolving(config, offer, async move {
            cleared.settle_amount(amount).await.map(Some)
        }),
    };
    Next::Settle(settle, response)
}

/// `resolution`, boxed, its refusal answered with `offer`'s challenge.
fn resolving(
    config: Arc<Config>,
    offer: Arc<Offer>,
    resolution: impl Future<Output = Result<Option<Paid>, Refusal>> + Send + 'static,
) -> SettleFuture {
    Box::pin(Resolving {
        config: Some(config),
        offer,
        resolution,
    })
}

pin_project! {
    /// A payment's resolution and what answers its refusal. A future of its own rather than
    /// an `async` block, which would keep the resolution twice: as captured, and as awaited.
    struct Resolving<F> {
        config: Option<Arc<Config>>,
        offer: Arc<Offer>,
        #[pin]
        resolution: F,
    }
}

impl<F> Future for Resolving<F>
where
    F: Future<Output = Result<Option<Paid>, Refusal>>,
{
    type Output = (Arc<Config>, Result<Option<Paid>, Response<Bytes>>);

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let outcome = ready!(this.resolution.poll(cx));
        let config = this.config.take().expect(POLLED_AFTER_COMPLETION);
        let outcome = outcome.map_err(|refusal| responses::refusal(&config, this.offer, &refusal));
        Poll::Ready((config, outcome))
    }
}
