//! The `batch-settlement` scheme served over loopback HTTP against the sandbox facilitator: one
//! deposit then vouchers verified locally (one facilitator `/settle` in all), forged vouchers
//! refused, a replay answered with the corrective 402, a failing handler changing nothing, and
//! concurrent requests on one channel never accepted on one cumulative base; a voucher whose
//! channel's mirrored chain state is stale verified by the facilitator instead; cooperative
//! refunds, partial and full, with the handler not run; a voucher above the balance refused and
//! a top-up deposit on an open channel; a refund signed with the server's own receiver
//! authorizer key; a voucher another hook refuses after verification leaving its channel free
//! at once; a deposit whose `/settle` answer was lost, recovered from doubt with its voucher's
//! charge committed, in the same process and after a restart; a refund whose `/settle` answer
//! was lost resolved against the chain, never sent again.

mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use http::StatusCode;
use serde_json::Value;
use tower_x402::BoxFuture;
use tower_x402::Refusal;
use tower_x402::payment::{HookStages, PaymentHooks, RefusalKind, VerifiedPayment};
use tower_x402::proto::AtomicAmount;
use tower_x402::proto::FacilitatorRequest;
use tower_x402::settlement::{MemorySettlementStore, Reconciler, Reconciliation};
use tower_x402_channels::{
    BatchSettlement, ChainChannel, ChainError, ChainReader, ChannelStore, MemoryChannelStore,
};
use tower_x402_sandbox::SandboxWallet;
use tower_x402_sandbox::{SandboxFacilitator, Step};
use x402_wire::Network;

use support::{AMOUNT, Buyer, DEPOSIT, ROW, Server};

async fn server() -> Server {
    Server::start(Arc::new(MemoryChannelStore::default())).await
}

#[tokio::test]
async fn twenty_vouchers_after_one_deposit_cost_one_facilitator_settle() {
    let server = server().await;
    let buyer = Buyer::new(&server);
    let first = server
        .get("/rows?count=2", &buyer.deposit(&server, 0))
        .await;
    assert_eq!(first.status, StatusCode::OK, "{first:?}");
    let settlement = first.settlement.as_ref().unwrap();
    assert!(
        !settlement.transaction.is_empty(),
        "the deposit's transaction"
    );
    assert_eq!(settlement.amount, Some(AtomicAmount(DEPOSIT)));
    assert_eq!(first.extra()["chargedAmount"], "2000");
    assert_eq!(
        first.extra()["channelState"]["chargedCumulativeAmount"],
        "2000"
    );
    assert_eq!(
        first.extra()["channelState"]["balance"],
        DEPOSIT.to_string()
    );
    let (verifies, settles) = (server.sandbox.verify_calls(), server.sandbox.settle_calls());
    assert_eq!((verifies, settles), (1, 1));

    let mut charged = 2_000;
    for request in 0..20u128 {
        let count = request % 10 + 1;
        let answer = server
            .get(
                &format!("/rows?count={count}"),
                &buyer.voucher(&server, charged + AMOUNT),
            )
            .await;
        assert_eq!(answer.status, StatusCode::OK, "{answer:?}");
        let settlement = answer.settlement.as_ref().unwrap();
        assert_eq!(
            settlement.transaction, "",
            "a voucher moves nothing on chain"
        );
        assert_eq!(settlement.amount, None);
        charged += count * ROW;
        assert_eq!(answer.extra()["chargedAmount"], (count * ROW).to_string());
        assert_eq!(
            answer.extra()["channelState"]["chargedCumulativeAmount"],
            charged.to_string()
        );
        assert_eq!(answer.body, format!("{count} rows"));
    }
    assert_eq!(
        (server.sandbox.verify_calls(), server.sandbox.settle_calls()),
        (1, 1),
        "every voucher verified locally and committed without the facilitator"
    );
    let channel = server.channels.load(&buyer.id).await.unwrap().unwrap();
    assert_eq!(channel.charged, charged);
    assert_eq!(
        channel.voucher.unwrap().max_claimable,
        charged - 10 * ROW + AMOUNT
    );
    assert_eq!(channel.hold, None);
}

