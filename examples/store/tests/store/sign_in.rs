//! Sign-in-with-x at the store: a buyer who paid for a SKU signs in with the same wallet and
//! gets the same answer as a re-delivery (same Passport, same fulfillment URLs), with no new
//! order, no settlement and no purchase counted; every proof the store must refuse gets the
//! normal 402 with an `error`. Every sign-in request (and the challenge it signs) goes over a
//! real connection to the store's own server on a loopback port.

use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use serde_json::{Value, json};
use tower_x402_sandbox::SandboxWallet;
use tower_x402_sandbox::siwx::{ProofFields, SandboxSolanaWallet, encode, proof_fields};
use x402_store::storage::{NewOrder, Order, Store};
use x402_wire::Network;

use super::paywall_doors::SOLANA_TREASURY;
use super::support::{
    Answer, Backend, ExtraKinds, RECEIPT, Shop, TAX, assert_sign_in_refused, get_over_loopback,
    passport_of, run_on, sign_in_challenge, store_with,
};

/// The sign-in challenge of `slug`'s 402, over a real connection.
async fn extension(shop: &Shop, slug: &str) -> Value {
    sign_in_challenge(&get_over_loopback(&shop.app, &format!("/api/x402/{slug}"), &[]).await)
}

/// `slug` requested with the sign-in `proof`, over a real connection.
async fn sign_in(shop: &Shop, slug: &str, proof: &str) -> Answer {
    get_over_loopback(
        &shop.app,
        &format!("/api/x402/{slug}"),
        &[("sign-in-with-x", proof)],
    )
    .await
}

/// A refusal: the normal 402 with a fresh challenge, whose `error` starts with `code`.
fn refused(answer: &Answer, code: &str) {
    assert_sign_in_refused(answer, code);
}

/// Records that `payer` bought `slug` on `network` now, as the paywall (the entitlement) and the
/// handler (the order) record a settled purchase: for wallets the sandbox cannot settle.
async fn record_purchase(store: &Store, slug: &str, payer: &str, network: &str, passport: &str) {
    let resource = format!("http://127.0.0.1:4020/api/x402/{slug}");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let address = if payer.starts_with("0x") {
        payer.to_lowercase()
    } else {
        payer.to_owned()
    };
    store
        .entitlements()
        .record_purchase(&resource, &address, now)
        .await
        .unwrap();
    let order = Order {
        passport: passport.to_owned(),
        sku: slug.to_owned(),
        resource,
        payer: Some(payer.to_owned()),
        network: network.to_owned(),
        transaction: format!("0x{}", "ab".repeat(32)),
        amount: "1.00".parse().unwrap(),
        payment_key: format!("id:{passport}"),
        demo: false,
        issued: i64::try_from(now).unwrap(),
        referral: None,
    };
    store
        .record_order(&NewOrder {
            order,
            secret_hash: format!("unused-{passport}"),
        })
        .await
        .unwrap();
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
    refused(
        &sign_in(&strict, RECEIPT, &proof).await,
        "invalid_siwx_entitlement_lapsed",
    );
    // The store's default lifetime still lets the buyer in.
    let proof = buyer.sign_in(&extension(&shop, RECEIPT).await).unwrap();
    assert_eq!(sign_in(&shop, RECEIPT, &proof).await.status, StatusCode::OK);
}

/// Entitlements and used nonces are in the database: after a restart the buyer still signs in,
/// and a proof used before it stays used.
async fn a_restart_keeps_entitlements_and_used_proofs() {
    let shop = Shop::open(false).await;
    let buyer = SandboxWallet::random();
    let bought = shop.buy(&buyer, RECEIPT, None).await;
    let used = buyer.sign_in(&extension(&shop, RECEIPT).await).unwrap();
    let before = sign_in(&shop, RECEIPT, &used).await;
    assert_eq!(before.status, StatusCode::OK, "{}", before.text);

    let shop = shop.restart(false).await;
    let settlements = shop.facilitator.settlement_count();
    let proof = buyer.sign_in(&extension(&shop, RECEIPT).await).unwrap();
    let after = sign_in(&shop, RECEIPT, &proof).await;
    assert_eq!(after.status, StatusCode::OK, "{}", after.text);
    assert_eq!(passport_of(&after), passport_of(&bought));
    assert_eq!(after.json["fulfillment"], bought.json["fulfillment"]);
    assert_eq!(shop.facilitator.settlement_count(), settlements);
    refused(
        &sign_in(&shop, RECEIPT, &used).await,
        "invalid_siwx_nonce_used",
    );
}

/// A smart-contract wallet (EIP-1271) that bought: refused without a JSON-RPC endpoint, served
/// with one (the sandbox chain hosting the contract).
async fn a_smart_contract_wallet_signs_in_through_the_rpc_endpoint() {
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
    record_purchase(
        &shop.state.store,
        RECEIPT,
        &wallet,
        "eip155:8453",
        "pp_CONTRACTWALLET0000000A",
    )
    .await;

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
}

