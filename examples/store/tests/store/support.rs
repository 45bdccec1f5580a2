//! The store's test harness: the whole app over a fresh database with the in-process sandbox
//! facilitator (or a wrapper around it), one [`Answer`] type for every response, request
//! helpers, and a [`Shop`] to buy from (sign, present, restart over the same database).
//!
//! Every test runs on both backends: [`on_both_backends!`] turns each named `async fn` into a
//! module with a `sqlite` and a `postgres` test, and [`database`] opens the backend of the test
//! that calls it (a temporary SQLite file, or a fresh database on the throwaway PostgreSQL
//! server of [`postgres_server`](super::postgres_server)).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode};
use serde_json::Value;
use tempfile::TempDir;
use tower::ServiceExt as _;
use tower_x402::BoxFuture;
use tower_x402::{Facilitator, FacilitatorError};
use tower_x402_sandbox::{SandboxFacilitator, SandboxWallet};
use x402_wire::header;
use x402_wire::{
    FacilitatorRequest, PAYMENT_REQUIRED, PaymentRequired, SettleResponse, SupportedKind,
    SupportedResponse, VerifyResponse, X402Version,
};

use x402_store::app::app;
use x402_store::config::Config;
use x402_store::state::{AppState, build_state_with};

/// Runs each named `async fn()` as two tests, `NAME::sqlite` and `NAME::postgres`.
macro_rules! on_both_backends {
    ($($name:ident),+ $(,)?) => {$(
        mod $name {
            #[tokio::test]
            async fn sqlite() {
                $crate::support::run_on($crate::support::Backend::Sqlite, super::$name()).await;
            }

            #[tokio::test]
            async fn postgres() {
                $crate::support::run_on($crate::support::Backend::Postgres, super::$name()).await;
            }
        }
    )+};
}
pub(crate) use on_both_backends;

/// The database engine a test runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Backend {
    /// A SQLite file in a temporary directory.
    Sqlite,
    /// A fresh database on the test PostgreSQL server.
    Postgres,
}

tokio::task_local! {
    static BACKEND: Backend;
}

/// Runs `test` with [`database`] opening `backend`. A PostgreSQL run whose server cannot start
/// fails.
pub(crate) async fn run_on(backend: Backend, test: impl std::future::Future<Output = ()>) {
    if backend == Backend::Postgres {
        super::postgres_server::require();
    }
    BACKEND.scope(backend, test).await;
}

/// A database for one test; a SQLite file lives as long as this value.
pub(crate) struct TestDatabase {
    pub(crate) url: String,
    _dir: TempDir,
}

/// A fresh database on the current test's backend (SQLite at `data/store.db`).
pub(crate) async fn database() -> TestDatabase {
    database_at(&["data", "store.db"]).await
}

/// A fresh database on the current test's backend; a SQLite file at `path` in a new temporary
/// directory (its directories created by the store).
pub(crate) async fn database_at(path: &[&str]) -> TestDatabase {
    let dir = tempfile::tempdir().unwrap();
    let url = match BACKEND.try_with(|backend| *backend) {
        Ok(Backend::Postgres) => super::postgres_server::fresh_database().await,
        // A test not declared with `on_both_backends!` runs on SQLite.
        Ok(Backend::Sqlite) | Err(_) => {
            let file = path
                .iter()
                .fold(dir.path().to_owned(), |at, part| at.join(part));
            format!("sqlite://{}", file.display())
        }
    };
    TestDatabase { url, _dir: dir }
}

/// A store under test. The database lives as long as this value.
pub(crate) struct TestStore {
    pub(crate) state: AppState,
    pub(crate) app: Router,
    _database: TestDatabase,
}

/// An answer with its body read (and parsed when it is JSON).
#[derive(Debug)]
pub(crate) struct Answer {
    pub(crate) status: StatusCode,
    pub(crate) headers: HeaderMap,
    pub(crate) bytes: Vec<u8>,
    pub(crate) text: String,
    pub(crate) json: Value,
}

impl Answer {
    /// An answer of `status` and `headers` whose body was `bytes`.
    fn read(status: StatusCode, headers: HeaderMap, bytes: Vec<u8>) -> Self {
        let text = String::from_utf8_lossy(&bytes).into_owned();
        let json = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        Self {
            status,
            headers,
            bytes,
            text,
            json,
        }
    }

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
    let database = database().await;
    let (state, app) = open_app(&database.url, edit, facilitator, true).await;
    TestStore {
        app,
        state,
        _database: database,
    }
}

