//! The scheme's settle steps: a voucher's charge committed to the channel's store (nothing sent
//! on chain), a deposit sent to `/settle` through the core and its voucher committed once it
//! moved (by the settle step, or by the `proven` step when the core's reconciler proved a
//! deposit in doubt settled), a refund sent through the core (see `refund`). What a request
//! holds between its verification and its settlement ([`Pending`]) travels in the payment's
//! notes; the core's release step lets its channel go when the payment ends unsettled.
use std::sync::Arc;
use std::time::Duration;

use http::Extensions;
use tower_x402::Refusal;
use tower_x402::payment::{PaymentContext, RefusalKind};
use tower_x402::proto::{Network, SettleResponse};

use super::Inner;
use super::payload::{BuyerPayload, Kind};
use super::response::{channel_state, settlement_extra, snapshot};
use crate::channel::{Commit, Committed, OnChain, Voucher};

/// How often a commit is sent again after the store gave no answer (it is recognized when it
/// had applied).
const COMMIT_ATTEMPTS: usize = 3;

/// A request between its verification and its settlement: the payment's note.
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
}

impl Pending {
    /// The request's pending state with the chain as `on_chain` read it.
    pub(super) fn read(mut self, on_chain: OnChain) -> Self {
        self.on_chain = on_chain;
        self.fresh_reading = true;
        self
    }
}

/// Unix milliseconds ([`x402_wire::unix_time`]).
pub(super) fn now_ms() -> u64 {
    u64::try_from(x402_wire::unix_time().as_millis()).unwrap_or(u64::MAX)
}

pub(super) fn ms(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

impl Inner {
    pub(super) async fn release(&self, id: &str, hold: &str) {
        if let Err(error) = self.store.release(id, hold).await {
            tracing::warn!(%error, channel = %id, "channel hold could not be released; it expires with its lease");
        }
    }

    /// Commits the request's voucher for `charged`, sent again when the store gave no
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

    /// The settle step: by the kind of request the payment's note says it is. A payment
    /// without a note was verified by another process (this one restarted while it was in
    /// doubt, or another instance).
    pub(super) async fn settle(
        self: Arc<Self>,
        payment: &PaymentContext<'_>,
        notes: &mut Extensions,
    ) -> Result<SettleResponse, Refusal> {
        let Some(pending) = notes.get::<Pending>().cloned() else {
            return Box::pin(self.settle_unnoted(payment)).await;
        };
        match pending.kind {
            Kind::Voucher => self.settle_voucher(payment, pending, notes).await,
            Kind::Refund => Box::pin(self.settle_refund(payment, pending, notes)).await,
            Kind::Deposit => {
                let mut settlement = payment.settle_at_facilitator().await?;
                self.deposit_settled(payment, notes, &mut settlement).await;
                Ok(settlement)
            }
        }
    }

    /// A payment in doubt recovered without its note: a deposit or a refund sent to `/settle`
    /// again as written ahead (a deposit's voucher then committed from its payload, a refund's
    /// record mirroring the chain the answer shows); a voucher, whose hold is gone, settles
    /// nothing.
    async fn settle_unnoted(
        self: Arc<Self>,
        payment: &PaymentContext<'_>,
    ) -> Result<SettleResponse, Refusal> {
        let kind = BuyerPayload::read(payment.request.payment_payload()).map(|buyer| buyer.kind());
        match kind {
            Some(Kind::Deposit) => {
                let mut settlement = payment.settle_at_facilitator().await?;
                self.deposit_settled(payment, &mut Extensions::new(), &mut settlement)
                    .await;
                Ok(settlement)
            }
            Some(Kind::Refund) => {
                let settlement = payment.settle_at_facilitator().await?;
                self.refund_recovered(payment, &settlement).await;
                Ok(settlement)
            }
            _ => Err(Refusal::Hook {
                kind: RefusalKind::RetrySamePayment,
                reason: "this channel request is no longer held; nothing was charged".to_owned(),
            }),
        }
    }

    /// A deposit that moved (answered by `/settle`, or proven by the core's reconciler): the
    /// request's voucher committed, mirroring the chain it answered, and the channel's state in
    /// the settlement's `extra`. Without a note, committed from the payload
    /// ([`commit_recovered`](Self::commit_recovered)).
    pub(super) async fn deposit_settled(
        self: Arc<Self>,
        payment: &PaymentContext<'_>,
        notes: &mut Extensions,
        settlement: &mut SettleResponse,
    ) {
        let Some(mut pending) = notes.remove::<Pending>() else {
            Box::pin(self.commit_recovered(payment, settlement)).await;
            return;
        };
        if pending.kind != Kind::Deposit {
            // Only a deposit commits its voucher once it moved (a reconciler may prove others).
            notes.insert(pending);
            return;
        }
        if let Some(on_chain) = snapshot(settlement.extra.as_ref(), now_ms())
            .or_else(|| recovered_reading(payment, &pending))
        {
            pending.on_chain = on_chain;
            pending.fresh_reading = true;
        }
        let charged = payment.request.payment_requirements().amount.0;
        let state = channel_state(
            &pending.id,
            &pending.on_chain,
            pending.base.saturating_add(charged),
        );
        settlement
            .extra
            .get_or_insert_with(Default::default)
            .extend(settlement_extra(charged, state));
        match self.commit(&pending, charged).await {
            Ok(Committed::Done) => {}
            outcome => {
                tracing::error!(channel = %pending.id, ?outcome, "a deposit settled but its voucher could not be committed; this request's charge is forfeited");
                self.release(&pending.id, &pending.hold).await;
            }
        }
    }

    /// A voucher's settlement: its charge committed, nothing sent on chain. The note is taken
    /// when the channel is let go here (or was taken over): the core's release step has nothing
    /// left to release then.
    async fn settle_voucher(
        &self,
        payment: &PaymentContext<'_>,
        pending: Pending,
        notes: &mut Extensions,
    ) -> Result<SettleResponse, Refusal> {
        let requirement = payment.request.payment_requirements();
        let charged = requirement.amount.0;
        let refuse = |kind, reason: &str| {
            Err(Refusal::Hook {
                kind,
                reason: reason.to_owned(),
            })
        };
        match self.commit(&pending, charged).await {
            Ok(Committed::Done) => {
                let total = pending.base.saturating_add(charged);
                let state = channel_state(&pending.id, &pending.on_chain, total);
                Ok(SettleResponse {
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
                notes.remove::<Pending>();
                self.release(&pending.id, &pending.hold).await;
                refuse(
                    RefusalKind::ServerFault,
                    "invalid_batch_settlement_evm_charge_exceeds_signed_cumulative",
                )
            }
            Ok(other) => {
                tracing::warn!(channel = %pending.id, outcome = ?other, "voucher not committed: the channel moved on under this request");
                notes.remove::<Pending>();
                refuse(
                    RefusalKind::RetrySamePayment,
                    "the channel was taken over by another request; nothing was charged",
                )
            }
            Err(error) => {
                tracing::error!(channel = %pending.id, %error, "voucher commit unanswered");
                notes.remove::<Pending>();
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
    pub(super) async fn commit_recovered(
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
