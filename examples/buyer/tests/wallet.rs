//! The buyer's wallet against the sandbox, which hashes and signs with alloy: the same key gives
//! the same address, the sandbox facilitator verifies and settles what the wallet signs, the
//! signatures are the very bytes the sandbox wallet makes for the same message (secp256k1
//! signing is deterministic, RFC 6979), and both refuse the same accepts with the same words.

use serde_json::{Value, json};
use tower_x402::Offer;
use tower_x402_sandbox::{SandboxFacilitator, SandboxWallet};
use x402_buyer::Wallet;
use x402_wire::{
    ExactEvmPayload, FacilitatorRequest, Network, PaymentPayload, PaymentRequired, ResourceInfo,
    UptoEvmPayload, UsdcDeployment,
};

const PAY_TO: &str = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";

/// Private keys: the well-known test key and a spread of others.
fn keys() -> Vec<String> {
    let mut keys =
        vec!["4c0883a69102937d6231471b5dbb6204fe5129617082792ae468d01a3f362318".to_owned()];
    let mut word = 0x9e37_79b9_7f4a_7c15_u64;
    for _ in 0..24 {
        word = word.wrapping_mul(0x5851_f42d_4c95_7f2d).wrapping_add(1);
        keys.push(format!(
            "{word:016x}{:016x}{:016x}{:016x}",
            word.rotate_left(17),
            word ^ 0xdead_beef,
            word.rotate_right(29)
        ));
    }
    keys
}

fn wallets(key: &str) -> (Wallet, SandboxWallet) {
    (
        Wallet::from_private_key_hex(key).unwrap(),
        SandboxWallet::from_private_key_hex(key).unwrap(),
    )
}

fn exact_offer() -> Offer {
    Offer::builder(ResourceInfo::new("https://shop.example/report"))
        .usdc(
            &UsdcDeployment::BASE_SEPOLIA,
            "0.25".parse().unwrap(),
            PAY_TO,
        )
        .build()
        .unwrap()
}

async fn upto_offer(facilitator: &SandboxFacilitator) -> Offer {
    Offer::builder(ResourceInfo::new("https://shop.example/rows"))
        .usdc_upto(&UsdcDeployment::BASE, "0.50".parse().unwrap(), PAY_TO)
        .build_for(facilitator)
        .await
        .unwrap()
}

#[test]
fn the_same_key_gives_the_same_address() {
    for key in keys() {
        let (wallet, sandbox) = wallets(&key);
        assert_eq!(wallet.address(), sandbox.address(), "key {key}");
    }
}

#[test]
fn exact_payments_verify_settle_and_match_the_sandbox_signature() {
    let offer = exact_offer();
    let facilitator = SandboxFacilitator::new();
    for key in keys() {
        let (wallet, sandbox) = wallets(&key);
        let payment = wallet.pay(offer.payment_required()).unwrap();
        let request = FacilitatorRequest::new(payment.clone(), offer.accepts()[0].clone());
        let verified = facilitator.verify_payment(&request);
        assert!(verified.is_valid, "{verified:?}");
        assert_eq!(verified.payer.as_deref(), Some(wallet.address().as_str()));
        let settled = facilitator.settle_payment(&request);
        assert!(settled.success, "{settled:?}");

        let exact: ExactEvmPayload = serde_json::from_str(payment.payload.get()).unwrap();
        let again = sandbox
            .sign_authorization(&payment.accepted, &exact.authorization)
            .unwrap();
        assert_eq!(exact.signature, again.signature, "key {key}");
    }
    assert_eq!(facilitator.settlement_count(), keys().len());
}

#[test]
fn an_exact_payment_is_the_sandbox_wallets_shape() {
    let offer = exact_offer();
    let (wallet, sandbox) = wallets(&keys()[0]);
    let now = 1_900_000_000;
    let ours = wallet.pay_at(offer.payment_required(), now).unwrap();
    let theirs = sandbox.pay_at(offer.payment_required(), now).unwrap();
    let strip_nonce = |payment: &PaymentPayload| {
        let mut value = serde_json::to_value(payment).unwrap();
        let authorization = &mut value["payload"]["authorization"];
        let nonce = authorization["nonce"].take();
        assert!(nonce.as_str().unwrap().starts_with("0x"));
        assert_eq!(nonce.as_str().unwrap().len(), 66);
        value["payload"]["signature"].take();
        value
    };
    assert_eq!(strip_nonce(&ours), strip_nonce(&theirs));
    assert_eq!(
        serde_json::to_value(&ours).unwrap()["payload"]["authorization"]["validAfter"],
        json!((now - 600).to_string())
    );
}

#[tokio::test]
async fn upto_permits_verify_settle_and_match_the_sandbox_signature() {
    let facilitator = SandboxFacilitator::new();
    let offer = upto_offer(&facilitator).await;
    for key in keys() {
        let (wallet, sandbox) = wallets(&key);
        let payment = wallet.pay(offer.payment_required()).unwrap();
        let request = FacilitatorRequest::new(payment.clone(), offer.accepts()[0].clone());
        let verified = facilitator.verify_payment(&request);
        assert!(verified.is_valid, "{verified:?}");
        let settled = facilitator.settle_payment(&request);
        assert!(settled.success, "{settled:?}");

        let upto: UptoEvmPayload = serde_json::from_str(payment.payload.get()).unwrap();
        let nonce = &upto.permit2_authorization.nonce;
        assert!(nonce.bytes().all(|b| b.is_ascii_digit()), "{nonce}");
        let again = sandbox
            .sign_permit(&payment.accepted, &upto.permit2_authorization)
            .unwrap();
        assert_eq!(upto.signature, again.signature, "key {key}");
    }
}