/// The store as `cargo run` starts it with no setting: `build_state` with the in-process sandbox.
pub(crate) async fn zero_setup_store() -> TestStore {
    let database = database().await;
    let config = Config::for_tests(&database.url);
    let state = x402_store::state::build_state(config).await.unwrap();
    TestStore {
        app: app(state.clone()),
        state,
        _database: database,
    }
}

/// The app over `database_url`, with settings adjusted by `edit`.
async fn open_app(
    database_url: &str,
    edit: impl FnOnce(&mut Config),
    facilitator: Arc<dyn Facilitator>,
    demo: bool,
) -> (AppState, Router) {
    let mut config = Config::for_tests(database_url);
    edit(&mut config);
    let state = build_state_with(config, facilitator, demo).await.unwrap();
    (state.clone(), app(state))
}

/// Sends `request` to `app` and reads the whole answer.
async fn send(app: &Router, request: Request<Body>) -> Answer {
    let response = app.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    Answer::read(status, headers, bytes.to_vec())
}

impl TestStore {
    pub(crate) async fn get(&self, uri: &str) -> Answer {
        self.send(Request::get(uri).body(Body::empty()).unwrap())
            .await
    }

    pub(crate) async fn send(&self, request: Request<Body>) -> Answer {
        send(&self.app, request).await
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
    /// Networks whose kinds are taken out of the answer.
    removed: Vec<x402_wire::Network>,
}

impl ExtraKinds {
    pub(crate) fn new(
        kinds: Vec<(x402_wire::Network, Option<serde_json::Map<String, Value>>)>,
    ) -> Self {
        Self::with_scheme("exact", kinds)
    }

    /// Like [`ExtraKinds::new`], with every added kind on `scheme`.
    pub(crate) fn with_scheme(
        scheme: &str,
        kinds: Vec<(x402_wire::Network, Option<serde_json::Map<String, Value>>)>,
    ) -> Self {
        let kinds = kinds
            .into_iter()
            .map(|(network, extra)| SupportedKind {
                x402_version: X402Version::V2,
                scheme: scheme.to_owned(),
                network,
                extra,
            })
            .collect();
        Self {
            inner: SandboxFacilitator::new(),
            kinds,
            removed: Vec::new(),
        }
    }

    /// The sandbox with no kind on `network` in its `/supported` answer.
    pub(crate) fn without(network: x402_wire::Network) -> Self {
        Self {
            inner: SandboxFacilitator::new(),
            kinds: Vec::new(),
            removed: vec![network],
        }
    }
}

impl Facilitator for ExtraKinds {
    fn verify<'a>(
        &'a self,
        request: &'a FacilitatorRequest,
    ) -> BoxFuture<'a, Result<VerifyResponse, FacilitatorError>> {
        self.inner.verify(request)
    }

    fn settle<'a>(
        &'a self,
        request: &'a FacilitatorRequest,
    ) -> BoxFuture<'a, Result<SettleResponse, FacilitatorError>> {
        self.inner.settle(request)
    }

    fn supported(&self) -> BoxFuture<'_, Result<Arc<SupportedResponse>, FacilitatorError>> {
        Box::pin(async move {
            let mut supported = (*self.inner.supported().await?).clone();
            // Replace any kind for the same network, so a test decides its `extra`.
            supported.kinds.retain(|kind| {
                !self.kinds.iter().any(|extra| extra.network == kind.network)
                    && !self.removed.contains(&kind.network)
            });
            supported.kinds.extend(self.kinds.iter().cloned());
            Ok(Arc::new(supported))
        })
    }
}

/// The sandbox, counting the `/verify` and `/settle` calls that reach it.
#[derive(Clone, Default)]
pub(crate) struct Counting {
    pub(crate) inner: SandboxFacilitator,
    calls: Arc<std::sync::atomic::AtomicUsize>,
}

