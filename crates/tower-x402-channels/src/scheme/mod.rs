//! The `batch-settlement` scheme on the server's side, as a plug-in of the payment core:
//! [`BatchSettlement`] is one [`Scheme`], registered on a
//! [`Payments`](tower_x402::payment::Payments) in one call.

mod flow;
mod offer;
mod payload;
mod refund;
mod response;
mod signature;
mod sweep;
mod verify;

use std::sync::Arc;
use std::time::Duration;

use http::Extensions;
use tower_x402::BoxFuture;
use tower_x402::PaymentKey;
use tower_x402::payment::{PaymentContext, Payments, Refusal, Scheme};
use tower_x402::proto::{FacilitatorRequest, PaymentPayload, SettleResponse, VerifyResponse};

use crate::chain::ChainReader;
use crate::claim::ClaimAuthorizer;
use crate::store::ChannelStore;
use crate::wire::BATCH_SETTLEMENT_SCHEME;
use flow::Pending;
pub use offer::{ChannelOffer, ChannelOfferError, MAX_WITHDRAW_DELAY, MIN_WITHDRAW_DELAY};
#[cfg(feature = "rpc")]
pub(crate) use payload::deposit_facts;
use payload::{BuyerPayload, Kind};
use refund::CompletedRefund;

/// [`BatchSettlement::claim_within`]'s default.
const DEFAULT_CLAIM_WITHIN: Duration = Duration::from_secs(180);

/// What a voucher's acceptance keeps between the claim it waits for and a pending withdrawal's
/// finalization: a claim transaction's time to be mined, and the clocks' difference.
pub const WITHDRAWAL_MARGIN: Duration = Duration::from_secs(60);

