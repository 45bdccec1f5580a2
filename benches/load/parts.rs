//! The paid path taken apart: which of its parts the app of `x402-load app --part` replaces,
//! one at a time, so that `run.sh --parts` can measure what each costs on the clock against the
//! full path and the peers. Only parts an application can choose through tower-x402's public
//! API are here.

use std::sync::Arc;
use std::time::Duration;

use tower_x402::BoxFuture;
use tower_x402::facilitator::{
    DEFAULT_LABEL, Endpoint, Facilitator, FacilitatorError, Facilitators, HttpFacilitatorBuilder,
};
use tower_x402::payment::Payments;
use tower_x402::settlement::{
    LedgerEntry, MemorySettlementStore, PaymentKey, PaymentState, SettlementStore, StoreError,
};
use tower_x402_benches::PaymentCounter;
use x402_wire::{FacilitatorRequest, SettleResponse, VerifyResponse};

/// One variant of the paid path.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Part {
    /// The path as an application gets it: the memory ledger (10,000 settled payments kept),
    /// no event observer, HTTP/1.1 to the facilitator.
    Full,
    /// A ledger that keeps nothing: every read finds nothing, every write succeeds. What the
    /// ledger's three writes per payment cost (never for production: it forgets every payment).
    LedgerNoop,
    /// The memory ledger keeping one settled payment instead of 10,000: its map stays a few
    /// entries, which fit in cache.
    LedgerSmall,
    /// A hook observing every payment received and settled, as metrics do (the path with a
    /// hook registered).
    Events,
    /// HTTP/2 (prior knowledge) to the facilitator: one multiplexed connection.
    Http2,
    /// No facilitator client: the stub's facilitator (the sandbox, trusting the signatures) in
    /// the app's own process, so neither HTTP call nor its deadline timer is on the path (what
    /// the client and the two round trips cost). The facilitator's work moves from the stub's
    /// CPU into the app's; the app serves the stub's `/stats` itself.
    FacilitatorInProcess,
    /// The facilitator over HTTP/1.1 through a minimal client: a `reqwest::Client` with its
    /// default settings posting JSON to `/verify` and `/settle` and parsing the answers, with no
    /// deadline, retry, auth or redirect policy of its own (as x402-axum's client works). What
    /// tower-x402's client costs on the clock beyond the HTTP calls themselves.
    ReqwestPlain,
    /// Every guarantee x402-axum does not give switched off through the core's configuration:
    /// no deadline on a facilitator call (`HttpFacilitatorBuilder::verify_timeout` and
    /// `settle_timeout` at `Duration::MAX`), no `x402.verify` and `x402.settle` spans
    /// (`Facilitators::tracing_spans(false)`), a settlement dropped with its request
    /// (`Payments::settlement_outlives_request(false)`), no memory of refused payments nor of
    /// recent settlements (`refusal_memory(Duration::ZERO)`, `recent_settlements(0)`), and the
    /// ledger that keeps nothing of [`LedgerNoop`](Part::LedgerNoop). Never for production.
    GuaranteesOff,
}

impl Part {
    /// Whether the facilitator client speaks HTTP/2.
    pub(crate) fn http2(self) -> bool {
        self == Part::Http2
    }

    /// Whether the facilitator is in process rather than reached over HTTP.
    pub(crate) fn facilitator_in_process(self) -> bool {
        self == Part::FacilitatorInProcess
    }

    /// Whether the facilitator is reached through [`PlainClient`] instead of `HttpFacilitator`.
    pub(crate) fn reqwest_plain(self) -> bool {
        self == Part::ReqwestPlain
    }

    /// `builder` with this variant's deadlines: none at all in [`GuaranteesOff`](Part::GuaranteesOff).
    pub(crate) fn deadlines(self, builder: HttpFacilitatorBuilder) -> HttpFacilitatorBuilder {
        match self {
            Part::GuaranteesOff => builder
                .verify_timeout(Duration::MAX)
                .settle_timeout(Duration::MAX),
            _ => builder,
        }
    }

