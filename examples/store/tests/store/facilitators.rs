//! The store with more than one facilitator: a `store` process whose first facilitator is down
//! sells through the second, and the settings that list them.

use clap::Parser as _;
use reqwest::StatusCode;
use tower_x402_sandbox::SandboxFacilitator;
use x402_store::config::Config;

use super::operations::{get_json, present, sandbox_over_http, sign, start};

/// `Config` from `argv`, or why it is refused.
fn config(argv: &[&str]) -> Result<Config, String> {
    let argv = ["store"].iter().chain(argv).copied();
    let config = Config::try_parse_from(argv).map_err(|error| error.to_string())?;
    config.checked().map_err(|error| error.to_string())
}

const PAY_TO: &str = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";

#[tokio::test]
async fn a_purchase_goes_through_the_second_facilitator_while_the_first_is_down() {
    let dir = tempfile::tempdir().unwrap();
    let database = format!("sqlite://{}", dir.path().join("store.db").display());
    let refused = {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        format!("http://{}", listener.local_addr().unwrap())
    };
    let secondary = SandboxFacilitator::new();
    let (secondary_url, rpc) = sandbox_over_http(&secondary).await;
    let store = start(
        &format!("{refused},{secondary_url}"),
        &rpc,
        &database,
        &["--metrics-listen", "127.0.0.1:0"],
    )
    .await;
    let client = reqwest::Client::new();

    let (signature, _) = sign(&client, &store.base).await;
    let (status, body) = present(&client, &store.base, &signature).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        secondary.settlement_count(),
        1,
        "settled at the second facilitator"
    );

    let ops = store.ops.clone().expect("the metrics address");
    let (status, ready) = get_json(&client, &format!("{ops}/readyz")).await;
    assert_eq!(status, StatusCode::OK, "one facilitator answers: {ready}");
    let each = ready["checks"]["facilitators"].as_array().unwrap();
    let label = |url: &str| serde_json::Value::from(url.trim_start_matches("http://"));
    assert_eq!(each.len(), 2, "{ready}");
    assert_eq!(
        (&each[0]["facilitator"], &each[0]["ok"]),
        (&label(&refused), &false.into()),
        "{ready}"
    );
    assert_eq!(
        (&each[1]["facilitator"], &each[1]["ok"]),
        (&label(&secondary_url), &true.into()),
        "{ready}"
    );
}

#[test]
fn the_facilitator_url_takes_a_list_in_order_of_preference() {
    let config = config(&[
        "--facilitator-url",
        "https://a.example/, https://b.example",
        "--facilitator-bearer",
        "token-a,token-b",
        "--facilitator-breaker-failures",
        "5",
        "--facilitator-breaker-pause-secs",
        "7",
        "--pay-to",
        PAY_TO,
    ])
    .unwrap();
    assert_eq!(
        config.facilitators(),
        [
            ("https://a.example", Some("token-a")),
            ("https://b.example", Some("token-b"))
        ]
    );
    assert_eq!(config.facilitator_breaker_failures, 5);
    assert_eq!(
        config.facilitator_breaker_pause,
        std::time::Duration::from_secs(7)
    );

    let defaults = config_of_one_token();
    assert_eq!(
        defaults.facilitators(),
        [
            ("https://a.example", Some("t")),
            ("https://b.example", Some("t"))
        ],
        "one token is sent to all"
    );
    assert_eq!(defaults.facilitator_breaker_failures, 3);
    assert_eq!(
        defaults.facilitator_breaker_pause,
        std::time::Duration::from_secs(30)
    );
}

fn config_of_one_token() -> Config {
    config(&[
        "--facilitator-url",
        "https://a.example,https://b.example",
        "--facilitator-bearer",
        "t",
        "--pay-to",
        PAY_TO,
    ])
    .unwrap()
}

#[test]
fn a_bearer_count_that_matches_neither_one_nor_every_facilitator_is_refused() {
    let Err(refusal) = config(&[
        "--facilitator-url",
        "https://a.example,https://b.example,https://c.example",
        "--facilitator-bearer",
        "t1,t2",
        "--pay-to",
        PAY_TO,
    ]) else {
        panic!("two tokens for three facilitators is accepted");
    };
    assert!(refusal.contains("STORE_FACILITATOR_BEARER"), "{refusal}");
    assert!(refusal.contains("2 tokens for 3 facilitators"), "{refusal}");
    assert!(!refusal.contains("t1"), "never the secret: {refusal}");
}

#[test]
fn a_bad_entry_in_the_list_is_named() {
    let Err(refusal) = config(&[
        "--facilitator-url",
        "https://a.example,not a url",
        "--pay-to",
        PAY_TO,
    ]) else {
        panic!("a bad entry is accepted");
    };
    assert!(refusal.contains("STORE_FACILITATOR_URL"), "{refusal}");
    assert!(refusal.contains("entry 2 (\"not a url\")"), "{refusal}");
}

