//! The layer's request flow, one named test per outcome, each run against an in-process
//! facilitator and against a facilitator served over HTTP on loopback.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use common::*;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use serde_json::json;
use tower::{ServiceBuilder, ServiceExt};
use tower_x402::payment::Payments;
use tower_x402::{HttpFacilitator, Offer, Pricing, SettlementMode, X402Layer};
use x402_wire::{PaymentPayload, header};

const URL: &str = "https://shop.example/report";

#[derive(Clone, Copy, Debug)]
enum Via {
    InProcess,
    Http,
}

/// Runs a case against both kinds of facilitator.
macro_rules! both {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[tokio::test]
            async fn in_process() {
                super::$name(super::Via::InProcess).await
            }
            #[tokio::test]
            async fn over_http() {
                super::$name(super::Via::Http).await
            }
        }
    )*};
}

fn http_client(url: &str) -> HttpFacilitator {
    HttpFacilitator::builder(url)
        .connect_timeout(Duration::from_millis(500))
        .verify_timeout(Duration::from_millis(500))
        .settle_timeout(Duration::from_millis(500))
        .build()
        .unwrap()
}

async fn layer(via: Via, script: &SandboxFacilitator, pricing: impl Pricing) -> X402Layer {
    match via {
        Via::InProcess => X402Layer::new(script.clone(), pricing),
        Via::Http => X402Layer::new(http_client(&serve(script).await), pricing),
    }
}

/// Sends `request` through the layer in front of a counting echo service.
async fn send_with(
    layer: X402Layer,
    inner_status: StatusCode,
    request: Request<Full<Bytes>>,
) -> (
    Response<tower_x402::layer::ResponseBody<Full<Bytes>>>,
    usize,
) {
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = calls.clone();
    let service = ServiceBuilder::new()
        .layer(layer)
        .service_fn(move |request| {
            counter.fetch_add(1, Ordering::SeqCst);
            async move {
                let mut response = echo_payment(request).await?;
                *response.status_mut() = inner_status;
                Ok::<_, std::convert::Infallible>(response)
            }
        });
    let response = service.oneshot(request).await.unwrap();
    (response, calls.load(Ordering::SeqCst))
}

async fn send(
    via: Via,
    script: &SandboxFacilitator,
    offer: Arc<Offer>,
    request: Request<Full<Bytes>>,
) -> (
    Response<tower_x402::layer::ResponseBody<Full<Bytes>>>,
    usize,
) {
    let layer = layer(via, script, offer).await;
    send_with(layer, StatusCode::OK, request).await
}

/// Asserts how often the handler, `/verify` and `/settle` ran, in that order.
fn assert_calls(inner_calls: usize, script: &SandboxFacilitator, expected: (usize, usize, usize)) {
    assert_eq!(
        (inner_calls, script.verify_calls(), script.settle_calls()),
        expected,
        "(handler, /verify, /settle) calls"
    );
}

/// Sends a paid `GET /report` (the payment of seed 1 for `offer`) through a layer over `script`.
async fn send_paid(
    via: Via,
    script: &SandboxFacilitator,
    offer: &Arc<Offer>,
) -> (
    Response<tower_x402::layer::ResponseBody<Full<Bytes>>>,
    usize,
) {
    send(
        via,
        script,
        offer.clone(),
        paid_get("/report", &payment(offer, 1)),
    )
    .await
}

fn assert_challenge_headers<B>(response: &Response<B>) {
    let headers = response.headers();
    assert_eq!(headers["content-type"], "application/json");
    assert_eq!(headers["cache-control"], "no-store");
    assert_eq!(
        headers["access-control-expose-headers"],
        "PAYMENT-REQUIRED, PAYMENT-RESPONSE"
    );
    assert!(headers.contains_key("payment-required"));
}

both!(
    unpaid_request_gets_402_challenge,
    undecodable_payment_header_gets_400,
    undecodable_payment_header_gets_402_when_configured,
    accepted_matching_no_offer_gets_402,
    invalid_payment_gets_402_with_reason,
    facilitator_unreachable_on_verify_gets_503,
    facilitator_timeout_on_verify_gets_503,
    malformed_verify_reply_gets_502,
    facilitator_error_status_on_verify_gets_502,
    settle_after_success_serves_with_payment_response,
    settle_after_skips_settlement_when_handler_fails,
    settle_after_refused_drops_inner_response,
    settle_before_hands_settlement_to_handler,
    settle_before_refused_never_reaches_handler,
    settle_timeout_gets_503_never_402,
    settle_unreachable_gets_503_never_402,
    malformed_settle_reply_is_in_doubt,
    settle_nonce_already_used_is_in_doubt,
    repeated_payment_is_answered_from_record,
    settled_payment_cannot_buy_another_resource,
    payment_identifier_reused_for_another_payment_gets_409,
    fifty_concurrent_requests_with_one_payment_settle_once,
);

