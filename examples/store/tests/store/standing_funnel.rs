//! The funnel: eight stages in order, fed by traffic and orders, live and demo apart.

use tower_x402_sandbox::SandboxWallet;

use super::support::{RECEIPT, Shop, TAX, first_file_path};
use x402_store::sales::standing::STAGES;

async fn a_fresh_store_reports_eight_zero_stages_in_order() {
    let shop = Shop::open(false).await;
    let report = shop.state.standing.snapshot().await.unwrap();
    let names: Vec<&str> = report.stages.iter().map(|s| s.stage).collect();
    assert_eq!(names, STAGES);
    let demo_names: Vec<&str> = report.demo.iter().map(|s| s.stage).collect();
    assert_eq!(demo_names, STAGES);
    assert!(
        report
            .stages
            .iter()
            .chain(&report.demo)
            .all(|s| s.count == 0)
    );
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["mode"], "live");
    assert_eq!(json["stages"][0]["stage"], "indexed");
    assert!(json["stages"][7]["meaning"].is_string());
}

async fn live_traffic_and_orders_feed_their_stages() {
    let shop = Shop::open(false).await;
    shop.state.standing.set_indexed(3);
    shop.state.standing.record_retrieved();
    shop.state.standing.record_retrieved();

    let wallet = SandboxWallet::random();
    // Each `buy` asks for the challenge (considered) and then pays (selected).
    let first = shop.buy(&wallet, RECEIPT, None).await;
    let second = shop.buy(&wallet, TAX, None).await;
    let stranger = shop.buy(&SandboxWallet::random(), RECEIPT, None).await;
    for bought in [&first, &first, &second] {
        assert_eq!(shop.get(&first_file_path(bought), &[]).await.status, 200);
    }
    let _ = stranger;

    let report = shop.state.standing.snapshot().await.unwrap();
    let counts: Vec<u64> = report.stages.iter().map(|s| s.count).collect();
    // indexed, retrieved, considered, selected, purchased, used, returned, referred
    assert_eq!(counts, [3, 2, 3, 3, 3, 3, 1, 0]);
    assert!(
        report.demo.iter().all(|s| s.count == 0),
        "{:?}",
        report.demo
    );
}

async fn demo_activity_is_reported_apart_and_never_inflates_live_numbers() {
    let shop = Shop::open(true).await;
    shop.state.standing.set_indexed(2);
    let wallet = SandboxWallet::random();
    let bought = shop.buy(&wallet, RECEIPT, None).await;
    shop.buy(&wallet, TAX, None).await;
    shop.get(&first_file_path(&bought), &[]).await;

    let report = shop.state.standing.snapshot().await.unwrap();
    assert_eq!(report.mode, "demo");
    let live: Vec<u64> = report.stages.iter().map(|s| s.count).collect();
    assert_eq!(live, [2, 0, 0, 0, 0, 0, 0, 0]);
    let demo: Vec<u64> = report.demo.iter().map(|s| s.count).collect();
    assert_eq!(demo, [0, 0, 2, 2, 2, 1, 1, 0]);
}

async fn event_counts_reach_the_database_without_a_snapshot() {
    let shop = Shop::open(false).await;
    shop.challenge(RECEIPT).await;
    shop.state.standing.flush().await.unwrap();
    let rows = shop.state.store.counters().await.unwrap();
    let considered = rows
        .iter()
        .find(|c| c.stage == "considered")
        .map(|c| c.value);
    assert_eq!(considered, Some(1));
}

super::support::on_both_backends!(
    a_fresh_store_reports_eight_zero_stages_in_order,
    live_traffic_and_orders_feed_their_stages,
    demo_activity_is_reported_apart_and_never_inflates_live_numbers,
    event_counts_reach_the_database_without_a_snapshot,
);