#[tokio::test]
async fn forged_vouchers_are_refused_and_change_nothing() {
    let server = server().await;
    let buyer = Buyer::new(&server);
    let first = server
        .get("/rows?count=1", &buyer.deposit(&server, 0))
        .await;
    assert_eq!(first.status, StatusCode::OK, "{first:?}");
    let charged = 1_000;

    // Another key signs the channel's voucher.
    let thief = SandboxWallet::random();
    let forged = thief
        .voucher_payment(&server.accept, &buyer.sandbox_config(), charged + AMOUNT)
        .unwrap();
    let answer = server.get("/rows?count=1", &forged).await;
    assert_eq!(answer.status, StatusCode::PAYMENT_REQUIRED, "{answer:?}");
    assert_eq!(
        answer.error(),
        "invalid_batch_settlement_evm_voucher_signature"
    );

    // A ceiling above charged + amount.
    let greedy = buyer.voucher(&server, charged + AMOUNT + 1);
    let answer = server.get("/rows?count=1", &greedy).await;
    assert_eq!(answer.status, StatusCode::PAYMENT_REQUIRED, "{answer:?}");
    assert_eq!(
        answer.error(),
        "invalid_batch_settlement_evm_cumulative_amount_mismatch"
    );

    // A tampered configuration (another payer authorizer) under the channel's id.
    let mut tampered = buyer.voucher(&server, charged + AMOUNT);
    let mut payload: Value = serde_json::from_str(tampered.payload.get()).unwrap();
    payload["channelConfig"]["payerAuthorizer"] = thief.address().into();
    tampered.payload = serde_json::value::to_raw_value(&payload).unwrap();
    let answer = server.get("/rows?count=1", &tampered).await;
    assert_eq!(answer.status, StatusCode::PAYMENT_REQUIRED, "{answer:?}");
    assert_eq!(
        answer.error(),
        "invalid_batch_settlement_evm_channel_id_mismatch"
    );

    let channel = server.channels.load(&buyer.id).await.unwrap().unwrap();
    assert_eq!((channel.charged, channel.hold), (charged, None));
    // The honest voucher still pays.
    let answer = server
        .get("/rows?count=3", &buyer.voucher(&server, charged + AMOUNT))
        .await;
    assert_eq!(answer.status, StatusCode::OK, "{answer:?}");
    assert_eq!(server.sandbox.settle_calls(), 1);
}

#[tokio::test]
async fn a_replayed_voucher_is_answered_with_the_corrective_402() {
    let server = server().await;
    let buyer = Buyer::new(&server);
    assert_eq!(
        server
            .get("/rows?count=1", &buyer.deposit(&server, 0))
            .await
            .status,
        StatusCode::OK
    );
    let voucher = buyer.voucher(&server, 1_000 + AMOUNT);
    let paid = server.get("/rows?count=4", &voucher).await;
    assert_eq!(paid.status, StatusCode::OK, "{paid:?}");

    let replay = server.get("/rows?count=4", &voucher).await;
    assert_eq!(replay.status, StatusCode::PAYMENT_REQUIRED, "{replay:?}");
    assert_eq!(
        replay.error(),
        "invalid_batch_settlement_evm_cumulative_amount_mismatch"
    );
    let required = replay.required.as_ref().unwrap();
    let extra = &required["accepts"][0]["extra"];
    assert_eq!(
        extra["channelState"]["channelId"],
        buyer.id.to_ascii_lowercase()
    );
    assert_eq!(extra["channelState"]["chargedCumulativeAmount"], "5000");
    assert_eq!(
        extra["voucherState"]["signedMaxClaimable"],
        (1_000 + AMOUNT).to_string()
    );
    let signature: Value = serde_json::from_str(voucher.payload.get()).unwrap();
    assert_eq!(
        extra["voucherState"]["signature"],
        signature["voucher"]["signature"]
    );
    assert_eq!(
        extra["receiverAuthorizer"],
        server.accept.extra.as_ref().unwrap()["receiverAuthorizer"]
    );

    // Re-synced on the corrective state, the buyer pays again.
    let answer = server
        .get("/rows?count=1", &buyer.voucher(&server, 5_000 + AMOUNT))
        .await;
    assert_eq!(answer.status, StatusCode::OK, "{answer:?}");
    let channel = server.channels.load(&buyer.id).await.unwrap().unwrap();
    assert_eq!(channel.charged, 6_000);
}