/// The `batch-settlement` scheme (payment channels), server side: a buyer deposits once, then
/// pays each request with a voucher the server checks locally — one ECDSA recovery against the
/// channel's committed payer authorizer, no facilitator call — and counts once in its
/// [`ChannelStore`].
///
/// One [`Scheme`] on the core's steps: the core asks it only about `batch-settlement`
/// payments, and it reaches the facilitator only through the core
/// ([`PaymentContext::verify_at_facilitator`], [`PaymentContext::settle_at_facilitator`]), so
/// deposits, vouchers sent to `/verify` and refunds go through the core's facilitator pool,
/// circuit breakers, failover and deadlines, the ledger's write-ahead intent and its in-doubt
/// log, like any payment. What it keeps of a request between verification and settlement
/// travels with the payment, in its notes. Registered on a core with
/// [`register`](Self::register); offer it with
/// [`ChannelOffer::usdc`] in an offer settled [after the work](tower_x402::SettlementMode::After).
/// The handler decides each request's charge with a [`Charge`](tower_x402::Charge) (zero up to
/// the accept's amount); the channel's cumulative grows by it, committed durably before the
/// response is released, and nothing changes when the handler fails.
///
/// | payload | verified | settled |
/// |---|---|---|
/// | `deposit` | facilitator `/verify` | facilitator `/settle` (the deposit moves on chain); the voucher committed after it |
/// | `voucher` | locally, while the mirrored chain is fresh and the payer authorizer an EOA; else `/verify` | committed in the store; nothing sent |
/// | `refund` | its zero-charge voucher (`maxClaimableAmount == chargedCumulativeAmount`), then facilitator `/verify`; completed (amount, `refundNonce`, the claim of what was charged, the server's signatures) | the completed refund, written ahead in the ledger's intent, sent to `/settle`; the handler is not run; the record removed on a full refund |
///
/// The receiver authorizer may be the facilitator's (claims and refunds signed by it) or the
/// server's own: vouchers and deposits need no signature of it, and the
/// [`Claimer`](crate::Claimer) signs claims with a [`ClaimAuthorizer`](crate::ClaimAuthorizer);
/// refunds carry its signatures when it is given with [`authorizer`](Self::authorizer), else
/// the facilitator's.
///
/// Each voucher request also leaves a record in the core's
/// [`SettlementStore`](tower_x402::SettlementStore), as every settlement does; its key is unique
/// per request, since the channel store, not the ledger, counts a voucher once.
///
/// A channel this server has no record of (its records lost) starts from what the chain says
/// was claimed, as the specification says: charges accepted and not claimed are forfeited,
/// which is why the [`ChannelStore`] must be durable.
///
/// A voucher signed on another cumulative than the channel's (a replay, a buyer out of step)
/// is refused with the corrective 402: the accept carries `channelState` and `voucherState` so
/// the buyer can re-sync — only when the voucher is signed by the channel's payer authorizer;
/// anyone else gets a plain refusal (`invalid_batch_settlement_evm_voucher_signature`) and
/// nothing of the channel. A refund whose voucher is the one the server holds (the one a
/// corrective 402 shows) is refused (`invalid_batch_settlement_evm_refund_voucher_not_fresh`):
/// nothing the server ever sent is a refund's proof. A voucher on a channel whose pending
/// withdrawal may finalize before a claim is refused: see [`claim_within`](Self::claim_within).
/// The crate's README says where this goes beyond the specification. A request on a channel another request is being served on is refused
/// at once with `invalid_batch_settlement_evm_channel_busy` (503, the same payment may be sent
/// again).
///
/// A deposit whose `/settle` answer is lost is left *in doubt* by the core (503) and its
/// channel stays held (until the doubt resolves, at most the hold's lease of 120 s): when the
/// core learns it settled (the same payment sent again, the core's reconciler — a
/// `DepositReconciler` with the `rpc` feature), the request's voucher
/// is committed, the balance mirrored as the verified one plus the deposit; when it learns it
/// never did, the channel is released. A deposit recovered by a process that did not verify it
/// (this one restarted while it was in doubt, or another instance) commits its voucher from the
/// payload itself, on the base it was verified on (`maxClaimableAmount` less the accept's
/// amount), and only while the channel's charge is still that base: never twice. While the
/// stopped process's hold has not run out (at most its lease), the commit waits for it in a task
/// of its own, the channel busy meanwhile. A refund whose `/settle` answer is lost is resolved
/// against the chain read with [`chain`](Self::chain); when it cannot be, it is *in doubt* in
/// the core's ledger and log, never answered 402, and the same refund sent again re-sends the
/// completed request written ahead (its refund nonce makes it run at most once): see there.
///
/// ```
/// use std::sync::Arc;
/// use tower_x402::payment::Payments;
/// use tower_x402::HttpFacilitator;
/// use tower_x402_channels::{BatchSettlement, MemoryChannelStore};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let facilitator = HttpFacilitator::new("https://facilitator.example")?;
/// let channels = Arc::new(MemoryChannelStore::default());
/// let payments = BatchSettlement::new(Arc::clone(&channels)).register(Payments::new(facilitator));
/// # let _ = payments;
/// # Ok(()) }
/// ```
#[derive(Clone)]
#[must_use]
pub struct BatchSettlement {
    inner: Arc<Inner>,
}

struct Inner {
    store: Arc<dyn ChannelStore>,
    owner: String,
    hold_lease: Duration,
    fresh_for: Option<Duration>,
    /// How long this server may take to claim a channel (its claim interval, or its withdrawal
    /// watch's period plus a claim's time): a voucher is accepted only while the channel's
    /// pending withdrawal cannot finalize before that.
    claim_within: Duration,
    /// The server's own receiver-authorizer key, when it has one.
    authorizer: Option<Arc<dyn ClaimAuthorizer>>,
    /// Reads the contract, to resolve a refund whose `/settle` answer was lost.
    chain: Option<Arc<dyn ChainReader>>,
}

impl BatchSettlement {
    /// The scheme keeping channels in `store`. Deposits, refunds and the vouchers it cannot
    /// check locally go to the facilitators of the core it is [registered](Self::register) on.
    pub fn new(store: impl ChannelStore) -> Self {
        let owner: [u8; 8] = rand::random();
        Self {
            inner: Arc::new(Inner {
                store: Arc::new(store),
                owner: owner.iter().map(|byte| format!("{byte:02x}")).collect(),
                hold_lease: Duration::from_secs(120),
                fresh_for: None,
                claim_within: DEFAULT_CLAIM_WITHIN,
                authorizer: None,
                chain: None,
            }),
        }
    }