impl Counting {
    /// How many `/verify` and `/settle` calls reached the facilitator.
    pub(crate) fn calls(&self) -> usize {
        self.calls.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn count(&self) {
        self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Facilitator for Counting {
    fn verify<'a>(
        &'a self,
        request: &'a FacilitatorRequest,
    ) -> BoxFuture<'a, Result<VerifyResponse, FacilitatorError>> {
        self.count();
        self.inner.verify(request)
    }

    fn settle<'a>(
        &'a self,
        request: &'a FacilitatorRequest,
    ) -> BoxFuture<'a, Result<SettleResponse, FacilitatorError>> {
        self.count();
        self.inner.settle(request)
    }

    fn supported(&self) -> BoxFuture<'_, Result<Arc<SupportedResponse>, FacilitatorError>> {
        self.inner.supported()
    }
}

/// A facilitator whose `/supported` fails (verify and settle fail too).
pub(crate) struct Unreachable;

impl Unreachable {
    fn error(endpoint: tower_x402::facilitator::Endpoint) -> FacilitatorError {
        FacilitatorError::Unreachable {
            endpoint,
            source: tower_x402::BoxError::from("connection refused").into(),
        }
    }
}

impl Facilitator for Unreachable {
    fn verify<'a>(
        &'a self,
        _: &'a FacilitatorRequest,
    ) -> BoxFuture<'a, Result<VerifyResponse, FacilitatorError>> {
        Box::pin(async { Err(Self::error(tower_x402::facilitator::Endpoint::Verify)) })
    }

    fn settle<'a>(
        &'a self,
        _: &'a FacilitatorRequest,
    ) -> BoxFuture<'a, Result<SettleResponse, FacilitatorError>> {
        Box::pin(async { Err(Self::error(tower_x402::facilitator::Endpoint::Settle)) })
    }

    fn supported(&self) -> BoxFuture<'_, Result<Arc<SupportedResponse>, FacilitatorError>> {
        Box::pin(async { Err(Self::error(tower_x402::facilitator::Endpoint::Supported)) })
    }
}

/// The cheapest SKU.
pub(crate) const RECEIPT: &str = "store-rail-receipt";
/// Two SKUs at the same price (42.00), so one's payment matches the other's accept.
pub(crate) const TAX: &str = "store-tax-protocol";
pub(crate) const STAMPS: &str = "store-stamps-afr-protocol";

/// A running store: its state, router, facilitator and database.
pub(crate) struct Shop {
    pub(crate) state: AppState,
    pub(crate) app: Router,
    pub(crate) facilitator: SandboxFacilitator,
    pub(crate) database: Arc<TestDatabase>,
}

impl Shop {
    /// A fresh store over a fresh database.
    pub(crate) async fn open(demo: bool) -> Self {
        let database = Arc::new(database().await);
        Self::open_in(database, SandboxFacilitator::new(), demo, None).await
    }

    /// A store over `database`, with `facilitator`.
    pub(crate) async fn open_in(
        database: Arc<TestDatabase>,
        facilitator: SandboxFacilitator,
        demo: bool,
        content_dir: Option<PathBuf>,
    ) -> Self {
        let (state, app) = open_app(
            &database.url,
            |config| config.content_dir = content_dir,
            Arc::new(facilitator.clone()),
            demo,
        )
        .await;
        Self {
            app,
            state,
            facilitator,
            database,
        }
    }

    /// The same database and facilitator, as a new process would see them; `self` is flushed
    /// and dropped first.
    pub(crate) async fn restart(self, demo: bool) -> Self {
        self.state.standing.flush().await.unwrap();
        let Self {
            database,
            facilitator,
            ..
        } = self;
        Self::open_in(database, facilitator, demo, None).await
    }

    /// A second store over the same database and facilitator, with the settings `edit` adjusts.
    pub(crate) async fn sibling(&self, edit: impl FnOnce(&mut Config)) -> Self {
        let (state, app) = open_app(
            &self.database.url,
            edit,
            Arc::new(self.facilitator.clone()),
            self.state.catalog.is_demo(),
        )
        .await;
        Self {
            app,
            state,
            facilitator: self.facilitator.clone(),
            database: Arc::clone(&self.database),
        }
    }

    /// `GET uri` with `headers`.
    pub(crate) async fn get(&self, uri: &str, headers: &[(&str, &str)]) -> Answer {
        let mut request = Request::get(uri);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        send(&self.app, request.body(Body::empty()).unwrap()).await
    }

