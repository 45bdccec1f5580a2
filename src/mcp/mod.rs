//! Paid MCP tools: x402 over the Model Context Protocol, on the same payment core as the HTTP
//! layer.
//!
//! [`PaidTools`] puts a price ([`Offer`], `exact` or `upto`) on a tool of an [`rmcp`] server.
//! A `tools/call` of a priced tool is answered as the x402 MCP transport says:
//!
//! - **without a payment**: a tool result with `isError: true` whose `structuredContent` is the
//!   `PaymentRequired` and whose `content[0].text` is the same object as JSON text;
//! - **with a payment** in `params._meta["x402/payment"]` (the `PaymentPayload` as a plain JSON
//!   object, not base64): the payment goes through the same [`Payments`] core as
//!   [`X402Layer`](crate::X402Layer)'s — bound to the accept it names, single-flighted, claimed
//!   in the ledger, verified, settled, recovered when in doubt and answered from its record
//!   when it already settled — and the tool's own result comes back with the settlement in
//!   `_meta["x402/payment-response"]`.
//!
//! Settlement follows the offer's [`SettlementMode`]: in
//! [`After`](crate::SettlementMode::After) (the default) the tool runs on a verified payment and
//! the payment settles only when the tool's result is not an error: **a result with `isError:
//! true` (or a JSON-RPC error) is never settled**, and the payment is released for another
//! call. For `upto`, the tool names what the call cost through a [`Charge`] it takes from the
//! request's extensions (`rmcp::handler::server::tool::Extension<Charge>`); that amount is
//! settled, never more than the buyer signed, and a tool that names none is answered with an
//! error and charged nothing.
//!
//! | what happened | the answer (`isError: true` unless said) |
//! |---|---|
//! | no payment, a malformed one, a payment for another offer or refused by the facilitator | `PaymentRequired` in both fields, its `error` saying why |
//! | the facilitator refused to settle | `PaymentRequired` with the reason; the tool's content is withheld |
//! | settled | the tool's result (as it was) with `_meta["x402/payment-response"]` |
//! | the same payment again, fixed price (`exact`), the same arguments | the tool runs again (the same work, fully paid: a lost answer can be fetched again), its result with the recorded settlement |
//! | the same payment again with other arguments (or for another tool) | `{"x402Version": 2, "error": "payment_used_for_another_request", "message": …}` with the recorded settlement in `_meta["x402/payment-response"]`; the tool does not run |
//! | the same metered (`upto`) payment again, the same arguments | `{"x402Version": 2, "error": "payment_already_delivered", "message": …}` with the recorded settlement in `_meta`; the tool does not run |
//! | **settlement not confirmed** (in doubt) | `{"x402Version": 2, "error": "settlement_not_confirmed", "retryWithSamePayment": true, "message": …}`; the tool's content is withheld |
//! | the payment is being settled elsewhere, the facilitator or the ledger unavailable | the same shape with `retryWithSamePayment: true` and the reason as `error` |
//! | anything else (a bug in the tool's charge, a conflicting payment identifier) | `{"x402Version": 2, "error": …}` |
//!
//! **Settlements in doubt.** HTTP answers a settlement whose outcome is unknown (its answer was
//! lost, or the facilitator said it is pending) with a 503 and `Retry-After`; MCP has no such
//! status, and the x402 MCP transport no such state. A tool result is answered instead, marked
//! `isError` so that no client takes it for a delivery, and without `accepts` so that no
//! client takes it for a request to pay again: its `structuredContent` says the outcome is not
//! confirmed and asks the client to **call the tool again with the same payment**. That call
//! recovers the payment from the ledger — the identical `/settle` is re-sent, or the
//! [`Reconciler`](crate::Reconciler) asked — and delivers once the settlement is proven; the
//! payment is never settled twice.
//!
//! The resource URL of a paid tool is `mcp://tool/{name}` by default ([`PaidTools::resource`]),
//! and [`PaidTools::price`] declares the tool in the challenge's `bazaar` extension in its MCP
//! form (`info.input = {"type": "mcp", "toolName", "inputSchema", "description",
//! "transport": "streamable-http"}`) unless the offer declares `bazaar` itself.
//!
//! # Example
//!
//! An `rmcp` server whose `quote` tool costs 0.05 USDC on Base:
//!
//! ```
//! use std::sync::Arc;
//! use rmcp::handler::server::router::tool::ToolRouter;
//! use rmcp::handler::server::wrapper::Parameters;
//! use rmcp::{ServerHandler, tool, tool_handler, tool_router};
//! use tower_x402::mcp::PaidTools;
//! use tower_x402::payment::Payments;
//! use tower_x402::proto::UsdcDeployment;
//! use tower_x402::{Facilitator, Offer};
//!
//! #[derive(serde::Deserialize, rmcp::schemars::JsonSchema)]
//! #[schemars(crate = "rmcp::schemars")]
//! struct Symbol {
//!     symbol: String,
//! }
//!
//! #[derive(Clone)]
//! struct Quotes {
//!     tool_router: ToolRouter<Self>,
//! }
//!
//! #[tool_router]
//! impl Quotes {
//!     #[tool(description = "The latest quote of a symbol")]
//!     fn quote(&self, Parameters(Symbol { symbol }): Parameters<Symbol>) -> String {
//!         format!("{symbol}: 101.25")
//!     }
//! }
//!
//! #[tool_handler(router = self.tool_router)]
//! impl ServerHandler for Quotes {}
//!
//! fn quotes(facilitator: impl Facilitator) -> Result<Quotes, Box<dyn std::error::Error>> {
//!     let paid = PaidTools::new(Payments::new(facilitator));
//!     let quote = Offer::builder(PaidTools::resource("quote"))
//!         .usdc(&UsdcDeployment::BASE, "0.05".parse()?, "0x209693Bc6afc0C5328bA36FaF03C514EF312287C")
//!         .build()?;
//!     let tool_router = paid.price(Quotes::tool_router(), "quote", quote)?;
//!     Ok(Quotes { tool_router })
//! }
//! # let quotes = quotes(tower_x402_sandbox::SandboxFacilitator::new())?;
//! # assert!(quotes.tool_router.has_route("quote"));
//! # Ok::<_, Box<dyn std::error::Error>>(())
//! ```

