//! What the layer costs per request, measured against the bare inner service in the same run.
//!
//! `cargo bench --features sandbox --bench layer` runs every case, then prints each one's mean time as a ratio of
//! the bare service's (`ratio 1.00` = free). Cases:
//!
//! - `bare`: the inner service alone;
//! - `free`: a request the layer's pricing says is free;
//! - `challenge`: an unpaid request answered with the precomputed 402;
//! - `paid_instant`: verify and settle through an in-process facilitator that answers at once, so
//!   the time is the layer's own (decode, match, single-flight, record, response headers);
//! - `replayed`: a payment that already settled, answered from its record;
//! - `paid_sandbox`: verify and settle through the sandbox facilitator, which recovers a real
//!   secp256k1 signature twice (the signature is made outside the timed part);
//! - `catalog_lookup`: pricing 45 SKUs by path with a `PriceTable`.

use std::convert::Infallible;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use criterion::{BatchSize, Criterion};
use http::{HeaderValue, Request, Response};
use http_body_util::Full;
use tower::{Service, ServiceBuilder, ServiceExt};
use tower_x402::BoxFuture;
use tower_x402::layer::pricing::{PriceTable, Pricing};
use tower_x402::proto::{
    FacilitatorRequest, PaymentPayload, ResourceInfo, SettleResponse, SupportedResponse,
    UsdcDeployment, VerifyResponse, X402Version, header,
};
use tower_x402::sandbox::{SandboxFacilitator, SandboxWallet};
use tower_x402::{Facilitator, FacilitatorError, Offer, SettlementMode, X402Layer};

const PAY_TO: &str = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";
const CASES: [&str; 6] = [
    "bare",
    "free",
    "challenge",
    "paid_instant",
    "replayed",
    "paid_sandbox",
];

async fn inner(_request: Request<Full<Bytes>>) -> Result<Response<Full<Bytes>>, Infallible> {
    Ok(Response::new(Full::new(Bytes::from_static(b"the report"))))
}

fn offer(network: &UsdcDeployment) -> Arc<Offer> {
    Arc::new(
        Offer::builder(ResourceInfo::new("https://shop.example/report"))
            .usdc(network, "1.00".parse().expect("price"), PAY_TO)
            .settlement(SettlementMode::After)
            .build()
            .expect("offer"),
    )
}

/// A facilitator that accepts everything at once: isolates the layer's own cost.
#[derive(Clone, Debug)]
struct Instant;

impl Facilitator for Instant {
    fn verify<'a>(
        &'a self,
        _: &'a FacilitatorRequest,
    ) -> BoxFuture<'a, Result<VerifyResponse, FacilitatorError>> {
        Box::pin(async {
            Ok(VerifyResponse {
                is_valid: true,
                ..VerifyResponse::default()
            })
        })
    }

    fn settle<'a>(
        &'a self,
        request: &'a FacilitatorRequest,
    ) -> BoxFuture<'a, Result<SettleResponse, FacilitatorError>> {
        Box::pin(async move {
            Ok(SettleResponse {
                success: true,
                error_reason: None,
                error_message: None,
                payer: None,
                transaction: "0x01".into(),
                network: request.payment_requirements.network.clone(),
                amount: Some(request.payment_requirements.amount),
                extensions: None,
            })
        })
    }

    fn supported(&self) -> BoxFuture<'_, Result<Arc<SupportedResponse>, FacilitatorError>> {
        Box::pin(async { Ok(Arc::default()) })
    }
}

/// A syntactically valid payment with a fresh nonce per call (the instant facilitator does not
/// check signatures).
fn unsigned_payment(offer: &Offer, nonce: u64) -> HeaderValue {
    let accepted = offer.accepts()[0].clone();
    let payload = PaymentPayload {
        x402_version: X402Version::V2,
        resource: Some(offer.resource().clone()),
        payload: serde_json::json!({
            "signature": format!("0x{}", "ab".repeat(65)),
            "authorization": {
                "from": "0x857b06519E91e3A54538791bDbb0E22373e36b66",
                "to": accepted.pay_to,
                "value": accepted.amount,
                "validAfter": "0",
                "validBefore": "99999999999",
                "nonce": format!("0x{nonce:064x}"),
            }
        }),
        accepted,
        extensions: None,
    };
    header::encode(&payload).expect("encode")
}

fn request(path: &str, payment: Option<&HeaderValue>) -> Request<Full<Bytes>> {
    let mut builder = Request::get(path);
    if let Some(payment) = payment {
        builder = builder.header("payment-signature", payment.clone());
    }
    builder.body(Full::new(Bytes::new())).expect("request")
}

