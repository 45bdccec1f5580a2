//! PostgreSQL stopped under a running store (real server, real sockets): the free catalog
//! routes answer at once from what the store holds, and a paid request fails fast with a JSON
//! 503 instead of hanging past the client's timeout.

use std::sync::Arc;
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::Value;
use tower_x402::proto::{PaymentRequired, header};
use tower_x402_sandbox::{SandboxFacilitator, SandboxWallet};
use x402_store::app::app;
use x402_store::config::Config;
use x402_store::serve::{ServeLimits, serve};
use x402_store::state::build_state_with;

use super::postgres_server::PgServer;
use super::reliability;
use super::support::RECEIPT;

/// Far above every wait the store may take here; only a hang reaches it.
const PATIENCE: Duration = Duration::from_secs(30);

async fn timed_get(
    client: &reqwest::Client,
    url: &str,
    signature: Option<&str>,
) -> (StatusCode, Value, Duration) {
    let started = Instant::now();
    let mut request = client.get(url);
    if let Some(signature) = signature {
        request = request.header("payment-signature", signature);
    }
    let response = tokio::time::timeout(PATIENCE, request.send())
        .await
        .expect("the store hung")
        .unwrap();
    let status = response.status();
    let json = response.json().await.unwrap_or(Value::Null);
    (status, json, started.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_postgres_stopped_catalog_answers_at_once_and_payments_fail_fast() {
    super::postgres_server::require();
    let server = PgServer::start_own().unwrap();
    let config = Config::for_tests(server.url("postgres"));
    let timeout = config.database_timeout;
    assert_eq!(timeout, Duration::from_secs(2), "the default");
    let sandbox = SandboxFacilitator::new();
    let state = build_state_with(config, Arc::new(sandbox.clone()), true)
        .await
        .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(serve(
        listener,
        app(state),
        ServeLimits::default(),
        std::future::pending(),
    ));
    let client = reqwest::Client::new();
    let bazaar = format!("{base}/api/bazaar");
    let product = format!("{base}/api/x402/{RECEIPT}");

    let (status, healthy, _) = timed_get(&client, &bazaar, None).await;
    assert_eq!(status, StatusCode::OK);
    assert!(healthy["standing"]["stages"].is_array(), "{healthy}");
    let challenge = client.get(&product).send().await.unwrap();
    assert_eq!(challenge.status(), StatusCode::PAYMENT_REQUIRED);
    let required: PaymentRequired =
        header::decode(challenge.headers()["payment-required"].as_bytes()).unwrap();
    let payment = SandboxWallet::random().pay(&required).unwrap();
    let signature = header::encode(&payment)
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();

    server.stop();

    // The catalog answers from memory, with the last funnel counts read.
    for _ in 0..3 {
        let (status, document, took) = timed_get(&client, &bazaar, None).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(document["count"], 45);
        assert!(document["standing"]["stages"].is_array(), "{document}");
        assert!(
            took < Duration::from_millis(1500),
            "/api/bazaar took {took:?}"
        );
    }
    // A new payment cannot be recorded: a JSON 503 within the database timeout, nothing moved.
    let (paid, refused, took) = timed_get(&client, &product, Some(&signature)).await;
    assert_eq!(paid, StatusCode::SERVICE_UNAVAILABLE, "{refused}");
    assert!(refused.is_object(), "a JSON body: {refused}");
    assert!(
        took < timeout * 2 + Duration::from_secs(1),
        "503 after {took:?}"
    );
    assert_eq!(sandbox.settlement_count(), 0);
    // Once the store knows the database is away, the catalog does not wait for it at all.
    let (status, _, took) = timed_get(&client, &bazaar, None).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        took < Duration::from_millis(300),
        "/api/bazaar took {took:?}"
    );
    for path in ["/llms.txt", "/.well-known/x402.json", "/openapi.json"] {
        let started = Instant::now();
        let answer = client.get(format!("{base}{path}")).send().await.unwrap();
        assert_eq!(answer.status(), StatusCode::OK, "{path}");
        assert!(started.elapsed() < Duration::from_millis(300), "{path}");
    }

    let row = reliability::Row {
        fault: "PostgreSQL stopped under a running store; a new payment presented".to_owned(),
        mode: "before",
        client_sees: format!("{} within {} s", paid.as_u16(), timeout.as_secs() * 2 + 1),
        inner_ran: 0,
        transfers: sandbox.settlement_count(),
        delivered_unpaid: false,
    };
    reliability::check("store-database", &[row]);
}
