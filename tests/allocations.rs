//! The layer's promise for free requests: it allocates nothing beyond what the inner service
//! does. Counted with dhat's heap profiler (block counts, not timings, so the test is exact).

use std::convert::Infallible;
use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use tower::{Service, ServiceBuilder};
use tower_x402::{Offer, X402Layer};
use tower_x402_sandbox::SandboxFacilitator;
use x402_wire::{ResourceInfo, UsdcDeployment};

#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

async fn inner(_request: Request<Full<Bytes>>) -> Result<Response<Full<Bytes>>, Infallible> {
    Ok(Response::new(Full::new(Bytes::from_static(b"free"))))
}

/// Heap blocks allocated by `rounds` calls of `service` on a free path, polled to completion.
fn blocks_per_call<S>(mut service: S, rounds: u64) -> u64
where
    S: Service<Request<Full<Bytes>>>,
    S::Error: std::fmt::Debug,
{
    let mut cx = Context::from_waker(Waker::noop());
    let mut run = |service: &mut S| {
        assert!(service.poll_ready(&mut cx).is_ready());
        let request = Request::get("/free").body(Full::new(Bytes::new())).unwrap();
        let future = pin!(service.call(request));
        match future.poll(&mut cx) {
            Poll::Ready(result) => drop(result.unwrap()),
            Poll::Pending => panic!("the free path never waits"),
        }
    };
    run(&mut service); // warm-up: lazily initialised statics
    let before = dhat::HeapStats::get().total_blocks;
    for _ in 0..rounds {
        run(&mut service);
    }
    (dhat::HeapStats::get().total_blocks - before) / rounds
}

#[test]
fn free_requests_allocate_nothing_extra() {
    let _profiler = dhat::Profiler::builder().testing().build();
    let offer = Arc::new(
        Offer::builder(ResourceInfo::new("https://shop.example/report"))
            .usdc(
                &UsdcDeployment::BASE,
                "1.00".parse().unwrap(),
                "0x209693Bc6afc0C5328bA36FaF03C514EF312287C",
            )
            .build()
            .unwrap(),
    );
    let pricing =
        move |parts: &http::request::Parts| (parts.uri.path() == "/report").then(|| offer.clone());

    let bare = blocks_per_call(tower::service_fn(inner), 1_000);
    let layered = blocks_per_call(
        ServiceBuilder::new()
            .layer(X402Layer::new(SandboxFacilitator::new(), pricing))
            .service_fn(inner),
        1_000,
    );
    assert!(
        bare > 0,
        "the request and response themselves allocate; the count must see them"
    );
    assert_eq!(
        layered, bare,
        "the layer adds no allocation to a free request"
    );
}