#[tokio::test]
async fn a_failing_handler_changes_nothing() {
    let server = server().await;
    let buyer = Buyer::new(&server);
    assert_eq!(
        server
            .get("/rows?count=1", &buyer.deposit(&server, 0))
            .await
            .status,
        StatusCode::OK
    );
    let before = server.channels.load(&buyer.id).await.unwrap().unwrap();
    let voucher = buyer.voucher(&server, 1_000 + AMOUNT);
    let failed = server.get("/broken", &voucher).await;
    assert_eq!(
        failed.status,
        StatusCode::INTERNAL_SERVER_ERROR,
        "{failed:?}"
    );
    assert!(failed.settlement.is_none());
    let after = server.channels.load(&buyer.id).await.unwrap().unwrap();
    assert_eq!(
        (after.charged, &after.voucher, &after.hold),
        (before.charged, &before.voucher, &None)
    );
    // The same voucher pays for a request that succeeds.
    let answer = server.get("/rows?count=2", &voucher).await;
    assert_eq!(answer.status, StatusCode::OK, "{answer:?}");
    assert_eq!(
        server
            .channels
            .load(&buyer.id)
            .await
            .unwrap()
            .unwrap()
            .charged,
        3_000
    );
}

#[tokio::test]
async fn concurrent_requests_on_one_channel_are_never_accepted_on_one_base() {
    let server = Arc::new(server().await);
    let buyer = Arc::new(Buyer::new(&server));
    assert_eq!(
        server
            .get("/rows?count=1", &buyer.deposit(&server, 0))
            .await
            .status,
        StatusCode::OK
    );
    let requests: Vec<_> = (0..12)
        .map(|_| {
            let (server, buyer) = (Arc::clone(&server), Arc::clone(&buyer));
            tokio::spawn(async move {
                server
                    .get("/rows?count=5", &buyer.voucher(&server, 1_000 + AMOUNT))
                    .await
            })
        })
        .collect();
    let mut served = 0;
    for request in requests {
        let answer = request.await.unwrap();
        match answer.status {
            StatusCode::OK => served += 1,
            StatusCode::SERVICE_UNAVAILABLE => {
                assert_eq!(answer.error(), "invalid_batch_settlement_evm_channel_busy")
            }
            StatusCode::PAYMENT_REQUIRED => assert_eq!(
                answer.error(),
                "invalid_batch_settlement_evm_cumulative_amount_mismatch"
            ),
            other => panic!("{other}: {answer:?}"),
        }
    }
    assert_eq!(served, 1, "one request per cumulative base");
    let channel = server.channels.load(&buyer.id).await.unwrap().unwrap();
    assert_eq!((channel.charged, channel.hold), (6_000, None));
}

#[tokio::test]
async fn a_stale_mirror_sends_vouchers_to_the_facilitator_which_refreshes_it() {
    let stale: fn(BatchSettlement) -> BatchSettlement = |scheme| scheme.fresh_for(Duration::ZERO);
    let server = Server::configured(Arc::new(MemoryChannelStore::default()), Box::new(stale)).await;
    let buyer = Buyer::new(&server);
    assert_eq!(
        server
            .get("/rows?count=1", &buyer.deposit(&server, 0))
            .await
            .status,
        StatusCode::OK
    );
    tokio::time::sleep(Duration::from_millis(5)).await;
    let mut charged = ROW;
    for _ in 0..3 {
        let before = server.channels.load(&buyer.id).await.unwrap().unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
        let answer = server
            .get("/rows?count=1", &buyer.voucher(&server, charged + AMOUNT))
            .await;
        assert_eq!(answer.status, StatusCode::OK, "{answer:?}");
        charged += ROW;
        let after = server.channels.load(&buyer.id).await.unwrap().unwrap();
        assert!(
            after.on_chain.read_at > before.on_chain.read_at,
            "the reading mirrored"
        );
    }
    assert_eq!(
        (server.sandbox.verify_calls(), server.sandbox.settle_calls()),
        (4, 1),
        "each voucher verified by the facilitator, none settled there"
    );
    // A forged voucher is refused by the facilitator as well.
    let thief = SandboxWallet::random();
    let forged = thief
        .voucher_payment(&server.accept, &buyer.sandbox_config(), charged + AMOUNT)
        .unwrap();
    let answer = server.get("/rows?count=1", &forged).await;
    assert_eq!(answer.status, StatusCode::PAYMENT_REQUIRED, "{answer:?}");
    assert_eq!(
        server
            .channels
            .load(&buyer.id)
            .await
            .unwrap()
            .unwrap()
            .charged,
        charged
    );
}

