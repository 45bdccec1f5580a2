//! Several facilitators in order of preference, each behind a circuit breaker.
//!
//! `/verify` and new settlements go to the first facilitator whose breaker admits a request;
//! `/verify` moves on to the next one when a facilitator gives no answer. `/settle` never moves
//! on: a `/settle` that got no answer may have moved money, so the payment's intent records the
//! facilitator's label and every retry of that payment goes to it alone. Failed settlements
//! still count towards the breaker, apart from `/verify`'s answers, so that a facilitator that
//! verifies but cannot settle stops getting new sales.

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use x402_wire::{FacilitatorRequest, SettleResponse, VerifyResponse};

use super::{Facilitator, FacilitatorError};

/// The label of the facilitator a lone [`Facilitator`] is given.
pub const DEFAULT_LABEL: &str = "default";

/// Consecutive transport failures that open a breaker (default).
const DEFAULT_FAILURES_TO_OPEN: u32 = 3;

/// How long an open breaker waits before letting one trial request through (default).
const DEFAULT_PAUSE: Duration = Duration::from_secs(30);

/// Facilitators in order of preference, each with a circuit breaker.
///
/// A breaker opens after [`failures_to_open`](Self::failures_to_open) consecutive failures of
/// either kind, each counted on its own:
///
/// - `/verify` transport failures (no answer at all: unreachable, timed out, 429/502/503/504);
///   a negative answer (`isValid: false`) is an answer and resets this count;
/// - `/settle` failures: no answer, a timeout, an error status (a 500 too) or an answer that
///   could not be read. Only a `/settle` answer resets this count — a successful `/verify` does
///   not, so a facilitator that verifies every payment but settles none is routed around.
///
/// After [`pause`](Self::pause) one trial request goes through: an answer closes the breaker
/// (for a breaker opened by `/settle` failures, only a `/settle` answer does), a failure opens
/// it again. When every breaker is open the first facilitator is asked anyway. An open breaker
/// only turns new sales away: the retries of a payment whose settlement is in doubt still go to
/// the facilitator it was sent to.
///
/// ```
/// use std::sync::Arc;
/// use tower_x402::facilitator::{Facilitator, Facilitators};
/// # fn demo(primary: Arc<dyn Facilitator>, secondary: Arc<dyn Facilitator>) {
/// let facilitators = Facilitators::new("primary", primary)
///     .then("secondary", secondary)
///     .failures_to_open(5)
///     .pause(std::time::Duration::from_secs(10));
/// assert_eq!(facilitators.labels().collect::<Vec<_>>(), ["primary", "secondary"]);
/// # }
/// ```
#[derive(Clone)]
#[must_use]
pub struct Facilitators {
    members: Vec<Arc<Member>>,
    failures_to_open: u32,
    pause: Duration,
    /// Told of every breaker's state ([`on_breaker`](Self::on_breaker)).
    observer: Option<BreakerObserver>,
    /// Whether each call runs in an `x402.verify` or `x402.settle` span.
    spans: bool,
}

/// A function told a facilitator's label and whether its breaker is open.
type BreakerObserver = Arc<dyn Fn(&str, bool) + Send + Sync>;

/// One facilitator, its label and its breaker.
pub(crate) struct Member {
    pub(crate) label: Arc<str>,
    pub(crate) facilitator: Arc<dyn Facilitator>,
    /// Shared by the copies [`Facilitators::map`] makes, so every clone sees one breaker.
    breaker: Arc<Mutex<Breaker>>,
}

/// A breaker's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Breaker {
    /// Requests go through; consecutive `/verify` transport failures and `/settle` failures so
    /// far, each counted on its own.
    Closed { verify: u32, settle: u32 },
    /// No requests since `since`, until the pause has passed; `settle` when `/settle` failures
    /// opened it.
    Open { since: Instant, settle: bool },
    /// One trial request is on its way since `since` (a trial whose caller went away without
    /// an outcome is replaced by another after the pause); `settle` when only a `/settle`
    /// answer closes it.
    HalfOpen { since: Instant, settle: bool },
}

/// Which call an outcome is of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Call {
    Verify,
    Settle,
}

impl Breaker {
    const CLOSED: Self = Self::Closed {
        verify: 0,
        settle: 0,
    };
}

impl Facilitators {
    /// Whether one facilitator is configured, none to fail over to.
    pub(crate) fn is_single(&self) -> bool {
        self.members.len() == 1
    }

