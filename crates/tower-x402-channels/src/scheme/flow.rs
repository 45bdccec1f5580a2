//! The scheme's lifecycle hooks: a request holds its channel and is checked before the work
//! (`before_verify`), its charge is committed after it (`before_settle` for a voucher,
//! `after_settle` for a deposit, once the deposit moved), and its hold is released when the
//! payment will never be settled (`on_cancelled`: the work failed, or another hook refused the
//! payment after verification) or the deposit did not settle (`on_settle_failure`). A deposit
//! whose `/settle` answer was lost keeps its hold until the core resolves it: committed by
//! `after_settle` when it settled, released when the core tells it the doubt resolved unsettled
//! ([`PaymentEvent::DoubtResolved`]).

use std::sync::{Arc, PoisonError};
use std::time::Duration;

use serde_json::{Map, Value};
use tower_x402::BoxFuture;
use tower_x402::payment::{
    Decision, HookStages, PaymentContext, PaymentEvent, PaymentHooks, RefusalKind, VerifiedPayment,
};
use tower_x402::proto::{Network, SettleResponse, VerifyResponse};
use tower_x402::{PaymentKey, Refusal};

use super::Inner;
use super::payload::{BuyerPayload, Kind};
use super::response::{channel_state, settlement_extra, snapshot};
use crate::channel::{Commit, Committed, OnChain, Voucher};
use crate::wire::BATCH_SETTLEMENT_SCHEME;

/// How often a commit is sent again after the store gave no answer (it is recognized when it
/// had applied).
const COMMIT_ATTEMPTS: usize = 3;

/// A request between its verification and its settlement.
#[derive(Clone, Debug)]
pub(super) struct Pending {
    pub(super) kind: Kind,
    pub(super) id: String,
    pub(super) network: Network,
    pub(super) hold: String,
    /// The cumulative the request started from.
    pub(super) base: u128,
    pub(super) voucher: Voucher,
    pub(super) payer: String,
    /// The chain as the request saw it (a facilitator's answer), to mirror with the commit.
    pub(super) on_chain: OnChain,
    pub(super) fresh_reading: bool,
    /// A deposit whose `/settle` answer was lost: it may have moved, so its hold and voucher are
    /// kept for the settlement the core may still learn of.
    pub(super) answer_lost: bool,
}

impl Pending {
    /// The request's pending state with the chain as `on_chain` read it.
    pub(super) fn read(mut self, on_chain: OnChain) -> Self {
        self.on_chain = on_chain;
        self.fresh_reading = true;
        self
    }
}

/// The hooks' part of the scheme.
pub(super) struct Hooks(pub(super) Arc<Inner>);

/// Unix milliseconds ([`x402_wire::unix_time`]).
pub(super) fn now_ms() -> u64 {
    u64::try_from(x402_wire::unix_time().as_millis()).unwrap_or(u64::MAX)
}

pub(super) fn ms(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

impl Inner {
    pub(super) fn remember(&self, key: &PaymentKey, pending: Pending) {
        self.pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key.clone(), pending);
    }

    pub(super) fn take(&self, key: &PaymentKey) -> Option<Pending> {
        self.pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(key)
    }

    pub(super) fn peek(&self, key: &PaymentKey) -> Option<Pending> {
        self.pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(key)
            .cloned()
    }

    pub(super) async fn release(&self, id: &str, hold: &str) {
        if let Err(error) = self.store.release(id, hold).await {
            tracing::warn!(%error, channel = %id, "channel hold could not be released; it expires with its lease");
        }
    }
    /// answer, where it is recognized if it had applied.
    pub(super) async fn commit(
        &self,
        pending: &Pending,
        charged: u128,
    ) -> Result<Committed, String> {
        let mut commit = Commit::new(
            pending.base,
            pending.base.saturating_add(charged),
            pending.voucher.clone(),
        );
        if pending.fresh_reading {
            commit = commit.with_on_chain(pending.on_chain);
        }
        let mut last = String::new();
        for _ in 0..COMMIT_ATTEMPTS {
            match self.store.commit(&pending.id, &pending.hold, &commit).await {
                Ok(committed) => return Ok(committed),
                Err(error) => last = error.to_string(),
            }
        }
        Err(last)
    }

    /// A voucher's settlement: its charge committed, nothing sent on chain.
    async fn settle_voucher(
        &self,
        payment: &PaymentContext<'_>,
        pending: Pending,
    ) -> Decision<SettleResponse> {
        let requirement = payment.request.payment_requirements();
        let charged = requirement.amount.0;
        let refuse = |kind, reason: &str| {
            Decision::Abort(Refusal::Hook {
                kind,
                reason: reason.to_owned(),
            })
        };
        match self.commit(&pending, charged).await {
            Ok(Committed::Done) => {
                let total = pending.base.saturating_add(charged);
                let state = channel_state(&pending.id, &pending.on_chain, total);
                Decision::Handled(SettleResponse {
                    success: true,
                    error_reason: None,
                    error_message: None,
                    transaction: String::new(),
                    network: requirement.network.clone(),
                    payer: Some(pending.payer),
                    amount: None,
                    extensions: None,
                    extra: Some(settlement_extra(charged, state)),
                })
            }
            Ok(Committed::Invalid(reason)) => {
                tracing::error!(channel = %pending.id, %reason, "voucher commit refused");
                self.release(&pending.id, &pending.hold).await;
                refuse(
                    RefusalKind::ServerFault,
                    "invalid_batch_settlement_evm_charge_exceeds_signed_cumulative",
                )
            }
            Ok(other) => {
                tracing::warn!(channel = %pending.id, outcome = ?other, "voucher not committed: the channel moved on under this request");
                refuse(
                    RefusalKind::RetrySamePayment,
                    "the channel was taken over by another request; nothing was charged",
                )
            }
            Err(error) => {
                tracing::error!(channel = %pending.id, %error, "voucher commit unanswered");
                refuse(
                    RefusalKind::RetrySamePayment,
                    "channel records are unavailable, retry the same payment later",
                )
            }
        }
    }
}