#[tokio::test]
async fn an_upto_permit_is_the_sandbox_wallets_shape() {
    let facilitator = SandboxFacilitator::new();
    let offer = upto_offer(&facilitator).await;
    let (wallet, sandbox) = wallets(&keys()[0]);
    let now = 1_900_000_000;
    let strip_nonce = |payment: PaymentPayload| {
        let mut value = serde_json::to_value(payment).unwrap();
        value["payload"]["permit2Authorization"]["nonce"].take();
        value["payload"]["signature"].take();
        value
    };
    assert_eq!(
        strip_nonce(wallet.pay_at(offer.payment_required(), now).unwrap()),
        strip_nonce(sandbox.pay_at(offer.payment_required(), now).unwrap())
    );
}

#[test]
fn sign_in_proofs_are_the_sandbox_wallets() {
    let full = json!({
        "info": {
            "domain": "shop.example", "uri": "https://shop.example/report", "version": "1",
            "nonce": "n0nce", "issuedAt": "2026-11-26T12:00:00Z",
            "expirationTime": "2026-11-26T12:05:00Z", "notBefore": "2026-11-26T11:59:00Z",
            "requestId": "r-1", "statement": "Sign in to the shop",
            "resources": ["https://shop.example/report", "https://shop.example/rows"]
        },
        "supportedChains": [
            {"chainId": "solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp", "type": "ed25519"},
            {"chainId": "eip155:84532", "type": "eip191"}
        ]
    });
    let mut bare = full.clone();
    for field in [
        "statement",
        "expirationTime",
        "notBefore",
        "requestId",
        "resources",
    ] {
        bare["info"].as_object_mut().unwrap().remove(field);
    }
    for key in keys() {
        let (wallet, sandbox) = wallets(&key);
        for extension in [&full, &bare] {
            assert_eq!(
                wallet.sign_in(extension).unwrap(),
                sandbox.sign_in(extension).unwrap()
            );
        }
        assert_eq!(
            wallet.sign_message("hello").unwrap(),
            sandbox.sign_message("hello").unwrap()
        );
    }
}

#[test]
fn both_wallets_refuse_the_same_accepts_in_the_same_words() {
    let offer = exact_offer();
    let good = serde_json::to_value(offer.payment_required()).unwrap();
    let edits: Vec<fn(&mut Value)> = vec![
        |accept| accept["scheme"] = json!("batch"),
        |accept| accept["payTo"] = json!("not-an-address"),
        |accept| accept["network"] = json!(Network::SOLANA.to_string()),
        |accept| accept["extra"] = json!({"version": "2"}),
        |accept| accept["extra"] = json!({"name": "USDC"}),
        |accept| accept["asset"] = json!("0x1234"),
        |accept| accept["scheme"] = json!("upto"),
        |accept| {
            accept["scheme"] = json!("upto");
            accept["extra"] = json!({"assetTransferMethod": "permit2"});
        },
        |accept| {
            accept["scheme"] = json!("upto");
            accept["network"] = json!("solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp");
        },
    ];
    let (wallet, sandbox) = wallets(&keys()[0]);
    let mut every_edit = good.clone();
    every_edit["accepts"] = json!([]);
    for edit in &edits {
        let mut required = good.clone();
        edit(&mut required["accepts"][0]);
        every_edit["accepts"]
            .as_array_mut()
            .unwrap()
            .push(required["accepts"][0].clone());
        let required: PaymentRequired = serde_json::from_value(required).unwrap();
        let ours = wallet.pay(&required).unwrap_err().to_string();
        let theirs = sandbox.pay(&required).unwrap_err().to_string();
        assert_eq!(ours, theirs);
        assert!(ours.starts_with("no payable accept: accepts[0] "), "{ours}");
    }
    let every_edit: PaymentRequired = serde_json::from_value(every_edit).unwrap();
    assert_eq!(
        wallet.pay(&every_edit).unwrap_err().to_string(),
        sandbox.pay(&every_edit).unwrap_err().to_string()
    );
    let mut none = good;
    none["accepts"] = json!([]);
    let none: PaymentRequired = serde_json::from_value(none).unwrap();
    assert_eq!(
        wallet.pay(&none).unwrap_err().to_string(),
        "no payable accept: the challenge lists no accepts"
    );
}

#[test]
fn exact_permit2_payments_verify_settle_and_match_the_sandbox_signature() {
    let offer = Offer::builder(ResourceInfo::new("https://shop.example/report"))
        .usdc_permit2(
            &UsdcDeployment::BASE_SEPOLIA,
            "0.25".parse().unwrap(),
            PAY_TO,
        )
        .build()
        .unwrap();
    let facilitator = SandboxFacilitator::new();
    for key in keys() {
        let (wallet, sandbox) = wallets(&key);
        let payment = wallet.pay(offer.payment_required()).unwrap();
        let request = FacilitatorRequest::new(payment.clone(), offer.accepts()[0].clone());
        let verified = facilitator.verify_payment(&request);
        assert!(verified.is_valid, "{verified:?}");
        let settled = facilitator.settle_payment(&request);
        assert!(settled.success, "{settled:?}");

        let permit = payment.exact_permit2().unwrap();
        assert_eq!(
            permit.permit2_authorization.spender,
            x402_wire::EXACT_PERMIT2_PROXY_ADDRESS
        );
        let again = sandbox
            .sign_exact_permit(&payment.accepted, &permit.permit2_authorization)
            .unwrap();
        assert_eq!(permit.signature, again.signature, "key {key}");
    }
    let settled = facilitator.settlements();
    assert_eq!(settled.len(), keys().len());
    assert!(settled.iter().all(|s| s.transfer_method == "permit2"));
}
