//! The script: what [`SandboxFacilitator`] answers to each `/verify` and `/settle` call, and the
//! faults it injects — the ways a real facilitator's answer goes wrong or gets lost after the
//! money moved.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tower_x402::facilitator::Endpoint;
use x402_wire::{FacilitatorRequest, SettleResponse, VerifyResponse};

use crate::SandboxFacilitator;
use crate::verify::Signatures;

/// What the facilitator does with one `/verify` or `/settle` call.
///
/// Over HTTP ([`SandboxFacilitator::router`]) each step is what a client sees on the wire. In
/// process (the [`Facilitator`](tower_x402::Facilitator) implementation) a transport fault
/// becomes the [`FacilitatorError`](tower_x402::FacilitatorError) an HTTP client would report:
/// a status is `Status`, garbage is `Malformed`, silence is `TimedOut` (at once), a closed
/// connection is `Unreachable`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Step {
    /// The sandbox's own answer: the signature recovered and checked, the ledger consulted;
    /// `/settle` moves the funds.
    #[default]
    Answer,
    /// The sandbox's answer with the signature taken as the payer's, unread: for payments whose
    /// signature is made up. Every other check holds and `/settle` still moves the funds, each
    /// nonce once.
    Trust,
    /// `isValid: false` / `success: false` with this reason, and nothing settles.
    Refuse(String),
    /// `/settle` answers `success: false`, `settlement_pending`, without ever settling
    /// (`/verify` answers as [`Answer`](Self::Answer)).
    Pending,
    /// `/settle` settles, but answers `settlement_pending` with the transaction, as a facilitator
    /// whose receipt wait timed out; the identical request sent again is then answered with the
    /// settlement (`/verify` answers as [`Answer`](Self::Answer)).
    PendingThenSettled,
    /// Answers this HTTP status with a body that is not the protocol's, and does nothing: the
    /// request never reached the facilitator.
    Status(u16),
    /// Answers 200 with a body that is not JSON, and does nothing.
    Garbage,
    /// Never answers, and does nothing (the caller's timeout decides).
    Hang,
    /// Closes the connection without answering, and does nothing.
    Unreachable,
    /// Does the work (settles), then answers 504, as a proxy whose upstream answer timed out.
    AnswerLost,
    /// Does the work (settles), then closes the connection without answering.
    ConnectionReset,
    /// Does the work (settles), then never answers.
    NoAnswer,
    /// Waits, then does what `then` says.
    Delayed {
        /// How long to wait.
        delay: Duration,
        /// What to do then.
        then: Box<Step>,
    },
}

impl Step {
    /// The step this one comes to after its delays.
    fn last(&self) -> &Self {
        let mut step = self;
        while let Self::Delayed { then, .. } = step {
            step = then;
        }
        step
    }

    /// `self`, after `delay`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_x402_sandbox::Step;
    ///
    /// let slow = Step::Trust.after(Duration::from_millis(50));
    /// assert!(matches!(slow, Step::Delayed { .. }));
    /// ```
    #[must_use]
    pub fn after(self, delay: Duration) -> Self {
        Self::Delayed {
            delay,
            then: Box::new(self),
        }
    }

    /// The fault named `name` in kebab case, as the command-line examples take it: `none`
    /// ([`Answer`](Self::Answer)), `answer-lost`, `connection-reset`, `no-answer`,
    /// `lost-before-settling` (a 504 without settling), `pending-then-settled`, `stays-pending`
    /// ([`Pending`](Self::Pending)), `refused` (`insufficient_funds`), `server-error` (a 500
    /// without settling).
    ///
    /// ```
    /// use tower_x402_sandbox::Step;
    ///
    /// assert_eq!(Step::from_name("lost-before-settling"), Some(Step::Status(504)));
    /// assert_eq!(Step::from_name("server-error"), Some(Step::Status(500)));
    /// assert_eq!(Step::from_name("sideways"), None);
    /// ```
    pub fn from_name(name: &str) -> Option<Self> {
        Some(match name {
            "none" => Self::Answer,
            "answer-lost" => Self::AnswerLost,
            "connection-reset" => Self::ConnectionReset,
            "no-answer" => Self::NoAnswer,
            "lost-before-settling" => Self::Status(504),
            "pending-then-settled" => Self::PendingThenSettled,
            "stays-pending" => Self::Pending,
            "refused" => Self::Refuse("insufficient_funds".to_owned()),
            "server-error" => Self::Status(500),
            _ => return None,
        })
    }
}

/// What a scripted call comes to, before it is put on the wire or turned into an error.
#[derive(Debug)]
pub(crate) enum Reply<T> {
    /// A protocol answer, HTTP 200.
    Answer(T),
    /// This HTTP status with a body that is not the protocol's.
    Status(u16),
    /// HTTP 200 with a body that is not JSON.
    Garbage,
    /// No answer, ever.
    Hang,
    /// The connection closed without an answer.
    Drop,
}

/// The steps queued and standing for one endpoint.
#[derive(Debug, Default)]
struct Lane {
    standing: Step,
    queue: VecDeque<Step>,
}

