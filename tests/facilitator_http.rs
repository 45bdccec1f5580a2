//! `HttpFacilitator` against a fake facilitator served by axum on 127.0.0.1.
//!
//! Each test starts its own fake, scripts its replies per endpoint and counts what arrived.

use std::collections::{HashMap, VecDeque};
use std::error::Error as _;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, Method, StatusCode, Uri};
use serde_json::{Value, json};
use tower_x402::BoxError;
use tower_x402::facilitator::{Endpoint, HttpFacilitatorBuilder};
use tower_x402::{Facilitator, FacilitatorError, HttpFacilitator};
use x402_wire::{
    AtomicAmount, FacilitatorRequest, PaymentPayload, PaymentRequirements, SupportedResponse,
};

// ---------------------------------------------------------------------------------------------
// The fake facilitator

/// One scripted reply.
#[derive(Clone, Debug)]
struct Reply {
    status: StatusCode,
    body: String,
    delay: Duration,
    retry_after: Option<&'static str>,
    location: Option<String>,
}

impl Reply {
    fn json(status: u16, body: Value) -> Self {
        Self::raw(status, body.to_string())
    }

    fn raw(status: u16, body: impl Into<String>) -> Self {
        Self {
            status: StatusCode::from_u16(status).unwrap(),
            body: body.into(),
            delay: Duration::ZERO,
            retry_after: None,
            location: None,
        }
    }

    fn after(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }

    fn retry_after(mut self, value: &'static str) -> Self {
        self.retry_after = Some(value);
        self
    }

    /// A permanent redirect, which keeps the method and body.
    fn redirect(location: String) -> Self {
        Self {
            location: Some(location),
            ..Self::raw(308, "Redirecting...")
        }
    }
}

/// A request the fake received.
#[derive(Clone, Debug)]
struct Received {
    endpoint: Endpoint,
    path: String,
    headers: HeaderMap,
    body: Bytes,
}

#[derive(Default)]
struct FakeState {
    queued: Mutex<HashMap<Endpoint, VecDeque<Reply>>>,
    defaults: Mutex<HashMap<Endpoint, Reply>>,
    received: Mutex<Vec<Received>>,
}

struct Fake {
    addr: SocketAddr,
    state: Arc<FakeState>,
}

