//! Sign-in-with-x at the store: a buyer who paid for a SKU signs in with the same wallet and
//! gets the same answer as a re-delivery (same Passport, same fulfillment URLs), with no new
//! order, no settlement and no purchase counted; every proof the store must refuse gets the
//! normal 402 with an `error`.

use std::time::Duration;

use axum::http::StatusCode;
use serde_json::{Value, json};
use tower_x402::proto::{Network, PAYMENT_REQUIRED, PaymentRequired, header};
use tower_x402_sandbox::SandboxWallet;
use tower_x402_sandbox::siwx::{encode, proof_fields};
use x402_store::storage::{NewOrder, Order};

use super::support::{Answer, Backend, RECEIPT, Shop, TAX, passport_of, run_on};

/// The sign-in extension of `slug`'s 402.
async fn extension(shop: &Shop, slug: &str) -> Value {
    let answer = shop.get(&format!("/api/x402/{slug}"), &[]).await;
    assert_eq!(
        answer.status,
        StatusCode::PAYMENT_REQUIRED,
        "{}",
        answer.text
    );
    let required: PaymentRequired =
        header::decode(answer.headers[PAYMENT_REQUIRED].as_bytes()).unwrap();
    let extension = required.extensions.unwrap()["sign-in-with-x"].clone();
    assert_eq!(answer.json["extensions"]["sign-in-with-x"], extension);
    extension
}

async fn sign_in(shop: &Shop, slug: &str, proof: &str) -> Answer {
    shop.get(&format!("/api/x402/{slug}"), &[("sign-in-with-x", proof)])
        .await
}

/// A refusal: the normal 402 with a fresh challenge, whose `error` starts with `code`.
fn refused(answer: &Answer, code: &str) {
    assert_eq!(
        answer.status,
        StatusCode::PAYMENT_REQUIRED,
        "{}",
        answer.text
    );
    let error = answer.json["error"].as_str().unwrap();
    assert!(error.starts_with(code), "{error}");
    assert!(answer.json["extensions"]["sign-in-with-x"]["info"]["nonce"].is_string());
    assert!(answer.json.get("passport").is_none());
}

async fn a_buyer_signs_in_and_gets_the_same_purchase_without_paying() {
    let shop = Shop::open(false).await;
    let buyer = SandboxWallet::random();
    let bought = shop.buy(&buyer, RECEIPT, None).await;
    let settlements = shop.facilitator.settlement_count();
    let orders = shop.state.store.row_counts().await.unwrap()["orders"];

    let extension = extension(&shop, RECEIPT).await;
    assert_eq!(extension["info"]["domain"], "127.0.0.1:4020");
    assert_eq!(
        extension["info"]["uri"],
        format!("http://127.0.0.1:4020/api/x402/{RECEIPT}")
    );
    assert_eq!(
        extension["supportedChains"],
        json!([{"chainId": "eip155:8453", "type": "eip191"}])
    );
    shop.state.standing.flush().await.unwrap();
    let standing = serde_json::to_value(shop.state.standing.snapshot().await.unwrap()).unwrap();

    let proof = buyer.sign_in(&extension).unwrap();
    let again = sign_in(&shop, RECEIPT, &proof).await;
    assert_eq!(again.status, StatusCode::OK, "{}", again.text);
    assert_eq!(passport_of(&again), passport_of(&bought));
    assert_eq!(
        again.json["fulfillment"], bought.json["fulfillment"],
        "the same key"
    );
    assert_eq!(again.json["settlement"], bought.json["settlement"]);
    assert_eq!(again.json["replayed"], true);
    assert!(
        again.headers.get("payment-response").is_none(),
        "nothing paid"
    );
    assert_eq!(
        shop.facilitator.settlement_count(),
        settlements,
        "no second settlement"
    );
    assert_eq!(
        shop.state.store.row_counts().await.unwrap()["orders"],
        orders,
        "no second order"
    );
    shop.state.standing.flush().await.unwrap();
    assert_eq!(
        serde_json::to_value(shop.state.standing.snapshot().await.unwrap()).unwrap(),
        standing,
        "the standing counts no new purchase"
    );

    // The same proof twice: the second is refused.
    refused(
        &sign_in(&shop, RECEIPT, &proof).await,
        "invalid_siwx_nonce_used",
    );
}