/// How often a recovered deposit's commit tries again for its channel while another hold (that
/// of the process that verified it, stopped since) has not run out.
const RECOVERED_ATTEMPTS: usize = 4;

impl Inner {
    /// The voucher of a deposit that settled but was verified by another process (this one
    /// restarted while the deposit was in doubt, or another instance sent it): committed once,
    /// on the base it was verified on, `maxClaimableAmount` less the accept's amount. The commit
    /// compares that base with the channel's charge under a hold of its own, so a voucher
    /// already committed (by the process that verified it, or by an earlier recovery) is not
    /// committed again. While the channel is held by the stopped process, the commit waits for
    /// that hold's lease in a task of its own (the channel stays busy meanwhile, so no voucher is
    /// accepted on a base without this one).
    async fn commit_recovered(
        self: Arc<Self>,
        payment: &PaymentContext<'_>,
        settlement: &SettleResponse,
    ) {
        let Some(buyer) = BuyerPayload::read(payment.request.payment_payload()) else {
            return;
        };
        if buyer.kind() != Kind::Deposit {
            return;
        }
        let voucher = buyer.voucher();
        let accepted = payment.request.payment_payload().accepted.amount.0;
        let Some(base) = voucher.max_claimable_amount.checked_sub(accepted) else {
            return;
        };
        let recovered = Recovered {
            id: crate::channel::normalize_id(&voucher.channel_id),
            network: payment.request.payment_requirements().network.clone(),
            base,
            charged: payment.request.payment_requirements().amount.0,
            voucher: Voucher::new(voucher.max_claimable_amount, &voucher.signature),
            payer: buyer.config().payer.to_ascii_lowercase(),
            deposited: buyer.deposit_amount().unwrap_or(0),
            reading: snapshot(settlement.extra.as_ref(), now_ms()),
        };
        if let Err(wait) = self.try_recovered(&recovered).await {
            let Ok(runtime) = tokio::runtime::Handle::try_current() else {
                tracing::error!(channel = %recovered.id, "a recovered deposit's voucher could not be committed; this request's charge is forfeited");
                return;
            };
            runtime.spawn(async move {
                let mut wait = wait;
                for _ in 0..RECOVERED_ATTEMPTS {
                    tokio::time::sleep(wait).await;
                    match self.try_recovered(&recovered).await {
                        Ok(()) => return,
                        Err(next) => wait = next,
                    }
                }
                tracing::error!(channel = %recovered.id, "a recovered deposit's voucher could not be committed; this request's charge is forfeited");
            });
        }
    }

