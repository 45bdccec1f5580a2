//! The responses the layer writes itself: the challenge, every [`Refusal`], and the marks on a
//! paid response.

use std::time::Duration;

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderValue};
use http::{Response, StatusCode};
use x402_wire::{PAYMENT_REQUIRED, PAYMENT_RESPONSE, SettleResponse, header as codec};

use super::Config;
use super::body::ResponseBody;
use crate::payment::{Refusal, RefusalKind};
use crate::pricing::Offer;

const JSON: HeaderValue = HeaderValue::from_static("application/json");
const NO_STORE: HeaderValue = HeaderValue::from_static("no-store");

pub(crate) fn into_body<B>(response: Response<Bytes>) -> Response<ResponseBody<B>> {
    response.map(ResponseBody::layer)
}

fn base(config: &Config, status: StatusCode, body: Bytes) -> Response<Bytes> {
    let mut response = Response::new(body);
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, JSON);
    headers.insert(header::CACHE_CONTROL, NO_STORE);
    if let Some(expose) = &config.expose_headers {
        headers.insert(header::ACCESS_CONTROL_EXPOSE_HEADERS, expose.clone());
    }
    response
}

/// The HTTP status a refusal of `kind` is answered with.
pub(crate) fn status_of_kind(kind: RefusalKind) -> StatusCode {
    match kind {
        RefusalKind::PaymentRequired => StatusCode::PAYMENT_REQUIRED,
        RefusalKind::BadRequest => StatusCode::BAD_REQUEST,
        RefusalKind::Conflict => StatusCode::CONFLICT,
        RefusalKind::RetrySamePayment => StatusCode::SERVICE_UNAVAILABLE,
        RefusalKind::UpstreamFault => StatusCode::BAD_GATEWAY,
        RefusalKind::ServerFault => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// The response for `refusal`: the only place a refusal becomes a response.
pub(crate) fn refusal(config: &Config, offer: &Offer, refusal: &Refusal) -> Response<Bytes> {
    let status = match refusal {
        Refusal::InvalidHeader(_) if config.invalid_header_payment_required => {
            StatusCode::PAYMENT_REQUIRED
        }
        Refusal::InvalidHeader(_) => StatusCode::BAD_REQUEST,
        _ => status_of_kind(refusal.kind()),
    };
    match refusal {
        Refusal::PaymentMissing => challenge(config, offer),
        Refusal::SettlementRefused(settlement) => settlement_refused(config, offer, settlement),
        Refusal::Facilitator(failure) if status == StatusCode::SERVICE_UNAVAILABLE => {
            let wait = failure.retry_after().unwrap_or(config.retry_after);
            unavailable(config, offer, wait, refusal)
        }
        // Every other "send the same payment again" (the records, a payment in doubt or in
        // progress, a hook's) says when.
        _ if status == StatusCode::SERVICE_UNAVAILABLE => {
            unavailable(config, offer, config.retry_after, refusal)
        }
        Refusal::UsedForAnotherRequest { .. } | Refusal::AlreadyDelivered { .. } => {
            conflict(config, refusal)
        }
        Refusal::Corrected { reason, accept } => corrected(config, offer, reason, accept),
        _ if status == StatusCode::PAYMENT_REQUIRED => {
            challenge_explained(config, offer, &refusal.to_string())
        }
        _ => error(config, offer, status, &refusal.to_string()),
    }
}

/// The 402 for a request without payment: both parts precomputed in the offer.
fn challenge(config: &Config, offer: &Offer) -> Response<Bytes> {
    let mut response = base(
        config,
        StatusCode::PAYMENT_REQUIRED,
        offer.challenge_body().clone(),
    );
    response
        .headers_mut()
        .insert(PAYMENT_REQUIRED, offer.challenge_header().clone());
    response
}

/// A 402 whose challenge explains what was wrong with the payment presented.
pub(crate) fn challenge_explained(config: &Config, offer: &Offer, error: &str) -> Response<Bytes> {
    let required = offer.challenge_with_error(error);
    match (codec::encode(&required), serde_json::to_vec(&required)) {
        (Ok(value), Ok(body)) => {
            let mut response = base(config, StatusCode::PAYMENT_REQUIRED, body.into());
            response.headers_mut().insert(PAYMENT_REQUIRED, value);
            response
        }
        // Unreachable for valid offers (they encoded once already); never lose the challenge.
        _ => challenge(config, offer),
    }
}

/// A 402 whose accept of `accept`'s scheme, network, asset and payTo is `accept` (a scheme's
/// corrective challenge).
fn corrected(
    config: &Config,
    offer: &Offer,
    error: &str,
    accept: &x402_wire::PaymentRequirements,
) -> Response<Bytes> {
    let mut required = offer.challenge_with_error(error);
    for own in &mut required.accepts {
        if own.scheme == accept.scheme
            && own.network == accept.network
            && own.asset == accept.asset
            && own.pay_to == accept.pay_to
        {
            own.clone_from(accept);
        }
    }
    match (codec::encode(&required), serde_json::to_vec(&required)) {
        (Ok(value), Ok(body)) => {
            let mut response = base(config, StatusCode::PAYMENT_REQUIRED, body.into());
            response.headers_mut().insert(PAYMENT_REQUIRED, value);
            response
        }
        _ => challenge_explained(config, offer, error),
    }
}

/// The answer to a payment settled without the work
/// ([`Outcome::Answered`](crate::payment::Outcome::Answered)): 200, the settlement as the JSON
/// body and in `PAYMENT-RESPONSE`.
pub(crate) fn answered(
    config: &Config,
    payment: &crate::payment::VerifiedPayment,
) -> Response<Bytes> {
    let body = payment
        .settlement
        .as_ref()
        .and_then(|settlement| serde_json::to_vec(settlement).ok())
        .unwrap_or_default();
    let mut response = base(config, StatusCode::OK, body.into());
    if let Some(settlement) = &payment.settlement {
        mark_paid(config, response.headers_mut(), settlement);
    }
    response
}

/// A 402 after the facilitator refused to settle: the failure in `PAYMENT-RESPONSE`, and the
/// challenge again so the client can pay afresh.
fn settlement_refused(
    config: &Config,
    offer: &Offer,
    settlement: &SettleResponse,
) -> Response<Bytes> {
    let reason = settlement
        .error_reason
        .as_deref()
        .unwrap_or("settlement_failed");
    let mut response = challenge_explained(config, offer, reason);
    if let Ok(value) = codec::encode(settlement) {
        response.headers_mut().insert(PAYMENT_RESPONSE, value);
    }
    response
}

/// A non-402 error with a JSON body `{"x402Version":2,"error":…}`; a 400 also carries the
/// challenge so the client can try again correctly.
fn error(config: &Config, offer: &Offer, status: StatusCode, message: &str) -> Response<Bytes> {
    let mut response = base(config, status, error_body(message));
    if status == StatusCode::BAD_REQUEST {
        response
            .headers_mut()
            .insert(PAYMENT_REQUIRED, offer.challenge_header().clone());
    }
    response
}

/// A 409 for a payment that already bought its one delivery:
/// `{"x402Version":2,"error":code,"message":…}`, with the recorded settlement in
/// `PAYMENT-RESPONSE` when there is one.
fn conflict(config: &Config, refusal: &Refusal) -> Response<Bytes> {
    #[derive(serde::Serialize)]
    #[serde(rename_all = "camelCase")]
    struct ConflictBody<'a> {
        x402_version: u32,
        error: &'a str,
        message: String,
    }
    let body = serde_json::to_vec(&ConflictBody {
        x402_version: 2,
        error: refusal.conflict_code().unwrap_or("payment_conflict"),
        message: refusal.to_string(),
    })
    .unwrap_or_default();
    let mut response = base(config, StatusCode::CONFLICT, body.into());
    if let Some(value) = refusal
        .recorded_settlement()
        .and_then(|settlement| codec::encode(settlement).ok())
    {
        response.headers_mut().insert(PAYMENT_RESPONSE, value);
    }
    response
}

/// `{"x402Version":2,"error":message}`.
fn error_body(message: &str) -> Bytes {
    #[derive(serde::Serialize)]
    #[serde(rename_all = "camelCase")]
    struct ErrorBody<'a> {
        x402_version: u32,
        error: &'a str,
    }
    serde_json::to_vec(&ErrorBody {
        x402_version: 2,
        error: message,
    })
    .unwrap_or_default()
    .into()
}