use std::future::Future;
use std::sync::Arc;

use rmcp::ErrorData;
use rmcp::handler::server::tool::{DynCallToolHandler, ToolCallContext, ToolRouter};
use rmcp::model::{CallToolResponse, CallToolResult, MetaObject, Tool};
use serde::Deserialize as _;
use serde_json::{Map, Value, json};
use x402_wire::header::HeaderError;
use x402_wire::{Extension, PaymentPayload, ResourceInfo, SettleResponse, X402Version};

use crate::boxed::BoxFuture;

use crate::payment::{
    Charge, Opening, Pass, Payments, Prelude, ProtectedRequest, Refusal, RefusalKind, RequestDigest,
};
#[cfg(doc)]
use crate::pricing::SettlementMode;
use crate::pricing::{Offer, OfferError};

/// The `_meta` key of a `tools/call` request that carries the payment (a `PaymentPayload`
/// object).
pub const PAYMENT_META: &str = "x402/payment";

/// The `_meta` key of a paid tool result that carries the settlement (a `SettleResponse`
/// object).
pub const PAYMENT_RESPONSE_META: &str = "x402/payment-response";

/// The `error` of the challenge answered to a call without a payment.
const UNPAID: &str = "payment required: call the tool again with a payment in \
                      _meta[\"x402/payment\"]";

