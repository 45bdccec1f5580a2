//! Several facilitators over HTTP on loopback: failover of `/verify` and new sales, the circuit
//! breaker, and a payment's retries pinned to the facilitator that received its `/settle`.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{PAYER, SandboxFacilitator, Step, accepting, body_json, offer, paid_get, payment};
use http::StatusCode;
use tower::{Service as _, ServiceExt as _};
use tower_x402::facilitator::{Facilitator, Facilitators};
use tower_x402::payment::Payments;
use tower_x402::settlement::{MemorySettlementStore, check_conformance};
use tower_x402::{HttpFacilitator, SettlementMode, X402Layer};

const URL: &str = "http://shop.test/report";

/// A client for `url` with short timeouts, so that a facilitator that is down fails fast.
fn client(url: &str) -> Arc<dyn Facilitator> {
    Arc::new(
        HttpFacilitator::builder(url)
            .settle_timeout(Duration::from_millis(800))
            .build()
            .unwrap(),
    )
}

/// Serves `facilitator` on `addr`, or on a fresh port.
async fn serve_on(facilitator: &SandboxFacilitator, addr: &str) -> String {
    let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(facilitator.clone().serve(listener));
    url
}

/// A loopback address nothing listens on: connections to it are refused.
async fn refused_addr() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    listener.local_addr().unwrap().to_string()
}

/// A paid GET of `URL` through `layer`, with the payment made from `seed`.
async fn buy(layer: &X402Layer, seed: u8) -> (StatusCode, serde_json::Value) {
    let mut service = tower::ServiceBuilder::new()
        .layer(layer.clone())
        .service_fn(common::echo_payment);
    let offer = offer(URL, SettlementMode::Before);
    let request = paid_get(URL, &payment(&offer, seed));
    let response = service.ready().await.unwrap().call(request).await.unwrap();
    let status = response.status();
    let retry_after = response.headers().contains_key("retry-after");
    let mut body = body_json(response).await;
    body["retry_after"] = retry_after.into();
    (status, body)
}

/// `primary` then `secondary`, each served over HTTP on loopback.
async fn primary_then_secondary(
    primary: &SandboxFacilitator,
    secondary: &SandboxFacilitator,
) -> Facilitators {
    Facilitators::new("primary", client(&serve_on(primary, "127.0.0.1:0").await)).then(
        "secondary",
        client(&serve_on(secondary, "127.0.0.1:0").await),
    )
}

/// A layer settling before the work, `/verify` first: these tests follow `/verify`'s failover
/// (`settle_first_without_failover_*` follows `/settle` alone).
fn layer(facilitators: Facilitators) -> X402Layer {
    let payments = Payments::with_facilitators(facilitators).verify_before_settling(true);
    X402Layer::with_payments(payments, offer(URL, SettlementMode::Before))
}

#[tokio::test]
async fn primary_refusing_connections_sends_sales_to_the_secondary_until_it_is_back() {
    let primary_addr = refused_addr().await;
    let secondary = accepting();
    let secondary_url = serve_on(&secondary, "127.0.0.1:0").await;
    let facilitators = Facilitators::new("primary", client(&format!("http://{primary_addr}")))
        .then("secondary", client(&secondary_url))
        .failures_to_open(2)
        .pause(Duration::from_millis(500));
    let layer = layer(facilitators.clone());

    for seed in 1..=4 {
        let (status, body) = buy(&layer, seed).await;
        assert_eq!(status, StatusCode::OK, "sale {seed}: {body}");
        assert_eq!(body["settled"], true, "sale {seed}");
    }
    assert_eq!(
        secondary.settlement_count(),
        4,
        "every sale through the secondary"
    );
    assert_eq!(
        facilitators.is_open("primary"),
        Some(true),
        "open after two refusals"
    );
    assert_eq!(facilitators.is_open("secondary"), Some(false));

    // The primary comes back on its address; after the pause a trial goes to it and closes it.
    let primary = accepting();
    serve_on(&primary, &primary_addr).await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    let (status, body) = buy(&layer, 5).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        primary.settlement_count(),
        1,
        "the trial sale settled at the primary"
    );
    assert_eq!(secondary.settlement_count(), 4);
    assert_eq!(
        facilitators.is_open("primary"),
        Some(false),
        "the trial closed it"
    );
}

/// A payment settled first is sent to `/verify` first when several facilitators are configured:
/// a primary that refuses connections is passed over before anything is sent to `/settle`, and
/// the sale settles at the secondary at once, where `/settle` alone would have held it in doubt
/// at the primary.
#[tokio::test]
async fn settle_first_with_several_facilitators_verifies_first_and_fails_over() {
    let primary_addr = refused_addr().await;
    let secondary = accepting();
    let secondary_url = serve_on(&secondary, "127.0.0.1:0").await;
    let facilitators = Facilitators::new("primary", client(&format!("http://{primary_addr}")))
        .then("secondary", client(&secondary_url))
        .failures_to_open(2)
        .pause(Duration::from_secs(30));
    let layer =
        X402Layer::with_facilitators(facilitators.clone(), offer(URL, SettlementMode::Before));

    for seed in 1..=3 {
        let (status, body) = buy(&layer, seed).await;
        assert_eq!(status, StatusCode::OK, "sale {seed}: {body}");
    }
    assert_eq!(
        secondary.settlement_count(),
        3,
        "every sale at the secondary"
    );
    assert_eq!(secondary.verify_calls(), 3, "each verified first");
}