impl Fake {
    /// A fake that answers every endpoint positively until told otherwise.
    async fn start() -> Self {
        let state = Arc::new(FakeState::default());
        let fake = Self {
            addr: "127.0.0.1:0".parse().unwrap(),
            state: Arc::clone(&state),
        };
        fake.answer(
            Endpoint::Verify,
            Reply::json(200, json!({"isValid": true, "payer": PAYER})),
        );
        fake.answer(Endpoint::Settle, Reply::json(200, settled()));
        fake.answer(
            Endpoint::Supported,
            Reply::json(200, supported_body(&["eip155:84532"])),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = Router::new().fallback(handle).with_state(state);
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Self { addr, ..fake }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// A builder for this fake with quick retries.
    fn builder(&self) -> HttpFacilitatorBuilder {
        HttpFacilitator::builder(self.url("")).retry_base_delay(Duration::from_millis(20))
    }

    fn client(&self) -> HttpFacilitator {
        self.builder().build().unwrap()
    }

    /// Replies to `endpoint` with `reply` from now on (after any queued replies).
    fn answer(&self, endpoint: Endpoint, reply: Reply) {
        self.state.defaults.lock().unwrap().insert(endpoint, reply);
    }

    /// Replies to the next calls of `endpoint` with `replies`, in order.
    fn queue(&self, endpoint: Endpoint, replies: impl IntoIterator<Item = Reply>) {
        self.state
            .queued
            .lock()
            .unwrap()
            .entry(endpoint)
            .or_default()
            .extend(replies);
    }

    fn received(&self, endpoint: Endpoint) -> Vec<Received> {
        let received = self.state.received.lock().unwrap();
        received
            .iter()
            .filter(|r| r.endpoint == endpoint)
            .cloned()
            .collect()
    }

    fn hits(&self, endpoint: Endpoint) -> usize {
        self.received(endpoint).len()
    }
}

async fn handle(
    State(state): State<Arc<FakeState>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = uri.path().to_owned();
    let endpoint = [Endpoint::Verify, Endpoint::Settle, Endpoint::Supported]
        .into_iter()
        .find(|endpoint| path.ends_with(&format!("/{}", endpoint.path())));
    let Some(endpoint) = endpoint else {
        return (StatusCode::NOT_FOUND, "no such endpoint").into_response();
    };
    let expected = if endpoint == Endpoint::Supported {
        Method::GET
    } else {
        Method::POST
    };
    if method != expected {
        return StatusCode::METHOD_NOT_ALLOWED.into_response();
    }
    state.received.lock().unwrap().push(Received {
        endpoint,
        path,
        headers,
        body,
    });
    let queued = state
        .queued
        .lock()
        .unwrap()
        .get_mut(&endpoint)
        .and_then(VecDeque::pop_front);
    let reply = queued.unwrap_or_else(|| state.defaults.lock().unwrap()[&endpoint].clone());
    tokio::time::sleep(reply.delay).await;
    let mut response = (
        reply.status,
        [(http::header::CONTENT_TYPE, "application/json")],
        reply.body,
    )
        .into_response();
    if let Some(location) = reply.location {
        response
            .headers_mut()
            .insert(http::header::LOCATION, location.parse().unwrap());
    }
    if let Some(retry_after) = reply.retry_after {
        response
            .headers_mut()
            .insert(http::header::RETRY_AFTER, retry_after.parse().unwrap());
    }
    response
}

/// Polls `check` every 20 ms until it holds or `limit` passes; whether it held.
async fn wait_until<F, Fut>(limit: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let started = Instant::now();
    while started.elapsed() < limit {
        if check().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

// ---------------------------------------------------------------------------------------------
// Protocol data

const PAYER: &str = "0x857b06519E91e3A54538791bDbb0E22373e36b66";

fn requirements() -> PaymentRequirements {
    serde_json::from_value(json!({
        "scheme": "exact",
        "network": "eip155:84532",
        "amount": "10000",
        "asset": "0x036CbD53842c5426634e7929541eC2318f3dCF7e",
        "payTo": "0x209693Bc6afc0C5328bA36FaF03C514EF312287C",
        "maxTimeoutSeconds": 60,
        "extra": {"name": "USDC", "version": "2"}
    }))
    .unwrap()
}

/// The specification's example payment (§3.6) against its own requirement.
fn request() -> FacilitatorRequest {
    let payload: PaymentPayload = serde_json::from_value(json!({
        "x402Version": 2,
        "resource": {"url": "https://api.example.com/premium-data"},
        "accepted": requirements(),
        "payload": {
            "signature": "0x2d6a7588d6acca505cbf0d9a4a227e0c52c6c34008c8e8986a1283259764173608a2ce6496642e377d6da8dbbf5836e9bd15092f9ecab05ded3d6293af148b571c",
            "authorization": {
                "from": PAYER,
                "to": "0x209693Bc6afc0C5328bA36FaF03C514EF312287C",
                "value": "10000",
                "validAfter": "1740672089",
                "validBefore": "1740672154",
                "nonce": "0xf3746613c2d920b5fdabc0856f2aeb2d4f88ee6037b8cc5d04a71a4462f13480"
            }
        }
    }))
    .unwrap();
    FacilitatorRequest::new(payload, requirements())
}

fn settled() -> Value {
    json!({"success": true, "payer": PAYER, "transaction": "0x1234567890abcdef1234567890abcdef1234567890abcdef1234567890abcdef", "network": "eip155:84532"})
}

fn supported_body(networks: &[&str]) -> Value {
    let kinds: Vec<Value> = networks
        .iter()
        .map(|network| json!({"x402Version": 2, "scheme": "exact", "network": network}))
        .collect();
    json!({"kinds": kinds, "extensions": [], "signers": {"eip155:*": ["0x1234567890abcdef1234567890abcdef12345678"]}})
}

fn networks(supported: &SupportedResponse) -> Vec<String> {
    supported
        .kinds
        .iter()
        .map(|kind| kind.network.to_string())
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Timeouts and transport failures

#[tokio::test]
async fn slow_facilitator_times_out() {
    let fake = Fake::start().await;
    fake.answer(
        Endpoint::Verify,
        Reply::json(200, json!({"isValid": true})).after(Duration::from_secs(5)),
    );
    fake.answer(
        Endpoint::Settle,
        Reply::json(200, settled()).after(Duration::from_secs(5)),
    );
    let facilitator = fake
        .builder()
        .verify_timeout(Duration::from_millis(200))
        .settle_timeout(Duration::from_millis(300))
        .build()
        .unwrap();

    let started = Instant::now();
    let error = facilitator.verify(&request()).await.unwrap_err();
    assert!(
        matches!(error, FacilitatorError::TimedOut { endpoint: Endpoint::Verify, after } if after == Duration::from_millis(200)),
        "{error}"
    );
    assert!(error.is_unavailable());
    let error = facilitator.settle(&request()).await.unwrap_err();
    assert!(
        matches!(error, FacilitatorError::TimedOut { endpoint: Endpoint::Settle, after } if after == Duration::from_millis(300)),
        "{error}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(
        (fake.hits(Endpoint::Verify), fake.hits(Endpoint::Settle)),
        (1, 1),
        "timeouts are not retried"
    );
}

#[tokio::test]
async fn a_timeout_of_duration_max_sets_no_deadline() {
    let fake = Fake::start().await;
    fake.answer(
        Endpoint::Verify,
        Reply::json(500, json!({"error": "boom"})).after(Duration::from_millis(50)),
    );
    fake.answer(
        Endpoint::Settle,
        Reply::json(200, settled()).after(Duration::from_millis(300)),
    );
    let facilitator = fake
        .builder()
        .verify_timeout(Duration::MAX)
        .settle_timeout(Duration::MAX)
        .retry_base_delay(Duration::from_millis(10))
        .build()
        .unwrap();
    // Answered, however long it takes: no deadline, and a retry is not cut short by one.
    let settlement = facilitator.settle(&request()).await.unwrap();
    assert!(settlement.success);
    let error = facilitator.verify(&request()).await.unwrap_err();
    assert!(
        matches!(
            error,
            FacilitatorError::Status {
                endpoint: Endpoint::Verify,
                ..
            }
        ),
        "{error}"
    );
    assert_eq!(
        (fake.hits(Endpoint::Verify), fake.hits(Endpoint::Settle)),
        (3, 1),
        "/verify retried up to its attempts, /settle sent once"
    );
}

#[tokio::test]
async fn facilitator_that_is_down_is_unreachable() {
    // Bind and release a port so that nothing listens on it.
    let addr = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap();
    let facilitator = HttpFacilitator::builder(format!("http://{addr}/facilitator"))
        .retry_base_delay(Duration::from_millis(10))
        .build()
        .unwrap();
    for error in [
        facilitator.verify(&request()).await.unwrap_err(),
        facilitator.settle(&request()).await.unwrap_err(),
        facilitator.supported().await.unwrap_err(),
    ] {
        assert!(
            matches!(error, FacilitatorError::Unreachable { .. }),
            "{error}"
        );
        assert!(error.is_unavailable(), "{error}");
        assert!(error.source().is_some());
    }
}

// ---------------------------------------------------------------------------------------------
// Status codes and retries

#[tokio::test]
async fn server_error_is_retried_for_verify() {
    let fake = Fake::start().await;
    fake.answer(Endpoint::Verify, Reply::json(500, json!({"error": "boom"})));
    let error = fake.client().verify(&request()).await.unwrap_err();
    match &error {
        FacilitatorError::Status {
            endpoint: Endpoint::Verify,
            status,
            body,
            retry_after: None,
        } => {
            assert_eq!(*status, StatusCode::INTERNAL_SERVER_ERROR);
            assert_eq!(body, r#"{"error":"boom"}"#);
        }
        other => panic!("expected a 500 Status error, got {other}"),
    }
    assert!(
        !error.is_unavailable(),
        "500 is an error, not unavailability"
    );
    assert_eq!(fake.hits(Endpoint::Verify), 3, "three attempts in total");
}

#[tokio::test]
async fn deadline_during_a_retry_reports_what_prompted_it() {
    let fake = Fake::start().await;
    fake.queue(
        Endpoint::Verify,
        [Reply::json(500, json!({"error": "boom"}))],
    );
    fake.answer(
        Endpoint::Verify,
        Reply::json(200, json!({"isValid": true})).after(Duration::from_secs(5)),
    );
    let facilitator = fake
        .builder()
        .verify_timeout(Duration::from_millis(300))
        .retry_base_delay(Duration::from_millis(10))
        .build()
        .unwrap();
    let error = facilitator.verify(&request()).await.unwrap_err();
    assert!(
        matches!(
            error,
            FacilitatorError::Status {
                endpoint: Endpoint::Verify,
                status: StatusCode::INTERNAL_SERVER_ERROR,
                ..
            }
        ),
        "the facilitator's 500, not the deadline: {error}"
    );
    assert_eq!(fake.hits(Endpoint::Verify), 2, "the retry was sent");
}

#[tokio::test]
async fn server_error_is_never_retried_for_settle() {
    let fake = Fake::start().await;
    fake.answer(Endpoint::Settle, Reply::json(500, json!({"error": "boom"})));
    let facilitator = fake.client();
    let error = facilitator.settle(&request()).await.unwrap_err();
    assert!(
        matches!(
            error,
            FacilitatorError::Status {
                endpoint: Endpoint::Settle,
                status: StatusCode::INTERNAL_SERVER_ERROR,
                ..
            }
        ),
        "{error}"
    );
    assert_eq!(fake.hits(Endpoint::Settle), 1);

    fake.answer(Endpoint::Settle, Reply::raw(503, "").retry_after("1"));
    let error = facilitator.settle(&request()).await.unwrap_err();
    assert!(error.is_unavailable());
    assert_eq!(error.retry_after(), Some(Duration::from_secs(1)));
    assert_eq!(
        fake.hits(Endpoint::Settle),
        2,
        "one request per settle call"
    );
}

#[tokio::test]
async fn too_many_requests_then_ok_succeeds_on_retry() {
    let fake = Fake::start().await;
    fake.queue(
        Endpoint::Verify,
        [Reply::json(429, json!({"error": "slow down"})).retry_after("1")],
    );
    let started = Instant::now();
    let verified = fake.client().verify(&request()).await.unwrap();
    assert!(verified.is_valid);
    assert_eq!(fake.hits(Endpoint::Verify), 2);
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "Retry-After is honoured: {:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn long_retry_after_is_reported_instead_of_waited_for() {
    let fake = Fake::start().await;
    fake.answer(Endpoint::Verify, Reply::raw(429, "busy").retry_after("120"));
    let started = Instant::now();
    let error = fake.client().verify(&request()).await.unwrap_err();
    assert!(error.is_unavailable());
    assert_eq!(error.retry_after(), Some(Duration::from_secs(120)));
    assert_eq!(fake.hits(Endpoint::Verify), 1);
    assert!(started.elapsed() < Duration::from_secs(1));
}

#[tokio::test]
async fn client_errors_are_not_retried_and_keep_a_truncated_body() {
    let fake = Fake::start().await;
    fake.answer(Endpoint::Verify, Reply::raw(404, "x".repeat(10_000)));
    let error = fake.client().verify(&request()).await.unwrap_err();
    let FacilitatorError::Status { status, body, .. } = &error else {
        panic!("expected a Status error, got {error}");
    };
    assert_eq!(*status, StatusCode::NOT_FOUND);
    assert!(
        body.chars().count() <= 513 && body.ends_with('…'),
        "{} chars",
        body.chars().count()
    );
    assert!(!error.is_unavailable());
    assert_eq!(fake.hits(Endpoint::Verify), 1);
}

#[tokio::test]
async fn garbage_body_is_malformed() {
    let fake = Fake::start().await;
    fake.answer(Endpoint::Verify, Reply::raw(200, "<html>not json</html>"));
    fake.answer(Endpoint::Settle, Reply::json(200, json!({"ok": true})));
    fake.answer(Endpoint::Supported, Reply::json(200, json!([1, 2, 3])));
    let facilitator = fake.client();
    let errors = [
        facilitator.verify(&request()).await.unwrap_err(),
        facilitator.settle(&request()).await.unwrap_err(),
        facilitator.supported().await.unwrap_err(),
    ];
    for (error, endpoint) in
        errors
            .iter()
            .zip([Endpoint::Verify, Endpoint::Settle, Endpoint::Supported])
    {
        assert!(
            matches!(error, FacilitatorError::Malformed { .. }),
            "{error}"
        );
        assert_eq!(error.endpoint(), endpoint);
        assert!(!error.is_unavailable());
    }
    assert!(
        errors[0].to_string().contains("<html>not json</html>"),
        "{}",
        errors[0]
    );
    let hits = [Endpoint::Verify, Endpoint::Settle, Endpoint::Supported].map(|e| fake.hits(e));
    assert_eq!(hits, [1, 1, 1], "a malformed answer is not retried");
}

#[tokio::test]
async fn negative_answers_are_ok() {
    let fake = Fake::start().await;
    let facilitator = fake.client();

    fake.answer(
        Endpoint::Verify,
        Reply::json(
            200,
            json!({"isValid": false, "invalidReason": "insufficient_funds", "payer": PAYER}),
        ),
    );
    let verified = facilitator.verify(&request()).await.unwrap();
    assert!(!verified.is_valid);
    assert_eq!(
        verified.invalid_reason.as_deref(),
        Some("insufficient_funds")
    );

    fake.answer(
        Endpoint::Verify,
        Reply::json(
            400,
            json!({"isValid": false, "invalidReason": "invalid_exact_evm_signature"}),
        ),
    );
    let verified = facilitator.verify(&request()).await.unwrap();
    assert_eq!(
        verified.invalid_reason.as_deref(),
        Some("invalid_exact_evm_signature")
    );

    let failed = json!({"success": false, "errorReason": "insufficient_funds", "payer": PAYER, "transaction": "", "network": "eip155:84532"});
    fake.answer(Endpoint::Settle, Reply::json(200, failed.clone()));
    let settled = facilitator.settle(&request()).await.unwrap();
    assert!(!settled.success);
    assert_eq!(settled.error_reason.as_deref(), Some("insufficient_funds"));

    fake.answer(Endpoint::Settle, Reply::json(500, failed));
    assert!(!facilitator.settle(&request()).await.unwrap().success);

    assert_eq!(
        (fake.hits(Endpoint::Verify), fake.hits(Endpoint::Settle)),
        (2, 2),
        "answers are never retried"
    );
}

#[tokio::test]
async fn verify_and_settle_post_the_protocol_request() {
    let fake = Fake::start().await;
    let facilitator = fake.client();
    assert!(facilitator.verify(&request()).await.unwrap().is_valid);
    let settled = facilitator.settle(&request()).await.unwrap();
    assert!(settled.success);
    assert_eq!(settled.payer.as_deref(), Some(PAYER));
    for endpoint in [Endpoint::Verify, Endpoint::Settle] {
        let received = &fake.received(endpoint)[0];
        assert_eq!(
            received.headers[http::header::CONTENT_TYPE],
            "application/json"
        );
        let body: Value = serde_json::from_slice(&received.body).unwrap();
        assert_eq!(body, serde_json::to_value(request()).unwrap());
        assert_eq!(body["x402Version"], 2);
    }
}

// ---------------------------------------------------------------------------------------------
// Authentication

#[tokio::test]
async fn static_auth_headers_reach_the_endpoints_they_are_for() {
    let fake = Fake::start().await;
    let facilitator = fake
        .builder()
        .header("x-api-key", "key-1")
        .bearer("static-token")
        .endpoint_header(Endpoint::Settle, "x-settle-key", "settle-only")
        .build()
        .unwrap();
    facilitator.verify(&request()).await.unwrap();
    facilitator.settle(&request()).await.unwrap();
    facilitator.supported().await.unwrap();

    for endpoint in [Endpoint::Verify, Endpoint::Settle, Endpoint::Supported] {
        let headers = &fake.received(endpoint)[0].headers;
        assert_eq!(headers["x-api-key"], "key-1", "{endpoint}");
        assert_eq!(
            headers[http::header::AUTHORIZATION],
            "Bearer static-token",
            "{endpoint}"
        );
        assert_eq!(
            headers.contains_key("x-settle-key"),
            endpoint == Endpoint::Settle,
            "{endpoint}"
        );
    }
    assert_eq!(
        fake.received(Endpoint::Settle)[0].headers["x-settle-key"],
        "settle-only"
    );
}

#[tokio::test]
async fn per_request_auth_provider_mints_headers_for_each_call() {
    let fake = Fake::start().await;
    let minted = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&minted);
    let facilitator = fake
        .builder()
        .header("x-api-key", "key-1")
        .auth(move |endpoint: Endpoint| {
            let n = counter.fetch_add(1, Ordering::SeqCst) + 1;
            async move {
                let mut headers = HeaderMap::new();
                headers.insert(
                    http::header::AUTHORIZATION,
                    format!("Bearer jwt-{}-{n}", endpoint.path()).parse()?,
                );
                Ok::<HeaderMap, BoxError>(headers)
            }
        })
        .build()
        .unwrap();
    // The first verify attempt fails with 503, so the retry needs (and gets) a fresh token.
    fake.queue(Endpoint::Verify, [Reply::raw(503, "")]);
    facilitator.verify(&request()).await.unwrap();
    facilitator.settle(&request()).await.unwrap();
    facilitator.supported().await.unwrap();

    let tokens = |endpoint| -> Vec<String> {
        fake.received(endpoint)
            .iter()
            .map(|r| {
                r.headers[http::header::AUTHORIZATION]
                    .to_str()
                    .unwrap()
                    .to_owned()
            })
            .collect()
    };
    assert_eq!(
        tokens(Endpoint::Verify),
        ["Bearer jwt-verify-1", "Bearer jwt-verify-2"]
    );
    assert_eq!(tokens(Endpoint::Settle), ["Bearer jwt-settle-3"]);
    assert_eq!(tokens(Endpoint::Supported), ["Bearer jwt-supported-4"]);
    assert_eq!(
        fake.received(Endpoint::Settle)[0].headers["x-api-key"],
        "key-1",
        "fixed headers still sent"
    );
    assert_eq!(minted.load(Ordering::SeqCst), 4);
}

#[tokio::test]
async fn failing_auth_provider_sends_nothing() {
    let fake = Fake::start().await;
    let facilitator = fake
        .builder()
        .auth(|_: Endpoint| async {
            Err::<HeaderMap, BoxError>("key vault said: secret-key-material is locked".into())
        })
        .build()
        .unwrap();
    for error in [
        facilitator.verify(&request()).await.unwrap_err(),
        facilitator.settle(&request()).await.unwrap_err(),
        facilitator.supported().await.unwrap_err(),
    ] {
        assert!(matches!(error, FacilitatorError::Auth { .. }), "{error}");
        assert!(
            !error.is_unavailable(),
            "a credentials failure is the server's own problem: 502"
        );
        assert!(
            !error.to_string().contains("secret-key-material"),
            "{error}"
        );
        assert!(error.source().unwrap().to_string().contains("locked"));
    }
    let hits = [Endpoint::Verify, Endpoint::Settle, Endpoint::Supported].map(|e| fake.hits(e));
    assert_eq!(hits, [0, 0, 0]);
}

#[tokio::test]
async fn debug_output_hides_credentials() {
    let fake = Fake::start().await;
    let facilitator = fake
        .builder()
        .bearer("very-secret-token")
        .endpoint_header(Endpoint::Verify, "x-api-key", "another-secret")
        .auth(|_: Endpoint| async { Ok::<_, BoxError>(HeaderMap::new()) })
        .build()
        .unwrap();
    let shown = format!("{facilitator:?}");
    assert!(
        shown.contains("authorization") && shown.contains("x-api-key"),
        "{shown}"
    );
    assert!(
        !shown.contains("very-secret-token") && !shown.contains("another-secret"),
        "{shown}"
    );
}

// ---------------------------------------------------------------------------------------------
// Base URLs

#[tokio::test]
async fn base_url_with_a_trailing_slash_works() {
    let fake = Fake::start().await;
    for base in [fake.url(""), fake.url("/")] {
        let facilitator = HttpFacilitator::new(base).unwrap();
        facilitator.verify(&request()).await.unwrap();
    }
    let paths: Vec<String> = fake
        .received(Endpoint::Verify)
        .into_iter()
        .map(|r| r.path)
        .collect();
    assert_eq!(paths, ["/verify", "/verify"]);
}

#[tokio::test]
async fn base_url_with_a_path_prefix_works() {
    let fake = Fake::start().await;
    for base in [
        fake.url("/platform/v2/x402"),
        fake.url("/platform/v2/x402/"),
    ] {
        let facilitator = HttpFacilitator::new(base).unwrap();
        facilitator.verify(&request()).await.unwrap();
        facilitator.settle(&request()).await.unwrap();
        facilitator.supported().await.unwrap();
    }
    for (endpoint, path) in [
        (Endpoint::Verify, "/platform/v2/x402/verify"),
        (Endpoint::Settle, "/platform/v2/x402/settle"),
        (Endpoint::Supported, "/platform/v2/x402/supported"),
    ] {
        let paths: Vec<String> = fake
            .received(endpoint)
            .into_iter()
            .map(|r| r.path)
            .collect();
        assert_eq!(paths, [path, path]);
    }
}

#[tokio::test]
async fn redirect_within_the_site_is_followed_with_its_headers() {
    let fake = Fake::start().await;
    fake.queue(Endpoint::Verify, [Reply::redirect(fake.url("/new/verify"))]);
    let facilitator = HttpFacilitator::builder(fake.url("/old"))
        .header("x-api-key", "key-1")
        .build()
        .unwrap();
    assert!(facilitator.verify(&request()).await.unwrap().is_valid);
    let received = fake.received(Endpoint::Verify);
    let paths: Vec<&str> = received.iter().map(|r| r.path.as_str()).collect();
    assert_eq!(paths, ["/old/verify", "/new/verify"]);
    assert_eq!(received[1].headers["x-api-key"], "key-1");
    let body: Value = serde_json::from_slice(&received[1].body).unwrap();
    assert_eq!(
        body,
        serde_json::to_value(request()).unwrap(),
        "308 keeps the method and body"
    );
}

#[tokio::test]
async fn redirect_to_another_site_is_not_followed() {
    let fake = Fake::start().await;
    let elsewhere = Fake::start().await;
    let other_site = format!("http://localhost:{}/verify", elsewhere.addr.port());
    fake.answer(Endpoint::Verify, Reply::redirect(other_site));
    let facilitator = fake.builder().header("x-api-key", "key-1").build().unwrap();
    let error = facilitator.verify(&request()).await.unwrap_err();
    assert!(
        matches!(
            error,
            FacilitatorError::Status {
                status: StatusCode::PERMANENT_REDIRECT,
                ..
            }
        ),
        "{error}"
    );
    assert!(!error.is_unavailable());
    assert_eq!(
        elsewhere.hits(Endpoint::Verify),
        0,
        "the API key never left the site"
    );
    assert_eq!(fake.hits(Endpoint::Verify), 1, "a 3xx is not retried");
}

#[test]
fn base_url_that_is_not_absolute_http_is_rejected() {
    for bad in [
        "x402.org/facilitator",
        "/facilitator",
        "ftp://x402.org/facilitator",
        "https://user:pass@x402.org",
        "https://x402.org/?token=1",
    ] {
        assert!(HttpFacilitator::new(bad).is_err(), "{bad}");
    }
}

// ---------------------------------------------------------------------------------------------
// The /supported cache

#[tokio::test]
async fn concurrent_supported_callers_share_one_request() {
    let fake = Fake::start().await;
    fake.answer(
        Endpoint::Supported,
        Reply::json(200, supported_body(&["eip155:84532"])).after(Duration::from_millis(200)),
    );
    let facilitator = fake.client();
    let callers: Vec<_> = (0..64)
        .map(|_| {
            let facilitator = facilitator.clone();
            tokio::spawn(async move { facilitator.supported().await })
        })
        .collect();
    for caller in callers {
        assert_eq!(networks(&caller.await.unwrap().unwrap()), ["eip155:84532"]);
    }
    assert_eq!(fake.hits(Endpoint::Supported), 1);
}

#[tokio::test]
async fn supported_is_served_from_cache_within_ttl() {
    let fake = Fake::start().await;
    let facilitator = fake.client();
    let first = facilitator.supported().await.unwrap();
    for _ in 0..20 {
        assert!(Arc::ptr_eq(&first, &facilitator.supported().await.unwrap()));
    }
    assert_eq!(fake.hits(Endpoint::Supported), 1);
}

#[tokio::test]
async fn supported_cache_is_shared_across_clones() {
    let fake = Fake::start().await;
    let facilitator = fake.client();
    let clone = facilitator.clone();
    let first = facilitator.supported().await.unwrap();
    let second = clone.supported().await.unwrap();
    assert!(Arc::ptr_eq(&first, &second));
    assert_eq!(fake.hits(Endpoint::Supported), 1);
}

#[tokio::test]
async fn stale_supported_is_served_while_one_refresh_runs() {
    let fake = Fake::start().await;
    let ttl = Duration::from_millis(200);
    let facilitator = fake.builder().supported_ttl(ttl).build().unwrap();
    assert_eq!(
        networks(&facilitator.supported().await.unwrap()),
        ["eip155:84532"]
    );

    tokio::time::sleep(ttl + Duration::from_millis(50)).await;
    let refresh_time = Duration::from_millis(500);
    fake.answer(
        Endpoint::Supported,
        Reply::json(200, supported_body(&["eip155:84532", "eip155:8453"])).after(refresh_time),
    );
    let started = Instant::now();
    for _ in 0..20 {
        assert_eq!(
            networks(&facilitator.supported().await.unwrap()),
            ["eip155:84532"],
            "stale copy served"
        );
    }
    assert!(
        started.elapsed() < refresh_time,
        "nobody waited for the refresh: {:?}",
        started.elapsed()
    );
    let refreshed = wait_until(Duration::from_secs(10), || async {
        networks(&facilitator.supported().await.unwrap()).len() == 2
    })
    .await;
    assert!(refreshed, "the refresh landed");
    assert_eq!(
        networks(&facilitator.supported().await.unwrap()),
        ["eip155:84532", "eip155:8453"]
    );
    assert_eq!(
        fake.hits(Endpoint::Supported),
        2,
        "one refresh for all the callers"
    );
}

#[tokio::test]
async fn failed_supported_is_not_hammered() {
    let fake = Fake::start().await;
    fake.answer(
        Endpoint::Supported,
        Reply::raw(503, "down").retry_after("0"),
    );
    let backoff = Duration::from_secs(1);
    let facilitator = fake
        .builder()
        .supported_failure_backoff(backoff)
        .build()
        .unwrap();
    let callers: Vec<_> = (0..32)
        .map(|_| {
            let facilitator = facilitator.clone();
            tokio::spawn(async move { facilitator.supported().await })
        })
        .collect();
    for caller in callers {
        let error = caller.await.unwrap().unwrap_err();
        assert!(
            matches!(
                error,
                FacilitatorError::Status {
                    status: StatusCode::SERVICE_UNAVAILABLE,
                    ..
                }
            ),
            "{error}"
        );
    }
    assert_eq!(
        fake.hits(Endpoint::Supported),
        3,
        "one fetch (three attempts) for every caller"
    );
    for _ in 0..10 {
        assert!(facilitator.supported().await.unwrap_err().is_unavailable());
    }
    assert_eq!(
        fake.hits(Endpoint::Supported),
        3,
        "the failure is served from memory during the backoff"
    );

    tokio::time::sleep(backoff).await;
    fake.answer(
        Endpoint::Supported,
        Reply::json(200, supported_body(&["eip155:8453"])),
    );
    assert_eq!(
        networks(&facilitator.supported().await.unwrap()),
        ["eip155:8453"]
    );
    assert_eq!(fake.hits(Endpoint::Supported), 4);
}

#[tokio::test]
async fn supported_with_legacy_v1_kinds_is_readable() {
    let fake = Fake::start().await;
    fake.answer(
        Endpoint::Supported,
        Reply::json(200, json!({"kinds": [{"x402Version": 1, "scheme": "exact", "network": "base-sepolia"}, {"x402Version": 2, "scheme": "exact", "network": "eip155:84532"}], "extensions": [], "signers": {}})),
    );
    let supported = fake.client().supported().await.unwrap();
    assert_eq!(networks(&supported), ["eip155:84532"]);
}

#[tokio::test]
async fn verify_and_settle_send_the_request_encoded_once() {
    let fake = Fake::start().await;
    let client = fake.client();
    let request = request();
    client.verify(&request).await.unwrap();
    client.settle(&request).await.unwrap();
    let verified = fake.received(Endpoint::Verify)[0].body.clone();
    let settled = fake.received(Endpoint::Settle)[0].body.clone();
    assert_eq!(verified, settled, "one payment, one body");
    assert_eq!(
        serde_json::from_slice::<FacilitatorRequest>(&verified).unwrap(),
        request
    );

    // Another amount is another request: its own body, never the first one's.
    let mut charged = requirements();
    charged.amount = AtomicAmount(2_500);
    let metered = request.with_requirements(charged);
    client.settle(&metered).await.unwrap();
    let body: Value = serde_json::from_slice(&fake.received(Endpoint::Settle)[1].body).unwrap();
    assert_eq!(body["paymentRequirements"]["amount"], "2500");
    assert_eq!(body["paymentPayload"]["accepted"]["amount"], "10000");
}