/// Paid tools on one payment core; see the [module docs](self).
///
/// Give it the [`Payments`] of an [`X402Layer`](crate::X402Layer)
/// ([`X402Layer::payments`](crate::X402Layer::payments)) and paid routes and paid tools share
/// one ledger, one facilitator and one set of in-flight payments.
#[derive(Clone, Debug)]
pub struct PaidTools {
    payments: Arc<Payments>,
}

impl PaidTools {
    /// Paid tools whose payments `payments` verifies, settles and records.
    pub fn new(payments: impl Into<Arc<Payments>>) -> Self {
        Self {
            payments: payments.into(),
        }
    }

    /// The payment core.
    pub fn payments(&self) -> &Arc<Payments> {
        &self.payments
    }

    /// The default resource of the tool `name`: `mcp://tool/{name}`, to start its
    /// [`Offer::builder`] with.
    pub fn resource(name: &str) -> ResourceInfo {
        ResourceInfo::new(format!("mcp://tool/{name}"))
    }

    /// Prices the tool `name` of `router` with `offer`: every call of it is answered as the
    /// [module docs](self) say, and the tool itself runs only on a payment verified (or
    /// settled) for `offer`. The offer's challenge gets the tool's `bazaar` declaration in MCP
    /// form, unless it declares `bazaar` itself.
    ///
    /// # Errors
    ///
    /// When the offer with its `bazaar` declaration cannot be built (it cannot fail for an
    /// offer that was built).
    ///
    /// # Panics
    ///
    /// When `router` has no tool `name`: a priced tool that does not exist is a mistake in the
    /// server's set-up, found at start-up.
    pub fn price<S>(
        &self,
        mut router: ToolRouter<S>,
        name: &str,
        offer: impl Into<Arc<Offer>>,
    ) -> Result<ToolRouter<S>, OfferError>
    where
        S: Send + Sync + 'static,
    {
        let Some(route) = router.map.get_mut(name) else {
            panic!("PaidTools::price: the router has no tool `{name}`");
        };
        let offer = with_bazaar(offer.into(), &route.attr)?;
        route.call = paid_route(Arc::clone(&route.call), self.clone(), offer);
        Ok(router)
    }

    /// Answers one call of a tool priced with `offer`, whose request carried `payment` in
    /// `_meta["x402/payment"]` and is `request` (the tool's name and arguments,
    /// [`RequestDigest::tool`]): the payment-required result without a payment; else the
    /// payment driven through the core, `work` run once the core allows it — given the
    /// [`Charge`] to set for an `upto` payment — and its result settled and returned with the
    /// settlement, or withheld, as the [module docs](self) say. [`price`](Self::price) calls it
    /// for a tool of a [`ToolRouter`]; call it from a `ServerHandler::call_tool` of your own.
    ///
    /// A payment that settled before the work (in [`SettlementMode::Before`], or answered from
    /// its record) has moved money whatever the tool answers: its result carries the
    /// settlement even when it is an error.
    ///
    /// The [lifecycle hooks](crate::payment::PaymentHooks) see the call with no `_meta` fields;
    /// a call they grant runs `work` without a charge (the grant's extensions reach a tool
    /// priced with [`price`](Self::price) only).
    pub async fn call<F, Fut>(
        &self,
        offer: &Arc<Offer>,
        payment: Option<&Value>,
        request: RequestDigest,
        work: F,
    ) -> Result<CallToolResponse, ErrorData>
    where
        F: FnOnce(Option<Charge>) -> Fut,
        Fut: Future<Output = Result<CallToolResponse, ErrorData>>,
    {
        self.serve(offer, None, payment, request, |admission| {
            work(admission.charge)
        })
        .await
    }