async fn unpaid_request_gets_402_challenge(via: Via) {
    let script = accepting();
    let offer = offer(URL, SettlementMode::After);
    let (response, inner_calls) = send(via, &script, offer.clone(), get("/report")).await;
    assert_eq!(response.status(), StatusCode::PAYMENT_REQUIRED);
    assert_challenge_headers(&response);
    let challenge = decode_required(&response);
    assert_eq!(&challenge, offer.payment_required());
    assert_eq!(
        challenge.error.as_deref(),
        Some("PAYMENT-SIGNATURE header is required")
    );
    assert_eq!(
        body_json(response).await,
        serde_json::to_value(offer.payment_required()).unwrap()
    );
    assert_calls(inner_calls, &script, (0, 0, 0));
}

async fn undecodable_payment_header_gets_400(via: Via) {
    let script = accepting();
    let offer = offer(URL, SettlementMode::After);
    let mut wrong_version = serde_json::to_value(payment(&offer, 1)).unwrap();
    wrong_version["x402Version"] = json!(1);
    let b64 = |json: &str| base64_std(json.as_bytes());
    let cases = [
        (
            "not base64",
            "%%%not base64%%%".to_owned(),
            "not standard base64",
        ),
        ("not JSON", b64("hello"), "not JSON"),
        (
            "wrong shape",
            b64(r#"{"x402Version":2,"accepted":{}}"#),
            "not a valid PaymentPayload",
        ),
        (
            "wrong version",
            b64(&wrong_version.to_string()),
            "x402Version 1",
        ),
        ("too large", "A".repeat(20 * 1024), "over the"),
    ];
    for (case, value, expected) in cases {
        let request = Request::get("/report")
            .header("payment-signature", value)
            .body(Full::default())
            .unwrap();
        let (response, inner_calls) = send(via, &script, offer.clone(), request).await;
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{case}");
        assert!(
            response.headers().contains_key("payment-required"),
            "{case}"
        );
        let body = body_json(response).await;
        let error = body["error"].as_str().unwrap();
        assert!(error.contains(expected), "{case}: {error}");
        assert_eq!(inner_calls, 0, "{case}");
    }
    assert_eq!(script.verify_calls(), 0);
}

async fn undecodable_payment_header_gets_402_when_configured(via: Via) {
    let script = accepting();
    let offer = offer(URL, SettlementMode::After);
    let cases = [
        (
            "not base64",
            "%%%not base64%%%".to_owned(),
            "not standard base64",
        ),
        ("not JSON", base64_std(b"hello"), "not JSON"),
        ("too large", "A".repeat(20 * 1024), "over the"),
    ];
    for (case, value, expected) in cases {
        let layer = layer(via, &script, offer.clone())
            .await
            .invalid_header_payment_required();
        let request = Request::get("/report")
            .header("payment-signature", value)
            .body(Full::default())
            .unwrap();
        let (response, inner_calls) = send_with(layer, StatusCode::OK, request).await;
        assert_eq!(response.status(), StatusCode::PAYMENT_REQUIRED, "{case}");
        assert_challenge_headers(&response);
        let challenge = decode_required(&response);
        assert_eq!(
            challenge.accepts,
            offer.payment_required().accepts,
            "{case}"
        );
        let error = challenge.error.unwrap();
        assert!(
            error.contains("invalid PAYMENT-SIGNATURE header"),
            "{case}: {error}"
        );
        assert!(error.contains(expected), "{case}: {error}");
        assert_eq!(body_json(response).await["error"], json!(error), "{case}");
        assert_eq!(inner_calls, 0, "{case}");
    }
    assert_eq!((script.verify_calls(), script.settle_calls()), (0, 0));
}

fn base64_std(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

async fn accepted_matching_no_offer_gets_402(via: Via) {
    let script = accepting();
    let offer = offer(URL, SettlementMode::After);
    let tamper: [(&str, fn(&mut PaymentPayload)); 4] = [
        ("amount", |p| p.accepted.amount = 1u128.into()),
        ("payTo", |p| p.accepted.pay_to = PAYER.into()),
        ("asset", |p| {
            p.accepted.asset = "0x036CbD53842c5426634e7929541eC2318f3dCF7e".into()
        }),
        ("scheme", |p| p.accepted.scheme = "upto".into()),
    ];
    for (field, change) in tamper {
        let mut payload = payment(&offer, 1);
        change(&mut payload);
        let (response, inner_calls) =
            send(via, &script, offer.clone(), paid_get("/report", &payload)).await;
        assert_eq!(response.status(), StatusCode::PAYMENT_REQUIRED, "{field}");
        assert_challenge_headers(&response);
        let error = decode_required(&response).error.unwrap();
        assert!(
            error.contains("no matching payment requirements") && error.contains(field),
            "{field}: {error}"
        );
        assert_eq!(body_json(response).await["error"], json!(error));
        assert_eq!(inner_calls, 0);
    }
    assert_eq!(
        script.verify_calls(),
        0,
        "a mismatch never reaches the facilitator"
    );
}

async fn invalid_payment_gets_402_with_reason(via: Via) {
    let script = scripted(
        Step::Refuse("invalid_exact_evm_signature".into()),
        Step::Trust,
    );
    let offer = offer(URL, SettlementMode::After);
    let (response, inner_calls) = send_paid(via, &script, &offer).await;
    assert_eq!(response.status(), StatusCode::PAYMENT_REQUIRED);
    assert_challenge_headers(&response);
    assert_eq!(
        decode_required(&response).error.as_deref(),
        Some("invalid_exact_evm_signature")
    );
    assert_calls(inner_calls, &script, (0, 1, 0));
}

async fn assert_unavailable(via: Via, script: SandboxFacilitator, mode: SettlementMode) {
    let offer = offer(URL, mode);
    let (response, inner_calls) = send_paid(via, &script, &offer).await;
    assert_eq!(
        response.status(),
        StatusCode::SERVICE_UNAVAILABLE,
        "{mode:?}"
    );
    assert!(response.headers().contains_key("retry-after"));
    assert!(!response.headers().contains_key("payment-response"));
    let body = body_json(response).await;
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("retry the same payment"),
        "{body}"
    );
    if mode == SettlementMode::Before || script.settle_calls() == 0 {
        assert_eq!(inner_calls, 0, "the inner service never runs unpaid");
    }
}

async fn facilitator_unreachable_on_verify_gets_503(via: Via) {
    let script = scripted(Step::Unreachable, Step::Trust);
    assert_unavailable(via, script.clone(), SettlementMode::After).await;
    assert_eq!(script.settle_calls(), 0);
}

async fn facilitator_timeout_on_verify_gets_503(via: Via) {
    let script = scripted(Step::Hang, Step::Trust);
    assert_unavailable(via, script.clone(), SettlementMode::After).await;
    assert_eq!(script.settle_calls(), 0);
}

async fn assert_bad_gateway(via: Via, script: &SandboxFacilitator, mode: SettlementMode) -> usize {
    let offer = offer(URL, mode);
    let (response, inner_calls) = send(
        via,
        script,
        offer.clone(),
        paid_get("/report", &payment(&offer, 1)),
    )
    .await;
    assert_eq!(response.status(), StatusCode::BAD_GATEWAY);
    assert!(!response.headers().contains_key("payment-response"));
    let body = body_json(response).await;
    let error = body["error"].as_str().unwrap();
    assert!(error.contains("facilitator"), "{error}");
    assert!(
        !error.contains("upstream says no"),
        "the facilitator's own words stay in the logs: {error}"
    );
    inner_calls
}

async fn malformed_verify_reply_gets_502(via: Via) {
    let script = scripted(Step::Garbage, Step::Trust);
    assert_eq!(
        assert_bad_gateway(via, &script, SettlementMode::After).await,
        0
    );
    assert_eq!(script.settle_calls(), 0);
}

async fn facilitator_error_status_on_verify_gets_502(via: Via) {
    let script = scripted(Step::Status(500), Step::Trust);
    assert_eq!(
        assert_bad_gateway(via, &script, SettlementMode::After).await,
        0
    );
    assert_eq!(script.settle_calls(), 0);
}

async fn settle_after_success_serves_with_payment_response(via: Via) {
    let script = accepting();
    let offer = offer(URL, SettlementMode::After);
    let (response, inner_calls) = send_paid(via, &script, &offer).await;
    assert_eq!(response.status(), StatusCode::OK);
    let settlement = decode_settlement(&response);
    assert!(settlement.success);
    assert_eq!(settlement.transaction, script.settlements()[0].transaction);
    assert_eq!(response.headers()["cache-control"], "private");
    assert_eq!(
        response.headers()["access-control-expose-headers"],
        "PAYMENT-REQUIRED, PAYMENT-RESPONSE"
    );
    let body = body_json(response).await;
    assert_eq!(
        body,
        json!({"paid": true, "settled": false, "replayed": false, "payer": PAYER})
    );
    assert_calls(inner_calls, &script, (1, 1, 1));
}

async fn settle_after_skips_settlement_when_handler_fails(via: Via) {
    let script = accepting();
    let offer = offer(URL, SettlementMode::After);
    let layer = layer(via, &script, offer.clone()).await;
    for status in [StatusCode::NOT_FOUND, StatusCode::INTERNAL_SERVER_ERROR] {
        let (response, inner_calls) = send_with(
            layer.clone(),
            status,
            paid_get("/report", &payment(&offer, 1)),
        )
        .await;
        assert_eq!(response.status(), status);
        assert!(!response.headers().contains_key("payment-response"));
        assert_eq!(inner_calls, 1);
    }
    assert_eq!(
        script.settle_calls(),
        0,
        "a failing handler is never charged"
    );
}

async fn settle_after_refused_drops_inner_response(via: Via) {
    let script = scripted(Step::Trust, Step::Refuse("insufficient_funds".into()));
    let offer = offer(URL, SettlementMode::After);
    let (response, inner_calls) = send_paid(via, &script, &offer).await;
    assert_eq!(response.status(), StatusCode::PAYMENT_REQUIRED);
    assert_challenge_headers(&response);
    let settlement = decode_settlement(&response);
    assert!(!settlement.success);
    assert_eq!(
        settlement.error_reason.as_deref(),
        Some("insufficient_funds")
    );
    let body = body_json(response).await;
    assert_eq!(
        body["error"], "insufficient_funds",
        "the handler's body is not sent: {body}"
    );
    assert_eq!(inner_calls, 1);
}

async fn settle_before_hands_settlement_to_handler(via: Via) {
    let script = accepting();
    let offer = offer(URL, SettlementMode::Before);
    let (response, inner_calls) = send_paid(via, &script, &offer).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert!(decode_settlement(&response).success);
    let body = body_json(response).await;
    assert_eq!(
        body,
        json!({"paid": true, "settled": true, "replayed": false, "payer": PAYER})
    );
    // One round trip: `/settle` verifies the payment as it settles it.
    assert_calls(inner_calls, &script, (1, 0, 1));
}

async fn settle_before_refused_never_reaches_handler(via: Via) {
    let script = scripted(Step::Trust, Step::Refuse("insufficient_funds".into()));
    let offer = offer(URL, SettlementMode::Before);
    let (response, inner_calls) = send_paid(via, &script, &offer).await;
    assert_eq!(response.status(), StatusCode::PAYMENT_REQUIRED);
    assert!(!decode_settlement(&response).success);
    assert_eq!(inner_calls, 0);
}

async fn settle_timeout_gets_503_never_402(via: Via) {
    for mode in [SettlementMode::After, SettlementMode::Before] {
        let script = scripted(Step::Trust, Step::Hang);
        assert_unavailable(via, script.clone(), mode).await;
        assert_eq!(script.settle_calls(), 1, "settle is never retried");
    }
}

async fn settle_unreachable_gets_503_never_402(via: Via) {
    // The connection closes after `/verify` passed: the payment may have settled.
    let script = scripted(Step::Trust, Step::Unreachable);
    assert_unavailable(via, script, SettlementMode::Before).await;
}

/// A settle answer that cannot be read may hide a transfer: the payment is in doubt, never 402.
async fn malformed_settle_reply_is_in_doubt(via: Via) {
    for mode in [SettlementMode::After, SettlementMode::Before] {
        let script = scripted(Step::Trust, Step::Garbage);
        assert_unavailable(via, script.clone(), mode).await;
        assert_eq!(script.settle_calls(), 1);
    }
}

/// `nonce already used` after this server's own verify passed may be this very payment: the
/// payment is in doubt (503), never 402.
async fn settle_nonce_already_used_is_in_doubt(via: Via) {
    for mode in [SettlementMode::After, SettlementMode::Before] {
        let script = scripted(
            Step::Trust,
            Step::Refuse("invalid_exact_evm_nonce_already_used".into()),
        );
        assert_unavailable(via, script.clone(), mode).await;
        assert_eq!(script.settle_calls(), 1);
    }
}

async fn repeated_payment_is_answered_from_record(via: Via) {
    for mode in [SettlementMode::After, SettlementMode::Before] {
        let script = accepting();
        let offer = offer(URL, mode);
        let layer = layer(via, &script, offer.clone()).await;
        let payload = payment(&offer, 7);
        let (first, _) =
            send_with(layer.clone(), StatusCode::OK, paid_get("/report", &payload)).await;
        let (again, inner_calls) =
            send_with(layer.clone(), StatusCode::OK, paid_get("/report", &payload)).await;
        assert_eq!(again.status(), StatusCode::OK);
        assert_eq!(decode_settlement(&again), decode_settlement(&first));
        assert_eq!(inner_calls, 1, "the handler runs again for the repeat");
        assert_eq!(body_json(again).await["replayed"], true);
        // Settled before the work: `/settle` alone.
        let verified = usize::from(mode == SettlementMode::After);
        assert_eq!(
            (script.verify_calls(), script.settle_calls()),
            (verified, 1),
            "{mode:?}: no second facilitator call"
        );
    }
}

async fn settled_payment_cannot_buy_another_resource(via: Via) {
    let script = accepting();
    let report = offer(URL, SettlementMode::Before);
    let other = offer("https://shop.example/other", SettlementMode::Before);
    let (report_for_closure, other_for_closure) = (report.clone(), other.clone());
    let pricing = move |parts: &http::request::Parts| {
        Some(if parts.uri.path() == "/report" {
            report_for_closure.clone()
        } else {
            other_for_closure.clone()
        })
    };
    let layer = layer(via, &script, pricing).await;
    let payload = payment(&report, 9);
    let (first, _) = send_with(layer.clone(), StatusCode::OK, paid_get("/report", &payload)).await;
    assert_eq!(first.status(), StatusCode::OK);
    let (replayed, inner_calls) =
        send_with(layer, StatusCode::OK, paid_get("/other", &payload)).await;
    assert_eq!(replayed.status(), StatusCode::PAYMENT_REQUIRED);
    assert!(
        decode_required(&replayed)
            .error
            .unwrap()
            .contains("different resource")
    );
    assert_eq!(inner_calls, 0);
    assert_eq!(script.settle_calls(), 1);
}

async fn payment_identifier_reused_for_another_payment_gets_409(via: Via) {
    let script = accepting();
    let offer = offer(URL, SettlementMode::After);
    let layer = layer(via, &script, offer.clone()).await;
    let with_id = |seed| {
        let mut payload = payment(&offer, seed);
        payload.extensions = Some(
            json!({"payment-identifier": {"info": {"required": false, "id": "pay_7d5d747be160e280504c099d984bcfe0"}, "schema": {}}})
                .as_object()
                .unwrap()
                .clone(),
        );
        payload
    };
    let (first, _) = send_with(
        layer.clone(),
        StatusCode::OK,
        paid_get("/report", &with_id(1)),
    )
    .await;
    assert_eq!(first.status(), StatusCode::OK);
    let (same, _) = send_with(
        layer.clone(),
        StatusCode::OK,
        paid_get("/report", &with_id(1)),
    )
    .await;
    assert_eq!(same.status(), StatusCode::OK);
    let (conflict, inner_calls) =
        send_with(layer, StatusCode::OK, paid_get("/report", &with_id(2))).await;
    assert_eq!(conflict.status(), StatusCode::CONFLICT);
    assert!(
        body_json(conflict).await["error"]
            .as_str()
            .unwrap()
            .contains("different payment")
    );
    assert_eq!(inner_calls, 0);
    assert_eq!(script.settle_calls(), 1);
}

async fn fifty_concurrent_requests_with_one_payment_settle_once(via: Via) {
    for mode in [SettlementMode::After, SettlementMode::Before] {
        let script = scripted(Step::Trust, Step::Trust.after(Duration::from_millis(50)));
        let offer = offer(URL, mode);
        let layer = layer(via, &script, offer.clone()).await;
        let service = ServiceBuilder::new().layer(layer).service_fn(echo_payment);
        let payload = payment(&offer, 3);
        let requests = (0..50).map(|_| service.clone().oneshot(paid_get("/report", &payload)));
        let responses = futures_join_all(requests).await;
        let mut settlements = Vec::new();
        let mut replays = 0;
        for response in responses {
            let response = response.unwrap();
            assert_eq!(response.status(), StatusCode::OK, "{mode:?}");
            settlements.push(decode_settlement(&response));
            replays += usize::from(body_json(response).await["replayed"] == true);
        }
        assert!(
            settlements.windows(2).all(|pair| pair[0] == pair[1]),
            "every response carries the one settlement"
        );
        assert_eq!(script.settle_calls(), 1, "{mode:?}: exactly one /settle");
        assert_eq!(
            script.verify_calls(),
            usize::from(mode == SettlementMode::After),
            "{mode:?}: duplicates wait instead of verifying (settled first: `/settle` alone)"
        );
        assert_eq!(replays, 49);
    }
}

/// Polls all futures concurrently on this task.
async fn futures_join_all<F: std::future::Future>(
    futures: impl IntoIterator<Item = F>,
) -> Vec<F::Output> {
    let handles: Vec<_> = futures.into_iter().map(Box::pin).collect();
    let mut outputs: Vec<Option<F::Output>> = handles.iter().map(|_| None).collect();
    let mut pending: Vec<_> = handles.into_iter().map(Some).collect();
    std::future::poll_fn(|cx| {
        let mut done = true;
        for (slot, output) in pending.iter_mut().zip(outputs.iter_mut()) {
            if let Some(future) = slot {
                match future.as_mut().poll(cx) {
                    std::task::Poll::Ready(value) => {
                        *output = Some(value);
                        *slot = None;
                    }
                    std::task::Poll::Pending => done = false,
                }
            }
        }
        if done {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    })
    .await;
    outputs.into_iter().map(|output| output.unwrap()).collect()
}

#[tokio::test]
async fn free_requests_pass_through_untouched() {
    let script = accepting();
    let offer = offer(URL, SettlementMode::After);
    let pricing =
        move |parts: &http::request::Parts| (parts.uri.path() == "/report").then(|| offer.clone());
    let (response, inner_calls) = send_with(
        X402Layer::new(script.clone(), pricing),
        StatusCode::OK,
        get("/free"),
    )
    .await;
    assert_eq!(response.status(), StatusCode::OK);
    for name in [
        "payment-required",
        "payment-response",
        "cache-control",
        "access-control-expose-headers",
    ] {
        assert!(!response.headers().contains_key(name), "{name}");
    }
    assert_eq!(body_json(response).await["paid"], false);
    assert_eq!((inner_calls, script.verify_calls()), (1, 0));
}

#[tokio::test]
async fn expose_headers_can_be_turned_off() {
    let layer = X402Layer::new(accepting(), offer(URL, SettlementMode::After)).expose_headers(None);
    let (response, _) = send_with(layer, StatusCode::OK, get("/report")).await;
    assert!(
        !response
            .headers()
            .contains_key("access-control-expose-headers")
    );
}

#[tokio::test]
async fn handler_cache_control_gains_private() {
    let script = accepting();
    let offer = offer(URL, SettlementMode::After);
    let service = ServiceBuilder::new()
        .layer(X402Layer::new(script, offer.clone()))
        .service_fn(|_request: Request<Full<Bytes>>| async {
            Ok::<_, std::convert::Infallible>(
                Response::builder()
                    .header("cache-control", "max-age=60")
                    .body(Full::new(Bytes::from("ok")))
                    .unwrap(),
            )
        });
    let response = service
        .oneshot(paid_get("/report", &payment(&offer, 1)))
        .await
        .unwrap();
    assert_eq!(response.headers()["cache-control"], "private, max-age=60");
}

#[tokio::test]
async fn hooks_hear_each_stage() {
    use tower_x402::payment::{HookStages, PaymentContext, PaymentEvent, PaymentHooks};
    use tower_x402::{BoxFuture, Refusal, VerifiedPayment};
    use x402_wire::SettleResponse;

    /// Names each stage it hears of.
    struct Stages(Arc<std::sync::Mutex<Vec<&'static str>>>);
    impl PaymentHooks for Stages {
        fn stages(&self) -> HookStages {
            HookStages::AFTER_VERIFY | HookStages::AFTER_SETTLE
        }
        fn observe(&self, event: &PaymentEvent<'_>) {
            let name = match event {
                PaymentEvent::Refused {
                    refusal: Refusal::PaymentMissing,
                    ..
                } => "challenge",
                PaymentEvent::Refused { .. } => "failed",
                PaymentEvent::Received { .. } => "received",
                PaymentEvent::Replayed { .. } => "replayed",
                _ => return,
            };
            self.0.lock().unwrap().push(name);
        }
        fn after_verify<'a>(
            &'a self,
            _: &'a VerifiedPayment,
        ) -> BoxFuture<'a, Result<(), Refusal>> {
            self.0.lock().unwrap().push("verified");
            Box::pin(async { Ok(()) })
        }
        fn after_settle<'a>(
            &'a self,
            _: &'a PaymentContext<'a>,
            _: &'a SettleResponse,
        ) -> BoxFuture<'a, ()> {
            self.0.lock().unwrap().push("settled");
            Box::pin(async {})
        }
    }

    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let offer = offer(URL, SettlementMode::After);
    let layer = X402Layer::with_payments(
        Payments::new(accepting()).hook(Stages(seen.clone())),
        offer.clone(),
    );
    let payload = payment(&offer, 1);
    send_with(layer.clone(), StatusCode::OK, get("/report")).await;
    send_with(layer.clone(), StatusCode::OK, paid_get("/report", &payload)).await;
    send_with(layer.clone(), StatusCode::OK, paid_get("/report", &payload)).await;
    let mut bad = payload.clone();
    bad.accepted.amount = 5u128.into();
    send_with(layer, StatusCode::OK, paid_get("/report", &bad)).await;
    assert_eq!(
        *seen.lock().unwrap(),
        [
            "challenge",
            "received",
            "verified",
            "settled",
            "received",
            "replayed",
            "received",
            "failed"
        ]
    );
}

