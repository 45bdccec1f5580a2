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
use tower_x402::layer::ResponseBody;
use tower_x402::payment::Payments;
use tower_x402::{Facilitator, HttpFacilitator, SettlementMode, X402Layer};
use tower_x402_benches::{
    InstantFacilitator, PaymentCounter, inner, inner_metered, offer, offer_with, request,
    store_sku, unsigned_payment, unsigned_upto_payment, upto_offer,
};
use tower_x402_channels::{BatchSettlement, ChannelOffer, MemoryChannelStore};
use tower_x402_sandbox::{SandboxFacilitator, SandboxWallet, Step};
use x402_wire::{AtomicAmount, FacilitatorRequest};
use x402_wire::{PaymentPayload, UsdcDeployment, header};

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
    case_on(Payments::new(InstantFacilitator), path, payment, warm_up)
}

/// [`case`] with the layer on `payments`.
fn case_on(
    payments: Payments,
    path: &str,
    payment: Option<HeaderValue>,
    warm_up: Request<Full<Bytes>>,
) -> Case {
    case_in(SettlementMode::After, payments, path, payment, warm_up)
}

/// [`case_on`] with the offer settled in `mode`.
fn case_in(
    mode: SettlementMode,
    payments: Payments,
    path: &str,
    payment: Option<HeaderValue>,
    warm_up: Request<Full<Bytes>>,
) -> Case {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let priced = offer_with(&UsdcDeployment::BASE, mode);
    let pricing =
        move |parts: &http::request::Parts| (parts.uri.path() == "/report").then(|| priced.clone());
    let service = BoxCloneService::new(
        ServiceBuilder::new()
            .layer(X402Layer::with_payments(payments, pricing))
            .service_fn(inner),
    );
    let response = runtime.block_on(service.clone().oneshot(warm_up));
    drop(black_box(response));
    settle_allocator();
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

/// An unpaid request for one SKU of the example store, its offer and sign-in-with-x as the
/// store builds them: every 402 carries a fresh sign-in challenge spliced into the challenge
/// prebuilt for the offer.
fn challenge_sign_in_case() -> Case {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let (path, priced, siwx) = runtime.block_on(store_sku());
    let route = path.clone();
    let pricing =
        move |parts: &http::request::Parts| (parts.uri.path() == route).then(|| priced.clone());
    let service = BoxCloneService::new(
        ServiceBuilder::new()
            .layer(X402Layer::with_payments(
                Payments::new(InstantFacilitator).hook(siwx),
                pricing,
            ))
            .service_fn(inner),
    );
    // The first 402 of an offer prebuilds its challenge and checks it once; the second is
    // what every later one does, and leaves the allocator as a serving process has it.
    let first = runtime.block_on(service.clone().oneshot(request(&path, None)));
    drop(black_box(first));
    let response = runtime.block_on(service.clone().oneshot(request(&path, None)));
    assert!(
        response.as_ref().is_ok_and(|r| r
            .headers()
            .get("payment-required")
            .and_then(|h| header::decode::<x402_wire::PaymentRequired>(h.as_bytes()).ok())
            .is_some_and(|r| r
                .extensions
                .is_some_and(|e| e.contains_key("sign-in-with-x") && e.contains_key("bazaar")))),
        "the warm-up was not answered with a sign-in challenge"
    );
    drop(black_box(response));
    let request = request(&path, None);
    settle_allocator();
    Case {
        runtime,
        service,
        request,
    }
}

fn paid_case() -> Case {
    let offer = offer(&UsdcDeployment::BASE);
    let warm_up = request("/report", Some(&unsigned_payment(&offer, 1)));
    case("/report", Some(unsigned_payment(&offer, 2)), warm_up)
}

/// The paid request of [`paid_case`] settled before the work: `/settle` alone.
fn paid_first_case() -> Case {
    let offer = offer(&UsdcDeployment::BASE);
    let warm_up = request("/report", Some(&unsigned_payment(&offer, 1)));
    let payments = Payments::new(InstantFacilitator);
    let payment = Some(unsigned_payment(&offer, 2));
    case_in(
        SettlementMode::Before,
        payments,
        "/report",
        payment,
        warm_up,
    )
}

/// The paid request of [`paid_case`] with a [`PaymentCounter`] registered.
fn paid_observed_case() -> Case {
    let offer = offer(&UsdcDeployment::BASE);
    let warm_up = request("/report", Some(&unsigned_payment(&offer, 1)));
    let payments = Payments::new(InstantFacilitator).hook(PaymentCounter::default());
    case_on(
        payments,
        "/report",
        Some(unsigned_payment(&offer, 2)),
        warm_up,
    )
}

/// A paid metered (`upto`) request: the offer built for the instant facilitator's
/// `/supported`, an inner service that sets the charge, and a Permit2 payment with a fresh nonce
/// after one warm-up payment.
fn paid_upto_case() -> Case {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let priced = runtime
        .block_on(upto_offer(&UsdcDeployment::BASE, &InstantFacilitator))
        .expect("upto offer");
    let warm_up = request("/report", Some(&unsigned_upto_payment(&priced, 1)));
    let payment = unsigned_upto_payment(&priced, 2);
    let pricing =
        move |parts: &http::request::Parts| (parts.uri.path() == "/report").then(|| priced.clone());
    let service = BoxCloneService::new(
        ServiceBuilder::new()
            .layer(X402Layer::new(InstantFacilitator, pricing))
            .service_fn(inner_metered),
    );
    let response = runtime.block_on(service.clone().oneshot(warm_up));
    assert!(
        response
            .as_ref()
            .is_ok_and(|r| r.status() == http::StatusCode::OK),
        "the warm-up metered payment was not served"
    );
    drop(black_box(response));
    settle_allocator();
    Case {
        runtime,
        service,
        request: request("/report", Some(&payment)),
    }
}

/// What a voucher request charges in the benchmark: 0.001 USDC of the 0.01 USDC a request may
/// cost.
const VOUCHER_CHARGE: AtomicAmount = AtomicAmount(1_000);

/// The inner service of a channel request: charges [`VOUCHER_CHARGE`].
async fn inner_voucher(request: Request<Full<Bytes>>) -> Result<Response<Full<Bytes>>, Infallible> {
    if let Some(charge) = request.extensions().get::<tower_x402::Charge>() {
        charge.set(VOUCHER_CHARGE);
    }
    inner(request).await
}

/// A payment channel's voucher request (`batch-settlement`): the channel opened by a deposit
/// and one voucher in the setup (through the in-process sandbox facilitator, real signatures),
/// then the next voucher, signed by the sandbox wallet — verified locally (its EIP-712 digest,
/// one public-key recovery, the cumulative check), the inner service charging 0.001 USDC, and
/// the new cumulative committed to the memory channel store. No facilitator call.
fn voucher_case() -> Case {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let sandbox = SandboxFacilitator::new();
    let payments = BatchSettlement::new(std::sync::Arc::new(MemoryChannelStore::default()))
        .register(Payments::new(sandbox.clone()));
    let accept = ChannelOffer::new(sandbox.receiver_authorizer()).usdc(
        &UsdcDeployment::BASE,
        AtomicAmount(10_000),
        tower_x402_benches::PAY_TO,
    );
    let priced = std::sync::Arc::new(
        tower_x402::Offer::builder(x402_wire::ResourceInfo::new("https://shop.example/report"))
            .accept(accept.clone())
            .settlement(SettlementMode::After)
            .build()
            .expect("channel offer"),
    );
    let pricing =
        move |parts: &http::request::Parts| (parts.uri.path() == "/report").then(|| priced.clone());
    let service = BoxCloneService::new(
        ServiceBuilder::new()
            .layer(X402Layer::with_payments(payments, pricing))
            .service_fn(inner_voucher),
    );
    let wallet = SandboxWallet::random();
    let config = wallet.channel_config(&accept, [0; 32]).expect("channel");
    let signed = |payment: &PaymentPayload| header::encode(payment).expect("header");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs();
    let deposit = wallet
        .deposit_payment_at(&accept, &config, 1_000_000, 10_000, now)
        .expect("deposit");
    let warm_up = wallet
        .voucher_payment(&accept, &config, 1_000 + 10_000)
        .expect("voucher");
    for payment in [deposit, warm_up] {
        let response = runtime.block_on(
            service
                .clone()
                .oneshot(request("/report", Some(&signed(&payment)))),
        );
        assert!(
            response
                .as_ref()
                .is_ok_and(|r| r.status() == http::StatusCode::OK),
            "the setup's deposit or voucher was not served"
        );
        drop(black_box(response));
    }
    let voucher = wallet
        .voucher_payment(&accept, &config, 2_000 + 10_000)
        .expect("voucher");
    settle_allocator();
    Case {
        runtime,
        service,
        request: request("/report", Some(&signed(&voucher))),
    }
}

/// Leaves glibc's allocator as a serving process has it between requests, at the end of each
/// setup. The setup frees many small blocks (runtime, layer, catalog, warm-up) that glibc parks
/// in its fast bins; the first allocation too large for the small bins then merges all of them,
/// and a 402 or a paid request would pay, inside the count, for the setup's garbage. One such
/// allocation here, freed at once, does that merge outside the count.
fn settle_allocator() {
    drop(black_box(Vec::<u8>::with_capacity(64 * 1024)));
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
#[bench::challenge_sign_in(
    setup = challenge_sign_in_case,
    config = budget(budgets::CHALLENGE_SIGN_IN_PATH)
)]
#[bench::paid(setup = paid_case, config = budget(budgets::PAID_PATH))]
#[bench::paid_first(setup = paid_first_case, config = budget(budgets::PAID_FIRST_PATH))]
#[bench::paid_observed(setup = paid_observed_case, config = budget(budgets::PAID_OBSERVED_PATH))]
#[bench::paid_upto(setup = paid_upto_case, config = budget(budgets::PAID_UPTO_PATH))]
#[bench::paid_voucher(setup = voucher_case, config = budget(budgets::PAID_VOUCHER_PATH))]
fn layer(case: Case) -> Case {
    run(case)
}