    /// [`call`](Self::call) with the request's `_meta` (less the payment) for the hooks, and
    /// what a grant brings handed to `work`.
    async fn serve<F, Fut>(
        &self,
        offer: &Arc<Offer>,
        meta: Option<&Map<String, Value>>,
        payment: Option<&Value>,
        request: RequestDigest,
        work: F,
    ) -> Result<CallToolResponse, ErrorData>
    where
        F: FnOnce(Admission) -> Fut,
        Fut: Future<Output = Result<CallToolResponse, ErrorData>>,
    {
        let (offer, pass) = match self.admit(offer, meta, payment, request).await {
            Admitted::Pass(offer, pass) => (offer, pass),
            Admitted::Granted(granted) => return work(Admission::granted(granted)).await,
            Admitted::Answer(result) => return Ok(result.into()),
        };
        let payments = &self.payments;
        let charge = payments.charge(pass.payment());
        let response = work(Admission::charged(charge.clone())).await;
        // A tool that failed, or asks the client for input first, is not settled: a held payment
        // is released for the next call. One settled before the work (`SettlementMode::Before`,
        // recovered from doubt, or a repeat at a fixed price for these same arguments) has moved
        // money, so the result says so whatever it is.
        let served = matches!(&response, Ok(CallToolResponse::Complete(result)) if result.is_error != Some(true));
        let (paid, held) = match pass {
            Pass::Paid(paid) | Pass::Answered(paid) => (Some(paid), false),
            Pass::Cleared(cleared) => match cleared.conclude(served, charge.as_ref(), None).await {
                Ok(paid) => (paid, true),
                Err(refusal) => return Ok(refused(&offer, &refusal).into()),
            },
        };
        let settlement = paid
            .as_ref()
            .and_then(|paid| paid.payment().settlement.as_ref());
        Ok(match (response?, settlement) {
            (CallToolResponse::Complete(result), Some(settlement)) => {
                with_payment_response(result, settlement).into()
            }
            (CallToolResponse::Task(_), _) if held => CallToolResult::structured_error(json!({
                "x402Version": X402Version::V2,
                "error": "a paid tool must answer in the call itself, not as a task; \
                          nothing was charged",
            }))
            .into(),
            (other, _) => other,
        })
    }
}

impl PaidTools {
    /// The core's side of a call before the work: the hooks' prelude, the payment decoded from
    /// `_meta` and driven through [`Payments::pay`]; the payment to run the work on (with the
    /// offer its challenge states), a hook's grant, or the answer that refuses the call.
    async fn admit(
        &self,
        offer: &Arc<Offer>,
        meta: Option<&Map<String, Value>>,
        payment: Option<&Value>,
        request: RequestDigest,
    ) -> Admitted {
        let payments = &self.payments;
        let offer = if payments.has_hooks() {
            let (name, paying) = (&offer.resource().url, payment.is_some());
            let request = ProtectedRequest::meta(offer, name, meta, paying);
            let prelude = match payments.open(&request) {
                Opening::Continue(offer) => Prelude::Continue(offer),
                Opening::Ask(offer, considering) => {
                    payments
                        .decide(&request.with_offer(&offer), considering)
                        .await
                }
            };
            match prelude {
                Prelude::Continue(offer) => offer,
                Prelude::Granted(granted) => return Admitted::Granted(granted),
                Prelude::Refused(offer, refusal) => {
                    return Admitted::Answer(refused(&offer, &refusal));
                }
            }
        } else {
            Arc::clone(offer)
        };
        let Some(value) = payment else {
            payments.report_refusal(&offer, &Refusal::PaymentMissing);
            return Admitted::Answer(payment_required(&offer, UNPAID));
        };
        let payload = match decode(value) {
            Ok(payload) => payload,
            Err(error) => {
                let reason = format!("invalid _meta[\"{PAYMENT_META}\"]: {}", describe(&error));
                payments.report_refusal(&offer, &Refusal::InvalidHeader(error));
                return Admitted::Answer(payment_required(&offer, &reason));
            }
        };
        match payments.pay(&offer, payload, request).await.into_pass() {
            Ok(Pass::Answered(paid)) => {
                // Settled with no work to run: the settlement is the answer.
                let settlement = paid.payment().settlement.as_ref();
                let result = CallToolResult::structured(
                    settlement
                        .and_then(|settlement| serde_json::to_value(settlement).ok())
                        .unwrap_or_default(),
                );
                Admitted::Answer(match settlement {
                    Some(settlement) => with_payment_response(result, settlement),
                    None => result,
                })
            }
            Ok(pass) => Admitted::Pass(offer, pass),
            Err(refusal) => Admitted::Answer(refused(&offer, &refusal)),
        }
    }
}

