//! The responses the layer writes itself.

use std::time::Duration;

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderValue};
use http::{Response, StatusCode};

use super::Offer;
use super::body::ResponseBody;
use super::config::Config;
use crate::facilitator::FacilitatorError;
use crate::proto::{PAYMENT_REQUIRED, PAYMENT_RESPONSE, SettleResponse, header as codec};

const JSON: HeaderValue = HeaderValue::from_static("application/json");
const NO_STORE: HeaderValue = HeaderValue::from_static("no-store");

/// A response written by the layer, before its body type is chosen.
pub(super) type Own = Response<Bytes>;

pub(super) fn into_body<B>(response: Own) -> Response<ResponseBody<B>> {
    response.map(ResponseBody::layer)
}

fn base(config: &Config, status: StatusCode, body: Bytes) -> Own {
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

/// The 402 for a request without payment: both parts precomputed in the offer.
pub(super) fn challenge(config: &Config, offer: &Offer) -> Own {
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
pub(super) fn payment_failed(config: &Config, offer: &Offer, error: &str) -> Own {
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

/// A 402 after the facilitator refused to settle: the failure in `PAYMENT-RESPONSE`, and the
/// challenge again so the client can pay afresh.
pub(super) fn settlement_failed(
    config: &Config,
    offer: &Offer,
    settlement: &SettleResponse,
) -> Own {
    let reason = settlement
        .error_reason
        .as_deref()
        .unwrap_or("settlement_failed");
    let mut response = payment_failed(config, offer, reason);
    if let Ok(value) = codec::encode(settlement) {
        response.headers_mut().insert(PAYMENT_RESPONSE, value);
    }
    response
}

/// A non-402 error with a JSON body `{"x402Version":2,"error":…}`; a 400 also carries the
/// challenge so the client can try again correctly.
pub(super) fn error(config: &Config, offer: &Offer, status: StatusCode, message: &str) -> Own {
    #[derive(serde::Serialize)]
    #[serde(rename_all = "camelCase")]
    struct ErrorBody<'a> {
        x402_version: u32,
        error: &'a str,
    }
    let body = serde_json::to_vec(&ErrorBody {
        x402_version: 2,
        error: message,
    })
    .unwrap_or_default();
    let mut response = base(config, status, body.into());
    if status == StatusCode::BAD_REQUEST {
        response
            .headers_mut()
            .insert(PAYMENT_REQUIRED, offer.challenge_header().clone());
    }
    response
}

/// A 503 asking the client to retry the same payment after `wait`.
pub(super) fn unavailable(config: &Config, offer: &Offer, wait: Duration, message: &str) -> Own {
    let mut response = error(config, offer, StatusCode::SERVICE_UNAVAILABLE, message);
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, retry_after_value(wait));
    response
}

/// The response for a facilitator that gave no usable answer: 503 with `Retry-After` when it is
/// unavailable (the client should retry the same payment), 502 when it answered wrongly.
pub(super) fn facilitator_failed(
    config: &Config,
    offer: &Offer,
    failure: &FacilitatorError,
) -> Own {
    let summary = failure.public_summary();
    if failure.is_unavailable() {
        let wait = failure.retry_after().unwrap_or(config.retry_after);
        let message =
            format!("payment facilitator unavailable, retry the same payment later: {summary}");
        unavailable(config, offer, wait, &message)
    } else {
        let message = format!("payment facilitator failed: {summary}");
        error(config, offer, StatusCode::BAD_GATEWAY, &message)
    }
}

fn retry_after_value(wait: Duration) -> HeaderValue {
    // Whole seconds, rounded up, at least one.
    let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    HeaderValue::from(secs.max(1))
}

/// Marks a paid response: `PAYMENT-RESPONSE`, `private` caching, and the exposed headers.
pub(super) fn mark_paid(config: &Config, headers: &mut HeaderMap, settlement: &SettleResponse) {
    if let Ok(value) = codec::encode(settlement) {
        headers.insert(PAYMENT_RESPONSE, value);
    }
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