    /// One attempt at a recovered deposit's commit: `Err` with how long to wait before the
    /// next, when the channel is held by another request or the store did not answer.
    async fn try_recovered(&self, recovered: &Recovered) -> Result<(), Duration> {
        let now = now_ms();
        let hold = crate::channel::Hold::new(&self.owner, now.saturating_add(ms(self.hold_lease)));
        let channel = match self.store.begin(&recovered.id, &hold, now).await {
            Ok(crate::channel::Begin::Held(channel)) => channel,
            Ok(crate::channel::Begin::Busy { until }) => {
                return Err(Duration::from_millis(
                    until.saturating_sub(now).saturating_add(50),
                ));
            }
            Ok(crate::channel::Begin::NotFound) => {
                tracing::error!(channel = %recovered.id, "a recovered deposit's channel is unknown; its voucher's charge is forfeited");
                return Ok(());
            }
            Err(error) => {
                tracing::warn!(%error, channel = %recovered.id, "channel store: a recovered deposit's commit");
                return Err(Duration::from_secs(1));
            }
        };
        let newer = channel
            .voucher
            .as_ref()
            .is_none_or(|latest| latest.max_claimable < recovered.voucher.max_claimable);
        if channel.charged != recovered.base || !newer {
            // Committed already, or the channel went on without it: nothing to add.
            self.release(&recovered.id, &hold.id).await;
            return Ok(());
        }
        let on_chain = recovered.reading.unwrap_or_else(|| {
            let mut on_chain = channel.on_chain;
            on_chain.balance = on_chain.balance.saturating_add(recovered.deposited);
            on_chain.read_at = now;
            on_chain
        });
        let pending = Pending {
            kind: Kind::Deposit,
            id: recovered.id.clone(),
            network: recovered.network.clone(),
            hold: hold.id,
            base: recovered.base,
            voucher: recovered.voucher.clone(),
            payer: recovered.payer.clone(),
            on_chain,
            fresh_reading: true,
            answer_lost: false,
        };
        match self.commit(&pending, recovered.charged).await {
            Ok(Committed::Done) => {
                tracing::info!(channel = %recovered.id, charged = recovered.charged, "a recovered deposit's voucher committed");
            }
            outcome => {
                tracing::error!(channel = %recovered.id, ?outcome, "a recovered deposit's voucher could not be committed; this request's charge is forfeited");
                self.release(&recovered.id, &pending.hold).await;
            }
        }
        Ok(())
    }
}

/// A recovered deposit's voucher, as its payload and settlement tell it.
struct Recovered {
    id: String,
    network: Network,
    /// The cumulative it was verified on.
    base: u128,
    /// What the request was charged.
    charged: u128,
    voucher: Voucher,
    payer: String,
    deposited: u128,
    /// The chain as the settlement answered it, if it did.
    reading: Option<OnChain>,
}

/// Whether a `/settle` refusal leaves it open whether the deposit moved (the core then goes on
/// to re-send or reconcile it, not to release it).
fn may_have_moved(failure: Result<&SettleResponse, &tower_x402::FacilitatorError>) -> bool {
    failure.is_ok_and(|settlement| {
        matches!(
            settlement.error_reason.as_deref(),
            Some(
                "settlement_pending"
                    | "unexpected_settle_error"
                    | "invalid_transaction_state"
                    | "duplicate_settlement"
            )
        )
    })
}

/// The chain after a deposit whose settlement carries no channel state (one the core recovered:
/// the reconciler's names only its transaction): the deposit moved its amount onto the balance
/// the request was verified against.
fn recovered_reading(payment: &PaymentContext<'_>, pending: &Pending) -> Option<OnChain> {
    let deposited = BuyerPayload::read(payment.request.payment_payload())?.deposit_amount()?;
    let mut on_chain = pending.on_chain;
    on_chain.balance = on_chain.balance.saturating_add(deposited);
    on_chain.read_at = now_ms();
    Some(on_chain)
}

fn is_ours(payment: &PaymentContext<'_>) -> bool {
    payment.request.payment_requirements().scheme == BATCH_SETTLEMENT_SCHEME
}

impl PaymentHooks for Hooks {
    /// Verifies vouchers itself, settles them and refunds itself, commits a request's voucher
    /// once its payment settled, keeps or releases the channel a deposit's failed `/settle`
    /// held, and releases a channel whose payment was cancelled: no part in `after_verify` nor
    /// in a failed `/verify`.
    fn stages(&self) -> HookStages {
        HookStages::BEFORE_VERIFY
            | HookStages::BEFORE_SETTLE
            | HookStages::SETTLE_FAILURE
            | HookStages::AFTER_SETTLE
            | HookStages::CANCELLED
    }