/// A 503 asking the client to retry the same payment after `wait`.
fn unavailable(
    config: &Config,
    offer: &Offer,
    wait: Duration,
    refusal: &Refusal,
) -> Response<Bytes> {
    unavailable_explained(config, offer, wait, &refusal.to_string())
}

/// A 503 with `Retry-After: wait` and `message` as its JSON `error`.
pub(crate) fn unavailable_explained(
    config: &Config,
    offer: &Offer,
    wait: Duration,
    message: &str,
) -> Response<Bytes> {
    let mut response = error(config, offer, StatusCode::SERVICE_UNAVAILABLE, message);
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, retry_after_value(wait));
    response
}

/// The answer to a paid request whose body could not be read: `status` and
/// `{"x402Version":2,"error":message}`.
pub(crate) fn body_refused(config: &Config, status: StatusCode, message: &str) -> Response<Bytes> {
    base(config, status, error_body(message))
}

/// The answer for a path where nothing is sold ([`Price::NotSold`](crate::Price::NotSold)).
pub(crate) fn not_sold(status: StatusCode, message: &str) -> Response<Bytes> {
    let mut response = Response::new(error_body(message));
    *response.status_mut() = status;
    response.headers_mut().insert(header::CONTENT_TYPE, JSON);
    response
}

fn retry_after_value(wait: Duration) -> HeaderValue {
    // Whole seconds, rounded up, at least one.
    let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    HeaderValue::from(secs.max(1))
}