    /// A list whose first (most preferred) facilitator is `facilitator`, named `label` in the
    /// ledger and the metrics. Labels should be short and stable: a payment's retries find their
    /// facilitator by it, after a restart too.
    pub fn new(label: impl Into<Arc<str>>, facilitator: Arc<dyn Facilitator>) -> Self {
        Self {
            members: vec![Member::new(label.into(), facilitator)],
            failures_to_open: DEFAULT_FAILURES_TO_OPEN,
            pause: DEFAULT_PAUSE,
            observer: None,
            spans: true,
        }
    }

    /// Adds `facilitator`, named `label`, after those already listed.
    pub fn then(mut self, label: impl Into<Arc<str>>, facilitator: Arc<dyn Facilitator>) -> Self {
        let member = Member::new(label.into(), facilitator);
        if let Some(observer) = &self.observer {
            observer(&member.label, member.is_open());
        }
        self.members.push(member);
        self
    }

    /// Consecutive transport failures that open a facilitator's breaker (default 3, at least 1).
    pub fn failures_to_open(mut self, failures: u32) -> Self {
        self.failures_to_open = failures.max(1);
        self
    }

    /// How long an open breaker waits before one trial request (default 30 s).
    pub fn pause(mut self, pause: Duration) -> Self {
        self.pause = pause;
        self
    }

    /// Whether each `/verify` and `/settle` runs in a tracing span (`x402.verify`, with the
    /// payment's network and scheme; `x402.settle`, with the facilitator's label too). On by
    /// default; off, a call costs no span even under a subscriber that records them (what the
    /// load benchmark's variant without the guarantees measures).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use tower_x402::facilitator::{Facilitator, Facilitators};
    /// # fn demo(facilitator: Arc<dyn Facilitator>) {
    /// let quiet = Facilitators::new("default", facilitator).tracing_spans(false);
    /// # let _ = quiet;
    /// # }
    /// ```
    pub fn tracing_spans(mut self, enabled: bool) -> Self {
        self.spans = enabled;
        self
    }

    /// The span a `/verify` of `request` runs in ([`tracing_spans`](Self::tracing_spans)).
    pub(crate) fn verify_span(&self, request: &FacilitatorRequest) -> tracing::Span {
        if !self.spans {
            return tracing::Span::none();
        }
        let requirement = request.payment_requirements();
        tracing::info_span!("x402.verify", network = %requirement.network, scheme = %requirement.scheme)
    }

    /// The span a `/settle` of `request` at `member` runs in.
    pub(crate) fn settle_span(
        &self,
        member: &Member,
        request: &FacilitatorRequest,
    ) -> tracing::Span {
        if !self.spans {
            return tracing::Span::none();
        }
        let requirement = request.payment_requirements();
        tracing::info_span!("x402.settle", network = %requirement.network, scheme = %requirement.scheme, facilitator = %member.label)
    }

    /// Tells `observer` whether each facilitator's breaker is open: at once for every facilitator
    /// listed (and for those added later), then whenever a breaker's state changes. The
    /// [`metrics`](https://docs.rs/metrics) gauge `x402_facilitator_circuit_open` is one such
    /// observer; an observer replaces the one set before.
    ///
    /// ```
    /// use std::sync::{Arc, Mutex};
    /// use tower_x402::facilitator::{Facilitator, Facilitators};
    /// # fn demo(primary: Arc<dyn Facilitator>) {
    /// let seen = Arc::new(Mutex::new(Vec::new()));
    /// let told = Arc::clone(&seen);
    /// let facilitators = Facilitators::new("primary", primary)
    ///     .on_breaker(move |label, open| told.lock().unwrap().push((label.to_owned(), open)));
    /// assert_eq!(*seen.lock().unwrap(), [("primary".to_owned(), false)]);
    /// # let _ = facilitators;
    /// # }
    /// ```
    pub fn on_breaker(mut self, observer: impl Fn(&str, bool) + Send + Sync + 'static) -> Self {
        for member in &self.members {
            observer(&member.label, member.is_open());
        }
        self.observer = Some(Arc::new(observer));
        self
    }

    /// The labels, in order of preference.
    pub fn labels(&self) -> impl Iterator<Item = &str> {
        self.members.iter().map(|member| &*member.label)
    }