#[tokio::test]
async fn refunds_claim_what_was_charged_return_the_rest_and_never_run_the_handler() {
    let server = server().await;
    let buyer = Buyer::new(&server);
    let payer = buyer.wallet.address();
    let start = server.sandbox.balance_of(&payer).0;
    assert_eq!(
        server
            .get("/rows?count=2", &buyer.deposit(&server, 0))
            .await
            .status,
        StatusCode::OK
    );
    let paid = server
        .get("/rows?count=3", &buyer.voucher(&server, 2 * ROW + AMOUNT))
        .await;
    assert_eq!(paid.status, StatusCode::OK, "{paid:?}");
    let charged = 5 * ROW;

    // A refund voucher on a stale cumulative: the corrective 402, nothing sent.
    let stale = server
        .get(
            "/rows?count=1",
            &buyer.refund(&server, 2 * ROW, Some(1_000)),
        )
        .await;
    assert_eq!(stale.status, StatusCode::PAYMENT_REQUIRED, "{stale:?}");
    assert_eq!(
        stale.error(),
        "invalid_batch_settlement_evm_cumulative_amount_mismatch"
    );

    // A partial refund: claimed and refunded in one /settle, the handler not run.
    let partial = server
        .get(
            "/rows?count=1",
            &buyer.refund(&server, charged, Some(100_000)),
        )
        .await;
    assert_eq!(partial.status, StatusCode::OK, "{partial:?}");
    assert!(
        !partial.body.contains("rows"),
        "the handler ran: {}",
        partial.body
    );
    let settlement = partial.settlement.as_ref().unwrap();
    assert!(!settlement.transaction.is_empty());
    assert_eq!(settlement.amount, Some(AtomicAmount(100_000)));
    let state = &partial.extra()["channelState"];
    assert_eq!(state["balance"], (DEPOSIT - 100_000).to_string());
    assert_eq!(state["totalClaimed"], charged.to_string());
    assert_eq!(state["chargedCumulativeAmount"], charged.to_string());
    assert!(partial.extra().get("chargedAmount").is_none());
    assert_eq!(
        server.sandbox.balance_of(&payer).0,
        start - DEPOSIT + 100_000
    );
    let channel = server.channels.load(&buyer.id).await.unwrap().unwrap();
    assert_eq!((channel.charged, channel.hold), (charged, None));

    // The channel goes on after a partial refund.
    let more = server
        .get("/rows?count=1", &buyer.voucher(&server, charged + AMOUNT))
        .await;
    assert_eq!(more.status, StatusCode::OK, "{more:?}");
    let charged = charged + ROW;

    // A full refund returns everything left and removes the record.
    let full = server
        .get("/rows?count=1", &buyer.refund(&server, charged, None))
        .await;
    assert_eq!(full.status, StatusCode::OK, "{full:?}");
    assert_eq!(
        full.settlement.as_ref().unwrap().amount,
        Some(AtomicAmount(DEPOSIT - 100_000 - charged))
    );
    assert_eq!(server.sandbox.balance_of(&payer).0, start - charged);
    assert!(server.channels.load(&buyer.id).await.unwrap().is_none());
    assert_eq!(
        server.sandbox.settle_calls(),
        5,
        "the deposit, and two refunds each followed by the sweep of what it claimed"
    );
}

#[tokio::test]
async fn a_server_that_lost_its_records_restarts_the_channel_from_what_the_chain_claimed() {
    let first = server().await;
    let buyer = Buyer::new(&first);
    assert_eq!(
        first
            .get("/rows?count=3", &buyer.deposit(&first, 0))
            .await
            .status,
        StatusCode::OK
    );
    first.stop();
    // The records are gone (a memory store, a new process): the chain claimed nothing yet, so
    // the 3000 charged are forfeited and the channel starts again from 0.
    let second = first.beside(Arc::new(MemoryChannelStore::default())).await;
    let lost = second
        .get("/rows?count=1", &buyer.voucher(&second, 3 * ROW + AMOUNT))
        .await;
    assert_eq!(lost.status, StatusCode::PAYMENT_REQUIRED, "{lost:?}");
    let state = &lost.required.as_ref().unwrap()["accepts"][0]["extra"]["channelState"];
    assert_eq!(state["chargedCumulativeAmount"], "0");
    assert_eq!(state["balance"], DEPOSIT.to_string());
    let resynced = second
        .get("/rows?count=1", &buyer.voucher(&second, AMOUNT))
        .await;
    assert_eq!(resynced.status, StatusCode::OK, "{resynced:?}");
    assert_eq!(
        second
            .channels
            .load(&buyer.id)
            .await
            .unwrap()
            .unwrap()
            .charged,
        ROW
    );
}