/// With the Solana door open, the challenge offers the Solana chain, and a Solana wallet that
/// bought signs in with SIWS (ed25519); on another SKU, or with a tampered signature, it is
/// refused.
async fn a_solana_wallet_signs_in_with_siws() {
    let store = store_with(
        |config| config.second_pay_to = Some(SOLANA_TREASURY.into()),
        Arc::new(ExtraKinds::new(vec![(Network::SOLANA, None)])),
    )
    .await;
    let get = |slug: &str, proof: Option<&str>| {
        let uri = format!("/api/x402/{slug}");
        let app = store.app.clone();
        let proof = proof.map(str::to_owned);
        async move {
            let headers: Vec<(&str, &str)> = proof
                .as_deref()
                .map(|proof| ("sign-in-with-x", proof))
                .into_iter()
                .collect();
            get_over_loopback(&app, &uri, &headers).await
        }
    };
    let extension = sign_in_challenge(&get(RECEIPT, None).await);
    let chains = extension["supportedChains"].as_array().unwrap();
    assert!(
        chains.contains(&json!({"chainId": Network::SOLANA.as_str(), "type": "ed25519"})),
        "{extension}"
    );

    let buyer = SandboxSolanaWallet::random();
    record_purchase(
        &store.state.store,
        RECEIPT,
        &buyer.address(),
        Network::SOLANA.as_str(),
        "pp_SOLANAWALLET000000000A",
    )
    .await;
    let answer = get(RECEIPT, Some(&buyer.sign_in(&extension).unwrap())).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.text);
    assert_eq!(passport_of(&answer), "pp_SOLANAWALLET000000000A");

    let other_sku = sign_in_challenge(&get(TAX, None).await);
    refused(
        &get(TAX, Some(&buyer.sign_in(&other_sku).unwrap())).await,
        "invalid_siwx_not_entitled",
    );

    // The buyer's proof carrying another wallet's signature over its own message.
    let extension = sign_in_challenge(&get(RECEIPT, None).await);
    let mut fields = decode(&buyer.sign_in(&extension).unwrap());
    let forged = decode(&SandboxSolanaWallet::random().sign_in(&extension).unwrap());
    fields.insert("signature".into(), forged["signature"].clone());
    refused(
        &get(RECEIPT, Some(&encode(&fields))).await,
        "invalid_siwx_signature",
    );
}

/// The fields of a `SIGN-IN-WITH-X` header value.
fn decode(proof: &str) -> ProofFields {
    use base64::Engine as _;
    let json = base64::engine::general_purpose::STANDARD
        .decode(proof)
        .unwrap();
    serde_json::from_slice(&json).unwrap()
}

super::support::on_both_backends!(
    a_buyer_signs_in_and_gets_the_same_purchase_without_paying,
    proofs_the_store_refuses,
    an_entitlement_past_its_lifetime_is_refused,
    a_restart_keeps_entitlements_and_used_proofs,
    a_smart_contract_wallet_signs_in_through_the_rpc_endpoint,
    a_solana_wallet_signs_in_with_siws,
    purchases_made_before_the_upgrade_sign_in,
);

/// Purchases recorded before sign-in-with-x (orders only) entitle their payers once the store
/// is upgraded: a migration fills the entitlements from the orders, an EVM payer
/// lower-cased and a Solana payer kept as is.
async fn purchases_made_before_the_upgrade_sign_in() {
    let shop = Shop::open(false).await;
    let buyer = SandboxWallet::random();
    let bought = shop.buy(&buyer, RECEIPT, None).await;
    let solana = SandboxSolanaWallet::random();
    record_purchase(
        &shop.state.store,
        TAX,
        &solana.address(),
        Network::SOLANA.as_str(),
        "pp_SOLANABEFOREUPGRADE00A",
    )
    .await;

    // The database as it was before sign-in-with-x: no entitlements, and the migration
    // that fills them not yet run.
    if shop.database.url.starts_with("postgres") {
        let pool = sqlx::PgPool::connect(&shop.database.url).await.unwrap();
        for statement in [
            "DELETE FROM x402_entitlements",
            "DELETE FROM _sqlx_migrations WHERE version = 3",
        ] {
            sqlx::query(statement).execute(&pool).await.unwrap();
        }
        pool.close().await;
    } else {
        let pool = sqlx::SqlitePool::connect(&shop.database.url).await.unwrap();
        for statement in [
            "DROP TABLE entitlements",
            "DROP TABLE siwx_nonces",
            "DELETE FROM _sqlx_migrations WHERE version = 4",
        ] {
            sqlx::query(statement).execute(&pool).await.unwrap();
        }
        pool.close().await;
    }

    let shop = shop.restart(false).await;
    let proof = buyer.sign_in(&extension(&shop, RECEIPT).await).unwrap();
    let answer = sign_in(&shop, RECEIPT, &proof).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.text);
    assert_eq!(passport_of(&answer), passport_of(&bought));
    let entitlements = shop.state.store.entitlements();
    let tax = format!("http://127.0.0.1:4020/api/x402/{TAX}");
    assert!(
        entitlements
            .last_purchase(&tax, &solana.address())
            .await
            .unwrap()
            .is_some()
    );
    assert_eq!(
        entitlements
            .last_purchase(&tax, &solana.address().to_lowercase())
            .await
            .unwrap(),
        None,
        "base58 is case-sensitive"
    );
}

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

/// The store's entitlement stores meet the `EntitlementStore` contract on both backends, each
/// twice on one database (two instances on PostgreSQL; on SQLite, a store and a sibling on the
/// same file, as the owner process's restarts see it).
#[tokio::test]
async fn the_entitlement_stores_meet_the_contract() {
    run_on(Backend::Postgres, async {
        let shop = Shop::open(false).await;
        tower_x402_siwx::check_conformance(shop.state.store.entitlements()).await;
        let sibling = shop.sibling(|_| {}).await;
        tower_x402_siwx::check_conformance(sibling.state.store.entitlements()).await;
    })
    .await;
    run_on(Backend::Sqlite, async {
        let shop = Shop::open(false).await;
        tower_x402_siwx::check_conformance(shop.state.store.entitlements()).await;
        let sibling = shop.sibling(|_| {}).await;
        tower_x402_siwx::check_conformance(sibling.state.store.entitlements()).await;
    })
    .await;
}