#[tokio::test]
async fn an_open_breaker_keeps_verify_away_from_the_primary() {
    let primary = accepting();
    let secondary = accepting();
    for _ in 0..2 {
        primary.queue_verify(Step::Unreachable);
    }
    let facilitators = primary_then_secondary(&primary, &secondary)
        .await
        .failures_to_open(2)
        .pause(Duration::from_secs(60));
    let layer = layer(facilitators.clone());
    for seed in 1..=5 {
        let (status, body) = buy(&layer, seed).await;
        assert_eq!(status, StatusCode::OK, "sale {seed}: {body}");
    }
    assert_eq!(
        primary.verify_calls(),
        2,
        "not tried once its breaker opened"
    );
    assert_eq!(primary.settle_calls(), 0);
    assert_eq!(secondary.settlement_count(), 5);
    assert_eq!(facilitators.is_open("primary"), Some(true));
}

#[tokio::test]
async fn a_lost_settle_answer_is_retried_only_at_the_facilitator_that_received_it() {
    let primary = accepting();
    let secondary = accepting();
    // The primary receives `/settle` and drops the connection, then stays down for two retries.
    for _ in 0..3 {
        primary.queue_settle(Step::Unreachable);
    }
    let facilitators = primary_then_secondary(&primary, &secondary)
        .await
        .failures_to_open(2)
        .pause(Duration::from_secs(60));
    let layer = layer(facilitators.clone());

    for attempt in 1..=3 {
        let (status, body) = buy(&layer, 1).await;
        assert_eq!(
            status,
            StatusCode::SERVICE_UNAVAILABLE,
            "attempt {attempt}: {body}"
        );
        assert_eq!(body["retry_after"], true, "attempt {attempt}");
        assert_eq!(
            primary.settle_calls(),
            attempt,
            "attempt {attempt} at the primary"
        );
    }
    assert_eq!(
        facilitators.is_open("primary"),
        Some(true),
        "its breaker is open"
    );
    assert_eq!(
        secondary.settle_calls(),
        0,
        "never settled at the secondary"
    );

    // A new sale meanwhile goes to the secondary.
    let (status, body) = buy(&layer, 2).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(secondary.settlement_count(), 1);

    // The primary is back: the retry settles there, once, and is delivered.
    let (status, body) = buy(&layer, 1).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["payer"], PAYER);
    assert_eq!(primary.settlement_count(), 1, "settled once at the primary");
    assert_eq!(primary.settle_calls(), 4);
    assert_eq!(secondary.settle_calls(), 1, "only the other sale");
    assert_eq!(facilitators.is_open("primary"), Some(false));
}

/// A facilitator that verifies every payment but answers every `/settle` with `status`.
async fn settles_nothing(status: u16) {
    let primary = accepting().with_settle(Step::Status(status));
    let secondary = accepting();
    let facilitators = primary_then_secondary(&primary, &secondary)
        .await
        .failures_to_open(3)
        .pause(Duration::from_secs(60));
    let layer = layer(facilitators.clone());

    // Each of the first three sales is verified at the primary, whose `/settle` fails: in doubt.
    for seed in 1..=3 {
        let (status, body) = buy(&layer, seed).await;
        assert_eq!(
            status,
            StatusCode::SERVICE_UNAVAILABLE,
            "sale {seed}: {body}"
        );
        assert_eq!(body["retry_after"], true, "sale {seed}");
    }
    assert_eq!(
        facilitators.is_open("primary"),
        Some(true),
        "three failed settlements open the breaker, whatever /verify answered"
    );
    // New sales go to the secondary.
    for seed in 4..=6 {
        let (status, body) = buy(&layer, seed).await;
        assert_eq!(status, StatusCode::OK, "sale {seed}: {body}");
    }
    assert_eq!(
        primary.verify_calls(),
        3,
        "no new sale verified at the primary"
    );
    assert_eq!(secondary.settlement_count(), 3);
    // A payment in doubt stays with the facilitator that received its `/settle`.
    let (status, body) = buy(&layer, 1).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(primary.settle_calls(), 4, "the retry went to the primary");
    assert_eq!(secondary.settle_calls(), 3, "and never to the secondary");
}

#[tokio::test]
async fn a_facilitator_answering_every_settle_500_loses_new_sales_to_the_next() {
    settles_nothing(500).await;
}

#[tokio::test]
async fn a_facilitator_answering_every_settle_504_loses_new_sales_to_the_next() {
    settles_nothing(504).await;
}

#[tokio::test]
async fn a_negative_verify_answer_does_not_trip_the_breaker() {
    let primary = accepting();
    let secondary = accepting();
    for _ in 0..4 {
        primary.queue_verify(Step::Refuse("invalid_exact_evm_payload_signature".into()));
    }
    let facilitators = primary_then_secondary(&primary, &secondary)
        .await
        .failures_to_open(2);
    let layer = layer(facilitators.clone());
    for seed in 1..=4 {
        let (status, body) = buy(&layer, seed).await;
        assert_eq!(status, StatusCode::PAYMENT_REQUIRED, "sale {seed}: {body}");
    }
    assert_eq!(facilitators.is_open("primary"), Some(false));
    assert_eq!(
        secondary.verify_calls(),
        0,
        "a refusal is an answer, not a failover"
    );
    let (status, body) = buy(&layer, 9).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(primary.settlement_count(), 1);
}

#[tokio::test]
async fn the_memory_store_keeps_the_facilitator_label() {
    check_conformance(Arc::new(MemorySettlementStore::default())).await;
}
