//! Lifecycle hooks: plug-ins that take part in each payment's life, registered on
//! [`Payments::hook`](super::Payments::hook) and called on every adapter's path (the HTTP
//! layer, metered bodies, MCP tools), since the core calls them.

use std::future::ready;
use std::sync::Arc;

use http::{Extensions, HeaderMap, HeaderName, Method};
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use x402_wire::{FacilitatorRequest, PaymentPayload, SettleResponse, VerifyResponse};

use super::refusal::Refusal;
use super::stages::HookStages;
use super::verified::VerifiedPayment;
use crate::boxed::BoxFuture;
use crate::facilitator::FacilitatorError;
use crate::pricing::{Cached, ExtensionTemplate, Offer, header_budget, with_rest_buffer};
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
/// | [`after_verify`](Self::after_verify) | the payment is verified, before the work runs | abort: the payment is released, never settled (every hook's `on_cancelled` is called) |
/// | [`before_settle`](Self::before_settle) | before the *settling* intent is written | abort (released, never settled), or skip: it settled the payment itself |
/// | [`settle_request_fields`](Self::settle_request_fields) | the same | add fields to the request sent to `/settle` |
/// | [`on_settle_failure`](Self::on_settle_failure) | `/settle` failed or refused | recover with a settlement of its own |
/// | [`settlement_extensions`](Self::settlement_extensions) | a settlement is known, before it is recorded | add extension data to `PAYMENT-RESPONSE` |
/// | [`settlement_extra`](Self::settlement_extra) | the same | add scheme data to the settlement's `extra` |
/// | [`after_settle`](Self::after_settle) | a settlement is known, before it is recorded | observe it |
/// | [`on_cancelled`](Self::on_cancelled) | a verified payment will never be settled | observe it |
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
/// use std::sync::atomic::{AtomicUsize, Ordering};
/// use tower_x402::BoxFuture;
/// use tower_x402::payment::{PaymentContext, PaymentHooks};
/// use tower_x402::proto::SettleResponse;
///
/// /// Counts settlements, once per payment key.
/// #[derive(Default)]
/// struct Revenue(AtomicUsize);
///
/// impl PaymentHooks for Revenue {
///     fn after_settle<'a>(
///         &'a self,
///         _payment: &'a PaymentContext<'a>,
///         _settlement: &'a SettleResponse,
///     ) -> BoxFuture<'a, ()> {
///         self.0.fetch_add(1, Ordering::Relaxed);
///         Box::pin(async {})
///     }
/// }
/// # let _ = tower_x402::payment::Payments::new(tower_x402::HttpFacilitator::new("https://x402.org/facilitator").unwrap()).hook(Revenue::default());
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
    /// [`after_verify`](Self::after_verify), [`before_settle`](Self::before_settle) with
    /// [`settle_request_fields`](Self::settle_request_fields),
    /// [`on_settle_failure`](Self::on_settle_failure), [`after_settle`](Self::after_settle) and
    /// [`on_cancelled`](Self::on_cancelled) only on the hooks that declared the method's stage,
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
    /// it: the payment is released, never settled, and every hook's
    /// [`on_cancelled`](Self::on_cancelled) is called.
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

    /// Fields added to the request sent to `/settle` (beside `x402Version`, `paymentPayload`
    /// and `paymentRequirements`). They are part of the *settling* intent, so a re-sent
    /// `/settle` carries them too.
    fn settle_request_fields(&self, payment: &PaymentContext<'_>) -> Option<Map<String, Value>> {
        let _ = payment;
        None
    }

    /// `/settle` refused the payment (`Ok`, its answer with `success: false`) or gave no
    /// usable answer (`Err`: the money may or may not have moved). A settlement returned here
    /// (`success: true`) is recorded as the payment's: the plug-in vouches that the money moved.
    fn on_settle_failure<'a>(
        &'a self,
        payment: &'a PaymentContext<'a>,
        failure: Result<&'a SettleResponse, &'a FacilitatorError>,
    ) -> BoxFuture<'a, Option<SettleResponse>> {
        let _ = (payment, failure);
        Box::pin(ready(None))
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

    /// Scheme data added to the settlement's `extra` (sent in `PAYMENT-RESPONSE` and recorded
    /// with it): a payment channel's charge and channel state, for instance.
    fn settlement_extra(
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

    /// A verified payment will never be settled: a hook refused it in
    /// [`after_verify`](Self::after_verify), the work failed, broke a metering rule, or the
    /// request was dropped (the client went away) before the payment settled after it.
    fn on_cancelled<'a>(&'a self, payment: &'a VerifiedPayment) -> BoxFuture<'a, ()> {
        let _ = payment;
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

/// A priced request as the hooks see it, in no transport's terms.
#[derive(Debug)]
pub struct ProtectedRequest<'a> {
    offer: &'a Arc<Offer>,
    path: &'a str,
    fields: Fields<'a>,
    paying: bool,
}

#[derive(Clone, Copy, Debug)]
enum Fields<'a> {
    Headers(&'a Method, &'a HeaderMap),
    Meta(Option<&'a Map<String, Value>>),
}

impl<'a> ProtectedRequest<'a> {
    /// An HTTP request for `offer` at `path` (path and query) with `method` and `headers`;
    /// `paying` when it carries a payment.
    pub fn http(
        offer: &'a Arc<Offer>,
        path: &'a str,
        method: &'a Method,
        headers: &'a HeaderMap,
        paying: bool,
    ) -> Self {
        Self {
            offer,
            path,
            fields: Fields::Headers(method, headers),
            paying,
        }
    }

    /// A request without HTTP (an MCP tool call) for `offer` named `path`, whose metadata
    /// (`_meta`, without the payment) is `meta`; `paying` when it carries a payment.
    pub fn meta(
        offer: &'a Arc<Offer>,
        path: &'a str,
        meta: Option<&'a Map<String, Value>>,
        paying: bool,
    ) -> Self {
        Self {
            offer,
            path,
            fields: Fields::Meta(meta),
            paying,
        }
    }

    /// The same request, priced with `offer` (the offer with the hooks' challenge extensions).
    pub(crate) fn with_offer<'b>(&self, offer: &'b Arc<Offer>) -> ProtectedRequest<'b>
    where
        'a: 'b,
    {
        ProtectedRequest {
            offer,
            path: self.path,
            fields: self.fields,
            paying: self.paying,
        }
    }

    /// Whether the request carries a payment (which is read after the hooks let it go on).
    pub fn is_paying(&self) -> bool {
        self.paying
    }

    /// Whether the request can never pay or sign in: an HTTP `HEAD`, which has no body to
    /// deliver and is answered like an unpaid `GET`.
    pub fn is_head(&self) -> bool {
        matches!(self.fields, Fields::Headers(method, _) if *method == Method::HEAD)
    }

    /// The offer the request is priced with.
    pub fn offer(&self) -> &'a Arc<Offer> {
        self.offer
    }

    /// The path and query requested (HTTP), or the name of what is called (MCP).
    pub fn path(&self) -> &'a str {
        self.path
    }

    /// The request's field `name`: an HTTP header (names are case-insensitive), or a string
    /// entry of the MCP `_meta` object.
    pub fn field(&self, name: &str) -> Option<&'a [u8]> {
        match self.fields {
            Fields::Headers(_, headers) => headers.get(name).map(http::HeaderValue::as_bytes),
            Fields::Meta(meta) => meta?.get(name)?.as_str().map(str::as_bytes),
        }
    }

    /// [`field`](Self::field) for a name that is a header name already: the name is not
    /// parsed again (a hook asks for its field on every priced request).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use http::{HeaderMap, HeaderName, Method};
    /// use tower_x402::payment::ProtectedRequest;
    /// use tower_x402::pricing::Offer;
    /// use x402_wire::{ResourceInfo, UsdcDeployment};
    ///
    /// const PROOF: HeaderName = HeaderName::from_static("x-proof");
    /// let offer = Arc::new(
    ///     Offer::builder(ResourceInfo::new("https://shop.example/report"))
    ///         .usdc(&UsdcDeployment::BASE, "0.10".parse()?, "0x209693Bc6afc0C5328bA36FaF03C514EF312287C")
    ///         .build()?,
    /// );
    /// let mut headers = HeaderMap::new();
    /// headers.insert(PROOF, "signed".parse()?);
    /// let request = ProtectedRequest::http(&offer, "/report", &Method::GET, &headers, false);
    /// assert_eq!(request.header_field(&PROOF), Some(&b"signed"[..]));
    /// assert_eq!(request.header_field(&PROOF), request.field("X-Proof"));
    /// # Ok::<_, Box<dyn std::error::Error>>(())
    /// ```
    pub fn header_field(&self, name: &HeaderName) -> Option<&'a [u8]> {
        match self.fields {
            Fields::Headers(_, headers) => headers.get(name).map(http::HeaderValue::as_bytes),
            Fields::Meta(meta) => meta?.get(name.as_str())?.as_str().map(str::as_bytes),
        }
    }
}

