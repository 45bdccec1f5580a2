//! Why a priced request was refused instead of passed on to the work.

use std::fmt;

use x402_wire::header::HeaderError;
use x402_wire::{AtomicAmount, PaymentRequirements, SettleResponse};

use crate::facilitator::FacilitatorError;
use crate::settlement::StoreError;

/// Why the core refused a priced request, in no transport's terms. Every refusal is answered
/// from this value alone: its [`kind`](Self::kind) (what the client should do next), and its
/// `Display` as the answer's `error`. Each adapter maps the kind to its wire: the HTTP layer to
/// a status ([`layer::status_of`](crate::layer::status_of)), the MCP adapter to a tool result.
/// [`PaymentHooks::observe`](super::PaymentHooks::observe) is told of each.
///
/// | refusal | kind | over HTTP |
/// |---|---|---|
/// | [`PaymentMissing`](Self::PaymentMissing) | [`PaymentRequired`](RefusalKind::PaymentRequired) | 402, the challenge |
/// | [`InvalidHeader`](Self::InvalidHeader) | [`BadRequest`](RefusalKind::BadRequest) | 400, or 402 with [`X402Layer::invalid_header_payment_required`](crate::X402Layer::invalid_header_payment_required); the challenge |
/// | [`OtherResource`](Self::OtherResource) | [`PaymentRequired`](RefusalKind::PaymentRequired) | 402, the challenge |
/// | [`NoMatchingRequirement`](Self::NoMatchingRequirement) | [`PaymentRequired`](RefusalKind::PaymentRequired) | 402, the challenge |
/// | [`InvalidPayment`](Self::InvalidPayment) | [`PaymentRequired`](RefusalKind::PaymentRequired) | 402, the challenge |
/// | [`IdentifierReused`](Self::IdentifierReused) | [`Conflict`](RefusalKind::Conflict) | 409 |
/// | [`SettledForAnotherResource`](Self::SettledForAnotherResource) | [`PaymentRequired`](RefusalKind::PaymentRequired) | 402, the challenge |
/// | [`UsedForAnotherRequest`](Self::UsedForAnotherRequest) | [`Conflict`](RefusalKind::Conflict) | 409, `error: "payment_used_for_another_request"`; the recorded `PAYMENT-RESPONSE` when settled |
/// | [`AlreadyDelivered`](Self::AlreadyDelivered) | [`Conflict`](RefusalKind::Conflict) | 409, `error: "payment_already_delivered"`; the recorded `PAYMENT-RESPONSE` |
/// | [`PermitAmountMismatch`](Self::PermitAmountMismatch) | [`PaymentRequired`](RefusalKind::PaymentRequired) | 402, the challenge; nothing verified |
/// | [`PermitMismatch`](Self::PermitMismatch) | [`PaymentRequired`](RefusalKind::PaymentRequired) | 402, the challenge; nothing verified |
/// | [`Facilitator`](Self::Facilitator) unavailable | [`RetrySamePayment`](RefusalKind::RetrySamePayment) | 503, `Retry-After` |
/// | [`Facilitator`](Self::Facilitator) answered wrongly | [`UpstreamFault`](RefusalKind::UpstreamFault) | 502 |
/// | [`SettlementRefused`](Self::SettlementRefused) | [`PaymentRequired`](RefusalKind::PaymentRequired) | 402, the challenge, the failure in `PAYMENT-RESPONSE` |
/// | [`RecordsUnavailable`](Self::RecordsUnavailable) | [`RetrySamePayment`](RefusalKind::RetrySamePayment) | 503, `Retry-After` |
/// | [`SettlementInDoubt`](Self::SettlementInDoubt) | [`RetrySamePayment`](RefusalKind::RetrySamePayment) | 503, `Retry-After`; never charged twice |
/// | [`PaymentInProgress`](Self::PaymentInProgress) | [`RetrySamePayment`](RefusalKind::RetrySamePayment) | 503, `Retry-After` |
/// | [`AuthorizationExpired`](Self::AuthorizationExpired) | [`PaymentRequired`](RefusalKind::PaymentRequired) | 402, the challenge; nothing moved, pay again |
/// | [`ChargeAboveMaximum`](Self::ChargeAboveMaximum) | [`ServerFault`](RefusalKind::ServerFault) | 500; nothing settled, the payment released |
/// | [`InvalidSettlementOverride`](Self::InvalidSettlementOverride) | [`ServerFault`](RefusalKind::ServerFault) | 500; nothing settled, the payment released |
/// | [`Corrected`](Self::Corrected) | [`PaymentRequired`](RefusalKind::PaymentRequired) | 402, the challenge with the corrected accept |
/// | [`Hook`](Self::Hook) | the hook's | as its kind says |
///
/// ```
/// use tower_x402::payment::{Refusal, RefusalKind};
///
/// let refusal = Refusal::NoMatchingRequirement { field: Some("amount") };
/// assert_eq!(refusal.kind(), RefusalKind::PaymentRequired);
/// assert_eq!(
///     refusal.to_string(),
///     "no matching payment requirements: accepted amount differs from this resource's"
/// );
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum Refusal {
    /// The request carries no `PAYMENT-SIGNATURE`.
    PaymentMissing,
    /// `PAYMENT-SIGNATURE` is not base64, not JSON, not a version 2 payment, or too large.
    InvalidHeader(HeaderError),
    /// The payment names another resource (`resource.url`) than the one requested: a payment
    /// buys what it was signed for, never a product of the same price elsewhere.
    OtherResource,
    /// The payment's `accepted` matches none of the offer's accepts.
    NoMatchingRequirement {
        /// The first field that differs from the closest accept, when one is close.
        field: Option<&'static str>,
    },
    /// The facilitator found the payment invalid (`isValid: false`).
    InvalidPayment {
        /// The facilitator's `invalidReason`, or `invalid_payment` when it gave none.
        reason: String,
    },
    /// The payment's `payment-identifier` was already used by a different payment.
    IdentifierReused,
    /// The payment already settled, for another resource; a payment buys one resource.
    SettledForAnotherResource,
    /// The payment was used for another request (method, path and query, or tool and
    /// arguments) of this resource: a payment buys one delivery of one request. Nothing ran.
    UsedForAnotherRequest {
        /// The settlement recorded for the payment, when it settled (not while in doubt).
        settlement: Option<Box<SettleResponse>>,
    },
    /// A payment delivered once and never again presented again: a metered (`upto`) one, whose
    /// charge was decided by the work that served it, or one that bought a request whose body
    /// was too large to compare ([`RequestDigest::http_unread_body`](super::RequestDigest::http_unread_body)).
    /// Nothing ran; the recorded settlement says what was charged.
    AlreadyDelivered {
        /// The settlement recorded for the payment.
        settlement: Box<SettleResponse>,
    },
    /// The amount a metered (`upto`) payment's Permit2 permit signs differs from the offer's
    /// maximum it names in `accepted`. Refused before verification.
    PermitAmountMismatch,
    /// An `exact` Permit2 permit does not pay the accept it names: it signs another amount,
    /// token (`permitted.token`), recipient (`witness.to`) or spender than the accept's
    /// amount, asset, `payTo` and the `exact` proxy. Refused before verification.
    PermitMismatch {
        /// The permit's field that differs: `amount`, `token`, `payTo` or `spender`.
        field: &'static str,
    },
    /// The facilitator gave no usable answer. Nothing settled unless this came from `/settle`,
    /// where the money may or may not have moved: the client is asked to retry the same payment.
    Facilitator(FacilitatorError),
    /// The facilitator refused to settle (`success: false`).
    SettlementRefused(Box<SettleResponse>),
    /// The settlement records could not be read, so the layer cannot tell whether the payment
    /// already settled; it refuses rather than risk a second charge.
    RecordsUnavailable(StoreError),
    /// `/settle` was sent and may have moved money, but its outcome is not known yet (the answer
    /// was lost, timed out or said `settlement_pending`, and no reconciler could tell). The
    /// payment is kept *in doubt*: retrying the same `PAYMENT-SIGNATURE` recovers it, and it is
    /// never charged twice.
    SettlementInDoubt {
        /// Why the outcome is unknown, for the logs (never sent to the client).
        reason: String,
    },
    /// Another process holds this payment right now (its lease has not expired).
    PaymentInProgress,
    /// The payment never settled (the chain says so) and its authorization has expired: nothing
    /// moved, and the buyer may pay again.
    AuthorizationExpired,
    /// The work set a metered charge above the maximum the buyer signed: a bug in the handler.
    /// Nothing settled, and the payment is released.
    ChargeAboveMaximum {
        /// What the handler set, in atomic units.
        charged: AtomicAmount,
        /// What the buyer signed for.
        maximum: AtomicAmount,
    },
    /// The work's `Settlement-Overrides` header could not be read: a bug in the handler.
    /// Nothing settled (never the maximum by default), and the payment is released.
    InvalidSettlementOverride {
        /// What was wrong with it, for the logs and the response.
        reason: String,
    },
    /// The payment was signed on a state the server no longer holds (a payment channel's
    /// cumulative that moved on): refused with a 402 whose accept of the same scheme, network,
    /// asset and payTo is `accept`, carrying the server's state so that the client can sign
    /// again on it. Nothing was run or charged.
    Corrected {
        /// The answer's `error`.
        reason: String,
        /// The accept answered in place of the offer's of its scheme, network, asset and payTo.
        accept: Box<PaymentRequirements>,
    },
    /// A [lifecycle hook](super::PaymentHooks) refused the request.
    Hook {
        /// What the client is asked to do.
        kind: RefusalKind,
        /// The answer's `error`.
        reason: String,
    },
}