    fn configure(mut self, change: impl FnOnce(&mut Inner)) -> Self {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            change(inner);
        }
        self
    }

    /// How long a request holds its channel before another request may take it over (default
    /// 120 s): longer than the handler runs, so that a crashed instance blocks a channel no
    /// longer than this.
    pub fn hold_lease(self, lease: Duration) -> Self {
        self.configure(|inner| inner.hold_lease = lease)
    }

    /// How long the mirrored on-chain state of a channel stays fresh enough to verify a voucher
    /// locally (default: a third of the channel's withdrawal delay, between 30 s and 5 min);
    /// past it, the voucher goes to the facilitator's `/verify`, whose answer refreshes it.
    pub fn fresh_for(self, ttl: Duration) -> Self {
        self.configure(|inner| inner.fresh_for = Some(ttl))
    }

    /// How long this server may take, at most, to claim a channel once it has charges on it
    /// (default 3 minutes: the [`Claimer`](crate::Claimer)'s default interval of one minute plus
    /// a claim's lease of two): its claim interval without a withdrawal watch, else the watch's
    /// period plus the time a claim takes.
    ///
    /// A payer's timed withdrawal takes back, once its delay has passed, whatever the server has
    /// not claimed. A voucher is therefore accepted only while the channel's pending withdrawal,
    /// if any, cannot finalize before `now + within` (and a margin of
    /// [`WITHDRAWAL_MARGIN`](crate::WITHDRAWAL_MARGIN)); past that it is refused with
    /// `invalid_batch_settlement_evm_withdrawal_pending` and the channel, mirrored with its
    /// withdrawal, is claimed by the next [`Claimer::tick`](crate::Claimer::tick). Vouchers
    /// checked locally are also capped at the balance less the pending withdrawal (above it,
    /// the facilitator's `/verify` decides).
    pub fn claim_within(self, within: Duration) -> Self {
        self.configure(|inner| inner.claim_within = within)
    }

    /// The server's own receiver-authorizer key: refunds of channels naming its address carry
    /// its `claimAuthorizerSignature` and `refundAuthorizerSignature` (without it, refunds go
    /// unsigned and the facilitator, as receiver authorizer, signs).
    pub fn authorizer(self, authorizer: impl ClaimAuthorizer) -> Self {
        let authorizer: Arc<dyn ClaimAuthorizer> = Arc::new(authorizer);
        self.configure(|inner| inner.authorizer = Some(authorizer))
    }

    /// Reads the contract through `chain` (an `RpcChainReader` or any [`ChainReader`]) to
    /// resolve a refund whose `/settle` answer was lost: the channel's refund nonce past the one
    /// sent means it ran (answered as settled, the record following the chain), the same nonce
    /// that it did not (the channel released unchanged, the buyer told to send it again).
    /// Without a reader, or when it cannot be read, the refund stays *in doubt* in the core's
    /// ledger (503, logged and counted like any payment in doubt): the channel stays held until
    /// its lease ends, and the same refund sent again re-sends the completed request.
    pub fn chain(self, chain: impl ChainReader) -> Self {
        let chain: Arc<dyn ChainReader> = Arc::new(chain);
        self.configure(|inner| inner.chain = Some(chain))
    }

    /// Registers the scheme on `payments`: the same as
    /// [`payments.scheme(self)`](Payments::scheme).
    pub fn register(self, payments: Payments) -> Payments {
        payments.scheme(self)
    }
}

impl std::fmt::Debug for BatchSettlement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BatchSettlement")
            .field("owner", &self.inner.owner)
            .field("hold_lease", &self.inner.hold_lease)
            .finish_non_exhaustive()
    }
}

impl Scheme for BatchSettlement {
    fn name(&self) -> &str {
        BATCH_SETTLEMENT_SCHEME
    }

