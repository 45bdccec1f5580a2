//! Heap allocations of a paid request through the layer, counted with dhat's heap profiler
//! (block counts, not timings, so the count is exact): verified and settled by an in-process
//! facilitator that answers at once, as the instruction benchmark's paid case. Run with
//! `cargo test -p tower-x402-benches --test allocations -- --nocapture`; it prints the count
//! and fails when a paid request allocates more than [`PAID_BLOCKS`].

use bytes::Bytes;
use http::Request;
use http_body_util::Full;
use tower::{Service, ServiceBuilder};
use tower_x402::X402Layer;
use tower_x402_benches::{InstantFacilitator, inner, offer, request, unsigned_payment};
use x402_wire::UsdcDeployment;

#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

/// The most heap blocks a paid request may allocate beyond the bare call (the request and
/// response themselves, and the payment header on the request): what it allocates today, 39.
const PAID_BLOCKS: u64 = 39;

/// Heap blocks allocated per call of `service` over `requests` (each run to completion on a
/// current-thread runtime, as the instruction benchmark's cases), after one warm-up call.
fn blocks_per_call<S>(
    runtime: &tokio::runtime::Runtime,
    mut service: S,
    mut requests: impl FnMut(u64) -> Request<Full<Bytes>>,
) -> u64
where
    S: Service<Request<Full<Bytes>>>,
    S::Error: std::fmt::Debug,
{
    const ROUNDS: u64 = 200;
    let run = |service: &mut S, request| {
        let response = runtime.block_on(async {
            std::future::poll_fn(|cx| service.poll_ready(cx))
                .await
                .unwrap();
            service.call(request).await
        });
        drop(response.unwrap());
    };
    run(&mut service, requests(0));
    let before = dhat::HeapStats::get().total_blocks;
    for round in 1..=ROUNDS {
        run(&mut service, requests(round));
    }
    (dhat::HeapStats::get().total_blocks - before) / ROUNDS
}

#[test]
fn allocations_per_paid_request() {
    let _profiler = dhat::Profiler::builder().testing().build();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let priced = offer(&UsdcDeployment::BASE);
    // Built before counting: the headers a client sends.
    let payments: Vec<_> = (1..=201)
        .map(|nonce| unsigned_payment(&priced, nonce))
        .collect();
    let pricing =
        move |parts: &http::request::Parts| (parts.uri.path() == "/report").then(|| priced.clone());
    let bare = blocks_per_call(&runtime, tower::service_fn(inner), |_| {
        request("/report", None)
    });
    let mut next = payments.iter();
    let paid = blocks_per_call(
        &runtime,
        ServiceBuilder::new()
            .layer(X402Layer::new(InstantFacilitator, pricing))
            .service_fn(inner),
        |_| request("/report", next.next()),
    );
    let added = paid - bare;
    println!("heap blocks per request: bare {bare}, paid through the layer {paid} ({added} added)");
    assert!(bare > 0, "the request and response themselves allocate");
    assert!(
        added <= PAID_BLOCKS,
        "a paid request allocates {added} blocks beyond the bare call, more than {PAID_BLOCKS}"
    );
}
