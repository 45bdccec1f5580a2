//! Heap blocks and bytes per request through a service, counted with dhat's heap profiler (a
//! count, not a timing, so it is exact and the same on every run): the one harness behind
//! tower-x402's row (`cargo test -p tower-x402-benches --test allocations_axum`) and the peers'
//! rows (`peer-allocations`) of the table `benches/peers/allocations.sh` prints.
//!
//! Every middleware sits in front of the same axum handler on the same route; each request is
//! built before counting (each with its own signed payment, or none), sent with
//! `Service::call` on a current-thread runtime and awaited to the end of its body, and its
//! answer checked, so a count is never of a failed request. A middleware's count is its route's
//! count minus the bare route's for the same requests: what the middleware adds.
//!
//! The calling binary installs `dhat::Alloc` as its global allocator; the harness runs a
//! `dhat::Profiler` around each counted run. With `ALLOCATION_SITES=DIR` in the environment,
//! each run also writes what allocated its blocks to `DIR/MIDDLEWARE-CASE.json` (cases `paid`,
//! `402`, `bare-paid`, `bare-402`).

use std::fmt;
use std::path::{Path, PathBuf};

use axum::Router;
use axum::body::Body;
use axum::routing::get;
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use tower::Service;

/// Requests answered before counting starts, so that what a middleware builds on its first
/// requests (caches, lazily enriched price tags) is not counted.
pub const WARM_UP: usize = 5;

/// Requests counted after the warm-up; the count is their total divided by this.
pub const COUNTED: usize = 200;

/// What the handler answers with.
pub const BODY: &str = "the report";

/// What every answer must be for its request to count.
#[derive(Clone, Copy, Debug)]
pub enum Expect {
    /// 200 with the handler's body and, when named, that header (the settlement).
    Delivered(Option<&'static str>),
    /// 402 with a `PAYMENT-REQUIRED` challenge.
    PaymentRequired,
}

/// Heap blocks allocated (reallocations included, as dhat counts them) and bytes asked for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Count {
    /// Blocks per request.
    pub blocks: u64,
    /// Bytes per request.
    pub bytes: u64,
}

impl Count {
    /// What `self` allocates beyond `bare`.
    pub fn beyond(self, bare: Count) -> Count {
        Count {
            blocks: self.blocks.saturating_sub(bare.blocks),
            bytes: self.bytes.saturating_sub(bare.bytes),
        }
    }
}

/// Blocks and bytes per request of `service` over `requests` (the first [`WARM_UP`] of them
/// answered before counting, the next [`COUNTED`] counted by a dhat profiler started for them),
/// every answer checked against `expect`. With `sites`, the profiler also writes there what
/// allocated each block (dhat's JSON, for `benches/peers/sites.py` or dhat's viewer).
///
/// # Panics
///
/// When there are fewer than `WARM_UP + COUNTED` requests, when another dhat profiler is
/// running, or when an answer is not what `expect` says (its status and body are in the
/// message).
pub fn per_request<S>(
    runtime: &tokio::runtime::Runtime,
    mut service: S,
    requests: Vec<Request<Body>>,
    expect: Expect,
    sites: Option<&Path>,
) -> Count
where
    S: Service<Request<Body>, Response = Response<Body>>,
    S::Error: fmt::Debug,
{
    assert!(requests.len() >= WARM_UP + COUNTED, "too few requests");
    let mut requests = requests.into_iter();
    let answer = |service: &mut S, request| {
        runtime.block_on(async {
            std::future::poll_fn(|cx| service.poll_ready(cx))
                .await
                .expect("ready");
            let response = service.call(request).await.expect("an answer");
            let (parts, body) = response.into_parts();
            let body = body.collect().await.expect("the body").to_bytes();
            check(&parts, &body, expect);
        });
    };
    for request in requests.by_ref().take(WARM_UP) {
        answer(&mut service, request);
    }
    let profiler = match sites {
        Some(file) => dhat::Profiler::builder()
            .file_name(file)
            .trim_backtraces(Some(60))
            .build(),
        None => dhat::Profiler::builder().testing().build(),
    };
    for request in requests.by_ref().take(COUNTED) {
        answer(&mut service, request);
    }
    let counted = dhat::HeapStats::get();
    drop(profiler);
    Count {
        blocks: counted.total_blocks / COUNTED as u64,
        bytes: counted.total_bytes / COUNTED as u64,
    }
}

