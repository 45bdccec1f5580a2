//! Harness for the catalog and discovery tests: the whole app over a temporary SQLite file with
//! the in-process sandbox facilitator (or a wrapper around it), plus request helpers.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode};
use serde_json::Value;
use tempfile::TempDir;
use tower::ServiceExt as _;
use tower_x402::facilitator::BoxFuture;
use tower_x402::proto::{
    PAYMENT_REQUIRED, SettleRequest, SettleResponse, SupportedKind, SupportedResponse,
    VerifyRequest, VerifyResponse, X402Version,
};
use tower_x402::sandbox::SandboxFacilitator;
use tower_x402::{Facilitator, FacilitatorError};

use x402_store::app::{AppState, app, build_state_with};
use x402_store::config::Config;

/// A store under test. The database directory lives as long as this value.
pub(crate) struct TestStore {
    pub(crate) state: AppState,
    pub(crate) app: Router,
    _dir: TempDir,
}

/// An answer with its body read (and parsed when it is JSON).
#[derive(Debug)]
pub(crate) struct Answer {
    pub(crate) status: StatusCode,
    pub(crate) headers: HeaderMap,
    pub(crate) text: String,
    pub(crate) json: Value,
}

impl Answer {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|value| value.to_str().ok())
    }

    /// The `PAYMENT-REQUIRED` challenge, decoded to JSON as sent (field order kept).
    pub(crate) fn challenge(&self) -> Value {
        use base64::Engine as _;
        let encoded = self
            .header(PAYMENT_REQUIRED.as_str())
            .expect("no PAYMENT-REQUIRED header");
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .unwrap();
        serde_json::from_slice(&bytes).unwrap()
    }
}

/// A demo store with default settings.
pub(crate) async fn store() -> TestStore {
    store_with(|_| {}, Arc::new(SandboxFacilitator::new())).await
}

/// A store whose settings `edit` adjusts, paying through `facilitator`.
pub(crate) async fn store_with(
    edit: impl FnOnce(&mut Config),
    facilitator: Arc<dyn Facilitator>,
) -> TestStore {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("store.db").display());
    let mut config = Config::for_tests(url);
    edit(&mut config);
    config.validate().unwrap();
    let state = build_state_with(config, facilitator, true).await.unwrap();
    TestStore {
        app: app(state.clone()),
        state,
        _dir: dir,
    }
}

impl TestStore {
    pub(crate) async fn get(&self, uri: &str) -> Answer {
        self.send(Request::get(uri).body(Body::empty()).unwrap())
            .await
    }

    pub(crate) async fn send(&self, request: Request<Body>) -> Answer {
        let response = self.app.clone().oneshot(request).await.unwrap();
        let status = response.status();
        let headers = response.headers().clone();
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        let text = String::from_utf8_lossy(&bytes).into_owned();
        let json = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        Answer {
            status,
            headers,
            text,
            json,
        }
    }

    /// POSTs a JSON-RPC message to `/mcp` with the usual MCP headers.
    pub(crate) async fn mcp(&self, body: &str) -> Answer {
        self.send(
            Request::post("/mcp")
                .header("content-type", "application/json")
                .header("accept", "application/json, text/event-stream")
                .body(Body::from(body.to_owned()))
                .unwrap(),
        )
        .await
    }

    /// Calls an MCP tool and returns the `result`.
    pub(crate) async fn tool(&self, name: &str, arguments: Value) -> Value {
        let body = serde_json::json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": name, "arguments": arguments}});
        let answer = self.mcp(&body.to_string()).await;
        assert_eq!(answer.status, StatusCode::OK, "{}", answer.text);
        answer.json["result"].clone()
    }
}

/// Serves `router` on a fresh loopback port until the test ends.
pub(crate) async fn serve(router: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    address
}

/// The sandbox, with extra kinds added to its `/supported` answer.
pub(crate) struct ExtraKinds {
    inner: SandboxFacilitator,
    kinds: Vec<SupportedKind>,
}

impl ExtraKinds {
    pub(crate) fn new(
        kinds: Vec<(
            tower_x402::proto::Network,
            Option<serde_json::Map<String, Value>>,
        )>,
    ) -> Self {
        let kinds = kinds
            .into_iter()
            .map(|(network, extra)| SupportedKind {
                x402_version: X402Version::V2,
                scheme: "exact".to_owned(),
                network,
                extra,
            })
            .collect();
        Self {
            inner: SandboxFacilitator::new(),
            kinds,
        }
    }
}

impl Facilitator for ExtraKinds {
    fn verify<'a>(
        &'a self,
        request: &'a VerifyRequest,
    ) -> BoxFuture<'a, Result<VerifyResponse, FacilitatorError>> {
        self.inner.verify(request)
    }

    fn settle<'a>(
        &'a self,
        request: &'a SettleRequest,
    ) -> BoxFuture<'a, Result<SettleResponse, FacilitatorError>> {
        self.inner.settle(request)
    }

    fn supported(&self) -> BoxFuture<'_, Result<Arc<SupportedResponse>, FacilitatorError>> {
        Box::pin(async move {
            let mut supported = (*self.inner.supported().await?).clone();
            // Replace any kind for the same network, so a test decides its `extra`.
            supported
                .kinds
                .retain(|kind| !self.kinds.iter().any(|extra| extra.network == kind.network));
            supported.kinds.extend(self.kinds.iter().cloned());
            Ok(Arc::new(supported))
        })
    }
}

/// A facilitator whose `/supported` fails (verify and settle fail too).
pub(crate) struct Unreachable;

impl Unreachable {
    fn error(endpoint: tower_x402::facilitator::Endpoint) -> FacilitatorError {
        FacilitatorError::Unreachable {
            endpoint,
            source: "connection refused".into(),
        }
    }
}

impl Facilitator for Unreachable {
    fn verify<'a>(
        &'a self,
        _: &'a VerifyRequest,
    ) -> BoxFuture<'a, Result<VerifyResponse, FacilitatorError>> {
        Box::pin(async { Err(Self::error(tower_x402::facilitator::Endpoint::Verify)) })
    }

    fn settle<'a>(
        &'a self,
        _: &'a SettleRequest,
    ) -> BoxFuture<'a, Result<SettleResponse, FacilitatorError>> {
        Box::pin(async { Err(Self::error(tower_x402::facilitator::Endpoint::Settle)) })
    }

    fn supported(&self) -> BoxFuture<'_, Result<Arc<SupportedResponse>, FacilitatorError>> {
        Box::pin(async { Err(Self::error(tower_x402::facilitator::Endpoint::Supported)) })
    }
}
