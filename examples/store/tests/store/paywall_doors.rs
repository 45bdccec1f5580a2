//! The payment doors in every configuration: which accepts a 402 carries and what each door
//! record says.

use std::sync::Arc;

use axum::http::StatusCode;

use serde_json::{Map, Value, json};
use tower_x402_sandbox::SandboxFacilitator;
use x402_store::config::Config;
use x402_wire::Network;

use super::support::{ExtraKinds, TestStore, Unreachable, store_with};

pub(super) const SOLANA_TREASURY: &str = "CKPKJWNdJEqa81x7CkZ14BVPiY6y16Sxs7owznqtWYp5";
const ALGORAND_TREASURY: &str = "VCMJKWOY5P5P7SKMZFFOCEROPJCZOTIJMNIYNUCKH7LRO45JMJP6UYBIJA";
const SOLANA_MINT: &str = "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v";

async fn accepts_and_doors(store: &TestStore) -> (Vec<Value>, Vec<Value>) {
    let challenge = store.get("/api/x402/store-api-pack").await.challenge();
    let doors = store.get("/api/bazaar").await.json["doors"]
        .as_array()
        .unwrap()
        .clone();
    // Every SKU carries the same set of networks.
    for sku in store.state.catalog.iter() {
        assert_eq!(
            sku.offer.accepts().len(),
            challenge["accepts"].as_array().unwrap().len()
        );
    }
    (challenge["accepts"].as_array().unwrap().clone(), doors)
}

/// Both extra deposit addresses set: Solana's and Algorand's.
fn both_treasuries(config: &mut Config) {
    config.second_pay_to = Some(SOLANA_TREASURY.into());
    config.third_pay_to = Some(ALGORAND_TREASURY.into());
}

/// The text field `name` of each of `items`.
fn texts<'a>(items: &'a [Value], name: &str) -> Vec<&'a str> {
    items
        .iter()
        .map(|item| item[name].as_str().unwrap())
        .collect()
}

/// Asserts that the third (Algorand) door stays mapped, its notes saying `because`.
fn assert_third_door_mapped(doors: &[Value], because: &str) {
    assert_eq!(doors[2]["status"], "mapped");
    let notes = doors[2]["notes"].as_str().unwrap();
    assert!(notes.contains(because), "{notes}");
}

fn fee_payer(address: &str) -> Option<Map<String, Value>> {
    let mut extra = Map::new();
    extra.insert("feePayer".to_owned(), json!(address));
    Some(extra)
}

async fn without_a_second_pay_to_only_the_canonical_door_is_open() {
    let store = store_with(|_| {}, Arc::new(SandboxFacilitator::new())).await;
    let (accepts, doors) = accepts_and_doors(&store).await;
    assert_eq!(accepts.len(), 1);
    assert_eq!(accepts[0]["network"], "eip155:8453");
    let statuses = texts(&doors, "status");
    assert_eq!(statuses, ["live", "gated", "mapped"]);
    assert_eq!(doors[0]["caip2"], "eip155:8453");
    assert_eq!(
        doors[0]["assetId"],
        "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913"
    );
    assert_eq!(doors[1]["caip2"], Network::SOLANA.as_str());
    assert_eq!(doors[1]["assetId"], SOLANA_MINT);
    assert_eq!(doors[1]["treasury"], "");
    assert_eq!(doors[2]["caip2"], Network::ALGORAND.as_str());
    assert_eq!(doors[2]["assetId"], "31566704");
    assert!(doors.iter().all(|d| d["asset"] == "USDC"));
}

async fn a_second_pay_to_opens_the_solana_door_on_its_own_address() {
    let store = store_with(
        |c| c.second_pay_to = Some(SOLANA_TREASURY.into()),
        Arc::new(ExtraKinds::new(vec![(Network::SOLANA, None)])),
    )
    .await;
    let (accepts, doors) = accepts_and_doors(&store).await;
    assert_eq!(accepts.len(), 2);
    assert_eq!(accepts[0]["payTo"], x402_store::config::DEMO_PAY_TO);
    assert_eq!(accepts[1]["network"], Network::SOLANA.as_str());
    assert_eq!(accepts[1]["asset"], SOLANA_MINT);
    assert_eq!(accepts[1]["payTo"], SOLANA_TREASURY);
    assert_ne!(accepts[1]["payTo"], accepts[0]["payTo"]);
    assert_eq!(accepts[1]["amount"], "99000000");
    assert_eq!(accepts[1]["scheme"], "exact");
    // The facilitator's kind has no `extra`, so the accept carries none.
    assert!(accepts[1].get("extra").is_none());
    assert_eq!(doors[1]["status"], "live");
    assert_eq!(doors[1]["treasury"], SOLANA_TREASURY);
    assert_eq!(doors[2]["status"], "mapped");
}

