//! PostgreSQL stopped under a running store (real server, real sockets): the free catalog
//! routes answer at once from what the store holds, and a paid request fails fast with a JSON
//! 503 instead of hanging past the client's timeout.

use std::sync::Arc;
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::Value;
use tower_x402_sandbox::{SandboxFacilitator, SandboxWallet};
use x402_store::config::Config;
use x402_store::state::build_state_with;
use x402_wire::{PaymentRequired, header};

use super::live_store::{
    PATIENCE, new_payment, open_store, open_store_with, present, serve_store, wait_until,
};
use super::postgres_server::PgServer;
use super::reliability;
use super::support::{RECEIPT, signature_header};

/// How soon after PostgreSQL is back a paid request is delivered again.
const RESTART_DELIVERY: Duration = Duration::from_secs(5);
/// How long the database stays away in the longest outage tried.
const OUTAGE: Duration = Duration::from_secs(15);

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
    let base = serve_store(state).await;
    let client = reqwest::Client::new();
    let bazaar = format!("{base}/api/bazaar");
    let product = format!("{base}/api/x402/{RECEIPT}");

    let (status, healthy, _) = timed_get(&client, &bazaar, None).await;
    assert_eq!(status, StatusCode::OK);
    assert!(healthy["standing"]["stages"].is_array(), "{healthy}");
    let signature = new_payment(&client, &product).await;

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
    // Once the store knows the database is away, the catalog does not wait for it at all: well
    // under the database timeout (a bound loose enough for a busy machine's scheduling).
    let (status, _, took) = timed_get(&client, &bazaar, None).await;
    assert_eq!(status, StatusCode::OK);
    assert!(took < timeout / 2, "/api/bazaar took {took:?}");
    for path in ["/llms.txt", "/.well-known/x402.json", "/openapi.json"] {
        let started = Instant::now();
        let answer = client.get(format!("{base}{path}")).send().await.unwrap();
        assert_eq!(answer.status(), StatusCode::OK, "{path}");
        assert!(started.elapsed() < timeout / 2, "{path}");
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

/// A buyer who paid before PostgreSQL stopped signs in while it is stopped: the entitlements
/// cannot be read, and the answer is a JSON 503 with `Retry-After` — never the 402 a client
/// would pay again for what it owns; once the database is back, a fresh proof signs in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sign_in_while_postgres_is_stopped_is_a_503_never_a_402() {
    super::postgres_server::require();
    let server = PgServer::start_own().unwrap();
    let config = Config::for_tests(server.url("postgres"));
    let timeout = config.database_timeout;
    let sandbox = SandboxFacilitator::new();
    let state = build_state_with(config, Arc::new(sandbox.clone()), true)
        .await
        .unwrap();
    let base = serve_store(state).await;
    let client = reqwest::Client::new();
    let product = format!("{base}/api/x402/{RECEIPT}");
    let buyer = SandboxWallet::random();
    let challenge = client.get(&product).send().await.unwrap();
    let required: PaymentRequired =
        header::decode(challenge.headers()["payment-required"].as_bytes()).unwrap();
    let (bought, _, _) = timed_get(
        &client,
        &product,
        Some(&signature_header(&buyer, &required)),
    )
    .await;
    assert_eq!(bought, StatusCode::OK);
    let settlements = sandbox.settlement_count();

    let proof = buyer
        .sign_in(&sign_in_extension(&client, &product).await)
        .unwrap();
    server.stop();
    let started = Instant::now();
    let answer = tokio::time::timeout(
        PATIENCE,
        client.get(&product).header("sign-in-with-x", &proof).send(),
    )
    .await
    .expect("the store hung")
    .unwrap();
    let took = started.elapsed();
    let status = answer.status();
    let retry_after = answer.headers().contains_key("retry-after");
    let challenged = answer.headers().contains_key("payment-required");
    let body: Value = answer.json().await.unwrap_or(Value::Null);
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert!(retry_after, "Retry-After");
    assert!(!challenged, "no challenge to pay: {body}");
    let error = body["error"].as_str().unwrap_or_default();
    assert!(error.starts_with("siwx_store_unavailable"), "{body}");
    assert!(
        took < timeout * 2 + Duration::from_secs(1),
        "503 after {took:?}"
    );

    server.start_again().unwrap();
    // The proof was not used up (its nonce could not be written): once the database answers,
    // a sign-in serves the purchase again.
    let started = Instant::now();
    let served = loop {
        let proof = buyer
            .sign_in(&sign_in_extension(&client, &product).await)
            .unwrap();
        let answer = client
            .get(&product)
            .header("sign-in-with-x", &proof)
            .send()
            .await
            .unwrap();
        if answer.status() == StatusCode::OK {
            break answer.status();
        }
        assert!(
            started.elapsed() < RESTART_DELIVERY,
            "no sign-in within {RESTART_DELIVERY:?} of the restart: {}",
            answer.status()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(
        sandbox.settlement_count(),
        settlements,
        "nothing paid again"
    );

    let row = reliability::Row {
        fault: "PostgreSQL stopped under a running store; a buyer who paid before signs in (`SIGN-IN-WITH-X`), then again after the restart".to_owned(),
        mode: "before",
        client_sees: format!(
            "{} + Retry-After (`siwx_store_unavailable`); {} after the restart",
            status.as_u16(),
            served.as_u16()
        ),
        // The purchase, and the sign-in after the restart; never the refused sign-in.
        inner_ran: 2,
        transfers: sandbox.settlement_count(),
        delivered_unpaid: false,
    };
    reliability::check("store-database-sign-in", &[row]);
}

/// The `sign-in-with-x` extension of a fresh 402 for `product`.
async fn sign_in_extension(client: &reqwest::Client, product: &str) -> Value {
    let answer = client.get(product).send().await.unwrap();
    assert_eq!(answer.status(), StatusCode::PAYMENT_REQUIRED);
    let required: PaymentRequired =
        header::decode(answer.headers()["payment-required"].as_bytes()).unwrap();
    required.extensions.unwrap()["sign-in-with-x"].clone()
}

/// `/readyz` follows the database: 200, 503 naming the database while PostgreSQL is stopped (a
/// paid request then gets 503 with `Retry-After`, nothing moves), 200 once it is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_follows_the_database() {
    super::postgres_server::require();
    let server = PgServer::start_own().unwrap();
    let sandbox = SandboxFacilitator::new();
    let (product, readyz) = open_store(&server, &sandbox).await;
    let client = reqwest::Client::new();

    let (status, ready, _) = timed_get(&client, &readyz, None).await;
    assert_eq!(status, StatusCode::OK, "{ready}");
    // Sales before the outage, several at once: the pool holds several connections, every one
    // of them dead once the server goes.
    let mut warm = Vec::new();
    for _ in 0..4 {
        let signature = new_payment(&client, &product).await;
        warm.push(present(&client, &product, &signature));
    }
    for sale in warm {
        assert_eq!(sale.await.unwrap().0, StatusCode::OK);
    }
    let signature = new_payment(&client, &product).await;

    server.stop();
    let (status, down, _) = timed_get(&client, &readyz, None).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{down}");
    assert_eq!(down["checks"]["database"]["ok"], false, "{down}");
    assert_eq!(down["checks"]["facilitator"]["ok"], true, "{down}");
    let (during, retry_after, _) = present(&client, &product, &signature).await.unwrap();
    assert_eq!(during, StatusCode::SERVICE_UNAVAILABLE);
    assert!(retry_after);
    assert_eq!(sandbox.settlement_count(), 4);

    server.start_again().unwrap();
    let started = Instant::now();
    let back = loop {
        let (status, back, _) = timed_get(&client, &readyz, None).await;
        if status == StatusCode::OK {
            break back;
        }
        assert!(started.elapsed() < PATIENCE, "never ready again: {back}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(back["status"], "ready");
    assert_eq!(sandbox.settlement_count(), 4);
    let ready_after = started.elapsed();
    // The payment refused during the outage is delivered within seconds of the restart.
    let (_, delivered) = delivered_after_restart(&client, &product, &signature, started).await;
    assert_eq!(
        sandbox.settlement_count(),
        5,
        "one transfer for the payment"
    );
    println!(
        "PostgreSQL stopped: /readyz 503 {down}, paid request {during} with Retry-After, nothing moved; restarted: /readyz 200 after {ready_after:?}, the payment delivered {delivered:?} after the restart"
    );
}

/// PostgreSQL stopped while `/settle` is under way (the *settling* intent written, the settled
/// record not yet): never a 402, never a second `/settle`; during the outage the payment is a 503
/// with `Retry-After` or, once settled, delivered; after the restart the same payment is
/// delivered from its record, with one transfer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_stopped_while_settling_never_settles_twice_and_delivers_after() {
    super::postgres_server::require();
    let server = PgServer::start_own().unwrap();
    let sandbox = SandboxFacilitator::new();
    let (product, _) = open_store(&server, &sandbox).await;
    let client = reqwest::Client::new();
    let signature = new_payment(&client, &product).await;

    sandbox.queue_settle(tower_x402_sandbox::Step::Answer.after(Duration::from_secs(2)));
    let first = present(&client, &product, &signature);
    wait_until("/settle never came", || sandbox.settle_calls() > 0).await;
    server.stop();
    let (during, retry_after, _) = first.await.unwrap();
    let mut seen = vec![during.as_u16()];
    assert_ne!(during, StatusCode::PAYMENT_REQUIRED);
    if during != StatusCode::OK {
        assert_eq!(during, StatusCode::SERVICE_UNAVAILABLE);
        assert!(retry_after, "503 with Retry-After");
    }
    let (retry, _, _) = timed_get(&client, &product, Some(&signature)).await;
    seen.push(retry.as_u16());
    assert!(
        retry == StatusCode::SERVICE_UNAVAILABLE || retry == StatusCode::OK,
        "{retry}"
    );
    assert_eq!(
        sandbox.settle_calls(),
        1,
        "no second /settle during the outage"
    );

    server.start_again().unwrap();
    let started = Instant::now();
    let (delivered, delivered_after) =
        delivered_after_restart(&client, &product, &signature, started).await;
    seen.push(200);
    assert!(delivered["passport"].is_object(), "{delivered}");
    assert_eq!(sandbox.settle_calls(), 1, "one /settle in all");
    assert_eq!(sandbox.settlement_count(), 1, "one transfer");
    println!(
        "PostgreSQL stopped while /settle was under way: answers {seen:?}, delivered {delivered_after:?} after the restart, /settle calls 1, transfers 1"
    );

    let row = reliability::Row {
        fault: "PostgreSQL stopped (immediate) while a payment is settling, /settle under way"
            .to_owned(),
        mode: "before",
        client_sees: format!(
            "503 + Retry-After or 200; 200 within {} s of the restart",
            RESTART_DELIVERY.as_secs()
        ),
        inner_ran: 1,
        transfers: sandbox.settlement_count(),
        delivered_unpaid: false,
    };
    reliability::check("store-database-settling", &[row]);
}

/// Retries `signature` until it is delivered, within [`RESTART_DELIVERY`] of `since`: never a
/// 402. Returns the body and how long after `since` it came.
async fn delivered_after_restart(
    client: &reqwest::Client,
    product: &str,
    signature: &str,
    since: Instant,
) -> (Value, Duration) {
    loop {
        let (status, body, _) = timed_get(client, product, Some(signature)).await;
        assert_ne!(status, StatusCode::PAYMENT_REQUIRED, "{body}");
        if status == StatusCode::OK {
            return (body, since.elapsed());
        }
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
        assert!(
            since.elapsed() < RESTART_DELIVERY,
            "still {status} {}s after the restart: {body}",
            since.elapsed().as_secs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `/readyz`'s status once it settles on one: polled until `want` or [`PATIENCE`].
async fn readyz_becomes(client: &reqwest::Client, readyz: &str, want: StatusCode) {
    let started = Instant::now();
    loop {
        let (status, body, _) = timed_get(client, readyz, None).await;
        if status == want {
            return;
        }
        assert!(started.elapsed() < PATIENCE, "/readyz never {want}: {body}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// PostgreSQL stopped while a payment is *claimed* (held in progress, `/verify` under way, with
/// `STORE_VERIFY_BEFORE_SETTLING`): nothing reaches `/settle`; the payment and its retries are
/// 503 with `Retry-After`, never 402; `/readyz` is 503 until the restart; then the same payment
/// is delivered once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_stopped_while_a_payment_is_claimed_settles_nothing_and_delivers_after() {
    super::postgres_server::require();
    let server = PgServer::start_own().unwrap();
    let sandbox = SandboxFacilitator::new();
    let mut config = Config::for_tests(server.url("postgres"));
    config.verify_before_settling = true;
    let (product, readyz) = open_store_with(config, &sandbox).await;
    let client = reqwest::Client::new();
    let signature = new_payment(&client, &product).await;

    sandbox.queue_verify(tower_x402_sandbox::Step::Answer.after(Duration::from_secs(1)));
    let first = present(&client, &product, &signature);
    wait_until("/verify never came", || sandbox.verify_calls() > 0).await;
    server.stop();
    let (during, retry_after, body) = first.await.unwrap();
    assert_eq!(during, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert!(retry_after, "503 with Retry-After");
    assert!(body.get("passport").is_none(), "no content: {body}");
    let retry = present(&client, &product, &signature).await.unwrap();
    assert_eq!(retry.0, StatusCode::SERVICE_UNAVAILABLE, "{}", retry.2);
    assert!(retry.1, "503 with Retry-After");
    readyz_becomes(&client, &readyz, StatusCode::SERVICE_UNAVAILABLE).await;
    assert_eq!(sandbox.settle_calls(), 0, "nothing sent to /settle");

    server.start_again().unwrap();
    let restarted = Instant::now();
    let (delivered, after) =
        delivered_after_restart(&client, &product, &signature, restarted).await;
    assert!(delivered["passport"].is_object(), "{delivered}");
    readyz_becomes(&client, &readyz, StatusCode::OK).await;
    let again = present(&client, &product, &signature).await.unwrap();
    assert_eq!(again.0, StatusCode::OK, "{}", again.2);
    assert_eq!(
        again.2["passport"], delivered["passport"],
        "the same purchase"
    );
    assert_eq!(sandbox.settle_calls(), 1, "one /settle in all");
    assert_eq!(sandbox.settlement_count(), 1, "one transfer");
    println!(
        "PostgreSQL stopped while the payment was claimed: answers [503, 503] with Retry-After, /readyz 503, /settle calls 0; restarted: delivered {after:?} after, /readyz 200, /settle calls 1, transfers 1"
    );

    let row = reliability::Row {
        fault: "PostgreSQL stopped (immediate) while a payment is claimed, /verify under way"
            .to_owned(),
        mode: "before",
        client_sees: format!(
            "503 + Retry-After; 200 within {} s of the restart",
            RESTART_DELIVERY.as_secs()
        ),
        inner_ran: 1,
        transfers: sandbox.settlement_count(),
        delivered_unpaid: false,
    };
    reliability::check("store-database-claimed", &[row]);
}

/// PostgreSQL stopped while `/settle` answers (settled, the outcome not yet written or
/// answered): during the outage never a 402, never a second `/settle`, `/readyz` 503; after the
/// restart the settled record reaches the database within seconds, so that another instance
/// sharing it (no memory of the payment) delivers it from the record, and this one too, with one
/// transfer in all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_stopped_as_the_settlement_arrives_records_it_and_another_instance_delivers() {
    super::postgres_server::require();
    let server = PgServer::start_own().unwrap();
    let sandbox = SandboxFacilitator::new();
    let (product, readyz) = open_store(&server, &sandbox).await;
    let client = reqwest::Client::new();
    let signature = new_payment(&client, &product).await;

    sandbox.queue_settle(tower_x402_sandbox::Step::Answer.after(Duration::from_millis(500)));
    let first = present(&client, &product, &signature);
    wait_until("/settle never came", || sandbox.settle_calls() > 0).await;
    server.stop();
    let (during, retry_after, body) = first.await.unwrap();
    assert_ne!(during, StatusCode::PAYMENT_REQUIRED, "{body}");
    if during != StatusCode::OK {
        assert_eq!(during, StatusCode::SERVICE_UNAVAILABLE, "{body}");
        assert!(retry_after, "503 with Retry-After");
        assert!(body.get("passport").is_none(), "no content: {body}");
    }
    readyz_becomes(&client, &readyz, StatusCode::SERVICE_UNAVAILABLE).await;
    // An outage long enough for the record's rewrites to back off many times: the record still
    // lands within seconds of the restart.
    tokio::time::sleep(OUTAGE).await;
    let retry = present(&client, &product, &signature).await.unwrap();
    assert!(
        retry.0 == StatusCode::SERVICE_UNAVAILABLE && retry.1 || retry.0 == StatusCode::OK,
        "{} {}",
        retry.0,
        retry.2
    );
    assert_eq!(sandbox.settle_calls(), 1, "no second /settle in the outage");

    server.start_again().unwrap();
    let restarted = Instant::now();
    // Another instance: the same database, no memory of this payment.
    let other = SandboxFacilitator::new();
    let (other_product, _) = open_store(&server, &other).await;
    let (from_record, after) =
        delivered_after_restart(&client, &other_product, &signature, restarted).await;
    assert!(from_record["passport"].is_object(), "{from_record}");
    assert_eq!(
        other.settle_calls(),
        0,
        "the other instance answered from the record"
    );
    let (delivered, _) = delivered_after_restart(&client, &product, &signature, restarted).await;
    assert_eq!(
        delivered["passport"], from_record["passport"],
        "one purchase"
    );
    readyz_becomes(&client, &readyz, StatusCode::OK).await;
    assert_eq!(sandbox.settle_calls(), 1, "one /settle in all");
    assert_eq!(sandbox.settlement_count(), 1, "one transfer");
    println!(
        "PostgreSQL stopped as /settle answered: answers [{}, {}], /settle calls 1; restarted: another instance delivered from the record {after:?} after, /settle calls 1, transfers 1",
        during.as_u16(),
        retry.0.as_u16()
    );

    let row = reliability::Row {
        fault: "PostgreSQL stopped (immediate) as /settle answers; the outcome written after the restart"
            .to_owned(),
        mode: "before",
        client_sees: format!(
            "503 + Retry-After or 200; another instance 200 within {} s of the restart",
            RESTART_DELIVERY.as_secs()
        ),
        inner_ran: 1,
        transfers: sandbox.settlement_count(),
        delivered_unpaid: false,
    };
    reliability::check("store-database-settled", &[row]);
}