#[tokio::test]
async fn payment_response_decodes_with_the_header_codec() {
    let offer = offer(URL, SettlementMode::Before);
    let (response, _) = send_with(
        X402Layer::new(accepting(), offer.clone()),
        StatusCode::OK,
        paid_get("/report", &payment(&offer, 2)),
    )
    .await;
    let value = response.headers()["payment-response"]
        .to_str()
        .unwrap()
        .to_owned();
    let settlement: x402_wire::SettleResponse = header::decode(value.as_bytes()).unwrap();
    assert_eq!(settlement.amount.unwrap().to_string(), "1000000");
}

/// An application database that is having a bad day: reads fail, or recording a settlement
/// fails (the steps before it work).
#[derive(Debug)]
struct BrokenStore {
    readable: bool,
    inner: tower_x402::settlement::MemorySettlementStore,
}

impl BrokenStore {
    fn new(readable: bool) -> Self {
        Self {
            readable,
            inner: Default::default(),
        }
    }
}

type StoreResult<'a, T> = tower_x402::BoxFuture<'a, Result<T, tower_x402::settlement::StoreError>>;

impl tower_x402::settlement::SettlementStore for BrokenStore {
    fn load<'a>(
        &'a self,
        key: &'a tower_x402::settlement::PaymentKey,
    ) -> StoreResult<'a, Option<tower_x402::settlement::LedgerEntry>> {
        if self.readable {
            return self.inner.load(key);
        }
        Box::pin(async {
            Err(tower_x402::settlement::StoreError(
                "connection refused".into(),
            ))
        })
    }

    fn insert<'a>(
        &'a self,
        key: &'a tower_x402::settlement::PaymentKey,
        state: &'a tower_x402::settlement::PaymentState,
    ) -> StoreResult<'a, bool> {
        self.inner.insert(key, state)
    }

    fn replace<'a>(
        &'a self,
        key: &'a tower_x402::settlement::PaymentKey,
        version: u64,
        state: &'a tower_x402::settlement::PaymentState,
    ) -> StoreResult<'a, bool> {
        if let tower_x402::settlement::PaymentState::Settled { .. } = state {
            return Box::pin(async { Err(tower_x402::settlement::StoreError("disk full".into())) });
        }
        self.inner.replace(key, version, state)
    }

    fn remove<'a>(
        &'a self,
        key: &'a tower_x402::settlement::PaymentKey,
        version: u64,
    ) -> StoreResult<'a, bool> {
        self.inner.remove(key, version)
    }
}