async fn the_fee_payer_comes_only_from_the_facilitator() {
    let facilitator = ExtraKinds::new(vec![(
        Network::SOLANA,
        fee_payer("FeePayer1111111111111111111111111111111111"),
    )]);
    let store = store_with(
        |c| c.second_pay_to = Some(SOLANA_TREASURY.into()),
        Arc::new(facilitator),
    )
    .await;
    let (accepts, _) = accepts_and_doors(&store).await;
    assert_eq!(
        accepts[1]["extra"],
        json!({"feePayer": "FeePayer1111111111111111111111111111111111"})
    );
}

async fn a_third_pay_to_alone_does_not_open_algorand() {
    let store = store_with(
        |c| c.third_pay_to = Some(ALGORAND_TREASURY.into()),
        Arc::new(SandboxFacilitator::new()),
    )
    .await;
    let supported = store.state.facilitator.supported().await.unwrap();
    assert!(
        !supported.supports_network(&Network::ALGORAND),
        "the sandbox must not list Algorand for this test"
    );
    let (accepts, doors) = accepts_and_doors(&store).await;
    assert_eq!(accepts.len(), 1);
    assert_third_door_mapped(&doors, "does not list Algorand");
}

async fn algorand_listed_without_a_third_pay_to_stays_mapped() {
    let facilitator = ExtraKinds::new(vec![(Network::ALGORAND, None)]);
    let store = store_with(|_| {}, Arc::new(facilitator)).await;
    let (accepts, doors) = accepts_and_doors(&store).await;
    assert_eq!(accepts.len(), 1);
    assert_third_door_mapped(&doors, "STORE_THIRD_PAY_TO");
}

async fn both_doors_open_when_configured_and_listed() {
    let facilitator = ExtraKinds::new(vec![(Network::SOLANA, None), (Network::ALGORAND, None)]);
    let store = store_with(both_treasuries, Arc::new(facilitator)).await;
    let (accepts, doors) = accepts_and_doors(&store).await;
    let networks = texts(&accepts, "network");
    assert_eq!(
        networks,
        [
            "eip155:8453",
            Network::SOLANA.as_str(),
            Network::ALGORAND.as_str()
        ]
    );
    assert_eq!(accepts[2]["asset"], "31566704");
    assert_eq!(accepts[2]["payTo"], ALGORAND_TREASURY);
    assert_eq!(accepts[2]["amount"], "99000000");
    let statuses = texts(&doors, "status");
    assert_eq!(statuses, ["live", "live", "live"]);
    assert_eq!(doors[2]["treasury"], ALGORAND_TREASURY);
}

async fn a_failing_supported_keeps_the_third_door_mapped() {
    let store = store_with(both_treasuries, Arc::new(Unreachable)).await;
    let (accepts, doors) = accepts_and_doors(&store).await;
    let networks = texts(&accepts, "network");
    assert_eq!(networks, ["eip155:8453"]);
    assert_eq!(doors[1]["status"], "mapped");
    assert_third_door_mapped(&doors, "could not be read");
}

/// The second door with its deposit address set, against each `/supported` answer: live (with
/// exactly the kind's `extra` on its accept) only when the facilitator lists `exact` on Solana.
#[tokio::test]
async fn the_solana_door_is_live_only_when_the_facilitator_lists_exact_on_solana() {
    let fee_payer = fee_payer("FeePayer1111111111111111111111111111111111");
    let cases: Vec<(&str, Arc<dyn tower_x402::Facilitator>, &str, Option<Value>)> = vec![
        (
            "not listed",
            Arc::new(ExtraKinds::without(Network::SOLANA)),
            "mapped",
            None,
        ),
        ("unreachable", Arc::new(Unreachable), "mapped", None),
        (
            "listed for another scheme",
            Arc::new(ExtraKinds::with_scheme(
                "upto",
                vec![(Network::SOLANA, fee_payer.clone())],
            )),
            "mapped",
            None,
        ),
        (
            "listed without extra",
            Arc::new(ExtraKinds::new(vec![(Network::SOLANA, None)])),
            "live",
            None,
        ),
        (
            "listed with a fee payer",
            Arc::new(ExtraKinds::new(vec![(Network::SOLANA, fee_payer.clone())])),
            "live",
            Some(json!({"feePayer": "FeePayer1111111111111111111111111111111111"})),
        ),
    ];
    for (case, facilitator, status, extra) in cases {
        let store = store_with(
            |c| c.second_pay_to = Some(SOLANA_TREASURY.into()),
            facilitator,
        )
        .await;
        let (accepts, doors) = accepts_and_doors(&store).await;
        assert_eq!(doors[1]["status"], status, "{case}");
        let solana: Vec<&Value> = accepts
            .iter()
            .filter(|a| a["network"] == Network::SOLANA.as_str())
            .collect();
        if status == "live" {
            assert_eq!(solana.len(), 1, "{case}");
            assert_eq!(solana[0].get("extra").cloned(), extra, "{case}");
        } else {
            assert!(solana.is_empty(), "{case}: {accepts:?}");
            assert!(
                doors[1]["notes"].as_str().unwrap().contains("Mapped"),
                "{case}"
            );
        }
    }
}

