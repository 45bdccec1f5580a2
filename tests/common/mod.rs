//! Test doubles shared by the layer tests: a scripted facilitator that runs in process or is
//! served over HTTP on loopback, and helpers to build offers, payments and requests.
#![allow(dead_code, unreachable_pub, missing_docs)]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::routing::{self, post};
use axum::{Json, Router};
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use serde_json::json;
use tower_x402::BoxFuture;
use tower_x402::facilitator::Endpoint;
use tower_x402::proto::{
    FacilitatorRequest, PaymentPayload, PaymentRequired, ResourceInfo, SettleResponse,
    SupportedKind, SupportedResponse, UsdcDeployment, VerifyResponse, X402Version, header,
};
use tower_x402::{Facilitator, FacilitatorError, Offer, SettlementMode, VerifiedPayment};

pub const PAY_TO: &str = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";
pub const PAYER: &str = "0x857b06519E91e3A54538791bDbb0E22373e36b66";
pub const TX: &str = "0x1234567890abcdef1234567890abcdef1234567890abcdef1234567890abcdef";

/// What a scripted facilitator endpoint does.
#[derive(Clone, Debug)]
pub enum Script {
    /// A positive answer.
    Accept,
    /// `isValid: false` / `success: false` with this reason.
    Refuse(&'static str),
    /// No connection (in process: `Unreachable`; over HTTP: the test uses a closed port instead).
    Unreachable,
    /// Never answers within any sane timeout.
    Hang,
    /// HTTP 200 with a body that is not the protocol object.
    Garbage,
    /// An HTTP error status with a non-protocol body.
    Status(u16),
    /// A positive answer after a delay.
    SlowAccept(Duration),
}

#[derive(Debug)]
pub struct Counters {
    pub verify: AtomicUsize,
    pub settle: AtomicUsize,
}

/// A facilitator whose answers the test chooses.
#[derive(Clone, Debug)]
pub struct Scripted {
    pub verify: Arc<Mutex<Script>>,
    pub settle: Arc<Mutex<Script>>,
    pub counters: Arc<Counters>,
}

impl Scripted {
    pub fn new(verify: Script, settle: Script) -> Self {
        Self {
            verify: Arc::new(Mutex::new(verify)),
            settle: Arc::new(Mutex::new(settle)),
            counters: Arc::new(Counters {
                verify: AtomicUsize::new(0),
                settle: AtomicUsize::new(0),
            }),
        }
    }

    pub fn accepting() -> Self {
        Self::new(Script::Accept, Script::Accept)
    }

    pub fn verify_calls(&self) -> usize {
        self.counters.verify.load(Ordering::SeqCst)
    }

    pub fn settle_calls(&self) -> usize {
        self.counters.settle.load(Ordering::SeqCst)
    }

    fn script(&self, endpoint: Endpoint) -> Script {
        let slot = if endpoint == Endpoint::Verify {
            &self.verify
        } else {
            &self.settle
        };
        slot.lock().unwrap().clone()
    }

    async fn answer(
        &self,
        endpoint: Endpoint,
        request: &FacilitatorRequest,
    ) -> Result<serde_json::Value, FacilitatorError> {
        let counter = if endpoint == Endpoint::Verify {
            &self.counters.verify
        } else {
            &self.counters.settle
        };
        counter.fetch_add(1, Ordering::SeqCst);
        match self.script(endpoint) {
            Script::Accept => Ok(positive(endpoint, request)),
            Script::SlowAccept(delay) => {
                tokio::time::sleep(delay).await;
                Ok(positive(endpoint, request))
            }
            Script::Refuse(reason) => Ok(negative(endpoint, request, reason)),
            Script::Unreachable => Err(FacilitatorError::Unreachable {
                endpoint,
                source: tower_x402::BoxError::from("connection refused").into(),
            }),
            // In process there is no transport to time out: report what a client with a deadline
            // would. Over HTTP the fake really hangs and the client's deadline fires.
            Script::Hang => Err(FacilitatorError::TimedOut {
                endpoint,
                after: Duration::from_millis(500),
            }),
            Script::Garbage => Err(FacilitatorError::Malformed {
                endpoint,
                message: "expected value at line 1 column 1".into(),
            }),
            Script::Status(code) => Err(FacilitatorError::Status {
                endpoint,
                status: StatusCode::from_u16(code).unwrap(),
                body: "upstream says no".into(),
                retry_after: None,
            }),
        }
    }

