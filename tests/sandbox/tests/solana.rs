//! Solana `exact` in the sandbox over HTTP on loopback: a valid transfer verified and settled
//! once over the SPL-token ledger, each tampering refused with its reason, and the Solana
//! JSON-RPC a buyer's client and a reconciler read.

use ed25519_dalek::Signer as _;
use serde_json::{Value, json};
use tower_x402_sandbox::{SandboxFacilitator, SandboxSolanaWallet};
use tower_x402_solana::{Pubkey, TOKEN_PROGRAM, Transaction};
use x402_wire::{
    AtomicAmount, FacilitatorRequest, PaymentRequired, PaymentRequirements, ResourceInfo,
    UsdcDeployment, X402Version,
};

const PAY_TO: &str = "2wKupLR9q6wXYppw8Gr2NvWxKBUqm4PPJKkQfoxHDBg4";

async fn serve(facilitator: &SandboxFacilitator) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(facilitator.clone().serve(listener));
    url
}

fn required(accept: &PaymentRequirements) -> PaymentRequired {
    PaymentRequired {
        x402_version: X402Version::V2,
        error: None,
        resource: ResourceInfo::new("https://shop.example/report"),
        accepts: vec![accept.clone()],
        extensions: None,
    }
}

fn request(accept: &PaymentRequirements, transaction: &Transaction) -> FacilitatorRequest {
    let payment = SandboxSolanaWallet::payload(&required(accept), accept, transaction);
    FacilitatorRequest::new(payment, accept.clone())
}