fn header_case() -> (HeaderValue, std::sync::Arc<tower_x402::Offer>) {
    let offer = offer(&UsdcDeployment::BASE);
    // Warm-up, as the layer's cases have: the decoder's per-thread buffer exists.
    drop(black_box(header::decode::<PaymentPayload>(
        unsigned_payment(&offer, 1).as_bytes(),
    )));
    let case = (unsigned_payment(&offer, 3), offer);
    settle_allocator();
    case
}

// The header and the offer come back with the answer, so that dropping what the setup made is
// not counted; the decoded payment is dropped inside, as the layer drops it.
#[library_benchmark]
#[bench::decode_and_match(setup = header_case, config = budget(budgets::DECODE_AND_MATCH))]
fn header_decode_and_match(
    (value, offer): (HeaderValue, std::sync::Arc<tower_x402::Offer>),
) -> (bool, HeaderValue, std::sync::Arc<tower_x402::Offer>) {
    let payload = header::decode::<PaymentPayload>(black_box(value.as_bytes()));
    let matched = match payload {
        Ok(payload) => offer.accepts().iter().any(|a| a.matches(&payload.accepted)),
        Err(_) => false,
    };
    (matched, value, offer)
}

/// A facilitator client's case: the sandbox facilitator served over loopback HTTP by a thread of
/// its own (not counted: callgrind counts the benchmark's thread only), a client on a
/// current-thread runtime that has already made one `/verify` + `/settle` (its connection is
/// open), and the next payment with a fresh nonce.
struct ClientCase {
    runtime: Runtime,
    facilitator: HttpFacilitator,
    request: FacilitatorRequest,
}