/// What a hook decided at a point where it may take the core's next step on itself:
/// [`on_protected_request`](PaymentHooks::on_protected_request) (`T`: the extensions of a request
/// served without payment), [`before_verify`](PaymentHooks::before_verify) (`T`: its own
/// verification) and [`before_settle`](PaymentHooks::before_settle) (`T`: its own settlement).
///
/// ```
/// use http::Extensions;
/// use tower_x402::payment::Decision;
///
/// // Serve a request without payment, with a marker the inner service can read.
/// let mut extensions = Extensions::new();
/// extensions.insert("member");
/// let grant: Decision<Extensions> = Decision::Handled(extensions);
/// assert!(matches!(grant, Decision::Handled(_)));
/// ```
// Returned once per request and matched at once: not worth a box.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
#[non_exhaustive]
pub enum Decision<T> {
    /// Go on as usual.
    Continue,
    /// The hook took this step itself, and this is its result.
    Handled(T),
    /// Refuse with this refusal; a payment is released, never settled.
    Abort(Refusal),
}

/// What the hooks made of a priced request without waiting
/// ([`Payments::open`](super::Payments::open)): the request's offer with their challenge
/// extensions, and whether a hook must still be asked about the request.
#[derive(Debug)]
pub(crate) enum Opening {
    /// No hook considers the request: go on with this offer (the challenge, or the payment).
    Continue(Arc<Offer>),
    /// A hook considers the request: await the hooks' decision
    /// ([`Payments::decide`](super::Payments::decide)) with this offer.
    Ask(Arc<Offer>, Considering),
}

