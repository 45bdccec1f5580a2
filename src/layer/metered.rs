//! Metered payments in the layer: the amount a handler named, and the body that settles once it
//! has ended ([`SettlementMode::AfterBody`](crate::SettlementMode::AfterBody)).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use http::{HeaderMap, HeaderName, HeaderValue};
use x402_wire::{AtomicAmount, PAYMENT_RESPONSE, header as codec};

use crate::payment::charge::resolve_override;
use crate::payment::{Charge, Cleared, Refusal, VerifiedPayment};

/// The response header in which a handler written for another x402 server names the amount to
/// charge for a metered payment: `{"amount": "1000" | "50%" | "$0.05"}` (atomic units, a
/// percentage of the signed maximum floored, or dollars truncated to the asset's decimals).
/// The layer reads it and removes it from every response to a priced request, so the client
/// never sees it. A [`Charge`] set by the handler takes precedence over it.
///
/// ```
/// assert_eq!(tower_x402::layer::SETTLEMENT_OVERRIDES, "settlement-overrides");
/// ```
pub const SETTLEMENT_OVERRIDES: HeaderName = HeaderName::from_static("settlement-overrides");

/// Removes every `Settlement-Overrides` header; `Err(())` when there was more than one.
pub(super) fn take_overrides(headers: &mut HeaderMap) -> Result<Option<HeaderValue>, ()> {
    let count = headers.get_all(SETTLEMENT_OVERRIDES).iter().count();
    let first = headers.remove(SETTLEMENT_OVERRIDES);
    if count > 1 { Err(()) } else { Ok(first) }
}

/// The amount the handler's `Settlement-Overrides` header names, if it sent one. A malformed
/// header is the handler's bug: refused (500), never the maximum.
pub(super) fn header_amount(
    charge: &Charge,
    overrides: Result<Option<HeaderValue>, ()>,
    payment: &VerifiedPayment,
) -> Result<Option<AtomicAmount>, Box<Refusal>> {
    let reason = match overrides {
        Ok(None) => return Ok(None),
        Ok(Some(value)) => {
            match resolve_override(value.as_bytes(), charge.maximum(), charge.decimals()) {
                Ok(amount) => return Ok(Some(amount)),
                Err(error) => error.to_string(),
            }
        }
        Err(()) => "more than one header".to_owned(),
    };
    tracing::error!(key = %payment.key, %reason, "malformed Settlement-Overrides header; nothing settled");
    Err(Box::new(Refusal::InvalidSettlementOverride { reason }))
}

/// Settles a payment once its response body has ended — or has been dropped (the client
/// disconnected), charging what was sent — on a task of its own, and hands the outcome back as
/// trailers.
pub(crate) struct Meter {
    state: MeterState,
}

enum MeterState {
    Streaming(Box<Unsettled>),
    Settling(tokio::task::JoinHandle<Option<HeaderMap>>),
    Done,
}

struct Unsettled {
    cleared: Cleared,
    charge: Option<Charge>,
    from_header: Option<AtomicAmount>,
}

impl Meter {
    pub(super) fn new(
        cleared: Cleared,
        charge: Option<Charge>,
        from_header: Option<AtomicAmount>,
    ) -> Self {
        Self {
            state: MeterState::Streaming(Box::new(Unsettled {
                cleared,
                charge,
                from_header,
            })),
        }
    }

    pub(super) fn is_streaming(&self) -> bool {
        matches!(self.state, MeterState::Streaming(_))
    }

    pub(super) fn is_done(&self) -> bool {
        matches!(self.state, MeterState::Done)
    }

    /// The body has ended (or failed): start settling what it charged.
    pub(super) fn finish(&mut self) {
        if let MeterState::Streaming(unsettled) =
            std::mem::replace(&mut self.state, MeterState::Done)
        {
            match tokio::runtime::Handle::try_current() {
                Ok(runtime) => self.state = MeterState::Settling(runtime.spawn(settle(*unsettled))),
                Err(_) => tracing::error!(
                    "no runtime to settle a metered body on; its hold expires unsettled"
                ),
            }
        }
    }

    /// The trailers once the settlement is done: `Some` once, then `None`.
    pub(super) fn poll_trailers(&mut self, cx: &mut Context<'_>) -> Poll<Option<HeaderMap>> {
        let MeterState::Settling(task) = &mut self.state else {
            return Poll::Ready(None);
        };
        let outcome = ready!(Pin::new(task).poll(cx));
        self.state = MeterState::Done;
        Poll::Ready(match outcome {
            Ok(trailers) => trailers,
            Err(error) => {
                tracing::error!(%error, "metered settlement task failed; the payment is left to recovery");
                None
            }
        })
    }
}

/// A body dropped before its end (the client disconnected) is charged for what was sent.
impl Drop for Meter {
    fn drop(&mut self) {
        if self.is_streaming() {
            tracing::debug!("metered body dropped before its end; settling what was sent");
            self.finish();
        }
    }
}

impl fmt::Debug for Meter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match self.state {
            MeterState::Streaming(_) => "streaming",
            MeterState::Settling(_) => "settling",
            MeterState::Done => "done",
        };
        f.debug_struct("Meter").field("state", &state).finish()
    }
}

/// Settles what the body charged; the trailers carry `PAYMENT-RESPONSE` when there is a
/// settlement (or a refusal from the facilitator) to show.
async fn settle(unsettled: Unsettled) -> Option<HeaderMap> {
    let Unsettled {
        cleared,
        charge,
        from_header,
    } = unsettled;
    // Served: never released, so settled or refused.
    let outcome = cleared.conclude(true, charge.as_ref(), from_header).await;
    let settlement = match outcome {
        Ok(paid) => paid.and_then(|paid| paid.payment().settlement.clone()),
        Err(Refusal::SettlementRefused(settlement)) => Some(*settlement),
        Err(refusal) => {
            tracing::warn!(%refusal, "a metered body was served but its payment did not settle");
            None
        }
    }?;
    let value = codec::encode(&settlement).ok()?;
    let mut trailers = HeaderMap::with_capacity(1);
    trailers.insert(PAYMENT_RESPONSE, value);
    Some(trailers)
}