async fn proofs_the_store_refuses() {
    let shop = Shop::open(false).await;
    let buyer = SandboxWallet::random();
    shop.buy(&buyer, RECEIPT, None).await;

    // Another wallet.
    let stranger = SandboxWallet::random()
        .sign_in(&extension(&shop, RECEIPT).await)
        .unwrap();
    refused(
        &sign_in(&shop, RECEIPT, &stranger).await,
        "invalid_siwx_not_entitled",
    );

    // A valid signature over a nonce this store did not issue.
    let mut fields = proof_fields(
        &extension(&shop, RECEIPT).await,
        "eip155:",
        &buyer.address(),
    )
    .unwrap();
    fields.insert(
        "nonce".into(),
        "00112233445566778899aabbccddeeff00112233".into(),
    );
    buyer.sign_proof(&mut fields).unwrap();
    refused(
        &sign_in(&shop, RECEIPT, &encode(&fields)).await,
        "invalid_siwx_nonce",
    );

    // Expired (issued long ago) and future-dated.
    for (issued, code) in [
        ("2020-01-01T00:00:00.000Z", "invalid_siwx_issued_at_too_old"),
        (
            "2099-01-01T00:00:00.000Z",
            "invalid_siwx_issued_at_in_future",
        ),
    ] {
        let mut fields = proof_fields(
            &extension(&shop, RECEIPT).await,
            "eip155:",
            &buyer.address(),
        )
        .unwrap();
        fields.insert("issuedAt".into(), issued.into());
        buyer.sign_proof(&mut fields).unwrap();
        refused(&sign_in(&shop, RECEIPT, &encode(&fields)).await, code);
    }

    // SKU A's proof on SKU B, as sent and re-signed for B's URI.
    let proof = buyer.sign_in(&extension(&shop, RECEIPT).await).unwrap();
    refused(
        &sign_in(&shop, TAX, &proof).await,
        "invalid_siwx_uri_mismatch",
    );
    let mut fields = proof_fields(
        &extension(&shop, RECEIPT).await,
        "eip155:",
        &buyer.address(),
    )
    .unwrap();
    let uri = format!("http://127.0.0.1:4020/api/x402/{TAX}");
    fields.insert("uri".into(), uri.clone().into());
    fields.insert("resources".into(), json!([uri]));
    buyer.sign_proof(&mut fields).unwrap();
    refused(
        &sign_in(&shop, TAX, &encode(&fields)).await,
        "invalid_siwx_nonce",
    );
    // B's own challenge: the buyer of A is not entitled to B.
    let proof_b = buyer.sign_in(&extension(&shop, TAX).await).unwrap();
    refused(
        &sign_in(&shop, TAX, &proof_b).await,
        "invalid_siwx_not_entitled",
    );

    // None of this consumed the buyer's own proof for A.
    assert_eq!(sign_in(&shop, RECEIPT, &proof).await.status, StatusCode::OK);
}

async fn an_entitlement_past_its_lifetime_is_refused() {
    let shop = Shop::open(false).await;
    let buyer = SandboxWallet::random();
    shop.buy(&buyer, RECEIPT, None).await;
    // One instance keeps entitlements a second; the purchase is older than that.
    let strict = shop
        .sibling(|config| config.siwx_entitlement = Some(Duration::from_secs(1)))
        .await;
    tokio::time::sleep(Duration::from_millis(2_100)).await;
    let proof = buyer.sign_in(&extension(&strict, RECEIPT).await).unwrap();
    let answer = sign_in(&strict, RECEIPT, &proof).await;
    if strict.state.store.entitlements_shared() {
        refused(&answer, "invalid_siwx_entitlement_lapsed");
    } else {
        // On SQLite each instance keeps its own (memory) entitlements.
        refused(&answer, "invalid_siwx_not_entitled");
    }
    // The store's default lifetime still lets the buyer in.
    let proof = buyer.sign_in(&extension(&shop, RECEIPT).await).unwrap();
    assert_eq!(sign_in(&shop, RECEIPT, &proof).await.status, StatusCode::OK);
}

super::support::on_both_backends!(
    a_buyer_signs_in_and_gets_the_same_purchase_without_paying,
    proofs_the_store_refuses,
    an_entitlement_past_its_lifetime_is_refused,
);