/// Where the hooks' decision starts: the first hook that considers the request. The hooks
/// before it do not; those after it are not asked yet, so that each is asked once.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Considering(usize);

/// What the hooks decided about a priced request before its payment is read
/// ([`Payments::open`](super::Payments::open), then [`Payments::decide`](super::Payments::decide)).
// Returned once per request and matched at once: not worth a box.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub(crate) enum Prelude {
    /// Go on with this offer (the request's, with the hooks' challenge extensions): the
    /// challenge, or the payment.
    Continue(Arc<Offer>),
    /// Serve the request without payment, with these extensions.
    Granted(Extensions),
    /// Refused (and reported); answer it with this offer's challenge where it has one.
    Refused(Arc<Offer>, Refusal),
}

/// The payment a hook is asked about.
#[derive(Debug)]
#[non_exhaustive]
pub struct PaymentContext<'a> {
    /// The offer of the request that carries the payment.
    pub offer: &'a Offer,
    /// The resource the payment was made for, as the ledger records it (the offer's resource
    /// URL when the payment was first presented).
    pub resource: &'a str,
    /// The payment's identity in the ledger; equal keys are the same payment.
    pub key: &'a PaymentKey,
    /// The payment and the server's requirement it matched, as sent to the facilitator.
    pub request: &'a FacilitatorRequest,
    /// The core, whose facilitators a [scheme's steps](super::Scheme) reach through this
    /// context ([`verify_at_facilitator`](Self::verify_at_facilitator),
    /// [`settle_at_facilitator`](Self::settle_at_facilitator)).
    pub(super) core: &'a super::Payments,
    /// The facilitator the payment's *settling* intent names (while it settles).
    pub(super) facilitator: Option<&'a str>,
    /// The facilitator that verified the payment through this context.
    pub(super) verifier: std::sync::OnceLock<Arc<str>>,
}

