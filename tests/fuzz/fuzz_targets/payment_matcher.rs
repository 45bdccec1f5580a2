//! The layer's handling of a presented payment — decode, resource check, matching against the
//! offer's accepts, verification by the sandbox — on arbitrary input: the first byte picks
//! whether the rest is sent as the raw header value or as base64 of it (so the fuzzer explores
//! the JSON inside). Never panics, never serves the inner service without a valid payment.
#![no_main]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use base64::Engine as _;
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use libfuzzer_sys::fuzz_target;
use tower::ServiceExt as _;
use x402_wire::{ResourceInfo, UsdcDeployment};
use tower_x402_sandbox::SandboxFacilitator;
use tower_x402::{Offer, SettlementMode, X402Layer};

const URL: &str = "https://shop.example/report";

struct World {
    runtime: tokio::runtime::Runtime,
    layer: X402Layer,
}

static WORLD: OnceLock<World> = OnceLock::new();
static SERVED: AtomicUsize = AtomicUsize::new(0);

fn world() -> &'static World {
    WORLD.get_or_init(|| {
        let offer = Offer::builder(ResourceInfo::new(URL))
            .usdc(
                &UsdcDeployment::BASE,
                "1.00".parse().expect("price"),
                "0x209693Bc6afc0C5328bA36FaF03C514EF312287C",
            )
            .settlement(SettlementMode::Before)
            .build()
            .expect("offer");
        World {
            runtime: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime"),
            layer: X402Layer::new(SandboxFacilitator::new(), Arc::new(offer)),
        }
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let value = if mode % 2 == 0 {
        rest.to_vec()
    } else {
        base64::engine::general_purpose::STANDARD
            .encode(rest)
            .into_bytes()
    };
    let Ok(value) = http::HeaderValue::from_bytes(&value) else {
        return;
    };
    let world = world();
    let service = tower::ServiceBuilder::new()
        .layer(world.layer.clone())
        .service_fn(|_request: Request<Full<Bytes>>| async {
            SERVED.fetch_add(1, Ordering::SeqCst);
            Ok::<_, std::convert::Infallible>(Response::new(Full::new(Bytes::from_static(b"paid"))))
        });
    let request = Request::get("/report")
        .header("payment-signature", value)
        .body(Full::default())
        .expect("request");
    let response = world
        .runtime
        .block_on(service.oneshot(request))
        .expect("infallible");
    // Arbitrary bytes are never a payment signed by a funded wallet.
    assert_ne!(response.status(), StatusCode::OK);
    assert_eq!(SERVED.load(Ordering::SeqCst), 0);
});