/// Bought on one instance, signed in on another sharing the PostgreSQL database; a proof used
/// on one is refused on the other.
#[tokio::test]
async fn bought_on_one_instance_signed_in_on_another() {
    run_on(Backend::Postgres, async {
        let first = Shop::open(false).await;
        let second = first.sibling(|_| {}).await;
        let buyer = SandboxWallet::random();
        let bought = first.buy(&buyer, RECEIPT, None).await;
        let settlements = first.facilitator.settlement_count();

        let proof = buyer.sign_in(&extension(&first, RECEIPT).await).unwrap();
        let answer = sign_in(&second, RECEIPT, &proof).await;
        assert_eq!(answer.status, StatusCode::OK, "{}", answer.text);
        assert_eq!(passport_of(&answer), passport_of(&bought));
        assert_eq!(answer.json["fulfillment"], bought.json["fulfillment"]);
        assert_eq!(first.facilitator.settlement_count(), settlements);
        refused(
            &sign_in(&first, RECEIPT, &proof).await,
            "invalid_siwx_nonce_used",
        );
    })
    .await;
}

/// A smart-contract wallet (EIP-1271) that bought: refused without a JSON-RPC endpoint, served
/// with one (the sandbox chain hosting the contract).
#[tokio::test]
async fn a_smart_contract_wallet_signs_in_through_the_rpc_endpoint() {
    run_on(Backend::Postgres, async {
        let shop = Shop::open(false).await;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let rpc = format!("http://{}", listener.local_addr().unwrap());
        let chain = shop.facilitator.rpc_router(Network::BASE);
        tokio::spawn(async move { axum::serve(listener, chain).await });
        let owner = SandboxWallet::random();
        let wallet = shop
            .facilitator
            .deploy_contract_wallet(&owner.address())
            .unwrap();

        // The contract wallet's purchase, as the paywall and the handler record a settled one.
        let resource = format!("http://127.0.0.1:4020/api/x402/{RECEIPT}");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        shop.state
            .store
            .entitlements()
            .record_purchase(&resource, &wallet.to_lowercase(), now)
            .await
            .unwrap();
        let order = Order {
            passport: "pp_CONTRACTWALLET0000000A".to_owned(),
            sku: RECEIPT.to_owned(),
            resource,
            payer: Some(wallet.clone()),
            network: "eip155:8453".to_owned(),
            transaction: format!("0x{}", "ab".repeat(32)),
            amount: "1.00".parse().unwrap(),
            payment_key: "id:contract-wallet-purchase".to_owned(),
            demo: false,
            issued: i64::try_from(now).unwrap(),
            referral: None,
        };
        shop.state
            .store
            .record_order(&NewOrder {
                order,
                secret_hash: "unused".to_owned(),
            })
            .await
            .unwrap();

        let sign = |extension: &Value| {
            let mut fields = proof_fields(extension, "eip155:", &wallet).unwrap();
            owner.sign_proof(&mut fields).unwrap();
            encode(&fields)
        };
        let proof = sign(&extension(&shop, RECEIPT).await);
        refused(
            &sign_in(&shop, RECEIPT, &proof).await,
            "invalid_siwx_signature",
        );

        let with_rpc = shop.sibling(|config| config.rpc_url = Some(rpc)).await;
        let proof = sign(&extension(&with_rpc, RECEIPT).await);
        let answer = sign_in(&with_rpc, RECEIPT, &proof).await;
        assert_eq!(answer.status, StatusCode::OK, "{}", answer.text);
        assert_eq!(passport_of(&answer), "pp_CONTRACTWALLET0000000A");
    })
    .await;
}

/// The store's entitlement stores meet the `EntitlementStore` contract: PostgreSQL (twice on
/// one database, as two instances) and the memory store SQLite uses.
#[tokio::test]
async fn the_entitlement_stores_meet_the_contract() {
    run_on(Backend::Postgres, async {
        let shop = Shop::open(false).await;
        tower_x402::siwx::check_conformance(shop.state.store.entitlements()).await;
        let sibling = shop.sibling(|_| {}).await;
        tower_x402::siwx::check_conformance(sibling.state.store.entitlements()).await;
    })
    .await;
    run_on(Backend::Sqlite, async {
        let shop = Shop::open(false).await;
        tower_x402::siwx::check_conformance(shop.state.store.entitlements()).await;
    })
    .await;
}
