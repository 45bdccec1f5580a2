//! A payment that settles before the work (`SettlementMode::Before`) goes straight to `/settle`:
//! one facilitator round trip, over HTTP on loopback, with payments signed by a real wallet
//! (secp256k1, EIP-712) that the sandbox facilitator recovers and checks inside `/settle`.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::routing::get;
use http::{HeaderMap, Request, StatusCode};
use http_body_util::BodyExt as _;
use serde_json::{Value, json};
use tower::ServiceExt as _;
use tower_x402::payment::Payments;
use tower_x402::{HttpFacilitator, Offer, SettlementMode, X402Layer};
use tower_x402_sandbox::{SandboxFacilitator, SandboxWallet, Step};
use x402_wire::{PaymentPayload, ResourceInfo, SettleResponse, UsdcDeployment, header};

const URL: &str = "https://shop.example/report";
const PAY_TO: &str = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";

/// A shop selling `/report` in `mode` through a sandbox facilitator served on loopback.
struct Shop {
    app: Router,
    sandbox: SandboxFacilitator,
    offer: Arc<Offer>,
    served: Arc<AtomicUsize>,
}

async fn shop(mode: SettlementMode, verify_first: bool) -> Shop {
    let sandbox = SandboxFacilitator::new();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(sandbox.clone().serve(listener));
    let client = HttpFacilitator::builder(url)
        .settle_timeout(Duration::from_millis(800))
        .build()
        .unwrap();
    let offer = Arc::new(
        Offer::builder(ResourceInfo::new(URL))
            .usdc(
                &UsdcDeployment::BASE_SEPOLIA,
                "0.25".parse().unwrap(),
                PAY_TO,
            )
            .settlement(mode)
            .build()
            .unwrap(),
    );
    // The sandbox's ledger is the chain its reconciler reads: a payment in doubt is proven.
    let payments = Payments::new(client)
        .reconciler(sandbox.clone())
        .verify_before_settling(verify_first);
    let layer = X402Layer::with_payments(payments, Arc::clone(&offer));
    let served = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&served);
    let handler = move || {
        count.fetch_add(1, Ordering::SeqCst);
        async { axum::Json(json!({ "delivered": true })) }
    };
    let app = Router::new().route("/report", get(handler).layer(layer));
    Shop {
        app,
        sandbox,
        offer,
        served,
    }
}

impl Shop {
    fn pay(&self) -> PaymentPayload {
        SandboxWallet::random()
            .pay(self.offer.payment_required())
            .unwrap()
    }

    async fn buy(&self, payment: &PaymentPayload) -> (StatusCode, HeaderMap, Value) {
        let request = Request::get("/report")
            .header("payment-signature", header::encode(payment).unwrap())
            .body(Body::empty())
            .unwrap();
        let response = self.app.clone().oneshot(request).await.unwrap();
        let (parts, body) = response.into_parts();
        let bytes = body.collect().await.unwrap().to_bytes();
        let json = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        (parts.status, parts.headers, json)
    }

    fn calls(&self) -> (usize, usize) {
        (self.sandbox.verify_calls(), self.sandbox.settle_calls())
    }
}

fn settlement_of(headers: &HeaderMap) -> SettleResponse {
    header::decode(headers["payment-response"].as_bytes()).unwrap()
}

#[tokio::test]
async fn settle_first_makes_one_facilitator_call_per_paid_request() {
    let shop = shop(SettlementMode::Before, false).await;
    for sale in 1..=5 {
        let (status, headers, body) = shop.buy(&shop.pay()).await;
        assert_eq!(status, StatusCode::OK, "sale {sale}: {body}");
        assert!(settlement_of(&headers).success, "sale {sale}");
        assert_eq!(shop.calls(), (0, sale), "sale {sale}: /settle alone");
    }
    assert_eq!(shop.sandbox.settlement_count(), 5);
    assert_eq!(shop.served.load(Ordering::SeqCst), 5);
}