/// The script of one facilitator and its clones.
#[derive(Debug, Default)]
pub(crate) struct Script {
    verify: Mutex<Lane>,
    settle: Mutex<Lane>,
    /// Settlements answered `settlement_pending`, by request, answered on a re-send.
    pending: Mutex<HashMap<String, SettleResponse>>,
    verify_calls: AtomicUsize,
    settle_calls: AtomicUsize,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Script {
    fn lane(&self, endpoint: Endpoint) -> &Mutex<Lane> {
        if endpoint == Endpoint::Verify {
            &self.verify
        } else {
            &self.settle
        }
    }

    fn calls(&self, endpoint: Endpoint) -> &AtomicUsize {
        if endpoint == Endpoint::Verify {
            &self.verify_calls
        } else {
            &self.settle_calls
        }
    }

    pub(crate) fn set_standing(&self, endpoint: Endpoint, step: Step) {
        lock(self.lane(endpoint)).standing = step;
    }

    pub(crate) fn queue(&self, endpoint: Endpoint, step: Step) {
        lock(self.lane(endpoint)).queue.push_back(step);
    }

    pub(crate) fn call_count(&self, endpoint: Endpoint) -> usize {
        self.calls(endpoint).load(Ordering::SeqCst)
    }

    /// Counts a call and takes its step, with whether the standing step trusts signatures.
    pub(crate) fn next(&self, endpoint: Endpoint) -> (Step, bool) {
        self.calls(endpoint).fetch_add(1, Ordering::SeqCst);
        let mut lane = lock(self.lane(endpoint));
        let trusting = *lane.standing.last() == Step::Trust;
        let step = match lane.queue.pop_front() {
            Some(step) => step,
            None => lane.standing.clone(),
        };
        (step, trusting)
    }

    fn remember(&self, request: &FacilitatorRequest, settled: SettleResponse) {
        if let Ok(key) = serde_json::to_string(request) {
            lock(&self.pending).insert(key, settled);
        }
    }

    fn remembered(&self, request: &FacilitatorRequest) -> Option<SettleResponse> {
        let pending = lock(&self.pending);
        if pending.is_empty() {
            return None;
        }
        let key = serde_json::to_string(request).ok()?;
        pending.get(&key).cloned()
    }
}

/// Waits out the delays in front of `step`; then how its work (if any) reads signatures: as
/// the step says, or else as the standing step does.
pub(crate) async fn arrive(mut step: Step, trusting: bool) -> (Step, Signatures) {
    while let Step::Delayed { delay, then } = step {
        tokio::time::sleep(delay).await;
        step = *then;
    }
    let signatures = match step {
        Step::Trust => Signatures::Trust,
        Step::Answer => Signatures::Recover,
        _ if trusting => Signatures::Trust,
        _ => Signatures::Recover,
    };
    (step, signatures)
}

/// The transport faults, with `work` done first where the step says the work is done.
pub(crate) fn transport<T>(step: &Step, work: impl FnOnce() -> T) -> Reply<T> {
    match step {
        Step::Status(code) => Reply::Status(*code),
        Step::Garbage => Reply::Garbage,
        Step::Hang => Reply::Hang,
        Step::Unreachable => Reply::Drop,
        Step::AnswerLost => {
            work();
            Reply::Status(504)
        }
        Step::ConnectionReset => {
            work();
            Reply::Drop
        }
        Step::NoAnswer => {
            work();
            Reply::Hang
        }
        _ => Reply::Answer(work()),
    }
}

/// The payer the authorization names, if it is an `exact` EVM payment.
fn claimed_payer(request: &FacilitatorRequest) -> Option<String> {
    let payload = request.payment_payload();
    match payload.exact_evm() {
        Ok(exact) => Some(exact.authorization.from),
        Err(_) => Some(payload.upto_evm().ok()?.permit2_authorization.from),
    }
}

impl SandboxFacilitator {
    /// `/verify` as the script says.
    pub(crate) async fn scripted_verify(
        &self,
        request: &FacilitatorRequest,
    ) -> Reply<VerifyResponse> {
        let (step, trusting) = self.script().next(Endpoint::Verify);
        match arrive(step, trusting).await {
            (Step::Refuse(reason), _) => Reply::Answer(VerifyResponse {
                is_valid: false,
                invalid_reason: Some(reason),
                payer: claimed_payer(request),
                ..VerifyResponse::default()
            }),
            (step, signatures) => transport(&step, || self.verify_checking(request, signatures)),
        }
    }

    /// `/settle` as the script says.
    pub(crate) async fn scripted_settle(
        &self,
        request: &FacilitatorRequest,
    ) -> Reply<SettleResponse> {
        let (step, trusting) = self.script().next(Endpoint::Settle);
        let network = || request.payment_requirements().network.clone();
        match arrive(step, trusting).await {
            (Step::Refuse(reason), _) => {
                let mut refused = SettleResponse::failure(network(), reason);
                refused.payer = claimed_payer(request);
                Reply::Answer(refused)
            }
            (Step::Pending, _) => {
                let mut pending = SettleResponse::failure(network(), "settlement_pending");
                pending.transaction = format!("0x{}", "0".repeat(64));
                Reply::Answer(pending)
            }
            (Step::PendingThenSettled, signatures) => {
                let settled = self.settle_checking(request, signatures);
                if !settled.success {
                    return Reply::Answer(settled);
                }
                let mut pending = SettleResponse::failure(network(), "settlement_pending");
                pending.transaction.clone_from(&settled.transaction);
                self.script().remember(request, settled);
                Reply::Answer(pending)
            }
            (step, signatures) => transport(&step, || {
                self.script()
                    .remembered(request)
                    .unwrap_or_else(|| self.settle_checking(request, signatures))
            }),
        }
    }
}