impl<'a> PaymentContext<'a> {
    pub(super) fn new(
        core: &'a super::Payments,
        offer: &'a Offer,
        resource: &'a str,
        key: &'a PaymentKey,
        request: &'a FacilitatorRequest,
    ) -> Self {
        Self {
            offer,
            resource,
            key,
            request,
            core,
            facilitator: None,
            verifier: std::sync::OnceLock::new(),
        }
    }
}

/// The hooks registered on a core, asked in order.
#[derive(Clone)]
pub(crate) struct Hooks {
    list: Vec<Arc<dyn PaymentHooks>>,
    /// Each hook's [`PaymentHooks::stages`], in the same order.
    stages: Vec<HookStages>,
    /// Every stage some hook declared.
    declared: HookStages,
}

/// What a hook's extension template made of a request's offer.
enum Spliced {
    /// The offer with the extension spliced in.
    Offer(Offer),
    /// The hook adds nothing to this 402.
    Nothing,
    /// The hook has no usable template for this offer.
    NoTemplate,
}

/// The request's offer with `hook`'s templated extension, its challenge prebuilt up to the
/// template on the offer's first 402 and kept with the offer.
fn spliced(hook: &Arc<dyn PaymentHooks>, request: &ProtectedRequest<'_>) -> Spliced {
    let offer = request.offer();
    let Some(splices) = offer.splices() else {
        return Spliced::NoTemplate;
    };
    let (prebuilt, first) = match splices.get(Arc::as_ptr(hook).cast()) {
        Cached::Prebuilt(prebuilt) => (prebuilt, false),
        Cached::None => return Spliced::NoTemplate,
        Cached::Unknown => {
            let prebuilt = hook
                .challenge_extension_template(offer)
                .and_then(|template| offer.prebuild(&template))
                .map(Arc::new);
            match prebuilt {
                Some(prebuilt) => (prebuilt, true),
                None => {
                    splices.put(Arc::downgrade(hook), None);
                    return Spliced::NoTemplate;
                }
            }
        }
    };
    let extended = with_rest_buffer(|rest| {
        hook.challenge_extension_rest(request, rest)
            .then(|| offer.with_spliced(&prebuilt, rest))
    });
    let Some(extended) = extended else {
        return Spliced::Nothing;
    };
    if first {
        // The template and its first rest, checked once as the whole challenge.
        let valid = extended.as_ref().is_some_and(|extended| {
            serde_json::from_slice::<x402_wire::PaymentRequired>(extended.challenge_body()).is_ok()
        });
        if !valid {
            tracing::warn!(key = %prebuilt.key(), "a hook's challenge extension template does not make JSON; encoded whole instead");
        }
        splices.put(Arc::downgrade(hook), valid.then_some(prebuilt));
        if !valid {
            return Spliced::NoTemplate;
        }
    }
    match extended {
        Some(offer) => Spliced::Offer(offer),
        None => Spliced::Nothing,
    }
}

/// `hook`'s extension for this 402 as one JSON value: its template and rest joined, or what
/// [`PaymentHooks::challenge_extension`] gives.
fn extension_whole(
    hook: &Arc<dyn PaymentHooks>,
    request: &ProtectedRequest<'_>,
) -> Option<(String, Box<RawValue>)> {
    let Some(template) = hook.challenge_extension_template(request.offer()) else {
        return hook.challenge_extension(request);
    };
    let mut rest = Vec::new();
    if !hook.challenge_extension_rest(request, &mut rest) {
        return None;
    }
    let mut text = template.head().as_bytes().to_vec();
    text.extend_from_slice(&rest);
    let value = String::from_utf8(text)
        .ok()
        .and_then(|text| RawValue::from_string(text).ok());
    if value.is_none() {
        tracing::warn!(key = %template.key(), "a hook's challenge extension template does not make JSON; left out");
    }
    Some((template.key().to_owned(), value?))
}

impl Default for Hooks {
    fn default() -> Self {
        Self {
            list: Vec::new(),
            stages: Vec::new(),
            declared: HookStages::NONE,
        }
    }
}

