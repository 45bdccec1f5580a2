//! What the layer costs per request, measured against the bare inner service in the same run.
//!
//! `cargo bench -p tower-x402-benches --bench layer` runs every case, then prints each one's mean time as a ratio of
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
//! - `catalog_lookup`: pricing 45 SKUs by path with a `HashMap` of paths to offers.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use criterion::{BatchSize, Criterion};
use http::Request;
use http_body_util::Full;
use tower::{Service, ServiceBuilder, ServiceExt};
use tower_x402::Offer;
use tower_x402::X402Layer;
use tower_x402::pricing::Pricing;
use tower_x402_benches::{
    InstantFacilitator as Instant, PAY_TO, inner, offer, request, unsigned_payment,
};
use tower_x402_sandbox::{SandboxFacilitator, SandboxWallet};
use x402_wire::{ResourceInfo, UsdcDeployment, header};

const CASES: [&str; 6] = [
    "bare",
    "free",
    "challenge",
    "paid_instant",
    "replayed",
    "paid_sandbox",
];

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
    let mut table = HashMap::new();
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
        table.insert(format!("/api/x402/sku-{index}"), Arc::new(offer));
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
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target"))
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