#[tokio::test]
async fn a_voucher_above_the_balance_is_refused_and_a_top_up_deposit_continues_the_channel() {
    let server = server().await;
    let buyer = Buyer::new(&server);
    let opened = server
        .get("/rows?count=5", &buyer.deposit_of(&server, 0, 15_000))
        .await;
    assert_eq!(opened.status, StatusCode::OK, "{opened:?}");
    let paid = server
        .get("/rows?count=5", &buyer.voucher(&server, 5_000 + AMOUNT))
        .await;
    assert_eq!(paid.status, StatusCode::OK, "{paid:?}");
    // 20,000 signed against 15,000 deposited: refused locally, nothing changed.
    let over = server
        .get("/rows?count=1", &buyer.voucher(&server, 10_000 + AMOUNT))
        .await;
    assert_eq!(over.status, StatusCode::PAYMENT_REQUIRED, "{over:?}");
    assert_eq!(
        over.error(),
        "invalid_batch_settlement_evm_cumulative_exceeds_balance"
    );
    assert_eq!(server.sandbox.settle_calls(), 1);
    // A top-up deposit with the same voucher base.
    let topped = server
        .get("/rows?count=2", &buyer.deposit_of(&server, 10_000, 100_000))
        .await;
    assert_eq!(topped.status, StatusCode::OK, "{topped:?}");
    assert_eq!(
        topped.settlement.as_ref().unwrap().amount,
        Some(AtomicAmount(100_000))
    );
    assert_eq!(topped.extra()["channelState"]["balance"], "115000");
    assert_eq!(
        topped.extra()["channelState"]["chargedCumulativeAmount"],
        "12000"
    );
    let next = server
        .get("/rows?count=1", &buyer.voucher(&server, 12_000 + AMOUNT))
        .await;
    assert_eq!(next.status, StatusCode::OK, "{next:?}");
    assert_eq!(
        server
            .channels
            .load(&buyer.id)
            .await
            .unwrap()
            .unwrap()
            .charged,
        13_000
    );
    assert_eq!(server.sandbox.settle_calls(), 2, "the two deposits");
}

#[tokio::test]
async fn a_server_owning_its_receiver_authorizer_signs_the_refund_and_its_claim() {
    let key = SandboxWallet::random();
    let authorizer = key.address();
    let server = Server::owning(Arc::new(MemoryChannelStore::default()), key).await;
    assert_eq!(
        server.accept.extra.as_ref().unwrap()["receiverAuthorizer"],
        authorizer.as_str()
    );
    let buyer = Buyer::new(&server);
    let payer = buyer.wallet.address();
    let start = server.sandbox.balance_of(&payer).0;
    assert_eq!(
        server
            .get("/rows?count=4", &buyer.deposit(&server, 0))
            .await
            .status,
        StatusCode::OK
    );
    let paid = server
        .get("/rows?count=2", &buyer.voucher(&server, 4 * ROW + AMOUNT))
        .await;
    assert_eq!(paid.status, StatusCode::OK, "{paid:?}");
    let refund = server
        .get("/rows?count=1", &buyer.refund(&server, 6 * ROW, None))
        .await;
    assert_eq!(refund.status, StatusCode::OK, "{refund:?}");
    assert_eq!(
        refund.extra()["channelState"]["totalClaimed"],
        (6 * ROW).to_string()
    );
    assert_eq!(server.sandbox.balance_of(&payer).0, start - 6 * ROW);
    assert!(server.channels.load(&buyer.id).await.unwrap().is_none());
}

/// A hook refusing verified payments after the scheme took them, while `refusing` is set.
struct Refusing(Arc<AtomicBool>);

impl PaymentHooks for Refusing {
    fn stages(&self) -> HookStages {
        HookStages::AFTER_VERIFY
    }

    fn after_verify<'a>(&'a self, _: &'a VerifiedPayment) -> BoxFuture<'a, Result<(), Refusal>> {
        let refusing = self.0.load(Ordering::SeqCst);
        Box::pin(async move {
            if refusing {
                return Err(Refusal::Hook {
                    kind: RefusalKind::PaymentRequired,
                    reason: "refused by policy".to_owned(),
                });
            }
            Ok(())
        })
    }
}