    /// The challenge of `slug`.
    pub(crate) async fn challenge(&self, slug: &str) -> PaymentRequired {
        let answer = self.get(&format!("/api/x402/{slug}"), &[]).await;
        assert_eq!(
            answer.status,
            StatusCode::PAYMENT_REQUIRED,
            "{}",
            answer.text
        );
        header::decode(answer.headers[PAYMENT_REQUIRED].as_bytes()).unwrap()
    }

    /// A `PAYMENT-SIGNATURE` value paying `slug` from `wallet`.
    pub(crate) async fn sign(&self, wallet: &SandboxWallet, slug: &str) -> String {
        signature_header(wallet, &self.challenge(slug).await)
    }

    /// Presents `signature` for `slug`, optionally citing `referrer`.
    pub(crate) async fn present(
        &self,
        slug: &str,
        signature: &str,
        referrer: Option<&str>,
    ) -> Answer {
        let mut headers = vec![("payment-signature", signature)];
        if let Some(referrer) = referrer {
            headers.push(("x-referrer-passport", referrer));
        }
        self.get(&format!("/api/x402/{slug}"), &headers).await
    }

    /// Pays for `slug` from `wallet` and expects a 200.
    pub(crate) async fn buy(
        &self,
        wallet: &SandboxWallet,
        slug: &str,
        referrer: Option<&str>,
    ) -> Answer {
        let signature = self.sign(wallet, slug).await;
        let answer = self.present(slug, &signature, referrer).await;
        assert_eq!(answer.status, StatusCode::OK, "{}", answer.text);
        answer
    }
}

/// `GET uri` with `headers` over a real connection: `app` served by the store's own server on a
/// loopback port for this one request, and a real HTTP client.
pub(crate) async fn get_over_loopback(app: &Router, uri: &str, headers: &[(&str, &str)]) -> Answer {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let server = tokio::spawn(x402_store::serve::serve(
        listener,
        app.clone(),
        x402_store::serve::ServeLimits::default(),
        std::future::pending(),
    ));
    let mut request = reqwest::Client::new().get(format!("{base}{uri}"));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let answer = read_response(request.send().await.unwrap()).await;
    server.abort();
    answer
}

/// Reads a real HTTP response whole into an [`Answer`].
pub(crate) async fn read_response(response: reqwest::Response) -> Answer {
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = response.bytes().await.unwrap();
    Answer::read(status, headers, bytes.to_vec())
}

/// The `sign-in-with-x` challenge of a 402, the same in the `PAYMENT-REQUIRED` header and the
/// JSON body.
pub(crate) fn sign_in_challenge(answer: &Answer) -> Value {
    assert_eq!(
        answer.status,
        StatusCode::PAYMENT_REQUIRED,
        "{}",
        answer.text
    );
    let extension = answer.challenge()["extensions"]["sign-in-with-x"].clone();
    assert!(
        extension.is_object(),
        "no sign-in challenge: {}",
        answer.text
    );
    assert_eq!(answer.json["extensions"]["sign-in-with-x"], extension);
    extension
}

/// A refused sign-in: the normal 402, whose JSON `error` starts with `code`, with a fresh
/// sign-in challenge and no purchase.
pub(crate) fn assert_sign_in_refused(answer: &Answer, code: &str) {
    let challenge = sign_in_challenge(answer);
    let error = answer.json["error"].as_str().unwrap_or_default();
    assert!(error.starts_with(code), "expected {code}: {}", answer.text);
    assert!(challenge["info"]["nonce"].is_string(), "{challenge}");
    assert!(answer.json.get("passport").is_none());
}

/// A `PAYMENT-SIGNATURE` value answering the challenge `required` from `wallet`.
pub(crate) fn signature_header(wallet: &SandboxWallet, required: &PaymentRequired) -> String {
    header::encode(&wallet.pay(required).unwrap())
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned()
}

/// The Passport id of a purchase answer.
pub(crate) fn passport_of(answer: &Answer) -> String {
    answer.json["passport"]["passport"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// The path and query of the first fulfillment URL of a purchase answer.
pub(crate) fn first_file_path(answer: &Answer) -> String {
    let url = answer.json["fulfillment"][0]["url"].as_str().unwrap();
    let path = url.strip_prefix("http://127.0.0.1:4020").unwrap();
    path.to_owned()
}