/// Panics unless the answer is what `expect` says.
fn check(parts: &http::response::Parts, body: &[u8], expect: Expect) {
    let fine = match expect {
        Expect::Delivered(header) => {
            parts.status == StatusCode::OK
                && body == BODY.as_bytes()
                && header.is_none_or(|name| parts.headers.contains_key(name))
        }
        Expect::PaymentRequired => {
            parts.status == StatusCode::PAYMENT_REQUIRED
                && parts.headers.contains_key("payment-required")
        }
    };
    assert!(
        fine,
        "expected {expect:?}, got {} {:?} {}",
        parts.status,
        parts.headers,
        String::from_utf8_lossy(body)
    );
}

/// The path every middleware's route is served at.
pub const PATH: &str = "/report";

/// The handler every middleware is put in front of.
pub async fn handler() -> &'static str {
    BODY
}

/// One middleware's line of the table: what a paid request and a 402 allocate beyond the bare
/// route, and what the bare route itself allocates for the paid request.
#[derive(Clone, Debug)]
pub struct Row {
    /// The middleware.
    pub name: String,
    /// A paid request (200 with the settlement), beyond the bare route.
    pub paid: Count,
    /// A request without payment (402), beyond the bare route.
    pub unpaid: Count,
    /// The bare route's own count for the paid request.
    pub bare: Count,
}

impl Row {
    /// The table's header line, for [`Row::line`]'s lines under it.
    pub fn header() -> String {
        format!(
            "{:<12} {:>11} {:>10} {:>11} {:>10} {:>11} {:>10}",
            "middleware",
            "paid blocks",
            "paid bytes",
            "402 blocks",
            "402 bytes",
            "bare blocks",
            "bare bytes"
        )
    }

    /// This row as a line of the table.
    pub fn line(&self) -> String {
        format!(
            "{:<12} {:>11} {:>10} {:>11} {:>10} {:>11} {:>10}",
            self.name,
            self.paid.blocks,
            self.paid.bytes,
            self.unpaid.blocks,
            self.unpaid.bytes,
            self.bare.blocks,
            self.bare.bytes
        )
    }
}

/// Counts the middleware `name` on `paid` (a router serving [`handler`] at [`PATH`] behind it):
/// its 402 is asked for once, `pay` turns that challenge (the `PAYMENT-REQUIRED` header's bytes)
/// and a nonce (1, 2, ...) into a `PAYMENT-SIGNATURE` header, one for each paid request, and
/// every count is taken against a router serving the handler alone for the same requests.
pub fn measure(
    runtime: &tokio::runtime::Runtime,
    name: &str,
    paid: Router,
    mut pay: impl FnMut(&[u8], u64) -> String,
) -> Row {
    let bare = Router::new().route(PATH, get(handler));
    let challenge = runtime.block_on(async {
        let response = paid.clone().call(request(None)).await.expect("an answer");
        let (parts, body) = response.into_parts();
        let body = body.collect().await.expect("the body").to_bytes();
        check(&parts, &body, Expect::PaymentRequired);
        parts.headers["payment-required"].as_bytes().to_vec()
    });
    let payments: Vec<String> = (1..=(WARM_UP + COUNTED) as u64)
        .map(|nonce| pay(&challenge, nonce))
        .collect();
    let paying = || {
        payments
            .iter()
            .map(|payment| request(Some(payment)))
            .collect()
    };
    let unpaid = || (0..WARM_UP + COUNTED).map(|_| request(None)).collect();
    let sites = std::env::var_os("ALLOCATION_SITES").map(PathBuf::from);
    let sites = |case: &str| {
        sites
            .as_ref()
            .map(|dir| dir.join(format!("{name}-{case}.json")))
    };
    let bare_paid = per_request(
        runtime,
        bare.clone(),
        paying(),
        Expect::Delivered(None),
        sites("bare-paid").as_deref(),
    );
    let bare_unpaid = per_request(
        runtime,
        bare,
        unpaid(),
        Expect::Delivered(None),
        sites("bare-402").as_deref(),
    );
    let paid_count = per_request(
        runtime,
        paid.clone(),
        paying(),
        Expect::Delivered(Some("payment-response")),
        sites("paid").as_deref(),
    );
    let unpaid_count = per_request(
        runtime,
        paid,
        unpaid(),
        Expect::PaymentRequired,
        sites("402").as_deref(),
    );
    Row {
        name: name.to_owned(),
        paid: paid_count.beyond(bare_paid),
        unpaid: unpaid_count.beyond(bare_unpaid),
        bare: bare_paid,
    }
}

/// A GET of [`PATH`], with `payment` in `PAYMENT-SIGNATURE` when given.
fn request(payment: Option<&String>) -> Request<Body> {
    let mut builder = Request::get(PATH);
    if let Some(payment) = payment {
        builder = builder.header("payment-signature", payment.as_str());
    }
    builder.body(Body::empty()).expect("a request")
}