    /// The core for `facilitator`, with this variant's spans: none in
    /// [`GuaranteesOff`](Part::GuaranteesOff).
    pub(crate) fn core(self, facilitator: impl Facilitator) -> Payments {
        let facilitators = Facilitators::new(DEFAULT_LABEL, Arc::new(facilitator))
            .tracing_spans(self != Part::GuaranteesOff);
        Payments::with_facilitators(facilitators)
    }

    /// `payments` with this variant's ledger and observers.
    pub(crate) fn apply(self, payments: Payments) -> Payments {
        match self {
            Part::Full | Part::Http2 | Part::FacilitatorInProcess | Part::ReqwestPlain => payments,
            Part::LedgerNoop => payments.settlement_store(NoLedger),
            Part::GuaranteesOff => payments
                .settlement_store(NoLedger)
                .recent_settlements(0)
                .refusal_memory(Duration::ZERO)
                .settlement_outlives_request(false),
            Part::LedgerSmall => payments.settlement_store(MemorySettlementStore::new(1)),
            Part::Events => payments.hook(PaymentCounter::default()),
        }
    }
}

/// A facilitator client as plain as one can be: JSON POSTs through a default `reqwest::Client`,
/// the answer parsed whatever its status. No deadline, retry, auth or redirect policy.
pub(crate) struct PlainClient {
    client: reqwest::Client,
    verify: reqwest::Url,
    settle: reqwest::Url,
}

impl PlainClient {
    /// A client for the facilitator at the base URL `base`.
    pub(crate) fn new(base: &str) -> Result<Self, String> {
        let base = base.trim_end_matches('/');
        let url = |path: &str| {
            reqwest::Url::parse(&format!("{base}/{path}")).map_err(|error| error.to_string())
        };
        Ok(Self {
            client: reqwest::Client::new(),
            verify: url("verify")?,
            settle: url("settle")?,
        })
    }

    async fn post<T: serde::de::DeserializeOwned>(
        &self,
        endpoint: Endpoint,
        url: &reqwest::Url,
        request: &FacilitatorRequest,
    ) -> Result<T, FacilitatorError> {
        let unreachable = |error: reqwest::Error| FacilitatorError::Unreachable {
            endpoint,
            source: Arc::new(error),
        };
        let response = self
            .client
            .post(url.clone())
            .json(request)
            .send()
            .await
            .map_err(unreachable)?;
        let body = response.bytes().await.map_err(unreachable)?;
        serde_json::from_slice(&body).map_err(|error| FacilitatorError::Malformed {
            endpoint,
            message: error.to_string(),
        })
    }
}

impl Facilitator for PlainClient {
    fn verify<'a>(
        &'a self,
        request: &'a FacilitatorRequest,
    ) -> BoxFuture<'a, Result<VerifyResponse, FacilitatorError>> {
        Box::pin(self.post(Endpoint::Verify, &self.verify, request))
    }

    fn settle<'a>(
        &'a self,
        request: &'a FacilitatorRequest,
    ) -> BoxFuture<'a, Result<SettleResponse, FacilitatorError>> {
        Box::pin(self.post(Endpoint::Settle, &self.settle, request))
    }
}

/// A settlement store that keeps nothing.
struct NoLedger;

impl SettlementStore for NoLedger {
    fn load<'a>(
        &'a self,
        _key: &'a PaymentKey,
    ) -> BoxFuture<'a, Result<Option<LedgerEntry>, StoreError>> {
        Box::pin(std::future::ready(Ok(None)))
    }

    fn insert<'a>(
        &'a self,
        _key: &'a PaymentKey,
        _state: &'a PaymentState,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(std::future::ready(Ok(true)))
    }

    fn replace<'a>(
        &'a self,
        _key: &'a PaymentKey,
        _version: u64,
        _state: &'a PaymentState,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(std::future::ready(Ok(true)))
    }

    fn remove<'a>(
        &'a self,
        _key: &'a PaymentKey,
        _version: u64,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(std::future::ready(Ok(true)))
    }
}