#[tokio::test]
async fn settled_payment_is_recognised_when_the_store_cannot_save_it() {
    let script = accepting();
    let offer = offer(URL, SettlementMode::Before);
    let layer = X402Layer::with_payments(
        Payments::new(script.clone()).settlement_store(BrokenStore::new(true)),
        offer.clone(),
    );
    let payload = payment(&offer, 4);
    let (first, _) = send_with(layer.clone(), StatusCode::OK, paid_get("/report", &payload)).await;
    assert_eq!(first.status(), StatusCode::OK);
    let (again, _) = send_with(layer, StatusCode::OK, paid_get("/report", &payload)).await;
    assert_eq!(again.status(), StatusCode::OK);
    assert_eq!(body_json(again).await["replayed"], true);
    assert_eq!(script.settle_calls(), 1, "never a second charge");
}

#[tokio::test]
async fn unreadable_store_refuses_payment_with_503() {
    let script = accepting();
    let offer = offer(URL, SettlementMode::Before);
    let layer = X402Layer::with_payments(
        Payments::new(script.clone()).settlement_store(BrokenStore::new(false)),
        offer.clone(),
    );
    let (response, inner_calls) = send_with(
        layer,
        StatusCode::OK,
        paid_get("/report", &payment(&offer, 5)),
    )
    .await;
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_calls(inner_calls, &script, (0, 0, 0));
}

