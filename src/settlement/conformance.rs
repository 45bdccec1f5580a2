//! The [`SettlementStore`] contract as a test any implementation can run.
//!
//! ```
//! use std::sync::Arc;
//! use tower_x402::settlement::{MemorySettlementStore, check_conformance};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! check_conformance(Arc::new(MemorySettlementStore::default())).await;
//! # }
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::json;
use x402_wire::{
    AtomicAmount, FacilitatorRequest, Network, PaymentPayload, PaymentRequirements, SettleResponse,
};

use super::SettlementStore;
use super::{LedgerEntry, PaymentKey, PaymentState, SettlementIntent, SettlementRecord};

/// How many tasks race for one key in the concurrency checks.
const RACERS: usize = 16;

/// Runs every check of the [`SettlementStore`] contract against `store`, panicking with the
/// broken rule on the first violation. Uses fresh keys on every call, so it can run against a
/// database that already holds data (and several times against the same one).
///
/// Checks: absent keys load as `None`; the facilitator label of an intent and the request digest
/// of a record are read back; `insert` stores version 1 and refuses an existing key;
/// `replace` and `remove` succeed only on the current version and bump or delete it; every
/// state round-trips unchanged; a removed key can be inserted again; of concurrent `insert`s,
/// `replace`s or `remove`s naming the same key and version exactly one succeeds.
pub async fn check(store: Arc<dyn SettlementStore>) {
    let run = unique_run();
    let key = |name: &str| PaymentKey::from_stored(format!("conformance:{run}:{name}"));
    let states = sample_states(&run);

    let absent = key("absent");
    assert_eq!(
        load(&*store, &absent).await,
        None,
        "an absent key loads as None"
    );
    assert!(
        !ok(store.replace(&absent, 1, &states[0]).await, "replace"),
        "replace of an absent key fails"
    );
    assert!(
        !ok(store.remove(&absent, 1).await, "remove"),
        "remove of an absent key fails"
    );

    // The facilitator that received `/settle` is read back with the intent.
    let labelled = key("labelled");
    assert!(
        ok(store.insert(&labelled, &states[1]).await, "insert"),
        "insert of an absent key succeeds"
    );
    match load(&*store, &labelled).await.map(|entry| entry.state) {
        Some(PaymentState::Settling { intent, .. }) => assert_eq!(
            intent.facilitator,
            Some(format!("facilitator-{run}").into()),
            "a settling intent keeps the label of its facilitator"
        ),
        other => panic!("a settling state loads as settling, got {other:?}"),
    }
    assert!(
        ok(store.remove(&labelled, 1).await, "remove"),
        "remove at version 1 succeeds"
    );

    // The request a payment bought is read back with its record.
    let bought = key("bought");
    assert!(
        ok(store.insert(&bought, &states[3]).await, "insert"),
        "insert of an absent key succeeds"
    );
    match load(&*store, &bought).await.map(|entry| entry.state) {
        Some(PaymentState::Settled { record }) => assert_eq!(
            record.request_digest,
            Some(format!("sha256:{run}").into()),
            "a settlement record keeps the request it bought"
        ),
        other => panic!("a settled state loads as settled, got {other:?}"),
    }
    assert!(
        ok(store.remove(&bought, 1).await, "remove"),
        "remove at version 1 succeeds"
    );

    // Lifecycle through every state, checking versions and round trips.
    let life = key("life");
    assert!(
        ok(store.insert(&life, &states[0]).await, "insert"),
        "insert of an absent key succeeds"
    );
    assert_eq!(
        load(&*store, &life).await,
        Some(LedgerEntry::new(states[0].clone(), 1)),
        "insert stores version 1, state unchanged"
    );
    assert!(
        !ok(store.insert(&life, &states[1]).await, "insert"),
        "insert of an existing key fails"
    );
    assert_eq!(
        load(&*store, &life).await.map(|e| e.version),
        Some(1),
        "a refused insert changes nothing"
    );
    for (version, state) in (1..).zip(&states[1..]) {
        assert!(
            !ok(store.replace(&life, version + 1, state).await, "replace"),
            "replace naming a later version fails"
        );
        assert!(
            !ok(
                store.replace(&life, version.saturating_sub(1), state).await,
                "replace"
            ),
            "replace naming an earlier version fails"
        );
        assert!(
            ok(store.replace(&life, version, state).await, "replace"),
            "replace naming the current version succeeds"
        );
        assert_eq!(
            load(&*store, &life).await,
            Some(LedgerEntry::new(state.clone(), version + 1)),
            "replace stores version + 1 and the state unchanged ({})",
            state.phase()
        );
    }
    let last = states.len() as u64;
    assert!(
        !ok(store.remove(&life, last - 1).await, "remove"),
        "remove naming another version fails"
    );
    assert!(
        ok(store.remove(&life, last).await, "remove"),
        "remove naming the current version succeeds"
    );
    assert_eq!(load(&*store, &life).await, None, "a removed key is absent");
    assert!(
        ok(store.insert(&life, &states[2]).await, "insert"),
        "a removed key can be inserted again"
    );
    assert_eq!(
        load(&*store, &life).await,
        Some(LedgerEntry::new(states[2].clone(), 1)),
        "re-inserted at version 1"
    );

    // Keys are independent.
    let other = key("other");
    assert!(ok(store.insert(&other, &states[0]).await, "insert"));
    assert_eq!(
        load(&*store, &life).await.map(|e| e.version),
        Some(1),
        "other keys are untouched"
    );

    // Races: exactly one winner each.
    let raced = key("raced");
    let wins = race(&store, |store, _| {
        let (key, state) = (raced.clone(), states[0].clone());
        async move { store.insert(&key, &state).await }
    })
    .await;
    assert_eq!(
        wins, 1,
        "of {RACERS} concurrent inserts of one key, exactly one succeeds"
    );
    let wins = race(&store, |store, i| {
        let (key, state) = (raced.clone(), states[1 + i % (states.len() - 1)].clone());
        async move { store.replace(&key, 1, &state).await }
    })
    .await;
    assert_eq!(
        wins, 1,
        "of {RACERS} concurrent replaces of one version, exactly one succeeds"
    );
    assert_eq!(load(&*store, &raced).await.map(|e| e.version), Some(2));
    let wins = race(&store, |store, _| {
        let key = raced.clone();
        async move { store.remove(&key, 2).await }
    })
    .await;
    assert_eq!(
        wins, 1,
        "of {RACERS} concurrent removes of one version, exactly one succeeds"
    );
    assert_eq!(load(&*store, &raced).await, None);
}

