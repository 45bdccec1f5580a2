//! The facilitator's script, seen by a client over HTTP on loopback and in process: each step's
//! answer or fault, whether the money moved, and the call counts.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tower_x402::facilitator::Endpoint;
use tower_x402::{Facilitator, FacilitatorError, Offer};
use tower_x402_sandbox::{SandboxFacilitator, SandboxWallet, Step};
use x402_wire::{FacilitatorRequest, ResourceInfo, UsdcDeployment};

const PAY_TO: &str = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";

/// A request for a fresh payment signed by a random wallet.
fn signed_request() -> FacilitatorRequest {
    let offer = Offer::builder(ResourceInfo::new("https://shop.example/report"))
        .usdc(
            &UsdcDeployment::BASE_SEPOLIA,
            "0.25".parse().unwrap(),
            PAY_TO,
        )
        .build()
        .unwrap();
    let payment = SandboxWallet::random()
        .pay(offer.payment_required())
        .unwrap();
    FacilitatorRequest::new(payment, offer.accepts()[0].clone())
}

/// `facilitator` served on loopback, and a client for it.
async fn served(facilitator: &SandboxFacilitator) -> (String, reqwest::Client) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(facilitator.clone().serve(listener));
    (url, reqwest::Client::new())
}

/// POSTs `request` to `url` + `path`: the status and body, or `None` when no answer came.
async fn post(
    http: &reqwest::Client,
    url: &str,
    path: &str,
    request: &FacilitatorRequest,
) -> Option<(u16, String)> {
    let response = http
        .post(format!("{url}{path}"))
        .json(request)
        .timeout(Duration::from_secs(2))
        .send()
        .await
        .ok()?;
    let status = response.status().as_u16();
    Some((status, response.text().await.ok()?))
}

fn json_of(body: &str) -> Value {
    serde_json::from_str(body).unwrap_or_else(|_| panic!("not JSON: {body}"))
}

#[tokio::test]
async fn without_a_script_the_sandbox_answers() {
    let facilitator = SandboxFacilitator::new();
    let (url, http) = served(&facilitator).await;
    let request = signed_request();
    let (status, body) = post(&http, &url, "/verify", &request).await.unwrap();
    assert_eq!(
        (status, json_of(&body)["isValid"].clone()),
        (200, json!(true))
    );
    let (status, body) = post(&http, &url, "/settle", &request).await.unwrap();
    assert_eq!(
        (status, json_of(&body)["success"].clone()),
        (200, json!(true))
    );
    assert_eq!(facilitator.settlement_count(), 1);
    assert_eq!(
        (facilitator.verify_calls(), facilitator.settle_calls()),
        (1, 1)
    );
}

#[tokio::test]
async fn queued_steps_answer_one_call_each_then_the_standing_step() {
    let facilitator = SandboxFacilitator::new();
    facilitator.queue_verify(Step::Status(503));
    facilitator.queue_verify(Step::Garbage);
    facilitator.queue_verify(Step::Refuse("insufficient_funds".into()));
    let (url, http) = served(&facilitator).await;
    let request = signed_request();

    let (status, body) = post(&http, &url, "/verify", &request).await.unwrap();
    assert_eq!(status, 503);
    assert_eq!(json_of(&body), json!({"error": "upstream says no"}));
    let (status, body) = post(&http, &url, "/verify", &request).await.unwrap();
    assert_eq!(status, 200);
    assert!(serde_json::from_str::<Value>(&body).is_err(), "{body}");
    let (_, body) = post(&http, &url, "/verify", &request).await.unwrap();
    let refused = json_of(&body);
    assert_eq!(refused["isValid"], false);
    assert_eq!(refused["invalidReason"], "insufficient_funds");
    let (_, body) = post(&http, &url, "/verify", &request).await.unwrap();
    assert_eq!(json_of(&body)["isValid"], true, "then the sandbox's answer");
    assert_eq!(facilitator.verify_calls(), 4);
}

#[tokio::test]
async fn a_lost_answer_moves_the_money_and_a_status_does_not() {
    let facilitator = SandboxFacilitator::new();
    facilitator.queue_settle(Step::Status(504));
    facilitator.queue_settle(Step::AnswerLost);
    let (url, http) = served(&facilitator).await;
    let request = signed_request();

    let (status, _) = post(&http, &url, "/settle", &request).await.unwrap();
    assert_eq!((status, facilitator.settlement_count()), (504, 0));
    let (status, _) = post(&http, &url, "/settle", &request).await.unwrap();
    assert_eq!((status, facilitator.settlement_count()), (504, 1));
    let (_, body) = post(&http, &url, "/settle", &request).await.unwrap();
    assert_eq!(
        json_of(&body)["errorReason"],
        "invalid_exact_evm_nonce_already_used"
    );
    assert_eq!(facilitator.settle_calls(), 3);
}

