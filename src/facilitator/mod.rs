//! The facilitator: the external party that verifies and settles payments.
//!
//! [`Facilitator`] is the interface the layer talks to. `HttpFacilitator` (feature `reqwest`)
//! implements it over HTTP for a real facilitator; the `tower-x402-sandbox` crate has an
//! in-process stand-in for tests. A negative answer (`isValid: false`, `success: false`) is a
//! normal `Ok` result; [`FacilitatorError`] is reserved for not getting an answer at all.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use x402_wire::{FacilitatorRequest, SettleResponse, SupportedResponse, VerifyResponse};

use crate::boxed::BoxFuture;

#[cfg(feature = "reqwest")]
mod http;
mod pool;

#[cfg(feature = "reqwest")]
pub use self::http::{FacilitatorConfigError, HttpFacilitator, HttpFacilitatorBuilder};
pub(crate) use self::pool::Member;
pub use self::pool::{DEFAULT_LABEL, Facilitators};

/// Verifies and settles payments. The facilitator is the only settler: the layer never moves
/// funds itself.
///
/// Implementations must be cheap to share (`Arc<dyn Facilitator>` is what the layer holds).
pub trait Facilitator: Send + Sync + 'static {
    /// `POST /verify`: would this payment settle?
    fn verify<'a>(
        &'a self,
        request: &'a FacilitatorRequest,
    ) -> BoxFuture<'a, Result<VerifyResponse, FacilitatorError>>;

    /// `POST /settle`: move the funds. Never retried blindly: a retry could double-charge if the
    /// first attempt reached the chain.
    fn settle<'a>(
        &'a self,
        request: &'a FacilitatorRequest,
    ) -> BoxFuture<'a, Result<SettleResponse, FacilitatorError>>;

    /// `GET /supported`: the payment kinds this facilitator handles.
    ///
    /// The layer never calls it; applications do, to decide what to offer. The default answers
    /// with an empty list, so a facilitator that only verifies and settles need not implement it.
    fn supported(&self) -> BoxFuture<'_, Result<Arc<SupportedResponse>, FacilitatorError>> {
        Box::pin(std::future::ready(Ok(Arc::new(
            SupportedResponse::default(),
        ))))
    }
}

impl<F: Facilitator + ?Sized> Facilitator for Arc<F> {
    fn verify<'a>(
        &'a self,
        request: &'a FacilitatorRequest,
    ) -> BoxFuture<'a, Result<VerifyResponse, FacilitatorError>> {
        (**self).verify(request)
    }

    fn settle<'a>(
        &'a self,
        request: &'a FacilitatorRequest,
    ) -> BoxFuture<'a, Result<SettleResponse, FacilitatorError>> {
        (**self).settle(request)
    }

    fn supported(&self) -> BoxFuture<'_, Result<Arc<SupportedResponse>, FacilitatorError>> {
        (**self).supported()
    }
}

/// Which facilitator endpoint an error came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Endpoint {
    /// `POST /verify`.
    Verify,
    /// `POST /settle`.
    Settle,
    /// `GET /supported`.
    Supported,
}

impl Endpoint {
    /// The path segment, e.g. `verify`.
    pub const fn path(self) -> &'static str {
        match self {
            Self::Verify => "verify",
            Self::Settle => "settle",
            Self::Supported => "supported",
        }
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "/{}", self.path())
    }
}

/// The facilitator gave no usable answer. Cloning it shares the source.
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FacilitatorError {
    /// No connection could be made (refused, DNS, TLS, reset before a response).
    #[error("facilitator {endpoint} is unreachable: {source}")]
    Unreachable {
        /// The endpoint called.
        endpoint: Endpoint,
        /// The transport error.
        #[source]
        source: Arc<dyn std::error::Error + Send + Sync>,
    },
    /// No answer within the configured time.
    #[error("facilitator {endpoint} timed out after {after:?}")]
    TimedOut {
        /// The endpoint called.
        endpoint: Endpoint,
        /// The deadline that passed.
        after: Duration,
    },
    /// An HTTP status other than success, with no well-formed answer in the body.
    #[error("facilitator {endpoint} answered HTTP {status}: {body}")]
    Status {
        /// The endpoint called.
        endpoint: Endpoint,
        /// The status received.
        status: ::http::StatusCode,
        /// The start of the body, for diagnosis.
        body: String,
        /// The facilitator's `Retry-After`, if it sent one.
        retry_after: Option<Duration>,
    },
    /// An answer that is not the protocol's JSON object.
    #[error("facilitator {endpoint} sent a malformed answer: {message}")]
    Malformed {
        /// The endpoint called.
        endpoint: Endpoint,
        /// What was wrong with it.
        message: String,
    },
    /// The credentials for the call could not be produced (the auth provider failed), so
    /// nothing was sent. This is the server's own configuration or credential source failing,
    /// not the facilitator being unavailable, so it is not
    /// [`is_unavailable`](Self::is_unavailable). The message leaves the provider's error out,
    /// since it may be shown to clients; it is available as the error's `source`.
    #[error("facilitator {endpoint} call was not sent: its credentials could not be produced")]
    Auth {
        /// The endpoint that was to be called.
        endpoint: Endpoint,
        /// The provider's error.
        #[source]
        source: Arc<dyn std::error::Error + Send + Sync>,
    },
}

impl FacilitatorError {
    /// The endpoint the error came from.
    pub fn endpoint(&self) -> Endpoint {
        match self {
            Self::Unreachable { endpoint, .. }
            | Self::TimedOut { endpoint, .. }
            | Self::Status { endpoint, .. }
            | Self::Malformed { endpoint, .. }
            | Self::Auth { endpoint, .. } => *endpoint,
        }
    }

    /// Whether the facilitator is (for now) unavailable — unreachable, timed out, overloaded
    /// (429) or down (502/503/504) — as opposed to answering wrongly. Unavailable maps to a 503
    /// with `Retry-After`; the rest to a 502.
    pub fn is_unavailable(&self) -> bool {
        match self {
            Self::Unreachable { .. } | Self::TimedOut { .. } => true,
            Self::Status { status, .. } => matches!(status.as_u16(), 429 | 502 | 503 | 504),
            Self::Malformed { .. } | Self::Auth { .. } => false,
        }
    }

    /// A short description that is safe to show a client: no facilitator body, no credentials.
    /// The full error (`Display`, `source()`) belongs in the server's logs.
    pub fn public_summary(&self) -> String {
        let endpoint = self.endpoint();
        match self {
            Self::Unreachable { .. } => format!("facilitator {endpoint} is unreachable"),
            Self::TimedOut { .. } => format!("facilitator {endpoint} timed out"),
            Self::Status { status, .. } => {
                format!("facilitator {endpoint} answered HTTP {}", status.as_u16())
            }
            Self::Malformed { .. } => format!("facilitator {endpoint} sent a malformed answer"),
            Self::Auth { .. } => format!("could not authenticate to facilitator {endpoint}"),
        }
    }

    /// How long the facilitator asked callers to wait, if it said.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::Status { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}