    /// A deposit is identified by its token authorization, so the core's ledger settles it once
    /// and recovers it after a lost answer. A voucher is counted once by the channel store (the
    /// cumulative check), not by the ledger: each presentation is its own, and a replay is
    /// answered with the corrective 402.
    fn identify(&self, payload: &PaymentPayload) -> Result<Arc<str>, Refusal> {
        let invalid = |reason: &str| Refusal::InvalidPayment {
            reason: reason.to_owned(),
        };
        let buyer = BuyerPayload::read(payload)
            .ok_or_else(|| invalid("invalid_batch_settlement_evm_payload"))?;
        let voucher = buyer.voucher();
        match buyer.kind() {
            Kind::Deposit => {
                let signature = buyer
                    .deposit_signature()
                    .ok_or_else(|| invalid("invalid_batch_settlement_evm_deposit_payload"))?;
                Ok(format!(
                    "batch-settlement:deposit:{}:{signature}",
                    voucher.channel_id.to_ascii_lowercase()
                )
                .into())
            }
            Kind::Voucher => {
                let nonce: [u8; 16] = rand::random();
                let nonce: String = nonce.iter().map(|byte| format!("{byte:02x}")).collect();
                Ok(format!(
                    "batch-settlement:voucher:{}:{}:{nonce}",
                    voucher.channel_id.to_ascii_lowercase(),
                    voucher.max_claimable_amount
                )
                .into())
            }
            Kind::Refund => {
                let amount = buyer
                    .refund_amount()
                    .ok_or_else(|| invalid("invalid_batch_settlement_evm_refund_amount_invalid"))?
                    .map_or_else(|| "all".to_owned(), |amount| amount.to_string());
                Ok(format!(
                    "batch-settlement:refund:{}:{}:{amount}:{}",
                    voucher.channel_id.to_ascii_lowercase(),
                    voucher.max_claimable_amount,
                    voucher.signature
                )
                .into())
            }
        }
    }

    /// A refund is an operation on the channel, not a payment for the work.
    fn settles_without_work(&self, payload: &PaymentPayload) -> bool {
        BuyerPayload::read(payload).is_some_and(|buyer| buyer.kind() == Kind::Refund)
    }

    fn metered(&self) -> bool {
        true
    }

    fn settles_zero(&self) -> bool {
        true
    }

    /// A deposit and a refund are verified by the facilitator, through the core; a voucher
    /// locally when it can be. The request's channel is held, and noted on the payment.
    fn verify<'a>(
        &'a self,
        payment: &'a PaymentContext<'a>,
        notes: &'a mut Extensions,
    ) -> Option<BoxFuture<'a, Result<VerifyResponse, Refusal>>> {
        Some(Box::pin(self.inner.admit(payment, notes)))
    }

    /// A refund, completed when it was verified.
    fn completed_request(
        &self,
        _: &FacilitatorRequest,
        notes: &Extensions,
    ) -> Option<FacilitatorRequest> {
        notes
            .get::<CompletedRefund>()
            .map(|refund| FacilitatorRequest::clone(&refund.request))
    }

    /// A voucher committed to the channel's store; a deposit and a refund sent to `/settle`
    /// through the core, and the channel's record following their settlement.
    fn settle<'a>(
        &'a self,
        payment: &'a PaymentContext<'a>,
        notes: &'a mut Extensions,
    ) -> Option<BoxFuture<'a, Result<SettleResponse, Refusal>>> {
        Some(Box::pin(Arc::clone(&self.inner).settle(payment, notes)))
    }

    /// A deposit in doubt the reconciler proved settled: its voucher committed.
    fn proven<'a>(
        &'a self,
        payment: &'a PaymentContext<'a>,
        notes: &'a mut Extensions,
        settlement: &'a mut SettleResponse,
    ) -> Option<BoxFuture<'a, ()>> {
        Some(Box::pin(
            Arc::clone(&self.inner).deposit_settled(payment, notes, settlement),
        ))
    }

    /// The request's channel hold released.
    fn release(&self, _: &PaymentKey, notes: Extensions) -> Option<BoxFuture<'static, ()>> {
        let pending = notes.get::<Pending>()?.clone();
        let inner = Arc::clone(&self.inner);
        Some(Box::pin(async move {
            inner.release(&pending.id, &pending.hold).await;
        }))
    }
}