/// Clients built on undici fail at 16 KB of response headers and several sellers keep to 8 KB:
/// every product's challenge stays under 8 KB with every door open (and so does a payment
/// copying the challenge's extensions).
#[tokio::test]
async fn every_challenge_header_stays_under_8_kb_with_every_door_open() {
    const BUDGET: usize = 8 * 1024;
    let facilitator = ExtraKinds::new(vec![
        (
            Network::SOLANA,
            fee_payer("FeePayer1111111111111111111111111111111111"),
        ),
        (Network::ALGORAND, None),
    ]);
    let store = store_with(both_treasuries, Arc::new(facilitator)).await;
    let mut largest = (0, String::new());
    for sku in store.state.catalog.iter() {
        let answer = store.get(&format!("/api/x402/{}", sku.slug)).await;
        assert_eq!(answer.status, StatusCode::PAYMENT_REQUIRED, "{}", sku.slug);
        let challenge = answer.challenge();
        assert_eq!(
            challenge["accepts"].as_array().unwrap().len(),
            3,
            "{}",
            sku.slug
        );
        let header: usize = answer
            .headers
            .iter()
            .map(|(name, value)| name.as_str().len() + value.len() + 4)
            .sum();
        if header > largest.0 {
            largest = (header, sku.slug.clone());
        }
        let wallet = tower_x402_sandbox::SandboxWallet::random();
        let required: x402_wire::PaymentRequired = serde_json::from_value(challenge).unwrap();
        let payment = x402_wire::header::encode(&wallet.pay(&required).unwrap()).unwrap();
        assert!(
            payment.len() < BUDGET,
            "{}: payment {} bytes",
            sku.slug,
            payment.len()
        );
    }
    assert!(
        largest.0 < BUDGET,
        "{}: {} bytes of headers",
        largest.1,
        largest.0
    );
}

/// With no setting at all the in-process sandbox settles Solana: the Solana door is live on the
/// demo address, and a Solana wallet buys through it, once, whatever bytes fill the fee payer's
/// signature slot of a replay.
async fn the_zero_setup_store_sells_on_solana() {
    use axum::body::Body;
    use axum::http::Request;
    use tower_x402_sandbox::SandboxSolanaWallet;
    use x402_wire::{PaymentRequired, SettleResponse, header};

    let store = super::support::zero_setup_store().await;
    let (accepts, doors) = accepts_and_doors(&store).await;
    assert_eq!(texts(&doors, "status"), ["live", "live", "mapped"]);
    assert_eq!(doors[1]["treasury"], x402_store::config::DEMO_SECOND_PAY_TO);
    let solana = &accepts[1];
    assert_eq!(solana["network"], Network::SOLANA.as_str());
    assert_eq!(solana["payTo"], x402_store::config::DEMO_SECOND_PAY_TO);
    assert!(solana["extra"]["feePayer"].as_str().is_some(), "{solana}");

    let first = store.get("/api/x402/store-rail-receipt").await;
    let required: PaymentRequired =
        header::decode(first.header("payment-required").unwrap().as_bytes()).unwrap();
    let wallet = SandboxSolanaWallet::random();
    let payment = wallet.pay(&required).unwrap();
    assert_eq!(payment.accepted.network, Network::SOLANA);
    let buy = async |payment: &x402_wire::PaymentPayload| {
        let signature = header::encode(payment).unwrap();
        store
            .send(
                Request::get("/api/x402/store-rail-receipt")
                    .header("payment-signature", signature)
                    .body(Body::empty())
                    .unwrap(),
            )
            .await
    };
    let paid = buy(&payment).await;
    assert_eq!(paid.status, StatusCode::OK, "{}", paid.text);
    let settlement: SettleResponse =
        header::decode(paid.header("payment-response").unwrap().as_bytes()).unwrap();
    assert!(settlement.success);
    assert_eq!(settlement.network, Network::SOLANA);
    assert_eq!(settlement.payer.as_deref(), Some(wallet.address().as_str()));

    // The same transfer with other bytes in the fee payer's slot: the same purchase.
    let mut transaction = tower_x402_solana::payload_transaction(&payment).unwrap();
    transaction.signatures[0] = [0x42; 64];
    let mut resent = payment.clone();
    resent.payload =
        serde_json::value::to_raw_value(&json!({"transaction": transaction.to_base64()})).unwrap();
    let again = buy(&resent).await;
    assert_eq!(again.status, StatusCode::OK, "{}", again.text);
    let repeated: SettleResponse =
        header::decode(again.header("payment-response").unwrap().as_bytes()).unwrap();
    assert_eq!(repeated.transaction, settlement.transaction);
}

super::support::on_both_backends!(
    the_zero_setup_store_sells_on_solana,
    without_a_second_pay_to_only_the_canonical_door_is_open,
    a_second_pay_to_opens_the_solana_door_on_its_own_address,
    the_fee_payer_comes_only_from_the_facilitator,
    a_third_pay_to_alone_does_not_open_algorand,
    algorand_listed_without_a_third_pay_to_stays_mapped,
    both_doors_open_when_configured_and_listed,
    a_failing_supported_keeps_the_third_door_mapped,
);