    /// Serves this script over HTTP on 127.0.0.1 and returns the base URL.
    pub async fn serve(&self) -> String {
        let app = Router::new()
            .route("/verify", post(http_verify))
            .route("/settle", post(http_settle))
            .route("/supported", routing::get(http_supported))
            .with_state(self.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr: SocketAddr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        format!("http://{addr}")
    }
}

fn positive(endpoint: Endpoint, request: &FacilitatorRequest) -> serde_json::Value {
    match endpoint {
        Endpoint::Verify => json!({"isValid": true, "payer": PAYER}),
        _ => json!({
            "success": true,
            "payer": PAYER,
            "transaction": TX,
            "network": request.payment_requirements.network,
            "amount": request.payment_requirements.amount,
        }),
    }
}

fn negative(endpoint: Endpoint, request: &FacilitatorRequest, reason: &str) -> serde_json::Value {
    match endpoint {
        Endpoint::Verify => json!({"isValid": false, "invalidReason": reason, "payer": PAYER}),
        _ => json!({
            "success": false,
            "errorReason": reason,
            "payer": PAYER,
            "transaction": "",
            "network": request.payment_requirements.network,
        }),
    }
}

async fn http_answer(
    script: Scripted,
    endpoint: Endpoint,
    request: FacilitatorRequest,
) -> Response<axum::body::Body> {
    let counter = if endpoint == Endpoint::Verify {
        &script.counters.verify
    } else {
        &script.counters.settle
    };
    let plan = script.script(endpoint);
    let reply = |status: u16, body: String| {
        Response::builder()
            .status(status)
            .header("content-type", "application/json")
            .body(axum::body::Body::from(body))
            .unwrap()
    };
    match plan {
        Script::Garbage => {
            counter.fetch_add(1, Ordering::SeqCst);
            reply(200, "<html>not json</html>".into())
        }
        Script::Status(code) => {
            counter.fetch_add(1, Ordering::SeqCst);
            reply(code, "{\"error\":\"upstream says no\"}".into())
        }
        Script::Hang => {
            counter.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_secs(3600)).await;
            reply(200, String::new())
        }
        _ => match script.answer(endpoint, &request).await {
            Ok(value) => reply(200, value.to_string()),
            Err(error) => reply(500, json!({"error": error.to_string()}).to_string()),
        },
    }
}

async fn http_verify(
    State(script): State<Scripted>,
    Json(request): Json<FacilitatorRequest>,
) -> Response<axum::body::Body> {
    http_answer(script, Endpoint::Verify, request).await
}

async fn http_settle(
    State(script): State<Scripted>,
    Json(request): Json<FacilitatorRequest>,
) -> Response<axum::body::Body> {
    http_answer(script, Endpoint::Settle, request).await
}

async fn http_supported() -> Json<SupportedResponse> {
    Json(supported())
}

pub fn supported() -> SupportedResponse {
    SupportedResponse {
        kinds: vec![SupportedKind {
            x402_version: X402Version::V2,
            scheme: "exact".into(),
            network: UsdcDeployment::BASE.network,
            extra: None,
        }],
        ..SupportedResponse::default()
    }
}

impl Facilitator for Scripted {
    fn verify<'a>(
        &'a self,
        request: &'a FacilitatorRequest,
    ) -> BoxFuture<'a, Result<VerifyResponse, FacilitatorError>> {
        Box::pin(async move {
            let value = self.answer(Endpoint::Verify, request).await?;
            Ok(serde_json::from_value(value).unwrap())
        })
    }

    fn settle<'a>(
        &'a self,
        request: &'a FacilitatorRequest,
    ) -> BoxFuture<'a, Result<SettleResponse, FacilitatorError>> {
        Box::pin(async move {
            let value = self.answer(Endpoint::Settle, request).await?;
            Ok(serde_json::from_value(value).unwrap())
        })
    }

    fn supported(&self) -> BoxFuture<'_, Result<Arc<SupportedResponse>, FacilitatorError>> {
        Box::pin(async { Ok(Arc::new(supported())) })
    }
}

/// An offer for `url` at one dollar on Base, settled in `mode`.
pub fn offer(url: &str, mode: SettlementMode) -> Arc<Offer> {
    Arc::new(
        Offer::builder(ResourceInfo::new(url))
            .usdc(&UsdcDeployment::BASE, "1.00".parse().unwrap(), PAY_TO)
            .settlement(mode)
            .build()
            .unwrap(),
    )
}

/// A payment for `offer`'s first accept, with a distinct EIP-3009 nonce per `seed`.
/// The signature is not real: scripted facilitators do not check it.
pub fn payment(offer: &Offer, seed: u8) -> PaymentPayload {
    let accepted = offer.accepts()[0].clone();
    PaymentPayload {
        x402_version: X402Version::V2,
        resource: Some(offer.resource().clone()),
        payload: json!({
            "signature": format!("0x{}", "ab".repeat(65)),
            "authorization": {
                "from": PAYER,
                "to": accepted.pay_to,
                "value": accepted.amount,
                "validAfter": "0",
                "validBefore": "99999999999",
                "nonce": format!("0x{}", format!("{seed:02x}").repeat(32)),
            }
        }),
        accepted,
        extensions: None,
    }
}

pub fn payment_header(payload: &PaymentPayload) -> http::HeaderValue {
    header::encode(payload).unwrap()
}

pub fn get(uri: &str) -> Request<Full<Bytes>> {
    Request::get(uri).body(Full::default()).unwrap()
}

pub fn paid_get(uri: &str, payload: &PaymentPayload) -> Request<Full<Bytes>> {
    Request::get(uri)
        .header("payment-signature", payment_header(payload))
        .body(Full::default())
        .unwrap()
}

/// The inner service of most tests: echoes what the layer told it about the payment.
pub async fn echo_payment(
    request: Request<Full<Bytes>>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let payment = request.extensions().get::<VerifiedPayment>();
    let body = json!({
        "paid": payment.is_some(),
        "settled": payment.and_then(|p| p.settlement.as_ref()).is_some(),
        "replayed": payment.is_some_and(|p| p.replayed),
        "payer": payment.and_then(|p| p.payer.clone()),
    });
    Ok(Response::new(Full::new(Bytes::from(body.to_string()))))
}

pub async fn body_json<B>(response: Response<B>) -> serde_json::Value
where
    B: http_body::Body,
    B::Error: std::fmt::Debug,
{
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| panic!("not JSON: {}", String::from_utf8_lossy(&bytes)))
}

pub fn decode_required<B>(response: &Response<B>) -> PaymentRequired {
    header::decode(response.headers()["payment-required"].as_bytes()).unwrap()
}

pub fn decode_settlement<B>(response: &Response<B>) -> SettleResponse {
    header::decode(response.headers()["payment-response"].as_bytes()).unwrap()
}