#[tokio::test]
async fn refusal_hooks_carry_the_typed_refusal() {
    use tower_x402::Refusal;
    use tower_x402::payment::{PaymentEvent, PaymentHooks};

    /// Names each refusal but the challenge, with its HTTP status.
    #[derive(Clone)]
    struct Refusals(Arc<std::sync::Mutex<Vec<(&'static str, u16)>>>);
    impl PaymentHooks for Refusals {
        fn observe(&self, event: &PaymentEvent<'_>) {
            let PaymentEvent::Refused { refusal, .. } = *event else {
                return;
            };
            let kind = match refusal {
                Refusal::PaymentMissing => return,
                Refusal::InvalidHeader(_) => "header",
                Refusal::NoMatchingRequirement { field } => field.unwrap_or("none"),
                Refusal::InvalidPayment { .. } => "invalid",
                Refusal::SettledForAnotherResource => "other resource",
                _ => "other",
            };
            self.0
                .lock()
                .unwrap()
                .push((kind, tower_x402::layer::status_of(refusal).as_u16()));
        }
    }
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let hook = Refusals(seen.clone());
    let offer = offer(URL, SettlementMode::Before);
    let elsewhere = common::offer("https://shop.example/other", SettlementMode::Before);
    let layer =
        X402Layer::with_payments(Payments::new(accepting()).hook(hook.clone()), offer.clone());
    let mut garbled = get("/report");
    garbled
        .headers_mut()
        .insert("payment-signature", "%%%".parse().unwrap());
    send_with(layer.clone(), StatusCode::OK, garbled).await;
    let mut cheap = payment(&offer, 1);
    cheap.accepted.amount = 5u128.into();
    send_with(layer.clone(), StatusCode::OK, paid_get("/report", &cheap)).await;
    let mut paid = payment(&offer, 2);
    // Without `resource`, only the settlement record tells the two resources apart.
    paid.resource = None;
    send_with(layer.clone(), StatusCode::OK, paid_get("/report", &paid)).await;
    // The same payment at another resource behind the same layer's records.
    let pricing = {
        let (offer, elsewhere) = (offer.clone(), elsewhere.clone());
        move |parts: &http::request::Parts| match parts.uri.path() {
            "/report" => Some(offer.clone()),
            _ => Some(elsewhere.clone()),
        }
    };
    let shared = X402Layer::with_payments(Payments::new(accepting()).hook(hook.clone()), pricing);
    send_with(shared.clone(), StatusCode::OK, paid_get("/report", &paid)).await;
    send_with(shared, StatusCode::OK, paid_get("/other", &paid)).await;
    // `/verify` refuses: asked before `/settle` although the payment settles first.
    let refusing = scripted(Step::Refuse("insufficient_funds".into()), Step::Trust);
    let refusing = X402Layer::with_payments(
        Payments::new(refusing)
            .verify_before_settling(true)
            .hook(hook),
        offer.clone(),
    );
    send_with(
        refusing,
        StatusCode::OK,
        paid_get("/report", &payment(&offer, 3)),
    )
    .await;
    assert_eq!(
        *seen.lock().unwrap(),
        [
            ("header", 400),
            ("amount", 402),
            ("other resource", 402),
            ("invalid", 402)
        ]
    );
}

#[tokio::test]
async fn not_sold_is_answered_by_the_layer_without_calling_the_service() {
    use tower_x402::Price;
    let offer = offer(URL, SettlementMode::Before);
    let pricing = move |parts: &http::request::Parts| match parts.uri.path() {
        "/report" => Price::Charge(offer.clone()),
        "/free" => Price::Free,
        _ => Price::not_found("no product is sold at this path"),
    };
    let layer = X402Layer::new(accepting(), pricing);
    let (response, calls) = send_with(layer.clone(), StatusCode::OK, get("/missing")).await;
    assert_eq!(calls, 0);
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    assert_eq!(response.headers()["content-type"], "application/json");
    assert!(!response.headers().contains_key("payment-required"));
    let body = body_json(response).await;
    assert_eq!(body["error"], "no product is sold at this path");
    let (response, calls) = send_with(layer.clone(), StatusCode::OK, get("/free")).await;
    assert_eq!((response.status(), calls), (StatusCode::OK, 1));
    let (response, calls) = send_with(layer, StatusCode::OK, get("/report")).await;
    assert_eq!(
        (response.status(), calls),
        (StatusCode::PAYMENT_REQUIRED, 0)
    );
}

#[tokio::test]
async fn payment_signed_for_another_resource_is_refused_before_verification() {
    // Two products at the same price: a payment signed for one must not buy the other.
    let report = offer(URL, SettlementMode::Before);
    let other = common::offer("https://shop.example/other", SettlementMode::Before);
    let facilitator = accepting();
    let layer = X402Layer::new(facilitator.clone(), report.clone());
    let (response, calls) = send_with(
        layer,
        StatusCode::OK,
        paid_get("/report", &payment(&other, 1)),
    )
    .await;
    assert_eq!(response.status(), StatusCode::PAYMENT_REQUIRED);
    assert_eq!(calls, 0);
    assert_eq!(
        (facilitator.verify_calls(), facilitator.settle_calls()),
        (0, 0)
    );
    let challenge = decode_required(&response);
    assert_eq!(challenge.resource.url, URL);
    assert!(
        challenge.error.unwrap().contains("different resource"),
        "the error names the reason"
    );
}

#[tokio::test]
async fn head_with_a_payment_never_verifies_or_settles() {
    for mode in [SettlementMode::Before, SettlementMode::After] {
        let offer = offer(URL, mode);
        let facilitator = accepting();
        let layer = X402Layer::new(facilitator.clone(), offer.clone());
        let mut head = paid_get("/report", &payment(&offer, 1));
        *head.method_mut() = http::Method::HEAD;
        let (response, calls) = send_with(layer, StatusCode::OK, head).await;
        assert_eq!(response.status(), StatusCode::PAYMENT_REQUIRED, "{mode:?}");
        let error = decode_required(&response).error.unwrap_or_default();
        assert!(
            error.contains("HEAD request is never paid") && error.contains("GET"),
            "the challenge says why, not that the header is missing: {error}"
        );
        assert_eq!(calls, 0);
        assert_eq!(
            (facilitator.verify_calls(), facilitator.settle_calls()),
            (0, 0),
            "{mode:?}"
        );
    }
}
