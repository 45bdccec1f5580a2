//! One facilitator call: headers, deadline, retries, and reading and classifying the answer.

use bytes::{Bytes, BytesMut};
use http::header::{ACCEPT, CONTENT_TYPE};
use http::{HeaderValue, Method, StatusCode};
use serde::de::DeserializeOwned;
use tokio::time::Instant;

use super::Inner;
use super::retry;
use crate::facilitator::{Endpoint, FacilitatorError};

/// Largest answer body read from a facilitator; real answers are a few hundred bytes.
const MAX_BODY_BYTES: usize = 1024 * 1024;
/// How much of an unexpected body is kept in an error, in characters.
const BODY_EXCERPT_CHARS: usize = 512;

/// The `Accept` of every call and the `Content-Type` of every request body (no copy: static).
fn application_json() -> HeaderValue {
    HeaderValue::from_static("application/json")
}

/// How one attempt ended.
enum Outcome<T> {
    Answer(T),
    Failed {
        error: FacilitatorError,
        retryable: bool,
    },
}

impl Inner {
    /// Calls `endpoint` (a POST of `body`, or a GET without one) and decodes the answer as `T`.
    ///
    /// The endpoint's timeout bounds the whole call, retries and waits included. `/verify` and
    /// `/supported` are retried on connection failures, 429 and 5xx; `/settle` never is. When the
    /// deadline cuts a retry short, the call fails with the error that prompted the retry: what
    /// the facilitator last answered, not how much time was left to ask again.
    pub(super) async fn call<T: DeserializeOwned>(
        &self,
        endpoint: Endpoint,
        body: Option<Bytes>,
    ) -> Result<T, FacilitatorError> {
        let budget = self.timeouts.for_endpoint(endpoint);
        let mut started = Instant::now();
        // A budget too large to add (`Duration::MAX`) sets no deadline.
        let deadline = started.checked_add(budget);
        let max_attempts = match endpoint {
            Endpoint::Settle => 1,
            Endpoint::Verify | Endpoint::Supported => self.retry.max_attempts,
        };
        let mut attempt = 1;
        let mut prompted_retry: Option<FacilitatorError> = None;
        loop {
            let pending = self.attempt(endpoint, body.clone(), started);
            let outcome = match deadline {
                Some(deadline) => match tokio::time::timeout_at(deadline, pending).await {
                    Ok(outcome) => outcome,
                    Err(_elapsed) => {
                        tracing::debug!(%endpoint, attempt, ?budget, "facilitator call timed out");
                        return Err(prompted_retry.unwrap_or(FacilitatorError::TimedOut {
                            endpoint,
                            after: budget,
                        }));
                    }
                },
                None => pending.await,
            };
            let error = match outcome {
                Outcome::Answer(answer) => return Ok(answer),
                Outcome::Failed { error, retryable } if retryable && attempt < max_attempts => {
                    error
                }
                Outcome::Failed { error, .. } => return Err(error),
            };
            let Some(wait) = self.retry.delay(attempt, error.retry_after()) else {
                return Err(error);
            };
            if deadline.is_some_and(|deadline| Instant::now() + wait >= deadline) {
                return Err(error);
            }
            tracing::debug!(%endpoint, attempt, wait_ms = wait.as_millis(), %error, "retrying facilitator call");
            tokio::time::sleep(wait).await;
            prompted_retry = Some(error);
            started = Instant::now();
            attempt += 1;
        }
    }

    /// One attempt, begun at `started` (for the logged latency). The request is built directly
    /// (no request builder): its method, URL and static headers without copies, the body as
    /// encoded, and the auth headers only when some are configured.
    async fn attempt<T: DeserializeOwned>(
        &self,
        endpoint: Endpoint,
        body: Option<Bytes>,
        started: Instant,
    ) -> Outcome<T> {
        let method = if body.is_some() {
            Method::POST
        } else {
            Method::GET
        };
        // reqwest takes the URL by value: one copy of a short string per call.
        let mut request = reqwest::Request::new(method, self.urls.get(endpoint).clone());
        let headers = request.headers_mut();
        headers.insert(ACCEPT, application_json());
        if let Some(body) = body {
            headers.insert(CONTENT_TYPE, application_json());
            *request.body_mut() = Some(body.into());
        }
        if !self.auth.is_empty() {
            match self.auth.headers(endpoint).await {
                Ok(auth) => request.headers_mut().extend(auth),
                Err(source) => {
                    tracing::debug!(%endpoint, "facilitator auth provider failed");
                    return Outcome::Failed {
                        error: FacilitatorError::Auth {
                            endpoint,
                            source: source.into(),
                        },
                        retryable: false,
                    };
                }
            }
        }
        let response = match self.client.execute(request).await {
            Ok(response) => response,
            Err(error) => {
                tracing::debug!(%endpoint, latency_ms = started.elapsed().as_millis(), %error, "facilitator request failed");
                return self.transport_failure(endpoint, error);
            }
        };
        let status = response.status();
        let retry_after = retry::retry_after(response.headers());
        let body = read_body(response).await;
        tracing::debug!(
            %endpoint,
            status = status.as_u16(),
            latency_ms = started.elapsed().as_millis(),
            "facilitator answered"
        );
        match body {
            Ok(body) => classify(endpoint, status, retry_after, &body),
            Err(BodyError::TooLarge) => Outcome::Failed {
                error: FacilitatorError::Malformed {
                    endpoint,
                    message: format!("HTTP {status} body is larger than {MAX_BODY_BYTES} bytes"),
                },
                retryable: false,
            },
            Err(BodyError::Transport(source)) => Outcome::Failed {
                error: FacilitatorError::Unreachable {
                    endpoint,
                    source: std::sync::Arc::new(source),
                },
                retryable: false,
            },
        }
    }