/// One request through a clone of `service` (every case clones, so the comparison is fair).
async fn call<S>(service: S, request: Request<Full<Bytes>>)
where
    S: Service<Request<Full<Bytes>>>,
    S::Error: std::fmt::Debug,
{
    let response = service.oneshot(request).await.expect("response");
    std::hint::black_box(response);
}

fn per_request(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let base = offer(&UsdcDeployment::BASE);
    let priced = base.clone();
    let pricing =
        move |parts: &http::request::Parts| (parts.uri.path() == "/report").then(|| priced.clone());
    let mut group = c.benchmark_group("per_request");

    let bare = tower::service_fn(inner);
    group.bench_function("bare", |b| {
        b.to_async(&runtime)
            .iter(|| call(bare, request("/free", None)))
    });

    let layered = ServiceBuilder::new()
        .layer(X402Layer::new(Instant, pricing.clone()))
        .service_fn(inner);
    group.bench_function("free", |b| {
        b.to_async(&runtime)
            .iter(|| call(layered.clone(), request("/free", None)))
    });
    group.bench_function("challenge", |b| {
        b.to_async(&runtime)
            .iter(|| call(layered.clone(), request("/report", None)))
    });

    let nonce = AtomicU64::new(0);
    group.bench_function("paid_instant", |b| {
        b.to_async(&runtime).iter_batched(
            || unsigned_payment(&base, nonce.fetch_add(1, Ordering::Relaxed)),
            |payment| call(layered.clone(), request("/report", Some(&payment))),
            BatchSize::SmallInput,
        )
    });

    let settled = unsigned_payment(&base, u64::MAX);
    runtime.block_on(call(layered.clone(), request("/report", Some(&settled))));
    group.bench_function("replayed", |b| {
        b.to_async(&runtime)
            .iter(|| call(layered.clone(), request("/report", Some(&settled))))
    });

    let sepolia = offer(&UsdcDeployment::BASE_SEPOLIA);
    let sandbox_priced = sepolia.clone();
    let sandbox = ServiceBuilder::new()
        .layer(X402Layer::new(
            SandboxFacilitator::new(),
            move |_: &http::request::Parts| Some(sandbox_priced.clone()),
        ))
        .service_fn(inner);
    let wallet = SandboxWallet::random();
    group.bench_function("paid_sandbox", |b| {
        b.to_async(&runtime).iter_batched(
            || {
                header::encode(&wallet.pay(sepolia.payment_required()).expect("pay"))
                    .expect("encode")
            },
            |payment| call(sandbox.clone(), request("/report", Some(&payment))),
            BatchSize::SmallInput,
        )
    });
    group.finish();
}

fn catalog_lookup(c: &mut Criterion) {
    let mut table = PriceTable::new();
    for index in 0..45 {
        let offer = Offer::builder(ResourceInfo::new(format!(
            "https://shop.example/api/x402/sku-{index}"
        )))
        .usdc(
            &UsdcDeployment::BASE,
            "1.00".parse().expect("price"),
            PAY_TO,
        )
        .build()
        .expect("offer");
        table.insert(format!("/api/x402/sku-{index}"), offer);
    }
    let (parts, ()) = Request::get("/api/x402/sku-44")
        .body(())
        .expect("request")
        .into_parts();
    c.bench_function("catalog_lookup", |b| {
        b.iter(|| std::hint::black_box(table.price(&parts)))
    });
}

/// Prints each case's mean as a multiple of `bare`'s, read back from criterion's estimates.
fn print_ratios() {
    let root = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target"))
        .join("criterion/per_request");
    let mean_ns = |case: &str| -> Option<f64> {
        let text = std::fs::read_to_string(root.join(case).join("new/estimates.json")).ok()?;
        let json: serde_json::Value = serde_json::from_str(&text).ok()?;
        json["mean"]["point_estimate"].as_f64()
    };
    let Some(bare) = mean_ns("bare") else {
        println!(
            "no estimates under {} (run without --no-run)",
            root.display()
        );
        return;
    };
    println!("\nper-request cost relative to the bare service (same run):");
    for case in CASES {
        if let Some(mean) = mean_ns(case) {
            println!(
                "  {case:<13} {:>10.0} ns   ratio {:>7.2}",
                mean,
                mean / bare
            );
        }
    }
}

fn main() {
    let mut criterion = Criterion::default().configure_from_args();
    per_request(&mut criterion);
    catalog_lookup(&mut criterion);
    criterion.final_summary();
    print_ratios();
}
