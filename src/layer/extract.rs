//! [`VerifiedPayment`] as an axum extractor.

use axum_core::extract::FromRequestParts;
use axum_core::response::{IntoResponse, Response};
use http::request::Parts;
use http::{HeaderValue, StatusCode, header};

use super::VerifiedPayment;

/// Rejection when a handler asks for [`VerifiedPayment`] but no [`X402Layer`](super::X402Layer)
/// put one in the request: a server misconfiguration, answered with a 500.
#[derive(Debug, Clone, Copy, Default)]
#[non_exhaustive]
pub struct MissingPayment;

const MISSING_PAYMENT_BODY: &str = r#"{"error":"no verified payment on this request: is `X402Layer` installed in front of this handler?"}"#;

impl IntoResponse for MissingPayment {
    fn into_response(self) -> Response {
        let mut response =
            (StatusCode::INTERNAL_SERVER_ERROR, MISSING_PAYMENT_BODY).into_response();
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        response
    }
}

impl std::fmt::Display for MissingPayment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("no verified payment on this request: is `X402Layer` installed in front of this handler?")
    }
}

impl std::error::Error for MissingPayment {}

impl<S: Send + Sync> FromRequestParts<S> for VerifiedPayment {
    type Rejection = MissingPayment;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        parts
            .extensions
            .get::<VerifiedPayment>()
            .cloned()
            .ok_or(MissingPayment)
    }
}

impl<S: Send + Sync> axum_core::extract::OptionalFromRequestParts<S> for VerifiedPayment {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut Parts,
        _state: &S,
    ) -> Result<Option<Self>, Self::Rejection> {
        Ok(parts.extensions.get::<VerifiedPayment>().cloned())
    }
}