#[tokio::test]
async fn a_voucher_another_hook_refuses_after_verification_frees_its_channel_at_once() {
    let refusing = Arc::new(AtomicBool::new(false));
    let server = Server::hooked(
        Arc::new(MemoryChannelStore::default()),
        Refusing(Arc::clone(&refusing)),
    )
    .await;
    let buyer = Buyer::new(&server);
    let deposit = server
        .get("/rows?count=1", &buyer.deposit(&server, 0))
        .await;
    assert_eq!(deposit.status, StatusCode::OK, "{deposit:?}");

    refusing.store(true, Ordering::SeqCst);
    let voucher = buyer.voucher(&server, 1_000 + AMOUNT);
    let refused = server.get("/rows?count=2", &voucher).await;
    assert_eq!(refused.status, StatusCode::PAYMENT_REQUIRED, "{refused:?}");
    assert_eq!(refused.error(), "refused by policy");
    assert!(refused.settlement.is_none());
    let channel = server.channels.load(&buyer.id).await.unwrap().unwrap();
    assert_eq!((channel.charged, &channel.hold), (1_000, &None));

    // The next voucher on the channel is served now, not after the hold's lease.
    refusing.store(false, Ordering::SeqCst);
    let answer = tokio::time::timeout(
        Duration::from_secs(5),
        server.get("/rows?count=2", &voucher),
    )
    .await
    .unwrap();
    assert_eq!(answer.status, StatusCode::OK, "{answer:?}");
    let channel = server.channels.load(&buyer.id).await.unwrap().unwrap();
    assert_eq!((channel.charged, &channel.hold), (3_000, &None));
}

#[tokio::test]
async fn a_deposit_in_doubt_when_its_process_stopped_commits_its_voucher_once_after_the_restart() {
    let channels: Arc<dyn ChannelStore> = Arc::new(MemoryChannelStore::default());
    let ledger = Arc::new(MemorySettlementStore::default());
    let channel = Arc::new(OnceLock::new());
    // A hold outlives its process by its lease: short here, so the test need not wait 120 s.
    let lease = Duration::from_millis(800);
    let extend = |sandbox: &SandboxFacilitator| -> support::After {
        let reconciler = ContractReading {
            sandbox: sandbox.clone(),
            channel: Arc::clone(&channel),
        };
        let ledger = Arc::clone(&ledger);
        Box::new(move |payments| payments.settlement_store(ledger).reconciler(reconciler))
    };
    let server = Server::configured_and_extended(
        Arc::clone(&channels),
        Box::new(move |scheme| scheme.hold_lease(lease)),
        extend,
    )
    .await;
    let buyer = Buyer::new(&server);
    channel.set(buyer.id.clone()).unwrap();

    server.sandbox.queue_settle(Step::AnswerLost);
    let deposit = buyer.deposit(&server, 0);
    let lost = server.get("/rows?count=1", &deposit).await;
    assert_eq!(lost.status, StatusCode::SERVICE_UNAVAILABLE, "{lost:?}");
    let stopped = channels.load(&buyer.id).await.unwrap().unwrap();
    assert_eq!(stopped.charged, 0);
    assert!(stopped.hold.is_some(), "held for the deposit in doubt");

    // The process stops with the deposit in doubt; the channel store and the ledger remain.
    let after = extend(&server.sandbox);
    let server = server
        .restarted(
            Arc::clone(&channels),
            Box::new(move |scheme| scheme.hold_lease(lease)),
            after,
        )
        .await;

    // The same deposit again, while the stopped process's hold has not run out: recovered
    // from doubt and delivered; its voucher is committed once that hold's lease ends.
    let recovered = server.get("/rows?count=1", &deposit).await;
    assert_eq!(recovered.status, StatusCode::OK, "{recovered:?}");
    let committed = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            let channel = channels.load(&buyer.id).await.unwrap().unwrap();
            if channel.charged > 0 {
                return channel;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the recovered deposit's voucher committed");
    assert_eq!((committed.charged, &committed.hold), (1_000, &None));
    assert_eq!(
        committed
            .voucher
            .as_ref()
            .map(|voucher| voucher.max_claimable),
        Some(AMOUNT)
    );

    // Sent once more, the deposit is answered from its record: nothing is counted again.
    let again = server.get("/rows?count=1", &deposit).await;
    assert_ne!(again.status, StatusCode::PAYMENT_REQUIRED, "{again:?}");
    tokio::time::sleep(Duration::from_millis(100)).await;
    let channel = channels.load(&buyer.id).await.unwrap().unwrap();
    assert_eq!(channel.charged, 1_000);

    // The channel goes on from the recovered charge.
    let next = server
        .get("/rows?count=2", &buyer.voucher(&server, 1_000 + AMOUNT))
        .await;
    assert_eq!(next.status, StatusCode::OK, "{next:?}");
    let channel = channels.load(&buyer.id).await.unwrap().unwrap();
    assert_eq!(channel.charged, 3_000);
}

/// The sandbox's contract read as a chain, once the sandbox is known.
struct ContractViews(Arc<OnceLock<SandboxFacilitator>>);

impl ChainReader for ContractViews {
    fn read<'a>(
        &'a self,
        network: &'a Network,
        id: &'a str,
    ) -> BoxFuture<'a, Result<ChainChannel, ChainError>> {
        let view = self
            .0
            .get()
            .ok_or_else(|| ChainError("no sandbox yet".into()))
            .and_then(|sandbox| {
                sandbox
                    .channel_state(network, id)
                    .map_err(|error| ChainError(error.into()))
            });
        Box::pin(async move {
            let view = view?;
            let mut read = ChainChannel::new(view.balance, view.total_claimed);
            read.refund_nonce = view.refund_nonce;
            read.withdraw_requested_at = view.withdraw_requested_at;
            read.pending_withdrawal = view.pending_withdrawal;
            Ok(read)
        })
    }
}