    /// A request that got no response. Only failures to connect are retried: anything later
    /// may have reached the facilitator.
    fn transport_failure<T>(&self, endpoint: Endpoint, error: reqwest::Error) -> Outcome<T> {
        let retryable = error.is_connect();
        let error = if error.is_timeout() {
            // The call's own deadline is enforced outside; this is the client's connect timeout.
            FacilitatorError::TimedOut {
                endpoint,
                after: self.timeouts.connect,
            }
        } else {
            FacilitatorError::Unreachable {
                endpoint,
                source: std::sync::Arc::new(error),
            }
        };
        Outcome::Failed { error, retryable }
    }
}

/// Sorts an answer into a decoded `T` or an error.
///
/// A success status must carry a `T`. Like the reference clients, an error status whose body
/// is a well-formed `T` (e.g. `400 {"isValid":false,…}`) counts as that answer; this never
/// applies to `/supported`, whose answer has no failure form.
fn classify<T: DeserializeOwned>(
    endpoint: Endpoint,
    status: StatusCode,
    retry_after: Option<std::time::Duration>,
    body: &[u8],
) -> Outcome<T> {
    let decoded = serde_json::from_slice::<T>(body);
    if status.is_success() {
        return match decoded {
            Ok(answer) => Outcome::Answer(answer),
            Err(error) => Outcome::Failed {
                error: FacilitatorError::Malformed {
                    endpoint,
                    message: format!(
                        "HTTP {status} body is not the expected JSON object ({error}): {:?}",
                        excerpt(body)
                    ),
                },
                retryable: false,
            },
        };
    }
    if endpoint != Endpoint::Supported
        && let Ok(answer) = decoded
    {
        return Outcome::Answer(answer);
    }
    Outcome::Failed {
        error: FacilitatorError::Status {
            endpoint,
            status,
            body: excerpt(body),
            retry_after,
        },
        retryable: status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error(),
    }
}

/// The start of a body as text, for error messages.
fn excerpt(body: &[u8]) -> String {
    let head = &body[..body.len().min(BODY_EXCERPT_CHARS * 4)];
    let text = String::from_utf8_lossy(head);
    let mut chars = text.char_indices();
    match chars.nth(BODY_EXCERPT_CHARS) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None if head.len() < body.len() => format!("{text}…"),
        None => text.into_owned(),
    }
}

enum BodyError {
    TooLarge,
    Transport(reqwest::Error),
}

/// Reads the whole body, refusing more than [`MAX_BODY_BYTES`].
///
/// A body that arrives in one chunk (the usual small answer) is returned as is, without a copy.
async fn read_body(mut response: reqwest::Response) -> Result<Bytes, BodyError> {
    let announced = response.content_length().unwrap_or(0);
    if usize::try_from(announced).map_or(true, |len| len > MAX_BODY_BYTES) {
        return Err(BodyError::TooLarge);
    }
    let Some(first) = response.chunk().await.map_err(BodyError::Transport)? else {
        return Ok(Bytes::new());
    };
    if first.len() > MAX_BODY_BYTES {
        return Err(BodyError::TooLarge);
    }
    let Some(second) = response.chunk().await.map_err(BodyError::Transport)? else {
        return Ok(first);
    };
    let mut body = BytesMut::with_capacity(first.len() + second.len());
    let mut next = Some(first);
    let mut pending = Some(second);
    while let Some(chunk) = next {
        if body.len() + chunk.len() > MAX_BODY_BYTES {
            return Err(BodyError::TooLarge);
        }
        body.extend_from_slice(&chunk);
        next = match pending.take() {
            Some(chunk) => Some(chunk),
            None => response.chunk().await.map_err(BodyError::Transport)?,
        };
    }
    Ok(body.freeze())
}

#[cfg(test)]
mod tests {
    use super::*;
    use x402_wire::VerifyResponse;

    #[test]
    fn a_negative_answer_in_an_error_status_is_an_answer() {
        let body = br#"{"isValid":false,"invalidReason":"invalid_exact_evm_signature"}"#;
        let outcome =
            classify::<VerifyResponse>(Endpoint::Verify, StatusCode::BAD_REQUEST, None, body);
        assert!(matches!(
            outcome,
            Outcome::Answer(VerifyResponse {
                is_valid: false,
                ..
            })
        ));
    }

    #[test]
    fn only_overload_and_server_errors_are_retryable() {
        for (status, retryable) in [
            (429, true),
            (500, true),
            (503, true),
            (400, false),
            (401, false),
            (404, false),
        ] {
            let status = StatusCode::from_u16(status).unwrap();
            match classify::<VerifyResponse>(Endpoint::Verify, status, None, b"{\"error\":\"x\"}") {
                Outcome::Failed {
                    error: FacilitatorError::Status { .. },
                    retryable: r,
                } => assert_eq!(r, retryable, "{status}"),
                _ => panic!("{status} should be a Status error"),
            }
        }
    }

    #[test]
    fn excerpts_are_bounded_and_cut_on_a_character() {
        assert_eq!(excerpt(b"short"), "short");
        let long = "é".repeat(BODY_EXCERPT_CHARS + 10);
        let cut = excerpt(long.as_bytes());
        assert_eq!(cut.chars().count(), BODY_EXCERPT_CHARS + 1);
        assert!(cut.ends_with('…'));
    }
}
