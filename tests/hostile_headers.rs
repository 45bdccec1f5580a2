//! Properties of the layer under arbitrary `PAYMENT-SIGNATURE` values: it never panics, never
//! reaches the inner service, and answers every value 400 or 402 (as configured) with a JSON body.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use base64::Engine as _;
use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode};
use http_body_util::{BodyExt as _, Full};
use proptest::prelude::*;
use tower::ServiceExt as _;
use tower_x402::{Offer, SettlementMode, X402Layer};
use tower_x402_sandbox::SandboxFacilitator;
use x402_wire::{ResourceInfo, UsdcDeployment};

fn offer() -> Arc<Offer> {
    Arc::new(
        Offer::builder(ResourceInfo::new("https://shop.example/report"))
            .usdc(
                &UsdcDeployment::BASE,
                "1.00".parse().unwrap(),
                "0x209693Bc6afc0C5328bA36FaF03C514EF312287C",
            )
            .settlement(SettlementMode::Before)
            .build()
            .unwrap(),
    )
}

/// Sends `value` as `PAYMENT-SIGNATURE`; returns the status, the body and the inner calls.
fn present(value: HeaderValue, payment_required: bool) -> (StatusCode, Bytes, usize) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = calls.clone();
    let mut layer = X402Layer::new(SandboxFacilitator::new(), offer());
    if payment_required {
        layer = layer.invalid_header_payment_required();
    }
    let service =
        tower::ServiceBuilder::new()
            .layer(layer)
            .service_fn(move |_: Request<Full<Bytes>>| {
                counter.fetch_add(1, Ordering::SeqCst);
                async { Ok::<_, std::convert::Infallible>(Response::new(Full::new(Bytes::new()))) }
            });
    let request = Request::get("/report")
        .header("payment-signature", value)
        .body(Full::default())
        .unwrap();
    runtime.block_on(async {
        let response = service.oneshot(request).await.unwrap();
        let status = response.status();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        (status, body, calls.load(Ordering::SeqCst))
    })
}

fn answers(value: HeaderValue) -> Result<(), TestCaseError> {
    for payment_required in [false, true] {
        let (status, body, calls) = present(value.clone(), payment_required);
        prop_assert!(
            [StatusCode::BAD_REQUEST, StatusCode::PAYMENT_REQUIRED].contains(&status),
            "{}",
            status
        );
        if payment_required {
            prop_assert_eq!(status, StatusCode::PAYMENT_REQUIRED);
        }
        let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
        prop_assert!(json["error"].is_string(), "{}", json);
        prop_assert_eq!(calls, 0);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn arbitrary_header_bytes_are_refused_without_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        if let Ok(value) = HeaderValue::from_bytes(&bytes) {
            answers(value)?;
        }
    }

    #[test]
    fn base64_of_arbitrary_bytes_is_refused_without_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let encoded = base64::engine::general_purpose::STANDARD.encode(&bytes);
        answers(HeaderValue::from_str(&encoded).unwrap())?;
    }

    #[test]
    fn base64_of_payload_shaped_json_is_refused_without_panic(
        version in prop_oneof![Just(json_number(2)), Just(json_number(1)), any::<i64>().prop_map(json_number)],
        scheme in "[a-z]{0,8}",
        network in prop_oneof![Just("eip155:8453".to_owned()), "[a-z0-9:]{0,16}"],
        amount in prop_oneof![Just("1000000".to_owned()), "[0-9]{0,40}", "\\PC{0,8}"],
        resource in prop_oneof![Just("https://shop.example/report".to_owned()), "\\PC{0,30}"],
    ) {
        let payload = serde_json::json!({
            "x402Version": version,
            "resource": {"url": resource},
            "accepted": {
                "scheme": scheme, "network": network, "amount": amount,
                "asset": "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913",
                "payTo": "0x209693Bc6afc0C5328bA36FaF03C514EF312287C",
                "maxTimeoutSeconds": 300,
            },
            "payload": {"signature": "0x00", "authorization": {}},
        });
        let encoded = base64::engine::general_purpose::STANDARD.encode(payload.to_string());
        answers(HeaderValue::from_str(&encoded).unwrap())?;
    }
}

fn json_number(n: i64) -> serde_json::Value {
    serde_json::Value::from(n)
}
