use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use http::HeaderValue;
use tower_layer::Layer;

use super::events::{PaymentEvent, PaymentEvents};
use super::inflight::Inflight;
use super::record::{MemorySettlementStore, SettlementStore};
use super::{Pricing, X402};
use crate::facilitator::Facilitator;
use crate::proto::header::DEFAULT_MAX_LEN;

/// The headers a browser script may read from a 402 or paid response unless configured
/// otherwise.
pub const DEFAULT_EXPOSE_HEADERS: &str = "PAYMENT-REQUIRED, PAYMENT-RESPONSE";

/// Seconds a client is asked to wait (`Retry-After`) when the facilitator is unavailable and it
/// did not say how long.
pub const DEFAULT_RETRY_AFTER_SECS: u64 = 5;

/// How many settlements the layer remembers in memory beside a custom
/// [`SettlementStore`](X402Layer::settlement_store).
pub const RECENT_SETTLEMENTS: usize = 4096;

/// A [`Layer`] that puts an x402 paywall in front of a service.
///
/// See the [module docs](super) for the request flow and an example.
#[derive(Clone)]
#[must_use]
pub struct X402Layer {
    pub(super) config: Arc<Config>,
}

#[derive(Clone)]
pub(super) struct Config {
    pub(super) facilitator: Arc<dyn Facilitator>,
    pub(super) pricing: Arc<dyn Pricing>,
    pub(super) store: Arc<dyn SettlementStore>,
    /// Recent settlements kept in memory beside an application's own store, so a payment that
    /// settled is still recognised when that store fails to save or to answer.
    pub(super) recent: Option<MemorySettlementStore>,
    pub(super) events: Option<Arc<dyn PaymentEvents>>,
    pub(super) expose_headers: Option<HeaderValue>,
    pub(super) max_header_len: usize,
    pub(super) retry_after: Duration,
    pub(super) inflight: Arc<Inflight>,
}

impl Config {
    /// Reports an event to the hook, building it only when there is one.
    #[inline]
    pub(super) fn emit<'a>(&self, event: impl FnOnce() -> PaymentEvent<'a>) {
        if let Some(events) = &self.events {
            events.on_event(&event());
        }
    }
}

impl X402Layer {
    /// A paywall that asks `pricing` what each request costs and has `facilitator` verify and
    /// settle the payments.
    ///
    /// Defaults: settlement records in a [`MemorySettlementStore`], no event hook,
    /// `Access-Control-Expose-Headers: PAYMENT-REQUIRED, PAYMENT-RESPONSE`, a 16 KiB limit on
    /// `PAYMENT-SIGNATURE`, and `Retry-After: 5` on 503s.
    pub fn new(facilitator: impl Facilitator, pricing: impl Pricing) -> Self {
        Self {
            config: Arc::new(Config {
                facilitator: Arc::new(facilitator),
                pricing: Arc::new(pricing),
                store: Arc::new(MemorySettlementStore::default()),
                recent: None,
                events: None,
                expose_headers: Some(HeaderValue::from_static(DEFAULT_EXPOSE_HEADERS)),
                max_header_len: DEFAULT_MAX_LEN,
                retry_after: Duration::from_secs(DEFAULT_RETRY_AFTER_SECS),
                inflight: Arc::default(),
            }),
        }
    }

    fn config_mut(&mut self) -> &mut Config {
        Arc::make_mut(&mut self.config)
    }

    /// Keeps settlement records in `store` (e.g. the application's database) instead of memory.
    ///
    /// The layer also remembers the last [`RECENT_SETTLEMENTS`] settlements in memory and checks
    /// them first, so that a settled payment is recognised even if `store` failed to save it or
    /// cannot be read for a moment: the buyer's retry is answered, never charged again.
    pub fn settlement_store(mut self, store: impl SettlementStore) -> Self {
        let config = self.config_mut();
        config.store = Arc::new(store);
        config.recent = Some(MemorySettlementStore::new(RECENT_SETTLEMENTS));
        self
    }

    /// Reports every [`PaymentEvent`] to `events`.
    pub fn events(mut self, events: impl PaymentEvents) -> Self {
        self.config_mut().events = Some(Arc::new(events));
        self
    }

    /// The `Access-Control-Expose-Headers` value set on 402 and paid responses, or `None` to set
    /// none (when a CORS layer outside already does).
    pub fn expose_headers(mut self, value: Option<HeaderValue>) -> Self {
        self.config_mut().expose_headers = value;
        self
    }

    /// The largest `PAYMENT-SIGNATURE` value accepted, in encoded bytes (larger → 400).
    pub fn max_payment_header_len(mut self, bytes: usize) -> Self {
        self.config_mut().max_header_len = bytes;
        self
    }

    /// The `Retry-After` sent with a 503 when the facilitator gave no hint.
    pub fn retry_after(mut self, wait: Duration) -> Self {
        self.config_mut().retry_after = wait;
        self
    }
}

impl<S> Layer<S> for X402Layer {
    type Service = X402<S>;

    fn layer(&self, inner: S) -> Self::Service {
        X402 {
            inner,
            config: Arc::clone(&self.config),
        }
    }
}

impl fmt::Debug for X402Layer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.config.fmt(f)
    }
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("X402Layer")
            .field("events", &self.events.is_some())
            .field("expose_headers", &self.expose_headers)
            .field("max_header_len", &self.max_header_len)
            .field("retry_after", &self.retry_after)
            .finish_non_exhaustive()
    }
}