impl Hooks {
    pub(super) fn push(&mut self, hook: Arc<dyn PaymentHooks>) {
        let stages = hook.stages();
        self.list.push(hook);
        self.stages.push(stages);
        self.declared |= stages;
    }

    /// Whether some hook takes part in `stage`: the core builds no future for it otherwise.
    #[inline]
    pub(crate) fn take_part(&self, stage: HookStages) -> bool {
        self.declared.contains(stage)
    }

    /// The hooks that take part in `stage`, in order.
    fn at(&self, stage: HookStages) -> impl Iterator<Item = &Arc<dyn PaymentHooks>> {
        self.list
            .iter()
            .zip(&self.stages)
            .filter(move |(_, stages)| stages.contains(stage))
            .map(|(hook, _)| hook)
    }

    /// Whether no hook is registered: the synchronous calls are skipped then (the asynchronous
    /// stages ask [`take_part`](Self::take_part)).
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    pub(super) fn len(&self) -> usize {
        self.list.len()
    }

    /// The hooks' part of a priced request that needs no waiting: its challenge's extensions,
    /// and whether a hook [considers](PaymentHooks::considers_request) the request.
    pub(super) fn open(&self, request: &ProtectedRequest<'_>) -> Opening {
        let offer = self
            .decorate(request)
            .unwrap_or_else(|| Arc::clone(request.offer));
        let decorated = request.with_offer(&offer);
        match self
            .list
            .iter()
            .position(|hook| hook.considers_request(&decorated))
        {
            Some(first) => Opening::Ask(offer, Considering(first)),
            None => Opening::Continue(offer),
        }
    }

    /// The decision of the hooks that consider `request` (priced with the offer
    /// [`open`](Self::open) gave).
    pub(super) async fn decide(
        &self,
        request: &ProtectedRequest<'_>,
        considering: Considering,
    ) -> Prelude {
        let offer = request.offer;
        match self.on_protected_request(request, considering).await {
            Decision::Handled(extensions) => Prelude::Granted(extensions),
            Decision::Abort(refusal) => Prelude::Refused(Arc::clone(offer), refusal),
            Decision::Continue => Prelude::Continue(Arc::clone(offer)),
        }
    }

    async fn on_protected_request(
        &self,
        request: &ProtectedRequest<'_>,
        Considering(first): Considering,
    ) -> Decision<Extensions> {
        for (index, hook) in self.list.iter().enumerate().skip(first) {
            if index > first && !hook.considers_request(request) {
                continue;
            }
            match hook.on_protected_request(request).await {
                Decision::Continue => {}
                decided => return decided,
            }
        }
        Decision::Continue
    }

    /// `offer` with every hook's challenge extension, or `None` when no hook adds one.
    fn decorate(&self, request: &ProtectedRequest<'_>) -> Option<Arc<Offer>> {
        let mut decorated: Option<Offer> = None;
        for hook in &self.list {
            if decorated.is_none() {
                match spliced(hook, request) {
                    Spliced::Offer(offer) => {
                        decorated = Some(offer);
                        continue;
                    }
                    Spliced::Nothing => continue,
                    Spliced::NoTemplate => {}
                }
            }
            if let Some((key, value)) = extension_whole(hook, request) {
                let base = decorated.as_ref().unwrap_or(request.offer());
                match base.with_extension(&key, value) {
                    Some(offer) => decorated = Some(offer),
                    None => {
                        tracing::warn!(%key, "a hook's challenge extension could not be encoded; left out")
                    }
                }
            }
        }
        let decorated = decorated?;
        header_budget::check(
            request.offer().resource_url(),
            decorated.challenge_header().len(),
            " with its per-request extensions",
        );
        Some(Arc::new(decorated))
    }

    pub(super) async fn before_verify(
        &self,
        payment: &PaymentContext<'_>,
    ) -> Decision<VerifyResponse> {
        for hook in self.at(HookStages::BEFORE_VERIFY) {
            match hook.before_verify(payment).await {
                Decision::Continue => {}
                decided => return decided,
            }
        }
        Decision::Continue
    }

