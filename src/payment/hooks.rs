//! Lifecycle hooks: plug-ins that take part in each payment's life, registered on
//! [`Payments::hook`](super::Payments::hook) and called on every adapter's path (the HTTP
//! layer, metered bodies, MCP tools), since the core calls them.

use std::future::ready;

use http::Extensions;
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use x402_wire::{SettleResponse, VerifyResponse};

use super::context::PaymentContext;
use super::decision::Decision;
use super::event::PaymentEvent;
use super::refusal::Refusal;
use super::request::ProtectedRequest;
use super::stages::HookStages;
use super::verified::VerifiedPayment;
use crate::boxed::BoxFuture;
use crate::facilitator::FacilitatorError;
use crate::pricing::{ExtensionTemplate, Offer};
#[cfg(doc)]
use crate::settlement::PaymentKey;

/// A plug-in that takes part in the life of each payment. Every method has a default that
/// changes nothing, so a hook implements only what it needs; several hooks are asked in the
/// order they were registered, and the first that decides something other than *continue* wins.
///
/// Where the core calls them:
///
/// | method | when | may |
/// |---|---|---|
/// | [`stages`](Self::stages) | once, when the hook is registered | say which of the methods below that take part in a stage it overrides (the default, [`HookStages::NONE`], takes part in none: a hook that only decorates or observes declares nothing) |
/// | [`considers_request`](Self::considers_request) | a priced request arrives, before its payment is read, for a hook that declared [`HookStages::REQUEST`] | say whether `on_protected_request` is asked about this request (no future is built for a request no hook considers) |
/// | [`on_protected_request`](Self::on_protected_request) | the same, when the hook considers the request | grant it without payment, abort it, or continue |
/// | [`challenge_extension`](Self::challenge_extension) | the same, for the request's 402 | add per-request extension data to the challenge |
/// | [`challenge_extension_template`](Self::challenge_extension_template), [`challenge_extension_rest`](Self::challenge_extension_rest) | the same, for an extension mostly the same in every 402 | add it, with only its changing part written per request |
/// | [`before_verify`](Self::before_verify) | a new payment is about to be sent to `/verify` | abort, or skip verification (it verified the payment itself) |
/// | [`on_verify_failure`](Self::on_verify_failure) | `/verify` failed or found the payment invalid | recover with a verification of its own |
/// | [`after_verify`](Self::after_verify) | the payment is verified, before the work runs | abort: the payment is released, never settled (its scheme [releases](super::Scheme::release) it) |
/// | [`before_settle`](Self::before_settle) | before the *settling* intent is written | abort (released, never settled), or skip: it settled the payment itself |
/// | [`settlement_extensions`](Self::settlement_extensions) | a settlement is known, before it is recorded | add extension data to `PAYMENT-RESPONSE` |
/// | [`after_settle`](Self::after_settle) | a settlement is known, before it is recorded | observe it |
/// | [`observe`](Self::observe) | a payment was received, answered from its record, entered or left doubt, or a request was refused ([`PaymentEvent`]) | observe it |
///
/// The asynchronous methods are called only on the hooks whose [`stages`](Self::stages)
/// declare them; the synchronous ones (the challenge's and the settlement's extensions, and
/// [`observe`](Self::observe)) on every hook. `observe` is called inline on the request path,
/// without awaiting: keep it quick (count, log, send on a channel).
///
/// **After settle is called at least once per settlement.** It runs for every settlement this
/// process learns of — `/settle` answered, a payment in doubt resolved by a re-sent `/settle` or
/// the reconciler, one recovered after a restart, one a hook settled itself — before its record
/// is written; a payment presented again is answered from that record without calling it. A
/// crash between the call and the record brings the payment back to recovery, and the hook is
/// called again: make it idempotent with the [`PaymentKey`] it is given.
///
/// A payment that hooks keep from the facilitator is still single-flighted and recorded in the
/// ledger like any other: a granted request is the only one that bypasses the ledger.
///
/// ```
/// use std::collections::HashSet;
/// use std::sync::Mutex;
/// use tower_x402::payment::{HookStages, PaymentContext, PaymentHooks};
/// use tower_x402::proto::SettleResponse;
/// use tower_x402::{BoxFuture, PaymentKey};
///
/// /// Counts settlements, once per payment key: a settlement heard again (a crash between the
/// /// call and the record brings the payment back) is not counted twice.
/// #[derive(Default)]
/// struct Revenue(Mutex<HashSet<PaymentKey>>);
///
/// impl Revenue {
///     fn settlements(&self) -> usize {
///         self.0.lock().unwrap().len()
///     }
/// }
///
/// impl PaymentHooks for Revenue {
///     fn stages(&self) -> HookStages {
///         HookStages::AFTER_SETTLE
///     }
///
///     fn after_settle<'a>(
///         &'a self,
///         payment: &'a PaymentContext<'a>,
///         _settlement: &'a SettleResponse,
///     ) -> BoxFuture<'a, ()> {
///         self.0.lock().unwrap().insert(payment.key.clone());
///         Box::pin(async {})
///     }
/// }
/// # let revenue = Revenue::default();
/// # assert_eq!(revenue.settlements(), 0);
/// # let _ = tower_x402::payment::Payments::new(tower_x402::HttpFacilitator::new("https://x402.org/facilitator").unwrap()).hook(revenue);
/// ```
pub trait PaymentHooks: Send + Sync + 'static {
    /// A priced request arrived; nothing of its payment has been read yet.
    /// [`Decision::Handled`] serves it without payment (and without calling the facilitator),
    /// its extensions added to the request's (the HTTP layer's inner service finds them there,
    /// an MCP tool in its request context).
    fn on_protected_request<'a>(
        &'a self,
        request: &'a ProtectedRequest<'a>,
    ) -> BoxFuture<'a, Decision<Extensions>> {
        let _ = request;
        Box::pin(ready(Decision::Continue))
    }

    /// Whether [`on_protected_request`](Self::on_protected_request) may decide anything but
    /// [`Decision::Continue`] for `request`; asked only of a hook whose
    /// [`stages`](Self::stages) declare [`HookStages::REQUEST`]. The core asks those hooks in
    /// order, each once per request, and calls `on_protected_request` only on those that answer
    /// `true`; when none does, the request goes on at once, with no future built for the hooks.
    /// A hook that acts only on requests carrying a field of its own answers from that field.
    /// The default is `true`.
    ///
    /// ```
    /// use http::Extensions;
    /// use tower_x402::BoxFuture;
    /// use tower_x402::payment::{Decision, HookStages, PaymentHooks, ProtectedRequest};
    ///
    /// /// Serves free whoever shows the staff pass; asked about no other request.
    /// struct StaffPass;
    ///
    /// impl PaymentHooks for StaffPass {
    ///     fn stages(&self) -> HookStages {
    ///         HookStages::REQUEST
    ///     }
    ///
    ///     fn considers_request(&self, request: &ProtectedRequest<'_>) -> bool {
    ///         request.field("x-staff-pass").is_some()
    ///     }
    ///
    ///     fn on_protected_request<'a>(
    ///         &'a self,
    ///         request: &'a ProtectedRequest<'a>,
    ///     ) -> BoxFuture<'a, Decision<Extensions>> {
    ///         let staff = request.field("x-staff-pass") == Some(&b"let-me-in"[..]);
    ///         Box::pin(async move {
    ///             if staff { Decision::Handled(Extensions::new()) } else { Decision::Continue }
    ///         })
    ///     }
    /// }
    /// ```
    fn considers_request(&self, request: &ProtectedRequest<'_>) -> bool {
        let _ = request;
        true
    }

    /// The stages of a payment's life this hook takes part in: the core calls
    /// [`considers_request`](Self::considers_request) with
    /// [`on_protected_request`](Self::on_protected_request),
    /// [`before_verify`](Self::before_verify), [`on_verify_failure`](Self::on_verify_failure),
    /// [`after_verify`](Self::after_verify), [`before_settle`](Self::before_settle) and
    /// [`after_settle`](Self::after_settle) only on the hooks that declared the method's stage,
    /// and builds no future at all for a stage no hook declared. Asked once, when the hook is
    /// registered.
    ///
    /// The default is [`HookStages::NONE`]: a hook that only decorates the challenge, adds
    /// settlement extensions or [observes](Self::observe) declares nothing and costs a request
    /// no future. **A hook that overrides one of the methods above declares its stage**: a
    /// method whose stage is not declared is never called.
    ///
    /// ```
    /// use tower_x402::BoxFuture;
    /// use tower_x402::payment::{HookStages, PaymentContext, PaymentHooks};
    /// use tower_x402::proto::SettleResponse;
    ///
    /// /// Logs settlements: asked about nothing else, so a paid request builds no future for
    /// /// the request's gate, the verification's or the settlement's start.
    /// struct SettlementLog;
    ///
    /// impl PaymentHooks for SettlementLog {
    ///     fn stages(&self) -> HookStages {
    ///         HookStages::AFTER_SETTLE
    ///     }
    ///
    ///     fn after_settle<'a>(
    ///         &'a self,
    ///         _payment: &'a PaymentContext<'a>,
    ///         settlement: &'a SettleResponse,
    ///     ) -> BoxFuture<'a, ()> {
    ///         tracing::info!(transaction = %settlement.transaction, "settled");
    ///         Box::pin(async {})
    ///     }
    /// }
    /// ```
    fn stages(&self) -> HookStages {
        HookStages::NONE
    }

    /// Extension data for this request's challenge (a fresh sign-in nonce is one): a key and
    /// its JSON value, added to the 402's `extensions` and to the offer the payment is matched
    /// against. `None` adds nothing.
    fn challenge_extension(
        &self,
        request: &ProtectedRequest<'_>,
    ) -> Option<(String, Box<RawValue>)> {
        let _ = request;
        None
    }

    /// The part of this hook's challenge extension that is the same in every 402 of `offer`:
    /// its key and the start of its JSON value. A hook that gives one is asked for the rest of
    /// each 402's value by [`challenge_extension_rest`](Self::challenge_extension_rest) instead
    /// of [`challenge_extension`](Self::challenge_extension); the core builds the offer's
    /// challenge up to the template once (its JSON and base64, kept with the offer and its
    /// clones), so a 402 costs the encoding of the rest alone. Asked once per offer and hook;
    /// the first 402's whole challenge is checked to be JSON, and a template that does not make
    /// one is left out (logged).
    fn challenge_extension_template(&self, offer: &Offer) -> Option<ExtensionTemplate> {
        let _ = offer;
        None
    }

    /// Writes into `rest` what completes this hook's
    /// [template](Self::challenge_extension_template) into one JSON value for this request's
    /// 402 (a fresh nonce and times). `false` adds no extension to this 402.
    fn challenge_extension_rest(&self, request: &ProtectedRequest<'_>, rest: &mut Vec<u8>) -> bool {
        let _ = (request, rest);
        false
    }

    /// A new payment is about to be verified (its ledger entry is held).
    /// [`Decision::Handled`] means the plug-in verified the payment itself: it goes on as if
    /// `/verify` had answered that (`isValid: true`; else it is refused with its
    /// `invalidReason`). [`Decision::Abort`] refuses it, released, nothing sent.
    fn before_verify<'a>(
        &'a self,
        payment: &'a PaymentContext<'a>,
    ) -> BoxFuture<'a, Decision<VerifyResponse>> {
        let _ = payment;
        Box::pin(ready(Decision::Continue))
    }

    /// `/verify` found the payment invalid (`Ok`, its answer with `isValid: false`) or gave no
    /// usable answer (`Err`). A verification returned here (`isValid: true`) lets the payment
    /// go on as if the facilitator had given it.
    fn on_verify_failure<'a>(
        &'a self,
        payment: &'a PaymentContext<'a>,
        failure: Result<&'a VerifyResponse, &'a FacilitatorError>,
    ) -> BoxFuture<'a, Option<VerifyResponse>> {
        let _ = (payment, failure);
        Box::pin(ready(None))
    }

    /// The payment is verified and the work has not run. An `Err` refuses the request with
    /// it: the payment is released, never settled, and its scheme
    /// [releases](super::Scheme::release) what it held for it.
    fn after_verify<'a>(
        &'a self,
        payment: &'a VerifiedPayment,
    ) -> BoxFuture<'a, Result<(), Refusal>> {
        let _ = payment;
        Box::pin(ready(Ok(())))
    }

    /// The payment is about to be settled (its *settling* intent not written yet).
    /// [`Decision::Handled`] means the plug-in settled it itself (a voucher that needs no
    /// transfer): that settlement is recorded as the payment's, nothing sent to the
    /// facilitator. [`Decision::Abort`] refuses it, released, never settled.
    fn before_settle<'a>(
        &'a self,
        payment: &'a PaymentContext<'a>,
    ) -> BoxFuture<'a, Decision<SettleResponse>> {
        let _ = payment;
        Box::pin(ready(Decision::Continue))
    }

    /// Extension data added to the settlement's `extensions` (sent in `PAYMENT-RESPONSE` and
    /// recorded, so a repeat of the payment is answered with it).
    fn settlement_extensions(
        &self,
        payment: &PaymentContext<'_>,
        settlement: &SettleResponse,
    ) -> Option<Map<String, Value>> {
        let _ = (payment, settlement);
        None
    }

    /// The payment settled; see the trait's docs for how often this is called.
    fn after_settle<'a>(
        &'a self,
        payment: &'a PaymentContext<'a>,
        settlement: &'a SettleResponse,
    ) -> BoxFuture<'a, ()> {
        let _ = (payment, settlement);
        Box::pin(ready(()))
    }

    /// Something happened to a payment: it was received, answered again from its record,
    /// entered or left doubt, or its request was refused (a 402 challenge is a
    /// [`PaymentEvent::Refused`] with [`Refusal::PaymentMissing`]). Called on every hook,
    /// inline on the request path: keep it quick.
    ///
    /// ```
    /// use std::sync::atomic::{AtomicU64, Ordering};
    /// use tower_x402::payment::{PaymentEvent, PaymentHooks, Refusal};
    ///
    /// /// Counts 402 challenges and payments received; declares no stage, so it costs a
    /// /// request no future.
    /// #[derive(Default)]
    /// struct Funnel {
    ///     challenged: AtomicU64,
    ///     received: AtomicU64,
    /// }
    ///
    /// impl PaymentHooks for Funnel {
    ///     fn observe(&self, event: &PaymentEvent<'_>) {
    ///         match event {
    ///             PaymentEvent::Refused { refusal: Refusal::PaymentMissing, .. } => {
    ///                 self.challenged.fetch_add(1, Ordering::Relaxed);
    ///             }
    ///             PaymentEvent::Received { .. } => {
    ///                 self.received.fetch_add(1, Ordering::Relaxed);
    ///             }
    ///             _ => {}
    ///         }
    ///     }
    /// }
    /// # let _ = tower_x402::payment::Payments::new(tower_x402::HttpFacilitator::new("https://x402.org/facilitator").unwrap()).hook(Funnel::default());
    /// ```
    fn observe(&self, event: &PaymentEvent<'_>) {
        let _ = event;
    }
}