/// What [`PaidTools::admit`] decided about a call.
enum Admitted {
    /// Run the work on this payment; the offer is the call's (with the hooks' extensions).
    Pass(Arc<Offer>, Pass),
    /// A hook granted the call without payment.
    Granted(http::Extensions),
    /// Answer the call with this result; the work does not run.
    Answer(CallToolResult),
}

/// The route of a priced tool: the payment taken out of the request's `_meta` (the tool never
/// sees it), the [`Charge`] of an `upto` payment put into its extensions, and `inner` called
/// as [`PaidTools::call`] allows.
fn paid_route<S>(
    inner: Arc<DynCallToolHandler<S>>,
    paid: PaidTools,
    offer: Arc<Offer>,
) -> Arc<DynCallToolHandler<S>>
where
    S: Send + Sync + 'static,
{
    fn typed<S, F>(route: F) -> F
    where
        F: for<'s> Fn(ToolCallContext<'s, S>) -> BoxFuture<'s, Result<CallToolResponse, ErrorData>>,
    {
        route
    }
    Arc::new(typed(move |mut context: ToolCallContext<'_, S>| {
        let (inner, paid, offer) = (Arc::clone(&inner), paid.clone(), Arc::clone(&offer));
        Box::pin(async move {
            let payment = context.request_context.meta.0.0.remove(PAYMENT_META);
            // The hooks read the call's other `_meta` fields; without hooks nothing is copied.
            let meta = paid
                .payments
                .has_hooks()
                .then(|| context.request_context.meta.0.0.clone());
            let request = RequestDigest::tool(&context.name, context.arguments.as_ref());
            paid.serve(
                &offer,
                meta.as_ref(),
                payment.as_ref(),
                request,
                move |admission| {
                    if let Some(charge) = admission.charge {
                        context.request_context.extensions.insert(charge);
                    }
                    if let Some(granted) = admission.granted {
                        context.request_context.extensions.insert(granted);
                    }
                    inner(context)
                },
            )
            .await
        })
    }))
}

/// What a call is let in with: the charge of an `upto` payment, or what a hook's grant brings
/// (an `http::Extensions` the tool finds in its request context's extensions).
struct Admission {
    charge: Option<Charge>,
    granted: Option<http::Extensions>,
}

impl Admission {
    fn charged(charge: Option<Charge>) -> Self {
        Self {
            charge,
            granted: None,
        }
    }

    fn granted(granted: http::Extensions) -> Self {
        Self {
            charge: None,
            granted: Some(granted),
        }
    }
}

/// The payment in `_meta["x402/payment"]`: a version 2 `PaymentPayload` object.
fn decode(value: &Value) -> Result<PaymentPayload, HeaderError> {
    if let Some(version) = value.get("x402Version")
        && *version != 2
    {
        return Err(HeaderError::WrongVersion {
            found: version.to_string(),
        });
    }
    PaymentPayload::deserialize(value).map_err(|source| HeaderError::Shape {
        what: "PaymentPayload",
        source,
    })
}

/// What is wrong with a `_meta["x402/payment"]` value, in its own terms (it is no header).
fn describe(error: &HeaderError) -> String {
    match error {
        HeaderError::Shape { what, source } => format!("not a valid {what}: {source}"),
        other => other.to_string(),
    }
}