#[tokio::test]
async fn a_refund_whose_answer_was_lost_is_resolved_on_chain_and_never_sent_again() {
    let sandbox = Arc::new(OnceLock::new());
    let reader = ContractViews(Arc::clone(&sandbox));
    let server = Server::configured(
        Arc::new(MemoryChannelStore::default()),
        Box::new(move |scheme| scheme.chain(reader)),
    )
    .await;
    sandbox.set(server.sandbox.clone()).unwrap();
    let buyer = Buyer::new(&server);
    let payer = buyer.wallet.address();
    let start = server.sandbox.balance_of(&payer).0;
    let deposited = server
        .get("/rows?count=2", &buyer.deposit(&server, 0))
        .await;
    assert_eq!(deposited.status, StatusCode::OK, "{deposited:?}");
    let charged = 2 * ROW;

    // The refund ran, its answer lost: answered as settled from the chain, not sent again.
    server.sandbox.queue_settle(Step::AnswerLost);
    let lost = server
        .get(
            "/rows?count=1",
            &buyer.refund(&server, charged, Some(100_000)),
        )
        .await;
    assert_eq!(lost.status, StatusCode::OK, "{lost:?}");
    assert!(
        !lost.body.contains("rows"),
        "the handler ran: {}",
        lost.body
    );
    let settlement = lost.settlement.as_ref().unwrap();
    assert!(settlement.transaction.is_empty());
    assert_eq!(settlement.amount, Some(AtomicAmount(100_000)));
    assert_eq!(
        lost.extra()["channelState"]["balance"],
        (DEPOSIT - 100_000).to_string()
    );
    assert_eq!(
        server.sandbox.settle_calls(),
        2,
        "the deposit and one refund"
    );
    assert_eq!(
        server.sandbox.balance_of(&payer).0,
        start - DEPOSIT + 100_000
    );
    let channel = server.channels.load(&buyer.id).await.unwrap().unwrap();
    assert_eq!((channel.charged, &channel.hold), (charged, &None));
    assert_eq!(channel.on_chain.balance, DEPOSIT - 100_000);
    assert_eq!(channel.on_chain.refund_nonce, 1);

    // A refund that never reached the chain: the buyer is told to send it again (503, not 402),
    // the channel released unchanged; sent again, it runs once.
    server.sandbox.queue_settle(Step::Unreachable);
    let refund = buyer.refund(&server, charged, Some(50_000));
    let unreached = server.get("/rows?count=1", &refund).await;
    assert_eq!(
        unreached.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{unreached:?}"
    );
    let channel = server.channels.load(&buyer.id).await.unwrap().unwrap();
    assert_eq!((channel.charged, &channel.hold), (charged, &None));
    assert_eq!(channel.on_chain.balance, DEPOSIT - 100_000);
    let again = server.get("/rows?count=1", &refund).await;
    assert_eq!(again.status, StatusCode::OK, "{again:?}");
    assert_eq!(
        server.sandbox.balance_of(&payer).0,
        start - DEPOSIT + 150_000
    );

    // The channel goes on from the chain as it is.
    let next = server
        .get("/rows?count=1", &buyer.voucher(&server, charged + AMOUNT))
        .await;
    assert_eq!(next.status, StatusCode::OK, "{next:?}");
    let channel = server.channels.load(&buyer.id).await.unwrap().unwrap();
    assert_eq!(channel.charged, charged + ROW);
}