/// The sandbox facilitator, trusting the made-up signatures, on a loopback port served by its
/// own thread; returns its base URL.
fn serve_sandbox() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.set_nonblocking(true).expect("nonblocking");
    let url = format!("http://{}", listener.local_addr().expect("address"));
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
            let facilitator = SandboxFacilitator::new()
                .with_starting_balance(AtomicAmount(u128::from(u64::MAX)))
                .with_verify(Step::Trust)
                .with_settle(Step::Trust);
            facilitator.serve(listener).await
        })
    });
    url
}

fn facilitator_request(offer: &tower_x402::Offer, nonce: u64) -> FacilitatorRequest {
    let value = unsigned_payment(offer, nonce);
    let payload = header::decode::<PaymentPayload>(value.as_bytes()).expect("payment");
    FacilitatorRequest::new(payload, offer.accepts()[0].clone())
}

async fn verify_and_settle(facilitator: &HttpFacilitator, request: &FacilitatorRequest) -> bool {
    let verified = facilitator.verify(request).await;
    let settled = facilitator.settle(request).await;
    matches!(verified, Ok(ref answer) if answer.is_valid)
        && matches!(settled, Ok(ref answer) if answer.success)
}

fn client_case(http2: bool) -> ClientCase {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let facilitator = HttpFacilitator::builder(serve_sandbox())
        .http2(http2)
        .build()
        .expect("facilitator");
    let offer = offer(&UsdcDeployment::BASE);
    let warm_up = facilitator_request(&offer, 1);
    assert!(
        runtime.block_on(verify_and_settle(&facilitator, &warm_up)),
        "warm-up payment refused"
    );
    ClientCase {
        runtime,
        facilitator,
        request: facilitator_request(&offer, 2),
    }
}

