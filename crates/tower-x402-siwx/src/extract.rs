//! [`Buyer`] and [`SignedIn`] as axum extractors (feature `axum`).

use axum_core::extract::{FromRequestParts, OptionalFromRequestParts};
use axum_core::response::{IntoResponse, Response};
use http::request::Parts;
use http::{HeaderValue, StatusCode, header};

use super::buyer::Buyer;
use super::signed_in::SignedIn;

const MISSING_BUYER: &str = "neither a payment nor a sign-in on this request: is `X402Layer` \
     installed in front of this handler?";

const MISSING_SIGN_IN: &str = "no sign-in on this request: is `X402Layer` with `SignInWithX` \
     installed in front of this handler?";

/// Rejection when a handler asks for a [`Buyer`] or a [`SignedIn`] the layer did not put in the
/// request (no layer in front, or no sign-in on it): a server misconfiguration, answered with
/// a 500 and a JSON error that says so.
#[derive(Debug, Clone, Copy)]
pub struct MissingBuyer {
    message: &'static str,
}

impl IntoResponse for MissingBuyer {
    fn into_response(self) -> Response {
        let body = serde_json::json!({ "error": self.message }).to_string();
        (
            StatusCode::INTERNAL_SERVER_ERROR,
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            )],
            body,
        )
            .into_response()
    }
}

impl std::fmt::Display for MissingBuyer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.message)
    }
}

impl std::error::Error for MissingBuyer {}

/// The payment, else the sign-in the layer put in the request; a 500 naming the layer when
/// there is neither.
impl<S: Send + Sync> FromRequestParts<S> for Buyer {
    type Rejection = MissingBuyer;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        Buyer::from_extensions(&parts.extensions).ok_or(MissingBuyer {
            message: MISSING_BUYER,
        })
    }
}

/// `SignedIn` alone answers 500 when the layer put none (a handler reached without a
/// sign-in); take `Option<SignedIn>` in a handler that serves both payments and sign-ins.
impl<S: Send + Sync> FromRequestParts<S> for SignedIn {
    type Rejection = MissingBuyer;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        parts
            .extensions
            .get::<SignedIn>()
            .cloned()
            .ok_or(MissingBuyer {
                message: MISSING_SIGN_IN,
            })
    }
}

impl<S: Send + Sync> OptionalFromRequestParts<S> for SignedIn {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut Parts,
        _state: &S,
    ) -> Result<Option<Self>, Self::Rejection> {
        Ok(parts.extensions.get::<SignedIn>().cloned())
    }
}
