//! Lifecycle hooks: plug-ins that take part in each payment's life, registered on
//! [`Payments::hook`](super::Payments::hook) and called on every adapter's path (the HTTP
//! layer, metered bodies, MCP tools), since the core calls them.

use std::future::ready;

use http::Extensions;
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use x402_wire::{PaymentPayload, SettleResponse, VerifyResponse};

use super::decision::{Decision, PaymentContext};
use super::refusal::Refusal;
use super::request::ProtectedRequest;
use super::stages::HookStages;
use super::verified::VerifiedPayment;
use crate::boxed::BoxFuture;
use crate::facilitator::FacilitatorError;
use crate::pricing::{ExtensionTemplate, Offer};
use crate::settlement::{PaymentKey, SettlementRecord};

/// A plug-in that takes part in the life of each payment. Every method has a default that
/// changes nothing, so a hook implements only what it needs; several hooks are asked in the
/// order they were registered, and the first that decides something other than *continue* wins.
///
/// Where the core calls them:
///
/// | method | when | may |
/// |---|---|---|
/// | [`stages`](Self::stages) | once, when the hook is registered | say which of the asynchronous methods below it takes part in (the core builds no future for a stage no hook declared) |
/// | [`considers_request`](Self::considers_request) | a priced request arrives, before its payment is read | say whether `on_protected_request` is asked (no future is built for a request no hook considers) |
/// | [`on_protected_request`](Self::on_protected_request) | the same, when the hook considers the request | grant it without payment, abort it, or continue |
/// | [`challenge_extension`](Self::challenge_extension) | the same, for the request's 402 | add per-request extension data to the challenge |
/// | [`challenge_extension_template`](Self::challenge_extension_template), [`challenge_extension_rest`](Self::challenge_extension_rest) | the same, for an extension mostly the same in every 402 | add it, with only its changing part written per request |
/// | [`before_verify`](Self::before_verify) | a new payment is about to be sent to `/verify` | abort, or skip verification (it verified the payment itself) |
/// | [`on_verify_failure`](Self::on_verify_failure) | `/verify` failed or found the payment invalid | recover with a verification of its own |
/// | [`after_verify`](Self::after_verify) | the payment is verified, before the work runs | abort: the payment is released, never settled (its scheme [releases](super::Scheme::release) it) |
/// | [`before_settle`](Self::before_settle) | before the *settling* intent is written | abort (released, never settled), or skip: it settled the payment itself |
/// | [`settlement_extensions`](Self::settlement_extensions) | a settlement is known, before it is recorded | add extension data to `PAYMENT-RESPONSE` |
/// | [`after_settle`](Self::after_settle) | a settlement is known, before it is recorded | observe it |
/// | [`on_payment_received`](Self::on_payment_received) | a request carried a decodable payment | observe it |
/// | [`on_replayed`](Self::on_replayed) | a settled payment was answered again from its record | observe it |
/// | [`on_in_doubt`](Self::on_in_doubt), [`on_doubt_resolved`](Self::on_doubt_resolved) | a payment entered or left doubt | observe it |
/// | [`on_refusal`](Self::on_refusal) | a request was refused (a 402 challenge is [`Refusal::PaymentMissing`]) | observe it |
///
/// The last five are called inline on the request path, without awaiting: keep them quick
/// (count, log, send on a channel).
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
/// use tower_x402::payment::{PaymentContext, PaymentHooks};
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
    /// [`Decision::Continue`] for `request`. The core asks the hooks in order, each once per
    /// request, and calls `on_protected_request` only on those that answer `true`; when none
    /// does, the request goes on at once, with no future built for the hooks. A hook that acts only
    /// on requests carrying a field of its own answers from that field; one that never
    /// overrides `on_protected_request` (an observer) answers `false`. The default is `true`.
    ///
    /// ```
    /// use tower_x402::payment::{PaymentHooks, ProtectedRequest};
    ///
    /// /// Counts nothing, decides nothing: never asked about a request.
    /// struct Quiet;
    ///
    /// impl PaymentHooks for Quiet {
    ///     fn considers_request(&self, _: &ProtectedRequest<'_>) -> bool {
    ///         false
    ///     }
    /// }
    /// ```
    fn considers_request(&self, request: &ProtectedRequest<'_>) -> bool {
        let _ = request;
        true
    }

    /// The asynchronous stages this hook takes part in. The core calls
    /// [`before_verify`](Self::before_verify), [`on_verify_failure`](Self::on_verify_failure),
    /// [`after_verify`](Self::after_verify), [`before_settle`](Self::before_settle) and
    /// [`after_settle`](Self::after_settle) only on the hooks that declared the method's stage,
    /// and builds no future at all for a stage no hook declared. Asked once, when the hook is
    /// registered. The default is [`HookStages::ALL`]; a hook that overrides some of those
    /// methods declares their stages, and one that overrides none declares
    /// [`HookStages::NONE`]. A method whose stage is not declared is never called.
    ///
    /// ```
    /// use tower_x402::BoxFuture;
    /// use tower_x402::payment::{HookStages, PaymentContext, PaymentHooks, ProtectedRequest};
    /// use tower_x402::proto::SettleResponse;
    ///
    /// /// Logs settlements: asked about nothing else, so a paid request builds no future for
    /// /// the verification's or the settlement's start.
    /// struct SettlementLog;
    ///
    /// impl PaymentHooks for SettlementLog {
    ///     fn considers_request(&self, _: &ProtectedRequest<'_>) -> bool {
    ///         false
    ///     }
    ///
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
        HookStages::ALL
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

    /// A request carried a decodable payment for `offer`; nothing of it is checked yet.
    fn on_payment_received(&self, offer: &Offer, payload: &PaymentPayload) {
        let _ = (offer, payload);
    }

    /// A payment that had already settled was presented again and answered from its
    /// `record`, without calling the facilitator.
    fn on_replayed(&self, offer: &Offer, record: &SettlementRecord) {
        let _ = (offer, record);
    }

    /// A payment entered *in doubt*: `/settle` may have moved money but its outcome is
    /// unknown, for `reason`. Alert on payments that stay there; a retry of the same payment,
    /// or an operator, resolves them.
    fn on_in_doubt(&self, offer: &Offer, key: &PaymentKey, reason: &str) {
        let _ = (offer, key, reason);
    }

    /// A payment left *in doubt* (or a crashed process's *settling*): it settled, with
    /// `settlement`, or never did and was released (`None`; the buyer may pay again).
    fn on_doubt_resolved(
        &self,
        offer: &Offer,
        key: &PaymentKey,
        settlement: Option<&SettleResponse>,
    ) {
        let _ = (offer, key, settlement);
    }

    /// A request for `offer` was refused, as an adapter answers it: every refusal passes here,
    /// [`Refusal::PaymentMissing`] being a 402 challenge sent for a request without payment.
    /// [`Refusal::kind`] says what the client is asked to do.
    fn on_refusal(&self, offer: &Offer, refusal: &Refusal) {
        let _ = (offer, refusal);
    }
}