    /// The facilitators with their labels, in order of preference (for `/supported` and
    /// readiness checks, which the layer never makes).
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Arc<dyn Facilitator>)> {
        self.members
            .iter()
            .map(|member| (&*member.label, &member.facilitator))
    }

    /// Whether the breaker of the facilitator named `label` is open (it is not asked until its
    /// pause has passed). `None` for an unknown label.
    pub fn is_open(&self, label: &str) -> Option<bool> {
        let member = self.members.iter().find(|member| &*member.label == label)?;
        Some(member.is_open())
    }

    /// Each facilitator wrapped by `wrap` (given its label and the facilitator), labels and
    /// breakers kept: how a plug-in (the [`metrics`](https://docs.rs/metrics) timing of
    /// each call) sees every call to each facilitator.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use tower_x402::facilitator::{Facilitator, Facilitators};
    /// # fn demo(primary: Arc<dyn Facilitator>, secondary: Arc<dyn Facilitator>) {
    /// let facilitators = Facilitators::new("primary", primary)
    ///     .then("secondary", secondary)
    ///     .map(|label, facilitator| {
    ///         println!("{label} wrapped");
    ///         facilitator
    ///     });
    /// # let _ = facilitators;
    /// # }
    /// ```
    pub fn map(
        mut self,
        wrap: impl Fn(&str, Arc<dyn Facilitator>) -> Arc<dyn Facilitator>,
    ) -> Self {
        self.members = self
            .members
            .iter()
            .map(|member| {
                Arc::new(Member {
                    label: Arc::clone(&member.label),
                    facilitator: wrap(&member.label, Arc::clone(&member.facilitator)),
                    breaker: Arc::clone(&member.breaker),
                })
            })
            .collect();
        self
    }

    /// The facilitator new work goes to: the first whose breaker admits a request, else the
    /// first.
    pub(crate) fn preferred(&self) -> &Arc<Member> {
        self.members
            .iter()
            .find(|member| member.admits(self.pause))
            .unwrap_or(&self.members[0])
    }

    /// The facilitator named `label`; `None` (an intent written before labels) is the first. An
    /// unknown label is `None`: the payment must not go anywhere else.
    pub(crate) fn named(&self, label: Option<&str>) -> Option<&Arc<Member>> {
        match label {
            None => self.members.first(),
            Some(label) => self.members.iter().find(|member| &*member.label == label),
        }
    }

    /// `/verify` at the first admitting facilitator, moving on to the next admitting one while
    /// they give no answer. The last failure is returned when none answers. The label is the
    /// facilitator that answered (or failed last): the payment's `/settle` goes there too.
    pub(crate) async fn verify(
        &self,
        request: &FacilitatorRequest,
    ) -> (Arc<str>, Result<VerifyResponse, FacilitatorError>) {
        let mut member = Arc::clone(self.preferred());
        loop {
            let answer = member.facilitator.verify(request).await;
            let failed = answer.as_ref().is_err_and(FacilitatorError::is_unavailable);
            self.record(&member, Call::Verify, failed);
            match answer {
                Err(failure) if failure.is_unavailable() => {
                    let position = self.position(&member);
                    let next = self.members[position + 1..]
                        .iter()
                        .find(|next| next.admits(self.pause));
                    match next {
                        Some(next) => {
                            tracing::warn!(error = %failure, from = %member.label, to = %next.label, "facilitator gave no answer to /verify; trying the next");
                            member = Arc::clone(next);
                        }
                        None => return (Arc::clone(&member.label), Err(failure)),
                    }
                }
                other => return (Arc::clone(&member.label), other),
            }
        }
    }

    /// `/settle` at `member` only, its outcome recorded in its breaker: any failure to get an
    /// answer counts (a 500 or a lost answer as much as a timeout).
    pub(crate) async fn settle(
        &self,
        member: &Member,
        request: &FacilitatorRequest,
    ) -> Result<SettleResponse, FacilitatorError> {
        let answer = member.facilitator.settle(request).await;
        self.record(member, Call::Settle, answer.is_err());
        answer
    }

    fn position(&self, member: &Member) -> usize {
        self.members
            .iter()
            .position(|each| std::ptr::eq(&**each, member))
            .unwrap_or(self.members.len() - 1)
    }

    /// Counts a call's outcome: a failure towards opening (each call's failures counted on
    /// their own), an answer resets that call's count and closes a half-open breaker it may
    /// close.
    fn record(&self, member: &Member, call: Call, failed: bool) {
        let limit = self.failures_to_open;
        let open = |settle| Breaker::Open {
            since: Instant::now(),
            settle,
        };
        let mut breaker = member.lock();
        let next = match (*breaker, call, failed) {
            (Breaker::Closed { settle, .. }, Call::Verify, false) => {
                Breaker::Closed { verify: 0, settle }
            }
            (Breaker::Closed { verify, .. }, Call::Settle, false) => {
                Breaker::Closed { verify, settle: 0 }
            }
            (Breaker::Closed { verify, settle }, Call::Verify, true) if verify + 1 < limit => {
                Breaker::Closed {
                    verify: verify + 1,
                    settle,
                }
            }
            (Breaker::Closed { verify, settle }, Call::Settle, true) if settle + 1 < limit => {
                Breaker::Closed {
                    verify,
                    settle: settle + 1,
                }
            }
            (Breaker::Closed { .. }, call, true) => open(call == Call::Settle),
            // A `/verify` answer says nothing of a facilitator that could not settle.
            (
                state @ (Breaker::Open { settle: true, .. }
                | Breaker::HalfOpen { settle: true, .. }),
                Call::Verify,
                false,
            ) => state,
            (Breaker::Open { .. } | Breaker::HalfOpen { .. }, _, false) => Breaker::CLOSED,
            (Breaker::Open { settle, .. } | Breaker::HalfOpen { settle, .. }, call, true) => {
                open(settle || call == Call::Settle)
            }
        };
        if next != *breaker {
            if matches!(next, Breaker::Open { .. }) && !matches!(*breaker, Breaker::Open { .. }) {
                tracing::warn!(facilitator = %member.label, "facilitator circuit opened");
            }
            if matches!(next, Breaker::Closed { .. }) && !matches!(*breaker, Breaker::Closed { .. })
            {
                tracing::info!(facilitator = %member.label, "facilitator circuit closed");
            }
            *breaker = next;
            drop(breaker);
            if let Some(observer) = &self.observer {
                observer(&member.label, member.is_open());
            }
        }
    }
}