/// `sandbox` served on `listener` until `stop` is sent: then the listener closes and the open
/// connections with it.
fn serve_until(
    sandbox: &SandboxFacilitator,
    listener: tokio::net::TcpListener,
) -> (
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<()>,
) {
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let app = sandbox.router();
    let server = tokio::spawn(async move {
        let _ = axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                let _ = stopped.await;
            })
            .await;
    });
    (stop, server)
}

/// Polls `/readyz` until it answers `want` (at most 20 s); the last body.
async fn readyz_becomes(
    client: &reqwest::Client,
    ops: &str,
    want: StatusCode,
) -> serde_json::Value {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let (status, body) = get_json(client, &format!("{ops}/readyz")).await;
        if status == want {
            return body;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "/readyz stayed {status}: {body}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn readyz_is_not_ready_while_the_only_facilitator_is_down_and_ready_once_it_is_back() {
    let dir = tempfile::tempdir().unwrap();
    let database = format!("sqlite://{}", dir.path().join("store.db").display());
    let sandbox = SandboxFacilitator::new();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let (stop, server) = serve_until(&sandbox, listener);
    let (_, rpc) = sandbox_over_http(&SandboxFacilitator::new()).await;
    let store = start(
        &format!("http://{address}"),
        &rpc,
        &database,
        &["--metrics-listen", "127.0.0.1:0"],
    )
    .await;
    let client = reqwest::Client::new();
    let ops = store.ops.clone().expect("the metrics address");
    readyz_becomes(&client, &ops, StatusCode::OK).await;

    // The facilitator stops: its `/supported` was read a moment ago, but that is no answer now.
    stop.send(()).unwrap();
    server.await.unwrap();
    let down = readyz_becomes(&client, &ops, StatusCode::SERVICE_UNAVAILABLE).await;
    assert_eq!(down["checks"]["facilitator"]["ok"], false, "{down}");
    assert_eq!(down["checks"]["facilitators"][0]["ok"], false, "{down}");

    // Back on the same address: ready again.
    let listener = tokio::net::TcpListener::bind(address).await.unwrap();
    let _back = serve_until(&sandbox, listener);
    readyz_becomes(&client, &ops, StatusCode::OK).await;
}

#[tokio::test]
async fn readyz_is_not_ready_when_every_breaker_is_open() {
    let dir = tempfile::tempdir().unwrap();
    let database = format!("sqlite://{}", dir.path().join("store.db").display());
    // Verifies every payment, answers `/supported`, and fails every `/settle` with a 500.
    let sandbox = SandboxFacilitator::new().with_settle(tower_x402_sandbox::Step::Status(500));
    let (url, rpc) = sandbox_over_http(&sandbox).await;
    let store = start(
        &url,
        &rpc,
        &database,
        &[
            "--metrics-listen",
            "127.0.0.1:0",
            "--facilitator-breaker-failures",
            "1",
        ],
    )
    .await;
    let client = reqwest::Client::new();
    let ops = store.ops.clone().expect("the metrics address");
    readyz_becomes(&client, &ops, StatusCode::OK).await;

    let (signature, _) = sign(&client, &store.base).await;
    let (status, body) = present(&client, &store.base, &signature).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    let (status, open) = get_json(&client, &format!("{ops}/readyz")).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{open}");
    assert_eq!(
        open["checks"]["facilitators"][0]["circuit_open"], true,
        "{open}"
    );
    assert_eq!(open["checks"]["facilitators"][0]["ok"], false, "{open}");
}

#[tokio::test]
async fn the_metrics_listener_closes_a_silent_connection() {
    use tokio::io::AsyncReadExt as _;

    let dir = tempfile::tempdir().unwrap();
    let database = format!("sqlite://{}", dir.path().join("store.db").display());
    let sandbox = SandboxFacilitator::new();
    let (url, rpc) = sandbox_over_http(&sandbox).await;
    let store = start(
        &url,
        &rpc,
        &database,
        &[
            "--metrics-listen",
            "127.0.0.1:0",
            "--first-byte-timeout-secs",
            "1",
            "--header-read-timeout-secs",
            "1",
        ],
    )
    .await;
    let ops = store.ops.clone().expect("the metrics address");
    let mut silent = tokio::net::TcpStream::connect(ops.trim_start_matches("http://"))
        .await
        .unwrap();
    let mut buffer = [0u8; 16];
    let read = tokio::time::timeout(std::time::Duration::from_secs(5), silent.read(&mut buffer))
        .await
        .expect("a silent connection to the metrics listener is closed");
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
    let (status, _) = get_json(&reqwest::Client::new(), &format!("{ops}/healthz")).await;
    assert_eq!(status, StatusCode::OK);
}