#[tokio::test]
async fn a_closed_connection_is_no_answer_and_a_reset_one_settled_first() {
    let facilitator = SandboxFacilitator::new();
    facilitator.queue_settle(Step::Unreachable);
    facilitator.queue_settle(Step::ConnectionReset);
    let (url, http) = served(&facilitator).await;
    let request = signed_request();

    assert_eq!(post(&http, &url, "/settle", &request).await, None);
    assert_eq!(facilitator.settlement_count(), 0);
    assert_eq!(post(&http, &url, "/settle", &request).await, None);
    assert_eq!(facilitator.settlement_count(), 1);
}

#[tokio::test]
async fn settlement_pending_then_the_settlement_on_the_identical_request() {
    let facilitator = SandboxFacilitator::new();
    facilitator.queue_settle(Step::PendingThenSettled);
    let (url, http) = served(&facilitator).await;
    let request = signed_request();

    let (_, body) = post(&http, &url, "/settle", &request).await.unwrap();
    let pending = json_of(&body);
    assert_eq!(
        (&pending["success"], &pending["errorReason"]),
        (&json!(false), &json!("settlement_pending"))
    );
    let (_, body) = post(&http, &url, "/settle", &request).await.unwrap();
    let settled = json_of(&body);
    assert_eq!(settled["success"], true);
    assert_eq!(settled["transaction"], pending["transaction"]);
    assert_eq!(facilitator.settlement_count(), 1);
}

#[tokio::test]
async fn trust_accepts_a_made_up_signature_once_per_nonce() {
    let facilitator = SandboxFacilitator::new()
        .with_verify(Step::Trust)
        .with_settle(Step::Trust.after(Duration::from_millis(100)));
    let (url, http) = served(&facilitator).await;
    let signed = signed_request();
    let mut proof: serde_json::Value =
        serde_json::from_str(signed.payment_payload().payload.get()).unwrap();
    proof["signature"] = json!(format!("0x{}", "ab".repeat(65)));
    let mut payload = signed.payment_payload().as_ref().clone();
    payload.payload = serde_json::value::to_raw_value(&proof).unwrap();
    let request = FacilitatorRequest::new(payload, signed.payment_requirements().clone());
    assert!(!SandboxFacilitator::new().verify_payment(&request).is_valid);

    let (_, body) = post(&http, &url, "/verify", &request).await.unwrap();
    assert_eq!(json_of(&body)["isValid"], true);
    let started = Instant::now();
    let (_, body) = post(&http, &url, "/settle", &request).await.unwrap();
    assert!(started.elapsed() >= Duration::from_millis(100));
    assert_eq!(json_of(&body)["success"], true);
    let (_, body) = post(&http, &url, "/settle", &request).await.unwrap();
    assert_eq!(
        json_of(&body)["errorReason"],
        "invalid_exact_evm_nonce_already_used"
    );
}

#[tokio::test]
async fn in_process_faults_are_the_errors_an_http_client_reports() {
    let facilitator = SandboxFacilitator::new();
    facilitator.queue_settle(Step::Status(503));
    facilitator.queue_settle(Step::Garbage);
    facilitator.queue_settle(Step::NoAnswer);
    facilitator.queue_settle(Step::Unreachable);
    let request = signed_request();

    let error = facilitator.settle(&request).await.unwrap_err();
    assert!(
        matches!(&error, FacilitatorError::Status { status, .. } if status.as_u16() == 503),
        "{error:?}"
    );
    let error = facilitator.settle(&request).await.unwrap_err();
    assert!(
        matches!(error, FacilitatorError::Malformed { .. }),
        "{error:?}"
    );
    let error = facilitator.settle(&request).await.unwrap_err();
    assert!(
        matches!(error, FacilitatorError::TimedOut { .. }),
        "{error:?}"
    );
    assert_eq!(facilitator.settlement_count(), 1, "no answer, but settled");
    let error = facilitator.settle(&request).await.unwrap_err();
    assert!(
        matches!(error, FacilitatorError::Unreachable { .. }),
        "{error:?}"
    );
    assert_eq!(error.endpoint(), Endpoint::Settle);
    let settled = facilitator.settle(&request).await.unwrap();
    assert_eq!(
        settled.error_reason.as_deref(),
        Some("invalid_exact_evm_nonce_already_used")
    );
    assert_eq!(facilitator.settle_calls(), 5);
}