    fn before_verify<'a>(
        &'a self,
        payment: &'a PaymentContext<'a>,
    ) -> BoxFuture<'a, Decision<VerifyResponse>> {
        Box::pin(async move {
            if !is_ours(payment) {
                return Decision::Continue;
            }
            self.0.admit(payment).await
        })
    }

    fn before_settle<'a>(
        &'a self,
        payment: &'a PaymentContext<'a>,
    ) -> BoxFuture<'a, Decision<SettleResponse>> {
        Box::pin(async move {
            if !is_ours(payment) {
                return Decision::Continue;
            }
            match self.0.peek(payment.key) {
                Some(pending) if pending.kind == Kind::Voucher => {
                    let pending = self.0.take(payment.key).unwrap_or(pending);
                    self.0.settle_voucher(payment, pending).await
                }
                Some(pending) if pending.kind == Kind::Refund => {
                    let pending = self.0.take(payment.key).unwrap_or(pending);
                    self.0.settle_refund(payment, pending).await
                }
                // A deposit settles at the facilitator; its voucher is committed after.
                Some(_) => Decision::Continue,
                None => Decision::Abort(Refusal::Hook {
                    kind: RefusalKind::RetrySamePayment,
                    reason: "this channel request is no longer held; nothing was charged"
                        .to_owned(),
                }),
            }
        })
    }

    fn settlement_extra(
        &self,
        payment: &PaymentContext<'_>,
        settlement: &SettleResponse,
    ) -> Option<Map<String, Value>> {
        if !is_ours(payment) {
            return None;
        }
        let pending = self.0.peek(payment.key)?;
        let charged = payment.request.payment_requirements().amount.0;
        let on_chain = snapshot(settlement.extra.as_ref(), now_ms())
            .or_else(|| recovered_reading(payment, &pending))
            .unwrap_or(pending.on_chain);
        let state = channel_state(&pending.id, &on_chain, pending.base.saturating_add(charged));
        Some(settlement_extra(charged, state))
    }

    fn after_settle<'a>(
        &'a self,
        payment: &'a PaymentContext<'a>,
        settlement: &'a SettleResponse,
    ) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            if !is_ours(payment) {
                return;
            }
            // A deposit moved: commit the request's voucher, mirroring the chain it answered.
            let Some(mut pending) = self.0.take(payment.key) else {
                // Not verified by this process: a deposit in doubt recovered after a restart.
                Box::pin(Arc::clone(&self.0).commit_recovered(payment, settlement)).await;
                return;
            };
            if let Some(on_chain) = snapshot(settlement.extra.as_ref(), now_ms()) {
                pending.on_chain = on_chain;
                pending.fresh_reading = true;
            } else if let Some(on_chain) = recovered_reading(payment, &pending) {
                pending.on_chain = on_chain;
                pending.fresh_reading = true;
            }
            let charged = payment.request.payment_requirements().amount.0;
            match self.0.commit(&pending, charged).await {
                Ok(Committed::Done) => {}
                outcome => {
                    tracing::error!(channel = %pending.id, ?outcome, "a deposit settled but its voucher could not be committed; this request's charge is forfeited");
                    self.0.release(&pending.id, &pending.hold).await;
                }
            }
        })
    }

    fn on_settle_failure<'a>(
        &'a self,
        payment: &'a PaymentContext<'a>,
        failure: Result<&'a SettleResponse, &'a tower_x402::FacilitatorError>,
    ) -> BoxFuture<'a, Option<SettleResponse>> {
        Box::pin(async move {
            if !is_ours(payment) {
                return None;
            }
            // Only a deposit reaches `/settle` through the core (a voucher and a refund are
            // settled by `before_settle`).
            let mut pending = self.0.take(payment.key)?;
            if failure.is_err() || pending.answer_lost || may_have_moved(failure) {
                // The deposit may have moved: the core keeps the payment in doubt and may learn
                // of its settlement (a re-sent `/settle`, the reconciler), when `after_settle`
                // commits the request's voucher. Until then the channel stays held (at most its
                // lease), so that no other voucher is accepted on a base missing this one.
                pending.answer_lost = true;
                self.0.remember(payment.key, pending);
            } else {
                self.0.release(&pending.id, &pending.hold).await;
            }
            None
        })
    }

    fn observe(&self, event: &PaymentEvent<'_>) {
        // Never settled (released by the core): the channel is freed now.
        if let PaymentEvent::DoubtResolved {
            key,
            settlement: None,
            ..
        } = *event
            && let Some(pending) = self.0.take(key)
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            let inner = Arc::clone(&self.0);
            runtime.spawn(async move { inner.release(&pending.id, &pending.hold).await });
        }
    }

    fn on_cancelled<'a>(&'a self, payment: &'a VerifiedPayment) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            if let Some(pending) = self.0.take(&payment.key) {
                self.0.release(&pending.id, &pending.hold).await;
            }
        })
    }
}