impl Refusal {
    /// What the refusal asks of the client; each adapter answers it in its own terms.
    pub fn kind(&self) -> RefusalKind {
        match self {
            Self::InvalidHeader(_) => RefusalKind::BadRequest,
            Self::IdentifierReused
            | Self::UsedForAnotherRequest { .. }
            | Self::AlreadyDelivered { .. } => RefusalKind::Conflict,
            Self::Facilitator(failure) if failure.is_unavailable() => RefusalKind::RetrySamePayment,
            Self::Facilitator(_) => RefusalKind::UpstreamFault,
            Self::RecordsUnavailable(_)
            | Self::SettlementInDoubt { .. }
            | Self::PaymentInProgress => RefusalKind::RetrySamePayment,
            Self::PaymentMissing
            | Self::OtherResource
            | Self::NoMatchingRequirement { .. }
            | Self::InvalidPayment { .. }
            | Self::SettledForAnotherResource
            | Self::PermitAmountMismatch
            | Self::PermitMismatch { .. }
            | Self::SettlementRefused(_)
            | Self::AuthorizationExpired
            | Self::Corrected { .. } => RefusalKind::PaymentRequired,
            Self::ChargeAboveMaximum { .. } | Self::InvalidSettlementOverride { .. } => {
                RefusalKind::ServerFault
            }
            Self::Hook { kind, .. } => *kind,
        }
    }
}