fn http1_case() -> ClientCase {
    client_case(false)
}

fn http2_case() -> ClientCase {
    client_case(true)
}

/// The two calls of [`facilitator_client`] made through a plain `reqwest::Client` (HTTP/1.1,
/// its defaults otherwise) with URLs parsed and bodies encoded beforehand, answers read as bytes
/// and not parsed:
/// what reqwest, hyper and tokio cost for the wire's work, the floor under `HttpFacilitator`.
struct ReqwestCase {
    runtime: Runtime,
    client: reqwest::Client,
    verify: reqwest::Url,
    settle: reqwest::Url,
    body: Bytes,
}

fn reqwest_alone_case() -> ReqwestCase {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let base = serve_sandbox();
    let client = reqwest::Client::builder()
        .http1_only()
        .build()
        .expect("client");
    let offer = offer(&UsdcDeployment::BASE);
    // The bytes `HttpFacilitator` sends for the same request.
    let encode = |nonce| facilitator_request(&offer, nonce).json().expect("request");
    let case = ReqwestCase {
        runtime,
        client,
        verify: format!("{base}/verify").parse().expect("URL"),
        settle: format!("{base}/settle").parse().expect("URL"),
        body: encode(1),
    };
    assert!(
        case.runtime.block_on(post_both(&case)),
        "warm-up payment refused"
    );
    ReqwestCase {
        body: encode(2),
        ..case
    }
}

/// `/verify` then `/settle` with the case's body; whether both answered 200.
async fn post_both(case: &ReqwestCase) -> bool {
    let mut answered = true;
    for url in [&case.verify, &case.settle] {
        let mut request = reqwest::Request::new(http::Method::POST, url.clone());
        request.headers_mut().insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        *request.body_mut() = Some(case.body.clone().into());
        let response = case.client.execute(request).await;
        answered &= match response {
            Ok(response) => response.status() == 200 && response.bytes().await.is_ok(),
            Err(_) => false,
        };
    }
    answered
}

#[library_benchmark]
#[bench::reqwest_alone(setup = reqwest_alone_case, config = budget(budgets::REQWEST_ALONE))]
fn reqwest_floor(case: ReqwestCase) -> ReqwestCase {
    assert!(
        case.runtime.block_on(post_both(black_box(&case))),
        "payment refused"
    );
    case
}

#[library_benchmark]
#[bench::http1(setup = http1_case, config = budget(budgets::CLIENT_HTTP1))]
#[bench::http2(setup = http2_case, config = budget(budgets::CLIENT_HTTP2))]
fn facilitator_client(case: ClientCase) -> ClientCase {
    let settled = case.runtime.block_on(verify_and_settle(
        &case.facilitator,
        black_box(&case.request),
    ));
    assert!(settled, "payment refused");
    case
}

library_benchmark_group!(name = paths; benchmarks = layer, header_decode_and_match);
library_benchmark_group!(name = client; benchmarks = facilitator_client, reqwest_floor);
main!(library_benchmark_groups = paths, client);
