//! Instruction counts of the layer's paths under callgrind, each held to its budget in
//! `budgets.rs`: `cargo bench -p tower-x402-benches --bench instructions` fails when a path
//! exceeds its budget. Needs valgrind and `gungraun-runner` of the same version as `gungraun`.
//!
//! Each case's setup (runtime, layer, request, and one warm-up call) is not counted.

// The benchmark macros generate undocumented modules.
#![allow(missing_docs)]

use std::hint::black_box;

use bytes::Bytes;
use gungraun::{
    Callgrind, EventKind, LibraryBenchmarkConfig, library_benchmark, library_benchmark_group, main,
};
use http::{HeaderValue, Request, Response};
use http_body_util::Full;
use std::convert::Infallible;
use tokio::runtime::Runtime;
use tower::util::BoxCloneService;
use tower::{ServiceBuilder, ServiceExt};
use tower_x402::X402Layer;
use tower_x402::layer::ResponseBody;
use tower_x402::proto::{PaymentPayload, UsdcDeployment, header};
use tower_x402_benches::{InstantFacilitator, inner, offer, request, unsigned_payment};

#[path = "budgets.rs"]
mod budgets;

type Layered =
    BoxCloneService<Request<Full<Bytes>>, Response<ResponseBody<Full<Bytes>>>, Infallible>;

/// A budget as callgrind limits: exceeding it fails the benchmark.
fn budget(instructions: u64) -> LibraryBenchmarkConfig {
    LibraryBenchmarkConfig::default()
        .tool(Callgrind::default().hard_limits([(EventKind::Ir, instructions)]))
        .clone()
}

struct Case {
    runtime: Runtime,
    service: Layered,
    request: Request<Full<Bytes>>,
}

/// A layered service priced at `/report` and warmed up with one call of `warm_up`.
fn case(path: &str, payment: Option<HeaderValue>, warm_up: Request<Full<Bytes>>) -> Case {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let priced = offer(&UsdcDeployment::BASE);
    let pricing =
        move |parts: &http::request::Parts| (parts.uri.path() == "/report").then(|| priced.clone());
    let service = BoxCloneService::new(
        ServiceBuilder::new()
            .layer(X402Layer::new(InstantFacilitator, pricing))
            .service_fn(inner),
    );
    let response = runtime.block_on(service.clone().oneshot(warm_up));
    drop(black_box(response));
    Case {
        runtime,
        service,
        request: request(path, payment.as_ref()),
    }
}

fn free_case() -> Case {
    case("/free", None, request("/free", None))
}

fn challenge_case() -> Case {
    case("/report", None, request("/report", None))
}

fn paid_case() -> Case {
    let offer = offer(&UsdcDeployment::BASE);
    let warm_up = request("/report", Some(&unsigned_payment(&offer, 1)));
    case("/report", Some(unsigned_payment(&offer, 2)), warm_up)
}

fn run(case: Case) -> Case {
    let Case {
        runtime,
        service,
        request,
    } = case;
    let response = runtime.block_on(service.clone().oneshot(black_box(request)));
    drop(black_box(response));
    // Returned so that tearing the runtime down is not counted.
    Case {
        runtime,
        service,
        request: Request::new(Full::new(Bytes::new())),
    }
}

#[library_benchmark]
#[bench::free(setup = free_case, config = budget(budgets::FREE_PATH))]
#[bench::challenge(setup = challenge_case, config = budget(budgets::CHALLENGE_PATH))]
#[bench::paid(setup = paid_case, config = budget(budgets::PAID_PATH))]
fn layer(case: Case) -> Case {
    run(case)
}

fn header_case() -> (HeaderValue, std::sync::Arc<tower_x402::Offer>) {
    let offer = offer(&UsdcDeployment::BASE);
    (unsigned_payment(&offer, 3), offer)
}

#[library_benchmark]
#[bench::decode_and_match(setup = header_case, config = budget(budgets::DECODE_AND_MATCH))]
fn header_decode_and_match(
    (value, offer): (HeaderValue, std::sync::Arc<tower_x402::Offer>),
) -> bool {
    let payload = header::decode::<PaymentPayload>(black_box(value.as_bytes()));
    match payload {
        Ok(payload) => offer.accepts().iter().any(|a| a.matches(&payload.accepted)),
        Err(_) => false,
    }
}

library_benchmark_group!(name = paths; benchmarks = layer, header_decode_and_match);
main!(library_benchmark_groups = paths);