/// Marks a paid response: `PAYMENT-RESPONSE`, `private` caching, and the exposed headers.
pub(crate) fn mark_paid(config: &Config, headers: &mut HeaderMap, settlement: &SettleResponse) {
    if let Ok(value) = codec::encode(settlement) {
        headers.insert(PAYMENT_RESPONSE, value);
    }
    mark_private(config, headers);
}

/// Marks the head of a response settled after its body: `PAYMENT-RESPONSE` is announced as a
/// trailer (so the body is sent chunked over HTTP/1.1, without `Content-Length`), `private`
/// caching, and the exposed headers.
pub(crate) fn mark_metered(config: &Config, headers: &mut HeaderMap) {
    headers.remove(header::CONTENT_LENGTH);
    headers.insert(
        header::TRAILER,
        HeaderValue::from_static("PAYMENT-RESPONSE"),
    );
    mark_private(config, headers);
}

fn mark_private(config: &Config, headers: &mut HeaderMap) {
    let cache_control = match headers.get(header::CACHE_CONTROL).map(HeaderValue::to_str) {
        None => Some(HeaderValue::from_static("private")),
        Some(Ok(existing))
            if has_directive(existing, "private") || has_directive(existing, "no-store") =>
        {
            None
        }
        Some(Ok(existing)) => HeaderValue::try_from(format!("private, {existing}")).ok(),
        // Not text: replace rather than keep a value that might allow shared caching.
        Some(Err(_)) => Some(HeaderValue::from_static("private")),
    };
    if let Some(value) = cache_control {
        headers.insert(header::CACHE_CONTROL, value);
    }
    if let Some(expose) = &config.expose_headers {
        headers.append(header::ACCESS_CONTROL_EXPOSE_HEADERS, expose.clone());
    }
}

fn has_directive(cache_control: &str, directive: &str) -> bool {
    cache_control.split(',').any(|part| {
        part.trim()
            .split('=')
            .next()
            .is_some_and(|name| name.trim().eq_ignore_ascii_case(directive))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_rounds_up_to_whole_seconds() {
        assert_eq!(retry_after_value(Duration::from_millis(1500)), "2");
        assert_eq!(retry_after_value(Duration::ZERO), "1");
        assert_eq!(retry_after_value(Duration::from_secs(30)), "30");
    }

    #[test]
    fn finds_cache_directives() {
        assert!(has_directive("max-age=60, Private", "private"));
        assert!(!has_directive("max-age=60, public", "private"));
        assert!(has_directive("no-store", "no-store"));
    }
}
