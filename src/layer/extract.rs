//! [`VerifiedPayment`], [`SettledPayment`] and [`Charge`](crate::payment::Charge) as axum
//! extractors.

use axum_core::extract::FromRequestParts;
use axum_core::response::{IntoResponse, Response};
use http::request::Parts;
use http::{HeaderValue, StatusCode, header};

use crate::payment::{GrantedWithoutPayment, SettledPayment, VerifiedPayment};

/// Rejection when a handler asks for [`VerifiedPayment`] (or [`SettledPayment`]) but no
/// [`X402Layer`](super::X402Layer) put one (a settled one) in the request: a server
/// misconfiguration, answered with a 500. A request a hook granted without payment (a
/// sign-in) has none: the error is then the hook's [`GrantedWithoutPayment`] reason, which
/// names the extractor to take instead.
#[derive(Debug, Clone, Copy, Default)]
pub struct MissingPayment {
    settled: bool,
    granted: Option<GrantedWithoutPayment>,
}

const MISSING_PAYMENT: &str =
    "no verified payment on this request: is `X402Layer` installed in front of this handler?";
const MISSING_SETTLEMENT: &str = "no settled payment on this request: is `X402Layer` with \
     `SettlementMode::Before` installed in front of this handler?";

impl MissingPayment {
    fn for_request(parts: &Parts, settled: bool) -> Self {
        let granted = parts.extensions.get::<GrantedWithoutPayment>().copied();
        Self { settled, granted }
    }

    fn message(self) -> &'static str {
        if let Some(granted) = self.granted {
            granted.reason()
        } else if self.settled {
            MISSING_SETTLEMENT
        } else {
            MISSING_PAYMENT
        }
    }
}

impl IntoResponse for MissingPayment {
    fn into_response(self) -> Response {
        let body = serde_json::json!({ "error": self.message() }).to_string();
        let mut response = (StatusCode::INTERNAL_SERVER_ERROR, body).into_response();
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        response
    }
}

impl std::fmt::Display for MissingPayment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.message())
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
            .ok_or_else(|| MissingPayment::for_request(parts, false))
    }
}

impl<S: Send + Sync> FromRequestParts<S> for SettledPayment {
    type Rejection = MissingPayment;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let payment = VerifiedPayment::from_request_parts(parts, state).await?;
        SettledPayment::try_from(payment).map_err(|_| MissingPayment::for_request(parts, true))
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

/// Rejection when a handler asks for a [`Charge`](crate::payment::Charge) on a request that carries no
/// metered (`upto`) payment: a server misconfiguration (no [`X402Layer`](super::X402Layer), or
/// an offer without `upto` accepts), answered with a 500.
#[derive(Debug, Clone, Copy, Default)]
pub struct MissingCharge;

const MISSING_CHARGE: &str = "no metered payment on this request: is `X402Layer` with an `upto` \
     offer installed in front of this handler?";

impl IntoResponse for MissingCharge {
    fn into_response(self) -> Response {
        let body = serde_json::json!({ "error": MISSING_CHARGE }).to_string();
        let mut response = (StatusCode::INTERNAL_SERVER_ERROR, body).into_response();
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        response
    }
}

impl std::fmt::Display for MissingCharge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(MISSING_CHARGE)
    }
}

impl std::error::Error for MissingCharge {}

impl<S: Send + Sync> FromRequestParts<S> for crate::payment::Charge {
    type Rejection = MissingCharge;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        parts
            .extensions
            .get::<crate::payment::Charge>()
            .cloned()
            .ok_or(MissingCharge)
    }
}
