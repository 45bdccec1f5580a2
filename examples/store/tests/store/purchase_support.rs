//! A store over a temporary SQLite file with the in-process sandbox, and helpers to buy from it.

use std::path::PathBuf;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode};
use serde_json::Value;
use tempfile::TempDir;
use tower::ServiceExt as _;
use tower_x402::proto::{PAYMENT_REQUIRED, PaymentRequired, header};
use tower_x402::sandbox::{SandboxFacilitator, SandboxWallet};

use x402_store::app::{AppState, app, build_state_with};
use x402_store::config::Config;

/// The cheapest SKU.
pub(crate) const RECEIPT: &str = "store-rail-receipt";
/// Two SKUs at the same price (42.00), so one's payment matches the other's accept.
pub(crate) const TAX: &str = "store-tax-protocol";
pub(crate) const STAMPS: &str = "store-stamps-afr-protocol";

/// A running store: its state, router, facilitator and database directory.
pub(crate) struct Shop {
    pub(crate) state: AppState,
    pub(crate) app: Router,
    pub(crate) facilitator: SandboxFacilitator,
    pub(crate) dir: Arc<TempDir>,
}

/// An HTTP answer, body parsed as JSON when it is JSON.
#[derive(Debug)]
pub(crate) struct Answer {
    pub(crate) status: StatusCode,
    pub(crate) headers: HeaderMap,
    pub(crate) bytes: Vec<u8>,
    pub(crate) json: Value,
}

impl Answer {
    pub(crate) fn text(&self) -> String {
        String::from_utf8_lossy(&self.bytes).into_owned()
    }
}

impl Shop {
    /// A fresh store in a new temporary directory.
    pub(crate) async fn open(demo: bool) -> Self {
        let dir = Arc::new(tempfile::tempdir().unwrap());
        Self::open_in(dir, SandboxFacilitator::new(), demo, None).await
    }

    /// A store over the database in `dir`, with `facilitator`.
    pub(crate) async fn open_in(
        dir: Arc<TempDir>,
        facilitator: SandboxFacilitator,
        demo: bool,
        content_dir: Option<PathBuf>,
    ) -> Self {
        let url = format!(
            "sqlite://{}",
            dir.path().join("data").join("store.db").display()
        );
        let mut config = Config::for_tests(url);
        config.content_dir = content_dir;
        let state = build_state_with(config, Arc::new(facilitator.clone()), demo)
            .await
            .unwrap();
        Self {
            app: app(state.clone()),
            state,
            facilitator,
            dir,
        }
    }

    /// The same database and facilitator, as a new process would see them; `self` is flushed
    /// and dropped first.
    pub(crate) async fn restart(self, demo: bool) -> Self {
        self.state.standing.flush().await.unwrap();
        let Self {
            dir, facilitator, ..
        } = self;
        Self::open_in(dir, facilitator, demo, None).await
    }

    /// `GET uri` with `headers`.
    pub(crate) async fn get(&self, uri: &str, headers: &[(&str, &str)]) -> Answer {
        let mut request = Request::get(uri);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let response = self
            .app
            .clone()
            .oneshot(request.body(Body::empty()).unwrap())
            .await
            .unwrap();
        let status = response.status();
        let headers = response.headers().clone();
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .unwrap()
            .to_vec();
        let json = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        Answer {
            status,
            headers,
            bytes,
            json,
        }
    }

    /// The challenge of `slug`.
    pub(crate) async fn challenge(&self, slug: &str) -> PaymentRequired {
        let answer = self.get(&format!("/api/x402/{slug}"), &[]).await;
        assert_eq!(
            answer.status,
            StatusCode::PAYMENT_REQUIRED,
            "{}",
            answer.text()
        );
        header::decode(answer.headers[PAYMENT_REQUIRED].as_bytes()).unwrap()
    }

    /// A `PAYMENT-SIGNATURE` value paying `slug` from `wallet`.
    pub(crate) async fn sign(&self, wallet: &SandboxWallet, slug: &str) -> String {
        let required = self.challenge(slug).await;
        let payload = wallet.pay(&required).unwrap();
        header::encode(&payload)
            .unwrap()
            .to_str()
            .unwrap()
            .to_owned()
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
        assert_eq!(answer.status, StatusCode::OK, "{}", answer.text());
        answer
    }
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