async fn race<F, Fut>(store: &Arc<dyn SettlementStore>, op: F) -> usize
where
    F: Fn(Arc<dyn SettlementStore>, usize) -> Fut,
    Fut: Future<Output = Result<bool, super::StoreError>> + Send + 'static,
{
    let tasks: Vec<_> = (0..RACERS)
        .map(|i| tokio::spawn(op(Arc::clone(store), i)))
        .collect();
    let mut wins = 0;
    for task in tasks {
        match task.await {
            Ok(outcome) => wins += usize::from(ok(outcome, "concurrent operation")),
            Err(error) => panic!("a concurrent store operation panicked: {error}"),
        }
    }
    wins
}

async fn load(store: &dyn SettlementStore, key: &PaymentKey) -> Option<LedgerEntry> {
    match store.load(key).await {
        Ok(entry) => entry,
        Err(error) => panic!("load failed: {error}"),
    }
}

fn ok(outcome: Result<bool, super::StoreError>, operation: &str) -> bool {
    match outcome {
        Ok(done) => done,
        Err(error) => panic!("{operation} failed: {error}"),
    }
}

/// A tag unique to this call: time and a process-wide counter.
fn unique_run() -> String {
    static CALLS: AtomicU64 = AtomicU64::new(0);
    let nanos = x402_wire::unix_time().as_nanos();
    format!(
        "{nanos:x}-{}-{}",
        std::process::id(),
        CALLS.fetch_add(1, Ordering::Relaxed)
    )
}

/// One state of each kind, with every field set to something distinctive.
fn sample_states(run: &str) -> Vec<PaymentState> {
    let requirement = PaymentRequirements {
        scheme: "exact".into(),
        network: Network::BASE_SEPOLIA,
        amount: AtomicAmount(1_250_000),
        asset: "0x036CbD53842c5426634e7929541eC2318f3dCF7e".into(),
        pay_to: "0x209693Bc6afc0C5328bA36FaF03C514EF312287C".into(),
        max_timeout_seconds: 60,
        extra: Some(
            json!({"name": "USDC", "version": "2"})
                .as_object()
                .cloned()
                .unwrap_or_default(),
        ),
    };
    let payload: PaymentPayload = match serde_json::from_value(json!({
        "x402Version": 2,
        "resource": {"url": format!("https://shop.example/{run}")},
        "accepted": requirement,
        "payload": {
            "signature": format!("0x{}", "ab".repeat(65)),
            "authorization": {
                "from": "0x857b06519E91e3A54538791bDbb0E22373e36b66",
                "to": "0x209693Bc6afc0C5328bA36FaF03C514EF312287C",
                "value": "1250000",
                "validAfter": "0",
                "validBefore": "4102444800",
                "nonce": format!("0x{}", "cd".repeat(32)),
            }
        },
        "extensions": {"payment-identifier": {"info": {"id": format!("pay_{run}")}}}
    })) {
        Ok(payload) => payload,
        Err(error) => panic!("the sample payment does not decode: {error}"),
    };
    let intent = SettlementIntent::new(
        format!("https://shop.example/{run}"),
        FacilitatorRequest::new(payload.clone(), requirement.clone()),
    )
    .for_request(format!("http GET /{run}?q=\u{fc}ber&n=1"));
    let settlement = SettleResponse {
        success: true,
        error_reason: None,
        error_message: None,
        transaction: format!("0x{}", "ef".repeat(32)),
        network: Network::BASE_SEPOLIA,
        payer: Some("0x857b06519E91e3A54538791bDbb0E22373e36b66".into()),
        amount: Some(AtomicAmount(1_250_000)),
        extensions: None,
        extra: None,
    };
    vec![
        PaymentState::InProgress {
            owner: format!("owner-{run}").into(),
            lease_until: 1_900_000_000_123,
            fingerprint: intent.fingerprint.clone(),
        },
        PaymentState::Settling {
            owner: format!("owner-{run}").into(),
            lease_until: 1_900_000_060_456,
            intent: intent.clone().at_facilitator(format!("facilitator-{run}")),
        },
        PaymentState::InDoubt {
            intent,
            since: 1_900_000_001_789,
            reason: "facilitator /settle answered HTTP 504 — \"quoted\" ünïcode".into(),
        },
        PaymentState::Settled {
            record: SettlementRecord::new(
                &payload,
                format!("https://shop.example/{run}"),
                requirement,
                settlement,
            )
            .for_request(format!("sha256:{run}")),
        },
    ]
}