    pub(super) async fn on_verify_failure(
        &self,
        payment: &PaymentContext<'_>,
        failure: Result<&VerifyResponse, &FacilitatorError>,
    ) -> Option<VerifyResponse> {
        for hook in self.at(HookStages::VERIFY_FAILURE) {
            if let Some(verified) = hook.on_verify_failure(payment, failure).await
                && verified.is_valid
            {
                return Some(verified);
            }
        }
        None
    }

    pub(super) async fn after_verify(&self, payment: &VerifiedPayment) -> Result<(), Refusal> {
        for hook in self.at(HookStages::AFTER_VERIFY) {
            hook.after_verify(payment).await?;
        }
        Ok(())
    }

    pub(super) async fn before_settle(
        &self,
        payment: &PaymentContext<'_>,
    ) -> Decision<SettleResponse> {
        for hook in self.at(HookStages::BEFORE_SETTLE) {
            match hook.before_settle(payment).await {
                Decision::Continue => {}
                decided => return decided,
            }
        }
        Decision::Continue
    }

    pub(super) fn settle_request_fields(
        &self,
        payment: &PaymentContext<'_>,
    ) -> Option<Map<String, Value>> {
        let mut fields: Option<Map<String, Value>> = None;
        for hook in self.at(HookStages::BEFORE_SETTLE) {
            if let Some(more) = hook.settle_request_fields(payment) {
                fields.get_or_insert_with(Map::new).extend(more);
            }
        }
        fields
    }

    pub(super) async fn on_settle_failure(
        &self,
        payment: &PaymentContext<'_>,
        failure: Result<&SettleResponse, &FacilitatorError>,
    ) -> Option<SettleResponse> {
        for hook in self.at(HookStages::SETTLE_FAILURE) {
            if let Some(settled) = hook.on_settle_failure(payment, failure).await
                && settled.success
            {
                return Some(settled);
            }
        }
        None
    }

    /// The hooks' `extensions` and `extra` added to `settlement`.
    pub(super) fn enrich(&self, payment: &PaymentContext<'_>, settlement: &mut SettleResponse) {
        for hook in &self.list {
            if let Some(extensions) = hook.settlement_extensions(payment, settlement) {
                settlement
                    .extensions
                    .get_or_insert_with(Map::new)
                    .extend(extensions);
            }
        }
        for hook in &self.list {
            if let Some(extra) = hook.settlement_extra(payment, settlement) {
                settlement.extra.get_or_insert_with(Map::new).extend(extra);
            }
        }
    }

    pub(super) async fn after_settle(
        &self,
        payment: &PaymentContext<'_>,
        settlement: &SettleResponse,
    ) {
        for hook in self.at(HookStages::AFTER_SETTLE) {
            hook.after_settle(payment, settlement).await;
        }
    }

    pub(super) async fn on_cancelled(&self, payment: &VerifiedPayment) {
        for hook in self.at(HookStages::CANCELLED) {
            hook.on_cancelled(payment).await;
        }
    }

    pub(super) fn on_payment_received(&self, offer: &Offer, payload: &PaymentPayload) {
        for hook in &self.list {
            hook.on_payment_received(offer, payload);
        }
    }

    pub(super) fn on_replayed(&self, offer: &Offer, record: &SettlementRecord) {
        for hook in &self.list {
            hook.on_replayed(offer, record);
        }
    }

    pub(super) fn on_in_doubt(&self, offer: &Offer, key: &PaymentKey, reason: &str) {
        for hook in &self.list {
            hook.on_in_doubt(offer, key, reason);
        }
    }

    pub(super) fn on_doubt_resolved(
        &self,
        offer: &Offer,
        key: &PaymentKey,
        settlement: Option<&SettleResponse>,
    ) {
        for hook in &self.list {
            hook.on_doubt_resolved(offer, key, settlement);
        }
    }

    pub(super) fn on_refusal(&self, offer: &Offer, refusal: &Refusal) {
        for hook in &self.list {
            hook.on_refusal(offer, refusal);
        }
    }
}

impl std::fmt::Debug for Hooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hooks")
            .field("count", &self.list.len())
            .finish()
    }
}