/// What a [`Refusal`] asks of the client, in no transport's terms.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RefusalKind {
    /// Pay (again): the answer carries the challenge. HTTP 402.
    PaymentRequired,
    /// The payment could not be read at all. HTTP 400 (with the challenge).
    BadRequest,
    /// The payment's identifier was already used by another payment. HTTP 409.
    Conflict,
    /// Nothing is known to be wrong with the payment, but it cannot be answered now: send the
    /// same payment again later; it is never charged twice. HTTP 503 with `Retry-After`.
    RetrySamePayment,
    /// The facilitator answered something unusable. HTTP 502.
    UpstreamFault,
    /// The server's own work broke a rule (a metered charge above the maximum, none set);
    /// nothing settled. HTTP 500.
    ServerFault,
}

/// The `error` text sent to the client: never a facilitator's body or a store's error, which
/// belong in the server's logs.
impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::PaymentMissing => f.write_str(crate::pricing::UNPAID_ERROR),
            Self::InvalidHeader(error) => write!(f, "invalid PAYMENT-SIGNATURE header: {error}"),
            Self::OtherResource => {
                f.write_str("this payment was signed for a different resource than this one")
            }
            Self::NoMatchingRequirement { field: Some(field) } => write!(
                f,
                "no matching payment requirements: accepted {field} differs from this resource's"
            ),
            Self::NoMatchingRequirement { field: None } => {
                f.write_str("no matching payment requirements")
            }
            Self::InvalidPayment { reason } => f.write_str(reason),
            Self::IdentifierReused => {
                f.write_str("this payment identifier was already used for a different payment")
            }
            Self::SettledForAnotherResource => {
                f.write_str("this payment was already settled for a different resource")
            }
            Self::UsedForAnotherRequest { .. } => f.write_str(
                "this payment was already used for a different request (another method, path, \
                 query or body, or other tool arguments): a payment buys one delivery of one \
                 request; nothing was run or charged again",
            ),
            Self::AlreadyDelivered { .. } => f.write_str(
                "this payment was already delivered and charged (see PAYMENT-RESPONSE): a \
                 metered payment, or one for a request whose body was too large to compare, is \
                 not served again; nothing was run or charged again",
            ),
            Self::PermitAmountMismatch => f.write_str(
                "the permit's signed amount differs from the accepted maximum: sign the \
                 maximum the offer names, written as decimal digits only",
            ),
            Self::PermitMismatch { field } => write!(
                f,
                "the permit's signed {field} differs from the accepted requirement's: sign a \
                 permit to the exact Permit2 proxy for the accept's amount, asset and payTo"
            ),
            Self::Facilitator(failure) if failure.is_unavailable() => write!(
                f,
                "payment facilitator unavailable, retry the same payment later: {}",
                failure.public_summary()
            ),
            Self::Facilitator(failure) => {
                write!(
                    f,
                    "payment facilitator failed: {}",
                    failure.public_summary()
                )
            }
            Self::SettlementRefused(settlement) => f.write_str(
                settlement
                    .error_reason
                    .as_deref()
                    .unwrap_or("settlement_failed"),
            ),
            Self::RecordsUnavailable(_) => {
                f.write_str("settlement records are unavailable, retry the same payment later")
            }
            Self::SettlementInDoubt { .. } => f.write_str(
                "the settlement of this payment is not confirmed yet: retry the same payment (the \
                 same PAYMENT-SIGNATURE); it will not be charged twice",
            ),
            Self::PaymentInProgress => f.write_str(
                "this payment is being processed: retry the same payment (the same \
                 PAYMENT-SIGNATURE); it will not be charged twice",
            ),
            Self::AuthorizationExpired => f.write_str(
                "this payment never settled and its authorization has expired: nothing was \
                 charged, sign a new payment",
            ),
            Self::ChargeAboveMaximum { charged, maximum } => write!(
                f,
                "the server set a charge of {charged} above the {maximum} signed for; nothing \
                 was charged"
            ),
            Self::Hook { reason, .. } | Self::Corrected { reason, .. } => f.write_str(reason),
            Self::InvalidSettlementOverride { reason } => write!(
                f,
                "the server's Settlement-Overrides header is malformed ({reason}); nothing was \
                 charged"
            ),
        }
    }
}

impl Refusal {
    /// The short machine-readable code a 409 answers with as its `error` (the text above
    /// goes in `message`): `payment_used_for_another_request` or `payment_already_delivered`.
    pub(crate) fn conflict_code(&self) -> Option<&'static str> {
        match self {
            Self::UsedForAnotherRequest { .. } => Some("payment_used_for_another_request"),
            Self::AlreadyDelivered { .. } => Some("payment_already_delivered"),
            _ => None,
        }
    }

    /// The settlement recorded for the payment this refusal is about, when it has one to show.
    pub(crate) fn recorded_settlement(&self) -> Option<&SettleResponse> {
        match self {
            Self::UsedForAnotherRequest { settlement } => settlement.as_deref(),
            Self::AlreadyDelivered { settlement } => Some(settlement),
            _ => None,
        }
    }
}

impl std::error::Error for Refusal {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::InvalidHeader(error) => Some(error),
            Self::Facilitator(error) => Some(error),
            Self::RecordsUnavailable(error) => Some(error),
            _ => None,
        }
    }
}