#[tokio::test]
async fn verify_before_settling_and_settling_after_the_work_keep_verify() {
    for (mode, verify_first) in [
        (SettlementMode::Before, true),
        (SettlementMode::After, false),
    ] {
        let shop = shop(mode, verify_first).await;
        for sale in 1..=3 {
            let (status, _, body) = shop.buy(&shop.pay()).await;
            assert_eq!(status, StatusCode::OK, "{mode:?}, sale {sale}: {body}");
            assert_eq!(shop.calls(), (sale, sale), "{mode:?}, sale {sale}");
        }
    }
}

#[tokio::test]
async fn a_settle_refusal_is_a_402_with_the_reason_and_nothing_served() {
    let shop = shop(SettlementMode::Before, false).await;
    // A signature that does not recover to the payer: `/settle` verifies it and refuses.
    let mut forged = shop.pay();
    let other = shop.pay();
    let mut signed: Value = serde_json::from_str(forged.payload.get()).unwrap();
    let theirs: Value = serde_json::from_str(other.payload.get()).unwrap();
    signed["signature"] = theirs["signature"].clone();
    forged.payload = serde_json::value::to_raw_value(&signed).unwrap();
    let (status, headers, body) = shop.buy(&forged).await;
    assert_eq!(status, StatusCode::PAYMENT_REQUIRED, "{body}");
    assert_eq!(body["error"], "invalid_exact_evm_signature", "{body}");
    assert!(
        headers.contains_key("payment-required"),
        "the challenge again"
    );
    let settlement = settlement_of(&headers);
    assert!(!settlement.success);
    assert_eq!(
        settlement.error_reason.as_deref(),
        Some("invalid_exact_evm_signature")
    );
    assert_eq!(shop.calls(), (0, 1));
    assert_eq!(shop.sandbox.settlement_count(), 0, "nothing moved");
    assert_eq!(shop.served.load(Ordering::SeqCst), 0, "nothing served");

    // Presented again, the same forged payment is answered from memory: nothing sent.
    for _ in 0..3 {
        let (status, _, again) = shop.buy(&forged).await;
        assert_eq!(status, StatusCode::PAYMENT_REQUIRED);
        assert_eq!(again["error"], body["error"], "{again}");
    }
    assert_eq!(shop.calls(), (0, 1), "one /settle for the four");

    // Released, not held: the buyer's good payment goes through at once.
    let (status, _, body) = shop.buy(&shop.pay()).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(shop.sandbox.settlement_count(), 1);
}

#[tokio::test]
async fn a_lost_settle_answer_is_in_doubt_then_delivered_on_retry_with_one_transfer() {
    for fault in [Step::AnswerLost, Step::ConnectionReset, Step::NoAnswer] {
        let shop = shop(SettlementMode::Before, false).await;
        let payment = shop.pay();
        shop.sandbox.queue_settle(fault.clone());
        let (status, headers, body) = shop.buy(&payment).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{fault:?}: {body}");
        assert!(headers.contains_key("retry-after"), "{fault:?}");
        assert!(!headers.contains_key("payment-response"), "{fault:?}");
        assert_eq!(shop.sandbox.settlement_count(), 1, "{fault:?}: it moved");
        assert_eq!(shop.served.load(Ordering::SeqCst), 0, "{fault:?}");

        let (status, headers, body) = shop.buy(&payment).await;
        assert_eq!(status, StatusCode::OK, "{fault:?}: {body}");
        assert!(settlement_of(&headers).success, "{fault:?}");
        assert_eq!(
            shop.sandbox.settlement_count(),
            1,
            "{fault:?}: one transfer"
        );
        assert_eq!(shop.served.load(Ordering::SeqCst), 1, "{fault:?}");
        assert_eq!(
            shop.calls(),
            (0, 2),
            "{fault:?}: the identical /settle re-sent"
        );
    }
}
