//! The `batch-settlement` scheme on PostgreSQL, over loopback HTTP against the sandbox
//! facilitator: a restart (a new server on a new pool) continues a channel, and two instances
//! on one database share a channel without counting a voucher twice; a failing handler changes
//! nothing in the database.

#[path = "../../tower-x402-channels/tests/support/guard.rs"]
mod guard;
#[path = "../../../examples/store/tests/store/postgres_server.rs"]
#[allow(dead_code)]
mod postgres_server;
#[path = "../../tower-x402-channels/tests/support/mod.rs"]
mod support;

use std::sync::Arc;

use http::StatusCode;
use sqlx::postgres::{PgPool, PgPoolOptions};
use tower_x402_channels::ChannelStore;
use tower_x402_postgres::PostgresChannelStore;

use support::{AMOUNT, Buyer, ROW, Server};

async fn store(database: &str) -> Arc<dyn ChannelStore> {
    let pool: PgPool = PgPoolOptions::new()
        .max_connections(8)
        .connect(database)
        .await
        .unwrap();
    tower_x402_postgres::migrate(&pool).await.unwrap();
    Arc::new(PostgresChannelStore::new(pool))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_restarted_server_continues_a_channel_from_the_database() {
    postgres_server::require();
    let database = postgres_server::fresh_database().await;
    let first = Server::start(store(&database).await).await;
    let buyer = Buyer::new(&first);
    let opened = first.get("/rows?count=2", &buyer.deposit(&first, 0)).await;
    assert_eq!(opened.status, StatusCode::OK, "{opened:?}");
    let paid = first
        .get("/rows?count=3", &buyer.voucher(&first, 2 * ROW + AMOUNT))
        .await;
    assert_eq!(paid.status, StatusCode::OK, "{paid:?}");
    first.stop();

    // A new process: new pool, new payment core, new app, the same database.
    let second = first.beside(store(&database).await).await;
    let continued = second
        .get("/rows?count=4", &buyer.voucher(&second, 5 * ROW + AMOUNT))
        .await;
    assert_eq!(continued.status, StatusCode::OK, "{continued:?}");
    assert_eq!(
        continued.extra()["channelState"]["chargedCumulativeAmount"],
        (9 * ROW).to_string()
    );
    // The voucher the first process accepted is no good twice after the restart.
    let replayed = second
        .get("/rows?count=3", &buyer.voucher(&second, 2 * ROW + AMOUNT))
        .await;
    assert_eq!(
        replayed.status,
        StatusCode::PAYMENT_REQUIRED,
        "{replayed:?}"
    );
    let channel = second.channels.load(&buyer.id).await.unwrap().unwrap();
    assert_eq!(channel.charged, 9 * ROW);
    assert_eq!(second.sandbox.settle_calls(), 1, "the deposit's alone");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_instances_on_one_database_share_a_channel_without_double_counting() {
    postgres_server::require();
    let database = postgres_server::fresh_database().await;
    let one = Arc::new(Server::start(store(&database).await).await);
    let two = Arc::new(one.beside(store(&database).await).await);
    let buyer = Arc::new(Buyer::new(&one));
    assert_eq!(
        one.get("/rows?count=1", &buyer.deposit(&one, 0))
            .await
            .status,
        StatusCode::OK
    );
    // Alternating instances, each voucher on the cumulative the other reported.
    let mut charged = ROW;
    for round in 0..6u128 {
        let server = if round % 2 == 0 { &two } else { &one };
        let answer = server
            .get("/rows?count=2", &buyer.voucher(server, charged + AMOUNT))
            .await;
        assert_eq!(answer.status, StatusCode::OK, "{answer:?}");
        charged += 2 * ROW;
        assert_eq!(
            answer.extra()["channelState"]["chargedCumulativeAmount"],
            charged.to_string()
        );
    }
    // The same voucher sent to both instances at once, several times: one is served.
    let base = charged;
    let requests: Vec<_> = (0..8)
        .map(|request| {
            let server = Arc::clone(if request % 2 == 0 { &one } else { &two });
            let buyer = Arc::clone(&buyer);
            tokio::spawn(async move {
                server
                    .get("/rows?count=5", &buyer.voucher(&server, base + AMOUNT))
                    .await
            })
        })
        .collect();
    let mut served = 0;
    for request in requests {
        let answer = request.await.unwrap();
        match answer.status {
            StatusCode::OK => served += 1,
            StatusCode::SERVICE_UNAVAILABLE | StatusCode::PAYMENT_REQUIRED => {}
            other => panic!("{other}: {answer:?}"),
        }
    }
    assert_eq!(
        served, 1,
        "one request per cumulative base across instances"
    );
    let channel = one.channels.load(&buyer.id).await.unwrap().unwrap();
    assert_eq!((channel.charged, channel.hold), (base + 5 * ROW, None));
    assert_eq!(one.sandbox.settle_calls(), 1, "the deposit's alone");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failing_handler_changes_nothing_in_the_database() {
    postgres_server::require();
    let database = postgres_server::fresh_database().await;
    let server = Server::start(store(&database).await).await;
    let buyer = Buyer::new(&server);
    assert_eq!(
        server
            .get("/rows?count=1", &buyer.deposit(&server, 0))
            .await
            .status,
        StatusCode::OK
    );
    let before = server.channels.load(&buyer.id).await.unwrap().unwrap();
    let voucher = buyer.voucher(&server, ROW + AMOUNT);
    let failed = server.get("/broken", &voucher).await;
    assert_eq!(
        failed.status,
        StatusCode::INTERNAL_SERVER_ERROR,
        "{failed:?}"
    );
    let after = server.channels.load(&buyer.id).await.unwrap().unwrap();
    assert_eq!(
        (after.charged, &after.voucher, &after.hold),
        (before.charged, &before.voucher, &None)
    );
    let retried = server.get("/rows?count=2", &voucher).await;
    assert_eq!(retried.status, StatusCode::OK, "{retried:?}");
    assert_eq!(
        server
            .channels
            .load(&buyer.id)
            .await
            .unwrap()
            .unwrap()
            .charged,
        3 * ROW
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn no_voucher_is_served_once_a_watched_withdrawal_may_finalize() {
    postgres_server::require();
    let database = postgres_server::fresh_database().await;
    guard::no_voucher_is_served_once_a_watched_withdrawal_may_finalize(store(&database).await)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_withdrawal_seen_by_verify_refuses_the_voucher_and_is_claimed_first() {
    postgres_server::require();
    let database = postgres_server::fresh_database().await;
    guard::a_withdrawal_seen_by_verify_refuses_the_voucher_and_is_claimed_first(
        store(&database).await,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stranger_gets_no_channel_state_and_refunds_nothing() {
    postgres_server::require();
    let database = postgres_server::fresh_database().await;
    guard::a_stranger_gets_no_channel_state_and_refunds_nothing(store(&database).await).await;
}