#[tokio::test]
async fn a_refund_whose_answer_was_lost_without_a_chain_reader_stays_in_doubt() {
    let server = Server::configured(
        Arc::new(MemoryChannelStore::default()),
        Box::new(|scheme| scheme.hold_lease(Duration::from_millis(500))),
    )
    .await;
    let buyer = Buyer::new(&server);
    let deposited = server
        .get("/rows?count=2", &buyer.deposit(&server, 0))
        .await;
    assert_eq!(deposited.status, StatusCode::OK, "{deposited:?}");
    let charged = 2 * ROW;

    server.sandbox.queue_settle(Step::AnswerLost);
    let refund = buyer.refund(&server, charged, None);
    let lost = server.get("/rows?count=1", &refund).await;
    assert_eq!(lost.status, StatusCode::SERVICE_UNAVAILABLE, "{lost:?}");
    // Held: no voucher is accepted on a balance the refund may have emptied.
    let busy = server
        .get("/rows?count=1", &buyer.voucher(&server, charged + AMOUNT))
        .await;
    assert_eq!(busy.status, StatusCode::SERVICE_UNAVAILABLE, "{busy:?}");
    assert_eq!(busy.error(), "invalid_batch_settlement_evm_channel_busy");
    assert_eq!(
        server.sandbox.settle_calls(),
        2,
        "the deposit and one refund"
    );
}

/// Reads the sandbox's contract as a chain: the deposit settled when the channel holds it. The
/// contract keeps no transaction log, so the settlement is named by the channel it funded.
struct ContractReading {
    sandbox: SandboxFacilitator,
    channel: Arc<OnceLock<String>>,
}

impl Reconciler for ContractReading {
    fn reconcile<'a>(&'a self, request: &'a FacilitatorRequest) -> BoxFuture<'a, Reconciliation> {
        let network = &request.payment_requirements().network;
        let funded = self.channel.get().and_then(|id| {
            let view = self.sandbox.channel_state(network, id).ok()?;
            (view.balance >= DEPOSIT).then(|| id.clone())
        });
        Box::pin(async move {
            match funded {
                Some(id) => Reconciliation::Settled { transaction: id },
                None => Reconciliation::Unknown {
                    reason: "the channel holds no deposit".to_owned(),
                },
            }
        })
    }
}

#[tokio::test]
async fn a_deposit_whose_settle_answer_was_lost_commits_its_voucher_once_recovered() {
    let channel = Arc::new(OnceLock::new());
    let reading = Arc::clone(&channel);
    let server = Server::extended_with(Arc::new(MemoryChannelStore::default()), move |sandbox| {
        let reconciler = ContractReading {
            sandbox: sandbox.clone(),
            channel: reading,
        };
        Box::new(move |payments| payments.reconciler(reconciler))
    })
    .await;
    let buyer = Buyer::new(&server);
    channel.set(buyer.id.clone()).unwrap();

    server.sandbox.queue_settle(Step::AnswerLost);
    let deposit = buyer.deposit(&server, 0);
    let lost = server.get("/rows?count=1", &deposit).await;
    assert_eq!(lost.status, StatusCode::SERVICE_UNAVAILABLE, "{lost:?}");
    // The deposit moved; the channel stays held for the request in doubt.
    let view = server
        .sandbox
        .channel_state(&server.accept.network, &buyer.id)
        .unwrap();
    assert_eq!(view.balance, DEPOSIT);
    let busy = server
        .get("/rows?count=1", &buyer.voucher(&server, 1_000 + AMOUNT))
        .await;
    assert_eq!(busy.status, StatusCode::SERVICE_UNAVAILABLE, "{busy:?}");
    assert_eq!(busy.error(), "invalid_batch_settlement_evm_channel_busy");

    // The same deposit again: recovered from doubt, and its voucher's charge committed.
    let recovered = server.get("/rows?count=1", &deposit).await;
    assert_eq!(recovered.status, StatusCode::OK, "{recovered:?}");
    let channel = server.channels.load(&buyer.id).await.unwrap().unwrap();
    assert_eq!((channel.charged, &channel.hold), (1_000, &None));
    assert_eq!(
        channel
            .voucher
            .as_ref()
            .map(|voucher| voucher.max_claimable),
        Some(AMOUNT)
    );
    // The channel goes on from that charge.
    let next = server
        .get("/rows?count=2", &buyer.voucher(&server, 1_000 + AMOUNT))
        .await;
    assert_eq!(next.status, StatusCode::OK, "{next:?}");
    let channel = server.channels.load(&buyer.id).await.unwrap().unwrap();
    assert_eq!(channel.charged, 3_000);
}