impl Member {
    fn new(label: Arc<str>, facilitator: Arc<dyn Facilitator>) -> Arc<Self> {
        Arc::new(Self {
            label,
            facilitator,
            breaker: Arc::new(Mutex::new(Breaker::CLOSED)),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Breaker> {
        // A poisoned breaker is still a valid state.
        self.breaker
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn state(&self) -> Breaker {
        *self.lock()
    }

    /// Whether a request may go here now; an open breaker whose pause has passed lets this one
    /// through as its trial.
    fn admits(&self, pause: Duration) -> bool {
        let mut breaker = self.lock();
        match *breaker {
            Breaker::Closed { .. } => true,
            Breaker::Open { since, settle } | Breaker::HalfOpen { since, settle }
                if since.elapsed() >= pause =>
            {
                *breaker = Breaker::HalfOpen {
                    since: Instant::now(),
                    settle,
                };
                true
            }
            Breaker::Open { .. } | Breaker::HalfOpen { .. } => false,
        }
    }

    /// Whether the breaker is open or half-open.
    fn is_open(&self) -> bool {
        !matches!(self.state(), Breaker::Closed { .. })
    }
}

impl fmt::Debug for Facilitators {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Facilitators")
            .field("labels", &self.labels().collect::<Vec<_>>())
            .field("failures_to_open", &self.failures_to_open)
            .field("pause", &self.pause)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::boxed::BoxFuture;
    use crate::facilitator::Endpoint;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    /// Answers `/verify` valid, or fails as unreachable while `down`.
    #[derive(Default)]
    struct Switch {
        down: AtomicBool,
        calls: AtomicUsize,
    }

    impl Facilitator for Switch {
        fn verify<'a>(
            &'a self,
            _: &'a FacilitatorRequest,
        ) -> BoxFuture<'a, Result<VerifyResponse, FacilitatorError>> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            let answer = if self.down.load(Ordering::SeqCst) {
                Err(FacilitatorError::Unreachable {
                    endpoint: Endpoint::Verify,
                    source: Arc::new(std::io::Error::from(std::io::ErrorKind::ConnectionRefused)),
                })
            } else {
                Ok(serde_json::from_value(serde_json::json!({"isValid": true})).unwrap())
            };
            Box::pin(std::future::ready(answer))
        }

        fn settle<'a>(
            &'a self,
            _: &'a FacilitatorRequest,
        ) -> BoxFuture<'a, Result<SettleResponse, FacilitatorError>> {
            unreachable!("not settled in these tests")
        }
    }

    #[test]
    fn the_breaker_opens_after_consecutive_failures_and_a_trial_closes_it() {
        let facilitators = Facilitators::new("a", Arc::new(Switch::default()))
            .failures_to_open(2)
            .pause(Duration::ZERO);
        let member = Arc::clone(facilitators.preferred());
        let failure = FacilitatorError::TimedOut {
            endpoint: Endpoint::Verify,
            after: Duration::from_secs(1),
        };
        facilitators.record(&member, Call::Verify, failure.is_unavailable());
        assert_eq!(facilitators.is_open("a"), Some(false));
        facilitators.record(&member, Call::Verify, failure.is_unavailable());
        assert_eq!(facilitators.is_open("a"), Some(true));
        assert!(member.admits(Duration::ZERO), "the pause passed: one trial");
        assert!(
            !member.admits(Duration::from_secs(60)),
            "one trial per pause"
        );
        facilitators.record(&member, Call::Verify, false);
        assert_eq!(facilitators.is_open("a"), Some(false));
    }

    #[test]
    fn a_failed_trial_opens_the_breaker_again_for_a_new_pause() {
        let facilitators = Facilitators::new("a", Arc::new(Switch::default())).failures_to_open(3);
        let member = Arc::clone(facilitators.preferred());
        let failure = FacilitatorError::TimedOut {
            endpoint: Endpoint::Verify,
            after: Duration::from_secs(1),
        };
        for _ in 0..3 {
            facilitators.record(&member, Call::Verify, failure.is_unavailable());
        }
        assert_eq!(facilitators.is_open("a"), Some(true));
        assert!(
            !member.admits(Duration::from_secs(60)),
            "no request before the pause"
        );
        assert!(member.admits(Duration::ZERO), "the pause passed: one trial");
        // One failed trial opens it again, without counting up to three.
        facilitators.record(&member, Call::Verify, failure.is_unavailable());
        assert_eq!(facilitators.is_open("a"), Some(true));
        assert!(
            !member.admits(Duration::from_secs(60)),
            "a new pause starts with the failed trial"
        );
    }

    #[test]
    fn settle_failures_open_the_breaker_whatever_verify_answers_and_only_a_settle_closes_it() {
        let facilitators = Facilitators::new("a", Arc::new(Switch::default()))
            .failures_to_open(2)
            .pause(Duration::ZERO);
        let member = Arc::clone(facilitators.preferred());
        for _ in 0..2 {
            facilitators.record(&member, Call::Verify, false);
            facilitators.record(&member, Call::Settle, true);
        }
        assert_eq!(facilitators.is_open("a"), Some(true));
        assert!(member.admits(Duration::ZERO), "the pause passed: one trial");
        facilitators.record(&member, Call::Verify, false);
        assert_eq!(
            facilitators.is_open("a"),
            Some(true),
            "a verified trial says nothing of settling"
        );
        facilitators.record(&member, Call::Settle, false);
        assert_eq!(
            facilitators.is_open("a"),
            Some(false),
            "a settle answer closes it"
        );
    }

    #[tokio::test]
    async fn verify_fails_over_and_skips_an_open_breaker() {
        let primary = Arc::new(Switch::default());
        let secondary = Arc::new(Switch::default());
        primary.down.store(true, Ordering::SeqCst);
        let facilitators = Facilitators::new("a", primary.clone() as Arc<dyn Facilitator>)
            .then("b", secondary.clone() as Arc<dyn Facilitator>)
            .failures_to_open(2);
        let request: FacilitatorRequest = serde_json::from_value(serde_json::json!({
            "x402Version": 2,
            "paymentPayload": {"x402Version": 2, "accepted": {"scheme": "exact", "network": "eip155:84532", "amount": "1", "asset": "0x0", "payTo": "0x0", "maxTimeoutSeconds": 60}, "payload": {}},
            "paymentRequirements": {"scheme": "exact", "network": "eip155:84532", "amount": "1", "asset": "0x0", "payTo": "0x0", "maxTimeoutSeconds": 60}
        }))
        .unwrap();
        for _ in 0..4 {
            let (label, answer) = facilitators.verify(&request).await;
            assert!(answer.unwrap().is_valid);
            assert_eq!(&*label, "b");
        }
        assert_eq!(primary.calls.load(Ordering::SeqCst), 2, "open after two");
        assert_eq!(secondary.calls.load(Ordering::SeqCst), 4);
        assert_eq!(facilitators.is_open("a"), Some(true));
    }
}
