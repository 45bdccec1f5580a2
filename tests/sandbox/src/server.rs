//! The facilitator HTTP API over a [`SandboxFacilitator`] and its script: `POST /verify`,
//! `POST /settle`, `GET /supported`.

use std::pin::Pin;
use std::task::{Context, Poll};

use axum::Json;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Serialize;
use tokio::net::TcpListener;

use crate::SandboxFacilitator;
use crate::script::Reply;

/// The body of a [`Step::Status`](crate::Step::Status) answer: not the protocol's.
pub(crate) const STATUS_BODY: &str = r#"{"error":"upstream says no"}"#;

impl SandboxFacilitator {
    /// The facilitator HTTP API, in the wire format of the reference facilitator, following
    /// this facilitator's script (see [`Step`](crate::Step) for the faults):
    ///
    /// | route | answer |
    /// |---|---|
    /// | `POST /verify` | 200 with a `VerifyResponse`, `isValid: false` included |
    /// | `POST /settle` | 200 with a `SettleResponse`, `success: false` included |
    /// | `GET /supported` | 200 with the `SupportedResponse` |
    /// | `POST /rpc/solana` | Solana JSON-RPC over the Solana ledger: `getLatestBlockhash`, `isBlockhashValid`, `getAccountInfo` (the USDC mints, token accounts), `getBalance`, `getTokenAccountBalance`, `getSignatureStatuses`, `getSignaturesForAddress`, `getTransaction`, `getSlot`, `getBlockHeight`, `getHealth`, `getMinimumBalanceForRentExemption`, `getFeeForMessage`; others get error -32601 |
    /// | a body that is not `{x402Version, paymentPayload, paymentRequirements}` | 400 `{"error": "…"}` |
    ///
    /// ```no_run
    /// use tower_x402_sandbox::SandboxFacilitator;
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
            .route("/rpc/solana", post(crate::solana::rpc::rpc))
            .with_state(self.clone())
    }

    /// Serves [`router`](Self::router) on `listener` until the listener fails.
    ///
    /// ```
    /// use tower_x402_sandbox::{SandboxFacilitator, Step};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> std::io::Result<()> {
    /// let facilitator = SandboxFacilitator::new();
    /// facilitator.queue_verify(Step::Status(503));
    /// let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    /// let url = format!("http://{}", listener.local_addr()?);
    /// tokio::spawn(facilitator.clone().serve(listener));
    /// # let _ = url;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// The listener's error.
    pub async fn serve(self, listener: TcpListener) -> std::io::Result<()> {
        axum::serve(listener, self.router()).await
    }
}

async fn verify(State(facilitator): State<SandboxFacilitator>, body: Bytes) -> Response {
    match serde_json::from_slice(&body) {
        Ok(request) if crate::batch::is_batch(&request) => {
            reply(facilitator.scripted_batch_verify(&request).await).await
        }
        Ok(request) => reply(facilitator.scripted_verify(&request).await).await,
        Err(error) => not_a_request(&error),
    }
}

async fn settle(State(facilitator): State<SandboxFacilitator>, body: Bytes) -> Response {
    match serde_json::from_slice(&body) {
        Ok(request) if crate::batch::is_batch(&request) => {
            reply(facilitator.scripted_batch_settle(&request).await).await
        }
        Ok(request) => reply(facilitator.scripted_settle(&request).await).await,
        Err(error) => not_a_request(&error),
    }
}

async fn supported(State(facilitator): State<SandboxFacilitator>) -> Response {
    Json(&*facilitator.supported_response()).into_response()
}

/// A 400 saying why the body is not a facilitator request.
fn not_a_request(error: &serde_json::Error) -> Response {
    let message = format!(
        "body is not a facilitator request {{x402Version, paymentPayload, paymentRequirements}}: {error}"
    );
    (
        StatusCode::BAD_REQUEST,
        Json(serde_json::json!({ "error": message })),
    )
        .into_response()
}

/// `reply` on the wire.
async fn reply<T: Serialize>(reply: Reply<T>) -> Response {
    let json = |status: StatusCode, body: Body| {
        (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
    };
    match reply {
        Reply::Answer(answer) => Json(answer).into_response(),
        Reply::Status(code) => json(
            StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            Body::from(STATUS_BODY),
        ),
        Reply::Garbage => json(StatusCode::OK, Body::from("<html>not json</html>")),
        Reply::Hang => std::future::pending().await,
        Reply::Drop => json(StatusCode::OK, Body::new(Severed)),
    }
}

/// A body that fails before its first byte: the server closes the connection without an
/// answer.
struct Severed;

impl http_body::Body for Severed {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        Poll::Ready(Some(Err(std::io::Error::new(
            std::io::ErrorKind::ConnectionReset,
            "the connection is severed before an answer",
        ))))
    }
}
