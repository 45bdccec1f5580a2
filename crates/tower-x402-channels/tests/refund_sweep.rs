//! What a cooperative refund claims for the receiver is swept: at once after the refund, and,
//! when that sweep fails, by the claimer on shutdown.

mod support;

use std::sync::Arc;

use http::StatusCode;
use tower_x402_channels::{Claimer, MemoryChannelStore};
use tower_x402_sandbox::Step;

use support::{AMOUNT, Buyer, DEPOSIT, PAY_TO, ROW, Server};

/// A deposit and a voucher charging 5 rows, then a partial refund of 100,000; what was charged.
async fn charged_then_refunded(server: &Server, buyer: &Buyer) -> u128 {
    let deposit = server.get("/rows?count=2", &buyer.deposit(server, 0)).await;
    assert_eq!(deposit.status, StatusCode::OK, "{deposit:?}");
    let paid = server
        .get("/rows?count=3", &buyer.voucher(server, 2 * ROW + AMOUNT))
        .await;
    assert_eq!(paid.status, StatusCode::OK, "{paid:?}");
    let charged = 5 * ROW;
    let refund = server
        .get(
            "/rows?count=1",
            &buyer.refund(server, charged, Some(100_000)),
        )
        .await;
    assert_eq!(refund.status, StatusCode::OK, "{refund:?}");
    assert_eq!(
        refund.extra()["channelState"]["balance"],
        (DEPOSIT - 100_000).to_string()
    );
    charged
}

fn totals(server: &Server) -> (u128, u128) {
    server
        .sandbox
        .receiver_totals(&server.accept.network, PAY_TO, &server.accept.asset)
        .unwrap()
}

#[tokio::test]
async fn a_refund_claims_what_was_charged_and_it_is_swept_to_the_receiver_at_once() {
    let server = Server::start(Arc::new(MemoryChannelStore::default())).await;
    let buyer = Buyer::new(&server);
    let before = server.sandbox.balance_of(PAY_TO).0;
    let charged = charged_then_refunded(&server, &buyer).await;
    assert_eq!(totals(&server), (charged, charged), "claimed and swept");
    assert_eq!(server.sandbox.balance_of(PAY_TO).0 - before, charged);
}

#[tokio::test]
async fn a_sweep_after_a_refund_that_failed_is_done_by_the_claimer_on_shutdown() {
    let server = Server::start(Arc::new(MemoryChannelStore::default())).await;
    let buyer = Buyer::new(&server);
    let before = server.sandbox.balance_of(PAY_TO).0;
    // The deposit and the refund settle; the sweep after the refund is refused.
    server.sandbox.queue_settle(Step::Answer);
    server.sandbox.queue_settle(Step::Answer);
    server
        .sandbox
        .queue_settle(Step::Refuse("facilitator_busy".into()));
    let charged = charged_then_refunded(&server, &buyer).await;
    assert_eq!(
        totals(&server),
        (charged, 0),
        "claimed, left in the contract"
    );

    let facilitator = tower_x402::HttpFacilitator::new(&server.sandbox_url).unwrap();
    let claimer = Claimer::new(Arc::clone(&server.channels), facilitator).sweeps_for(
        &server.accept.network,
        PAY_TO,
        &server.accept.asset,
    );
    let report = claimer.spawn().shutdown().await.unwrap();
    assert!(report.is_settled(), "{report:?}");
    assert_eq!(report.swept.len(), 1, "{report:?}");
    assert_eq!(report.swept[0].3, Some(charged));
    assert_eq!(totals(&server), (charged, charged), "swept on the way out");
    assert_eq!(server.sandbox.balance_of(PAY_TO).0 - before, charged);
}
