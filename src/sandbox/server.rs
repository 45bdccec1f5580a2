//! The facilitator HTTP API over a [`SandboxFacilitator`]: `POST /verify`, `POST /settle`,
//! `GET /supported`.

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Serialize;

use super::SandboxFacilitator;
use crate::proto::FacilitatorRequest;

impl SandboxFacilitator {
    /// The facilitator HTTP API, in the wire format of the reference facilitator:
    ///
    /// | route | answer |
    /// |---|---|
    /// | `POST /verify` | 200 with a `VerifyResponse`, `isValid: false` included |
    /// | `POST /settle` | 200 with a `SettleResponse`, `success: false` included |
    /// | `GET /supported` | 200 with the `SupportedResponse` |
    /// | a body that is not `{x402Version, paymentPayload, paymentRequirements}` | 400 `{"error": "…"}` |
    ///
    /// ```no_run
    /// use tower_x402::sandbox::SandboxFacilitator;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> std::io::Result<()> {
    /// let listener = tokio::net::TcpListener::bind("127.0.0.1:4021").await?;
    /// axum::serve(listener, SandboxFacilitator::new().router()).await
    /// # }
    /// ```
    pub fn router(&self) -> axum::Router {
        axum::Router::new()
            .route("/verify", post(verify))
            .route("/settle", post(settle))
            .route("/supported", get(supported))
            .with_state(self.clone())
    }
}

async fn verify(State(facilitator): State<SandboxFacilitator>, body: Bytes) -> Response {
    answer(&body, |request| facilitator.verify_payment(request))
}

async fn settle(State(facilitator): State<SandboxFacilitator>, body: Bytes) -> Response {
    answer(&body, |request| facilitator.settle_payment(request))
}

async fn supported(State(facilitator): State<SandboxFacilitator>) -> Response {
    Json(&*facilitator.supported_response()).into_response()
}

/// 200 with `respond`'s answer to the request in `body`, or 400 saying why `body` is not one.
fn answer<T: Serialize>(body: &[u8], respond: impl FnOnce(&FacilitatorRequest) -> T) -> Response {
    match serde_json::from_slice(body) {
        Ok(request) => Json(respond(&request)).into_response(),
        Err(error) => {
            let message = format!(
                "body is not a facilitator request {{x402Version, paymentPayload, paymentRequirements}}: {error}"
            );
            (
                StatusCode::BAD_REQUEST,
                Json(serde_json::json!({ "error": message })),
            )
                .into_response()
        }
    }
}