async fn post(url: &str, path: &str, request: &FacilitatorRequest) -> Value {
    reqwest::Client::new()
        .post(format!("{url}{path}"))
        .json(request)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

async fn rpc(url: &str, method: &str, params: Value) -> Value {
    let answer: Value = reqwest::Client::new()
        .post(format!("{url}/rpc/solana"))
        .json(&json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(answer["id"], 7);
    answer
}

/// The transaction re-signed by `key` after `change` edited its message.
fn tampered(
    transaction: &Transaction,
    key: &ed25519_dalek::SigningKey,
    change: impl FnOnce(&mut tower_x402_solana::Message),
) -> Transaction {
    let mut message = transaction.message.clone();
    change(&mut message);
    let message_bytes = message.encode();
    let mut changed = Transaction {
        signatures: vec![[0; 64]; transaction.signatures.len()],
        message,
        message_bytes,
    };
    changed.sign(key).unwrap();
    changed
}

fn key_index(message: &tower_x402_solana::Message, key: &Pubkey) -> usize {
    message.account_keys.iter().position(|k| k == key).unwrap()
}

#[tokio::test]
async fn supported_lists_solana_with_the_fee_payer() {
    let facilitator = SandboxFacilitator::new();
    let url = serve(&facilitator).await;
    let supported: Value = reqwest::get(format!("{url}/supported"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    for network in [
        "solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp",
        "solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1",
    ] {
        let kind = supported["kinds"]
            .as_array()
            .unwrap()
            .iter()
            .find(|kind| kind["network"] == network && kind["scheme"] == "exact")
            .unwrap_or_else(|| panic!("{network} is not listed: {supported}"));
        assert_eq!(kind["extra"]["feePayer"], facilitator.solana_fee_payer());
    }
    assert_eq!(
        supported["signers"]["solana:*"][0],
        facilitator.solana_fee_payer()
    );
}

#[tokio::test]
async fn a_valid_transfer_settles_once_and_moves_the_tokens() {
    let facilitator = SandboxFacilitator::new();
    let url = serve(&facilitator).await;
    let usdc = &UsdcDeployment::SOLANA_DEVNET;
    let accept = facilitator.solana_requirement(usdc, AtomicAmount(250_000), PAY_TO);
    let wallet = SandboxSolanaWallet::random();
    let payment = wallet.pay(&required(&accept)).unwrap();
    let request = FacilitatorRequest::new(payment, accept.clone());

    let verified = post(&url, "/verify", &request).await;
    assert_eq!(verified["isValid"], true, "{verified}");
    assert_eq!(verified["payer"], wallet.address());

    let settled = post(&url, "/settle", &request).await;
    assert_eq!(settled["success"], true, "{settled}");
    assert_eq!(settled["payer"], wallet.address());
    assert_eq!(settled["network"], usdc.network.as_str());
    let id = settled["transaction"].as_str().unwrap();
    // The transaction id is the fee payer's real signature over the message.
    let landed = &facilitator.solana_settlements()[0];
    assert_eq!(landed.transaction, id);
    let signed = Transaction::from_base64(&landed.wire).unwrap();
    assert!(signed.signature_verifies(0) && signed.signature_verifies(1));
    assert_eq!(
        facilitator.solana_balance_of(&wallet.address(), usdc.asset),
        AtomicAmount(1_000_000_000 - 250_000)
    );
    assert_eq!(
        facilitator.solana_balance_of(PAY_TO, usdc.asset),
        AtomicAmount(1_000_000_000 + 250_000)
    );

    // A second application is refused and moves nothing.
    let again = post(&url, "/settle", &request).await;
    assert_eq!(again["success"], false);
    assert_eq!(again["errorReason"], "duplicate_settlement");
    let reverify = post(&url, "/verify", &request).await;
    assert_eq!(reverify["invalidReason"], "transaction_simulation_failed");
    assert_eq!(facilitator.solana_settlements().len(), 1);
    assert_eq!(
        facilitator.solana_balance_of(&wallet.address(), usdc.asset),
        AtomicAmount(1_000_000_000 - 250_000)
    );
}

#[tokio::test]
async fn each_tampering_is_refused_with_its_reason() {
    let facilitator = SandboxFacilitator::new();
    let url = serve(&facilitator).await;
    let usdc = &UsdcDeployment::SOLANA;
    let accept = facilitator.solana_requirement(usdc, AtomicAmount(10_000), PAY_TO);
    let wallet = SandboxSolanaWallet::random();
    let key = wallet.signing_key();
    let honest = wallet.transaction_for(&accept, [3; 32]).unwrap();
    let mint: Pubkey = usdc.asset.parse().unwrap();
    let other: Pubkey = "9WzDXwBbmkg8ZTbNMqUxvQRAyrZzDsGYdLVL9zYtAWWM"
        .parse()
        .unwrap();

    let mut cases: Vec<(&str, Transaction, &str)> = vec![
        (
            "amount",
            tampered(&honest, key, |m| {
                m.instructions[2].data[1..9].copy_from_slice(&9_999u64.to_le_bytes())
            }),
            "invalid_exact_svm_payload_amount_insufficient",
        ),
        (
            "mint",
            tampered(&honest, key, |m| {
                let at = key_index(m, &mint);
                m.account_keys[at] = other;
            }),
            "invalid_exact_svm_payload_mint_mismatch",
        ),
        (
            "decimals",
            tampered(&honest, key, |m| m.instructions[2].data[9] = 9),
            "transaction_simulation_failed",
        ),
        (
            "destination",
            tampered(&honest, key, |m| {
                let destination = Pubkey::associated_token_address(&other, &mint, &TOKEN_PROGRAM);
                let at = usize::from(m.instructions[2].accounts[2]);
                m.account_keys[at] = destination;
            }),
            "invalid_exact_svm_payload_recipient_mismatch",
        ),
        (
            "compute price",
            tampered(&honest, key, |m| {
                m.instructions[1].data[1..9].copy_from_slice(&5_000_001u64.to_le_bytes())
            }),
            "invalid_exact_svm_payload_transaction_instructions_compute_price_instruction_too_high",
        ),
    ];
    let mut missing = honest.clone();
    missing.signatures[1] = [0; 64];
    cases.push((
        "missing signature",
        missing,
        "transaction_simulation_failed",
    ));
    let mut wrong = honest.clone();
    let stranger = SandboxSolanaWallet::random();
    wrong.signatures[1] = stranger
        .signing_key()
        .sign(&honest.message_bytes)
        .to_bytes();
    cases.push(("wrong signature", wrong, "transaction_simulation_failed"));
    let mut other_fee_payer = accept.clone();
    other_fee_payer.extra.as_mut().unwrap()["feePayer"] = json!(other.to_string());

    for (what, transaction, reason) in cases {
        let request = request(&accept, &transaction);
        let verified = post(&url, "/verify", &request).await;
        assert_eq!(verified["isValid"], false, "{what}: {verified}");
        assert_eq!(verified["invalidReason"], reason, "{what}: {verified}");
        assert!(
            verified["invalidMessage"]
                .as_str()
                .is_some_and(|m| !m.is_empty())
        );
        let settled = post(&url, "/settle", &request).await;
        assert_eq!(settled["success"], false, "{what}: {settled}");
        assert_eq!(settled["errorReason"], reason, "{what}");
    }
    let request = request(&other_fee_payer, &honest);
    let verified = post(&url, "/verify", &request).await;
    assert_eq!(
        verified["invalidReason"],
        "fee_payer_not_managed_by_facilitator"
    );
    assert!(facilitator.solana_settlements().is_empty());
    assert_eq!(
        facilitator.solana_balance_of(&wallet.address(), usdc.asset),
        AtomicAmount(1_000_000_000)
    );

    // The honest transaction still settles: nothing above touched the ledger.
    let settled = post(&url, "/settle", &request_for(&accept, &honest)).await;
    assert_eq!(settled["success"], true, "{settled}");
}

fn request_for(accept: &PaymentRequirements, transaction: &Transaction) -> FacilitatorRequest {
    request(accept, transaction)
}

#[tokio::test]
async fn a_payload_that_is_no_transaction_is_refused() {
    let facilitator = SandboxFacilitator::new();
    let url = serve(&facilitator).await;
    let accept = facilitator.solana_requirement(&UsdcDeployment::SOLANA, AtomicAmount(1), PAY_TO);
    let wallet = SandboxSolanaWallet::random();
    let mut payment = wallet.pay(&required(&accept)).unwrap();
    payment.payload = serde_json::value::to_raw_value(&json!({"transaction": "AQID"})).unwrap();
    let verified = post(&url, "/verify", &FacilitatorRequest::new(payment, accept)).await;
    assert_eq!(
        verified["invalidReason"],
        "invalid_exact_svm_payload_transaction_could_not_be_decoded"
    );
}

#[tokio::test]
async fn the_rpc_serves_a_buyer_and_a_reconciler() {
    let facilitator = SandboxFacilitator::new();
    let url = serve(&facilitator).await;
    let usdc = &UsdcDeployment::SOLANA_DEVNET;

    let latest = rpc(
        &url,
        "getLatestBlockhash",
        json!([{"commitment": "finalized"}]),
    )
    .await;
    let blockhash = latest["result"]["value"]["blockhash"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(latest["result"]["context"]["slot"].as_u64().is_some());
    let valid = rpc(&url, "isBlockhashValid", json!([blockhash])).await;
    assert_eq!(valid["result"]["value"], true);

    let mint = rpc(
        &url,
        "getAccountInfo",
        json!([usdc.asset, {"encoding": "base64"}]),
    )
    .await;
    let account = &mint["result"]["value"];
    assert_eq!(account["owner"], TOKEN_PROGRAM.to_string());
    let data = base64_decode(account["data"][0].as_str().unwrap());
    assert_eq!(data.len(), 82);
    assert_eq!(data[44], 6, "decimals");

    // A purchase under the RPC's blockhash, then found by what a reconciler asks.
    let accept = facilitator.solana_requirement(usdc, AtomicAmount(5_000), PAY_TO);
    let wallet = SandboxSolanaWallet::random();
    let mut hash = [0u8; 32];
    bs58::decode(&blockhash).onto(&mut hash).unwrap();
    let transaction = wallet.transaction_for(&accept, hash).unwrap();
    let settled = post(&url, "/settle", &request(&accept, &transaction)).await;
    let id = settled["transaction"].as_str().unwrap().to_owned();

    let statuses = rpc(&url, "getSignatureStatuses", json!([[id, "1111"]])).await;
    assert_eq!(
        statuses["result"]["value"][0]["confirmationStatus"],
        "finalized"
    );
    assert_eq!(statuses["result"]["value"][0]["err"], Value::Null);
    assert_eq!(statuses["result"]["value"][1], Value::Null);
    let listed = rpc(
        &url,
        "getSignaturesForAddress",
        json!([wallet.address(), {"limit": 10}]),
    )
    .await;
    assert_eq!(listed["result"][0]["signature"], id.as_str());
    let found = rpc(&url, "getTransaction", json!([id, {"encoding": "base64"}])).await;
    let landed =
        Transaction::from_base64(found["result"]["transaction"][0].as_str().unwrap()).unwrap();
    assert_eq!(landed.message_bytes, transaction.message_bytes);

    let source = Pubkey::associated_token_address(
        &wallet.address().parse().unwrap(),
        &usdc.asset.parse().unwrap(),
        &TOKEN_PROGRAM,
    );
    let token = rpc(
        &url,
        "getAccountInfo",
        json!([source.to_string(), {"encoding": "base64"}]),
    )
    .await;
    let data = base64_decode(token["result"]["value"]["data"][0].as_str().unwrap());
    assert_eq!(data.len(), 165);
    assert_eq!(
        u64::from_le_bytes(data[64..72].try_into().unwrap()),
        1_000_000_000 - 5_000
    );

    let unknown = rpc(&url, "sendTransaction", json!([])).await;
    assert_eq!(unknown["error"]["code"], -32601);
    let bad = rpc(&url, "getAccountInfo", json!(["0xnot"])).await;
    assert_eq!(bad["error"]["code"], -32602);
}

#[tokio::test]
async fn an_expired_blockhash_is_refused() {
    let now = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(1_800_000_000));
    let clock = std::sync::Arc::clone(&now);
    let facilitator = SandboxFacilitator::new()
        .with_clock(move || clock.load(std::sync::atomic::Ordering::SeqCst));
    let url = serve(&facilitator).await;
    let latest = rpc(&url, "getLatestBlockhash", json!([])).await;
    let mut hash = [0u8; 32];
    bs58::decode(latest["result"]["value"]["blockhash"].as_str().unwrap())
        .onto(&mut hash)
        .unwrap();
    let accept = facilitator.solana_requirement(&UsdcDeployment::SOLANA, AtomicAmount(1), PAY_TO);
    let transaction = SandboxSolanaWallet::random()
        .transaction_for(&accept, hash)
        .unwrap();
    now.fetch_add(91, std::sync::atomic::Ordering::SeqCst);
    let verified = post(&url, "/verify", &request(&accept, &transaction)).await;
    assert_eq!(
        verified["invalidReason"], "transaction_simulation_failed",
        "{verified}"
    );
    let valid = rpc(
        &url,
        "isBlockhashValid",
        json!([bs58::encode(hash).into_string()]),
    )
    .await;
    assert_eq!(valid["result"]["value"], false);
}

fn base64_decode(text: &str) -> Vec<u8> {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .unwrap()
}