/// The payment-required result: the challenge with `error`, in both `structuredContent` and
/// `content[0].text`.
fn payment_required(offer: &Offer, error: &str) -> CallToolResult {
    let required = offer.challenge_with_error(error);
    let value = serde_json::to_value(&required).unwrap_or_else(|_| json!({}));
    CallToolResult::structured_error(value)
}

/// The result for `refusal`: the only place a refusal becomes a tool result.
fn refused(offer: &Offer, refusal: &Refusal) -> CallToolResult {
    let retry = |error: &str, message: &str| {
        CallToolResult::structured_error(json!({
            "x402Version": X402Version::V2,
            "error": error,
            "message": message,
            "retryWithSamePayment": true,
        }))
    };
    match refusal {
        Refusal::SettlementInDoubt { .. } => retry(
            "settlement_not_confirmed",
            "the settlement of this payment is not confirmed yet: call the tool again with the \
             same payment in _meta[\"x402/payment\"]; it will not be charged twice",
        ),
        Refusal::PaymentInProgress => retry(
            "payment_in_progress",
            "this payment is being processed: call the tool again with the same payment in \
             _meta[\"x402/payment\"]; it will not be charged twice",
        ),
        Refusal::RecordsUnavailable(_) => retry(
            "records_unavailable",
            "the payment records are unavailable: call the tool again later with the same \
             payment; it will not be charged twice",
        ),
        Refusal::Facilitator(failure) if failure.is_unavailable() => retry(
            "facilitator_unavailable",
            "the payment facilitator is unavailable: call the tool again later with the same \
             payment; it will not be charged twice",
        ),
        Refusal::UsedForAnotherRequest { .. } | Refusal::AlreadyDelivered { .. } => {
            let result = CallToolResult::structured_error(json!({
                "x402Version": X402Version::V2,
                "error": refusal.conflict_code(),
                "message": refusal.to_string(),
            }));
            match refusal.recorded_settlement() {
                Some(settlement) => with_payment_response(result, settlement),
                None => result,
            }
        }
        _ if refusal.kind() == RefusalKind::PaymentRequired => {
            payment_required(offer, &refusal.to_string())
        }
        _ => CallToolResult::structured_error(json!({
            "x402Version": X402Version::V2,
            "error": refusal.to_string(),
        })),
    }
}

/// `result` with the settlement in `_meta["x402/payment-response"]`.
fn with_payment_response(
    mut result: CallToolResult,
    settlement: &SettleResponse,
) -> CallToolResult {
    if let Ok(value) = serde_json::to_value(settlement) {
        result
            .meta
            .get_or_insert_with(MetaObject::new)
            .insert(PAYMENT_RESPONSE_META.to_owned(), value);
    }
    result
}

/// `offer` declaring `tool` in its `bazaar` extension (MCP form), unless it declares `bazaar`.
fn with_bazaar(offer: Arc<Offer>, tool: &Tool) -> Result<Arc<Offer>, OfferError> {
    if offer
        .extensions()
        .is_some_and(|extensions| extensions.contains_key("bazaar"))
    {
        return Ok(offer);
    }
    let mut input = json!({
        "type": "mcp",
        "toolName": tool.name,
        "inputSchema": tool.input_schema.as_ref(),
        "transport": "streamable-http",
    });
    let mut properties = json!({
        "type": {"type": "string", "const": "mcp"},
        "toolName": {"type": "string"},
        "inputSchema": {"type": "object"},
        "transport": {"type": "string", "enum": ["streamable-http", "sse"]},
    });
    if let Some(description) = &tool.description {
        input["description"] = json!(description);
        properties["description"] = json!({"type": "string"});
    }
    let schema = json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": {
            "input": {
                "type": "object",
                "properties": properties,
                "required": ["type", "toolName", "inputSchema"],
                "additionalProperties": false,
            },
        },
        "required": ["input"],
    });
    offer
        .to_builder()
        .extension("bazaar", Extension::new(json!({ "input": input }), schema))
        .build()
        .map(Arc::new)
}
