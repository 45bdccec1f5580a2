//! [`VerifiedPayment`], [`SettledPayment`] and [`Charge`] as axum extractors, each rejected
//! with a [`MissingPayment`].

use axum_core::extract::FromRequestParts;
use axum_core::response::{IntoResponse, Response};
use http::request::Parts;
use http::{HeaderValue, StatusCode, header};

use crate::payment::{Charge, MissingPayment, SettledPayment, VerifiedPayment};

/// Answered with a 500 and `{"error": reason}`.
impl IntoResponse for MissingPayment {
    fn into_response(self) -> Response {
        let body = serde_json::json!({ "error": self.reason() }).to_string();
        let mut response = (StatusCode::INTERNAL_SERVER_ERROR, body).into_response();
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        response
    }
}

/// Why `parts` has no payment of the kind asked for: the reason of the hook that granted the
/// request without payment, else `missing`.
fn missing(parts: &Parts, missing: MissingPayment) -> MissingPayment {
    parts
        .extensions
        .get::<MissingPayment>()
        .copied()
        .unwrap_or(missing)
}

impl<S: Send + Sync> FromRequestParts<S> for VerifiedPayment {
    type Rejection = MissingPayment;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        parts
            .extensions
            .get::<VerifiedPayment>()
            .cloned()
            .ok_or_else(|| missing(parts, MissingPayment::PAYMENT))
    }
}

impl<S: Send + Sync> FromRequestParts<S> for SettledPayment {
    type Rejection = MissingPayment;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let payment = VerifiedPayment::from_request_parts(parts, state).await?;
        SettledPayment::try_from(payment).map_err(|_| missing(parts, MissingPayment::SETTLEMENT))
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

/// `None` when the request carries no settled payment (granted without payment, free, or
/// settled after the work).
impl<S: Send + Sync> axum_core::extract::OptionalFromRequestParts<S> for SettledPayment {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut Parts,
        _state: &S,
    ) -> Result<Option<Self>, Self::Rejection> {
        let payment = parts.extensions.get::<VerifiedPayment>().cloned();
        Ok(payment.and_then(|payment| SettledPayment::try_from(payment).ok()))
    }
}

/// `None` when the request carries no metered payment (granted without payment, free, or paid
/// at a fixed price).
impl<S: Send + Sync> axum_core::extract::OptionalFromRequestParts<S> for Charge {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut Parts,
        _state: &S,
    ) -> Result<Option<Self>, Self::Rejection> {
        Ok(parts.extensions.get::<Charge>().cloned())
    }
}

/// How a request got in without payment: `Some` with the granting hook's reason when a
/// [payment hook](crate::payment::PaymentHooks) (sign-in, a subscription) let it in, `None`
/// when it was paid or free. With `Option<VerifiedPayment>`, a handler behind hooks tells a
/// paid request from a granted one without a 500.
impl<S: Send + Sync> axum_core::extract::OptionalFromRequestParts<S> for MissingPayment {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut Parts,
        _state: &S,
    ) -> Result<Option<Self>, Self::Rejection> {
        Ok(parts.extensions.get::<MissingPayment>().copied())
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Charge {
    type Rejection = MissingPayment;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        parts
            .extensions
            .get::<Charge>()
            .cloned()
            .ok_or_else(|| missing(parts, MissingPayment::CHARGE))
    }
}
