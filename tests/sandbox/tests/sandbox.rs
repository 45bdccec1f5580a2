//! The sandbox facilitator and wallet: real signatures verify and settle, every tampered field is
//! refused with its own reason, a payment settles once, the protocol's signature vector checks
//! out, the HTTP router speaks the facilitator wire format, and a paid request goes through
//! `X402Layer` end to end.

use std::net::SocketAddr;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};

use alloy_primitives::{U256, hex};
use axum::Router;
use axum::routing::get;
use serde_json::{Value, json};
use tower_x402::{Facilitator, HttpFacilitator, Offer, SettlementMode, VerifiedPayment, X402Layer};
use tower_x402_sandbox::authorization_digest;
use tower_x402_sandbox::reason::*;
use tower_x402_sandbox::{SandboxFacilitator, SandboxWallet, WalletError};
use x402_wire::{
    AtomicAmount, Eip3009Authorization, FacilitatorRequest, Network, PAYMENT_REQUIRED,
    PAYMENT_RESPONSE, PAYMENT_SIGNATURE, PaymentPayload, PaymentRequired, PaymentRequirements,
    ResourceInfo, SettleResponse, UsdcDeployment, X402Version, header,
};

const PAY_TO: &str = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";
const NOW: u64 = 1_750_000_000;
const AMOUNT: u128 = 10_000;
const MAX_TIMEOUT: u64 = 60;

fn accept(usdc: &UsdcDeployment) -> PaymentRequirements {
    PaymentRequirements {
        scheme: "exact".into(),
        network: usdc.network.clone(),
        amount: AtomicAmount(AMOUNT),
        asset: usdc.asset.into(),
        pay_to: PAY_TO.into(),
        max_timeout_seconds: MAX_TIMEOUT,
        extra: usdc.eip712.map(|domain| domain.to_extra()),
    }
}

fn challenge(accepts: Vec<PaymentRequirements>) -> PaymentRequired {
    let extensions =
        json!({"bazaar": {"info": {"input": {"type": "http"}}, "schema": {"type": "object"}}});
    PaymentRequired {
        x402_version: X402Version::V2,
        error: Some("PAYMENT-SIGNATURE header is required".into()),
        resource: ResourceInfo::new("https://shop.example/report"),
        accepts,
        extensions: extensions.as_object().cloned(),
    }
}

fn facilitator_at(now: u64) -> SandboxFacilitator {
    SandboxFacilitator::new().with_clock(move || now)
}

/// A payment for `signed_under` whose authorization `edit` changed before the wallet signed it,
/// so that only the edited field is wrong.
fn signed(
    wallet: &SandboxWallet,
    signed_under: &PaymentRequirements,
    edit: impl FnOnce(&mut Eip3009Authorization),
) -> PaymentPayload {
    let mut authorization = wallet.authorization_at(signed_under, NOW).unwrap();
    edit(&mut authorization);
    let proof = wallet
        .sign_authorization(signed_under, &authorization)
        .unwrap();
    PaymentPayload {
        x402_version: X402Version::V2,
        resource: Some(ResourceInfo::new("https://shop.example/report")),
        accepted: signed_under.clone(),
        payload: serde_json::value::to_raw_value(&serde_json::to_value(proof).unwrap())
            .expect("a JSON payload"),
        extensions: None,
    }
}

/// Both `/verify` and `/settle` refuse `request` with `reason`, and nothing moves.
fn assert_refused(facilitator: &SandboxFacilitator, request: &FacilitatorRequest, reason: &str) {
    let payer = request
        .payment_payload()
        .exact_evm()
        .map(|p| p.authorization.from)
        .unwrap_or_default();
    let balance_before = facilitator.balance_of(&payer);
    let verified = facilitator.verify_payment(request);
    assert!(
        !verified.is_valid,
        "verify accepted a payment that should fail with {reason}"
    );
    assert_eq!(
        verified.invalid_reason.as_deref(),
        Some(reason),
        "{:?}",
        verified.invalid_message
    );
    let settled = facilitator.settle_payment(request);
    assert!(!settled.success);
    assert_eq!(
        settled.error_reason.as_deref(),
        Some(reason),
        "{:?}",
        settled.error_message
    );
    assert_eq!(settled.transaction, "");
    assert_eq!(settled.network, request.payment_requirements().network);
    assert_eq!(facilitator.settlement_count(), 0);
    assert_eq!(facilitator.balance_of(&payer), balance_before);
}

// ---------------------------------------------------------------------------------------------
// The wallet's payments

#[test]
fn wallet_payload_verifies_and_settles() {
    let facilitator = facilitator_at(NOW);
    let wallet = SandboxWallet::random();
    let required = challenge(vec![accept(&UsdcDeployment::BASE_SEPOLIA)]);
    let payment = wallet.pay_at(&required, NOW).unwrap();

    assert_eq!(payment.accepted, required.accepts[0]);
    assert_eq!(payment.resource.as_ref(), Some(&required.resource));
    assert_eq!(payment.extensions, required.extensions);
    let proof = payment.exact_evm().unwrap();
    let authorization = &proof.authorization;
    assert_eq!(authorization.from, wallet.address());
    assert_eq!(authorization.to, PAY_TO);
    assert_eq!(authorization.value, AMOUNT.to_string());
    assert_eq!(authorization.valid_after, (NOW - 600).to_string());
    assert_eq!(authorization.valid_before, (NOW + MAX_TIMEOUT).to_string());
    assert_eq!(authorization.nonce.len(), 66);
    assert_eq!(proof.signature.len(), 2 + 65 * 2);

    let request = FacilitatorRequest::new(payment, required.accepts[0].clone());
    let verified = facilitator.verify_payment(&request);
    assert!(verified.is_valid, "{:?}", verified.invalid_message);
    assert_eq!(verified.payer.as_deref(), Some(wallet.address().as_str()));

    let settled = facilitator.settle_payment(&request);
    assert!(settled.success, "{:?}", settled.error_message);
    assert_eq!(settled.payer.as_deref(), Some(wallet.address().as_str()));
    assert_eq!(settled.network, Network::BASE_SEPOLIA);
    assert_eq!(settled.amount, Some(AtomicAmount(AMOUNT)));
    assert!(settled.transaction.starts_with("0x") && settled.transaction.len() == 66);
    assert_eq!(facilitator.settlement_count(), 1);
    let record = &facilitator.settlements()[0];
    assert_eq!(
        (record.from.as_str(), record.to.as_str()),
        (wallet.address().as_str(), PAY_TO)
    );
    assert_eq!(record.transaction, settled.transaction);
    assert_eq!(
        facilitator.balance_of(&wallet.address()),
        AtomicAmount(1_000_000_000 - AMOUNT)
    );
    assert_eq!(
        facilitator.balance_of(PAY_TO),
        AtomicAmount(1_000_000_000 + AMOUNT)
    );
}

#[test]
fn wallet_pays_on_base_mainnet_too() {
    let facilitator = facilitator_at(NOW);
    let required = challenge(vec![accept(&UsdcDeployment::BASE)]);
    let payment = SandboxWallet::random().pay_at(&required, NOW).unwrap();
    let settled = facilitator.settle_payment(&FacilitatorRequest::new(
        payment,
        required.accepts[0].clone(),
    ));
    assert!(settled.success, "{:?}", settled.error_message);
    assert_eq!(settled.network, Network::BASE);
}

#[test]
fn wallet_picks_the_first_accept_it_can_pay() {
    let mut upto = accept(&UsdcDeployment::BASE);
    upto.scheme = "upto".into();
    let solana = PaymentRequirements {
        network: Network::SOLANA,
        asset: UsdcDeployment::SOLANA.asset.into(),
        pay_to: "CKPKJWNdJEqa81x7CkZ14BVPiY6y16Sxs7owznqtWYp5".into(),
        extra: None,
        ..accept(&UsdcDeployment::BASE)
    };
    let mut no_domain = accept(&UsdcDeployment::BASE);
    no_domain.extra = None;
    let payable = accept(&UsdcDeployment::BASE_SEPOLIA);
    let required = challenge(vec![
        upto.clone(),
        solana.clone(),
        no_domain.clone(),
        payable.clone(),
    ]);
    let payment = SandboxWallet::random().pay_at(&required, NOW).unwrap();
    assert_eq!(payment.accepted, payable);

    let unpayable = challenge(vec![upto, solana, no_domain]);
    let error = SandboxWallet::random().pay_at(&unpayable, NOW).unwrap_err();
    let WalletError::NothingPayable(why) = &error else {
        panic!("{error}")
    };
    assert!(why.contains("accepts[0]") && why.contains("upto"), "{why}");
    assert!(why.contains("accepts[1]") && why.contains("CKPK"), "{why}");
    assert!(why.contains("accepts[2]") && why.contains("name"), "{why}");
    assert!(matches!(
        SandboxWallet::random().pay_at(&challenge(vec![]), NOW),
        Err(WalletError::NothingPayable(_))
    ));
}

#[test]
fn wallet_signatures_recover_to_its_address() {
    let wallet = SandboxWallet::from_private_key_hex(
        "0x4c0883a69102937d6231471b5dbb6204fe5129617082792ae468d01a3f362318",
    )
    .unwrap();
    let sepolia = accept(&UsdcDeployment::BASE_SEPOLIA);
    let payment = signed(&wallet, &sepolia, |_| {});
    let proof = payment.exact_evm().unwrap();
    let digest = alloy_primitives::B256::from(
        authorization_digest(&sepolia, &proof.authorization)
            .unwrap()
            .signing_hash,
    );
    let signature =
        alloy_primitives::Signature::from_raw(&hex::decode(&proof.signature).unwrap()).unwrap();
    assert_eq!(
        signature
            .recover_address_from_prehash(&digest)
            .unwrap()
            .to_checksum(None),
        wallet.address()
    );
}

// ---------------------------------------------------------------------------------------------
// Each tampered field, refused with its own reason

#[test]
fn rejects_value_other_than_amount() {
    let sepolia = accept(&UsdcDeployment::BASE_SEPOLIA);
    let payment = signed(&SandboxWallet::random(), &sepolia, |auth| {
        auth.value = (AMOUNT - 1).to_string()
    });
    assert_refused(
        &facilitator_at(NOW),
        &FacilitatorRequest::new(payment, sepolia),
        INVALID_EXACT_EVM_AUTHORIZATION_VALUE,
    );
}

#[test]
fn rejects_value_above_amount_too() {
    let sepolia = accept(&UsdcDeployment::BASE_SEPOLIA);
    let payment = signed(&SandboxWallet::random(), &sepolia, |auth| {
        auth.value = (AMOUNT + 1).to_string()
    });
    assert_refused(
        &facilitator_at(NOW),
        &FacilitatorRequest::new(payment, sepolia),
        INVALID_EXACT_EVM_AUTHORIZATION_VALUE,
    );
}

#[test]
fn rejects_recipient_other_than_pay_to() {
    let sepolia = accept(&UsdcDeployment::BASE_SEPOLIA);
    let thief = SandboxWallet::random().address();
    let payment = signed(&SandboxWallet::random(), &sepolia, |auth| auth.to = thief);
    assert_refused(
        &facilitator_at(NOW),
        &FacilitatorRequest::new(payment, sepolia),
        INVALID_EXACT_EVM_RECIPIENT_MISMATCH,
    );
}

#[test]
fn rejects_from_that_did_not_sign() {
    let sepolia = accept(&UsdcDeployment::BASE_SEPOLIA);
    let victim = SandboxWallet::random().address();
    let payment = signed(&SandboxWallet::random(), &sepolia, |auth| {
        auth.from = victim
    });
    assert_refused(
        &facilitator_at(NOW),
        &FacilitatorRequest::new(payment, sepolia),
        INVALID_EXACT_EVM_SIGNATURE,
    );
}

#[test]
fn rejects_a_field_changed_after_signing() {
    let sepolia = accept(&UsdcDeployment::BASE_SEPOLIA);
    let mut payment = signed(&SandboxWallet::random(), &sepolia, |_| {});
    edit_proof(&mut payment, |proof| {
        proof["authorization"]["validBefore"] = json!((NOW + 3600).to_string());
    });
    assert_refused(
        &facilitator_at(NOW),
        &FacilitatorRequest::new(payment, sepolia),
        INVALID_EXACT_EVM_SIGNATURE,
    );
}

#[test]
fn rejects_reused_nonce() {
    let facilitator = facilitator_at(NOW);
    let sepolia = accept(&UsdcDeployment::BASE_SEPOLIA);
    let wallet = SandboxWallet::random();
    let request = FacilitatorRequest::new(signed(&wallet, &sepolia, |_| {}), sepolia);
    assert!(facilitator.settle_payment(&request).success);
    let balance = facilitator.balance_of(&wallet.address());

    let verified = facilitator.verify_payment(&request);
    assert_eq!(
        verified.invalid_reason.as_deref(),
        Some(INVALID_EXACT_EVM_NONCE_ALREADY_USED)
    );
    let again = facilitator.settle_payment(&request);
    assert!(!again.success);
    assert_eq!(
        again.error_reason.as_deref(),
        Some(INVALID_EXACT_EVM_NONCE_ALREADY_USED)
    );
    assert_eq!(again.payer.as_deref(), Some(wallet.address().as_str()));
    assert_eq!(facilitator.settlement_count(), 1);
    assert_eq!(facilitator.balance_of(&wallet.address()), balance);
}

#[test]
fn rejects_expired_valid_before() {
    let clock = Arc::new(AtomicU64::new(NOW));
    let facilitator = SandboxFacilitator::new().with_clock({
        let clock = Arc::clone(&clock);
        move || clock.load(Ordering::SeqCst)
    });
    let sepolia = accept(&UsdcDeployment::BASE_SEPOLIA);
    let request =
        FacilitatorRequest::new(signed(&SandboxWallet::random(), &sepolia, |_| {}), sepolia);
    // validBefore = NOW + 60: usable while at least 6 s remain.
    clock.store(NOW + MAX_TIMEOUT - 6, Ordering::SeqCst);
    assert!(facilitator.verify_payment(&request).is_valid);
    clock.store(NOW + MAX_TIMEOUT - 5, Ordering::SeqCst);
    assert_refused(
        &facilitator,
        &request,
        INVALID_EXACT_EVM_PAYLOAD_AUTHORIZATION_VALID_BEFORE,
    );
}

#[test]
fn rejects_valid_after_in_the_future() {
    let sepolia = accept(&UsdcDeployment::BASE_SEPOLIA);
    let payment = signed(&SandboxWallet::random(), &sepolia, |auth| {
        auth.valid_after = (NOW + 1).to_string()
    });
    assert_refused(
        &facilitator_at(NOW),
        &FacilitatorRequest::new(payment, sepolia),
        INVALID_EXACT_EVM_PAYLOAD_AUTHORIZATION_VALID_AFTER,
    );
}

#[test]
fn rejects_signature_under_another_eip712_domain() {
    // Signed with Base mainnet's token name on Base Sepolia, whose token is named `USDC`.
    let required = accept(&UsdcDeployment::BASE_SEPOLIA);
    let mut mislabelled = required.clone();
    mislabelled.extra = UsdcDeployment::BASE.eip712.map(|domain| domain.to_extra());
    let payment = signed(&SandboxWallet::random(), &mislabelled, |_| {});
    assert_refused(
        &facilitator_at(NOW),
        &FacilitatorRequest::new(payment, required),
        INVALID_EXACT_EVM_SIGNATURE,
    );
}

#[test]
fn rejects_signature_for_another_chain() {
    // The same token domain but Base mainnet's chain id and contract.
    let required = accept(&UsdcDeployment::BASE_SEPOLIA);
    let mut other_chain = accept(&UsdcDeployment::BASE);
    other_chain.extra = required.extra.clone();
    let mut payment = signed(&SandboxWallet::random(), &other_chain, |_| {});
    payment.accepted = required.clone();
    assert_refused(
        &facilitator_at(NOW),
        &FacilitatorRequest::new(payment, required),
        INVALID_EXACT_EVM_SIGNATURE,
    );
}

#[test]
fn rejects_a_domain_the_token_contract_does_not_have() {
    // A server advertising `USDC` on Base mainnet: signer and requirement agree, the chain would not.
    let mut wrong_name = accept(&UsdcDeployment::BASE);
    wrong_name.extra = UsdcDeployment::BASE_SEPOLIA
        .eip712
        .map(|domain| domain.to_extra());
    let payment = signed(&SandboxWallet::random(), &wrong_name, |_| {});
    assert_refused(
        &facilitator_at(NOW),
        &FacilitatorRequest::new(payment, wrong_name),
        INVALID_EXACT_EVM_TOKEN_NAME_MISMATCH,
    );

    let mut wrong_version = accept(&UsdcDeployment::BASE);
    wrong_version
        .extra
        .as_mut()
        .unwrap()
        .insert("version".into(), json!("1"));
    let payment = signed(&SandboxWallet::random(), &wrong_version, |_| {});
    assert_refused(
        &facilitator_at(NOW),
        &FacilitatorRequest::new(payment, wrong_version),
        INVALID_EXACT_EVM_TOKEN_VERSION_MISMATCH,
    );
}

#[test]
fn rejects_an_asset_that_is_not_usdc() {
    let mut other_token = accept(&UsdcDeployment::BASE_SEPOLIA);
    other_token.asset = "0x4200000000000000000000000000000000000006".into();
    let payment = signed(&SandboxWallet::random(), &other_token, |_| {});
    assert_refused(
        &facilitator_at(NOW),
        &FacilitatorRequest::new(payment, other_token),
        INVALID_EXACT_EVM_EIP3009_NOT_SUPPORTED,
    );
}

#[test]
fn rejects_network_mismatch() {
    let base = accept(&UsdcDeployment::BASE);
    let payment = signed(&SandboxWallet::random(), &base, |_| {});
    let required = accept(&UsdcDeployment::BASE_SEPOLIA);
    assert_refused(
        &facilitator_at(NOW),
        &FacilitatorRequest::new(payment, required),
        INVALID_EXACT_EVM_NETWORK_MISMATCH,
    );
}

#[test]
fn rejects_unsupported_network() {
    let polygon = accept(&UsdcDeployment::POLYGON);
    let payment = signed(&SandboxWallet::random(), &polygon, |_| {});
    assert_refused(
        &facilitator_at(NOW),
        &FacilitatorRequest::new(payment, polygon),
        INVALID_NETWORK,
    );
}

#[test]
fn rejects_scheme_other_than_exact() {
    let sepolia = accept(&UsdcDeployment::BASE_SEPOLIA);
    let mut payment = signed(&SandboxWallet::random(), &sepolia, |_| {});
    payment.accepted.scheme = "upto".into();
    assert_refused(
        &facilitator_at(NOW),
        &FacilitatorRequest::new(payment, sepolia),
        INVALID_EXACT_EVM_SCHEME,
    );
}

#[test]
fn rejects_missing_extra() {
    let sepolia = accept(&UsdcDeployment::BASE_SEPOLIA);
    let payment = signed(&SandboxWallet::random(), &sepolia, |_| {});
    let mut no_extra = sepolia.clone();
    no_extra.extra = None;
    assert_refused(
        &facilitator_at(NOW),
        &FacilitatorRequest::new(payment.clone(), no_extra),
        INVALID_EXACT_EVM_MISSING_EIP712_DOMAIN,
    );
    let mut no_version = sepolia;
    no_version.extra.as_mut().unwrap().remove("version");
    assert_refused(
        &facilitator_at(NOW),
        &FacilitatorRequest::new(payment, no_version),
        INVALID_EXACT_EVM_MISSING_EIP712_DOMAIN,
    );
}

#[test]
fn rejects_insufficient_balance() {
    let facilitator = facilitator_at(NOW).with_starting_balance(AtomicAmount(AMOUNT - 1));
    let sepolia = accept(&UsdcDeployment::BASE_SEPOLIA);
    let wallet = SandboxWallet::random();
    let request = FacilitatorRequest::new(signed(&wallet, &sepolia, |_| {}), sepolia);
    assert_refused(
        &facilitator,
        &request,
        INVALID_EXACT_EVM_INSUFFICIENT_BALANCE,
    );
    facilitator
        .set_balance(&wallet.address(), AtomicAmount(AMOUNT))
        .unwrap();
    assert!(facilitator.settle_payment(&request).success);
    assert_eq!(facilitator.balance_of(&wallet.address()), AtomicAmount(0));
}

#[test]
fn rejects_payloads_that_are_not_eip3009() {
    let sepolia = accept(&UsdcDeployment::BASE_SEPOLIA);
    let mut payment = signed(&SandboxWallet::random(), &sepolia, |_| {});
    edit_proof(&mut payment, |proof| {
        *proof = json!({"transaction": "AQID"})
    });
    assert_refused(
        &facilitator_at(NOW),
        &FacilitatorRequest::new(payment, sepolia.clone()),
        INVALID_PAYLOAD,
    );
    let mut bad_number = signed(&SandboxWallet::random(), &sepolia, |_| {});
    edit_proof(&mut bad_number, |proof| {
        proof["authorization"]["value"] = json!("1e4")
    });
    assert_refused(
        &facilitator_at(NOW),
        &FacilitatorRequest::new(bad_number, sepolia),
        INVALID_PAYLOAD,
    );
}

#[test]
fn rejects_malleable_and_malformed_signatures() {
    let sepolia = accept(&UsdcDeployment::BASE_SEPOLIA);
    let payment = signed(&SandboxWallet::random(), &sepolia, |_| {});
    let original = hex::decode(payment.exact_evm().unwrap().signature).unwrap();

    // (r, n - s, v ^ 1) recovers to the same address, but the token accepts low-s only.
    let order =
        U256::from_str("0xfffffffffffffffffffffffffffffffebaaedce6af48a03bbfd25e8cd0364141")
            .unwrap();
    let high_s = order - U256::from_be_slice(&original[32..64]);
    let mut malleable = original[..32].to_vec();
    malleable.extend_from_slice(&high_s.to_be_bytes::<32>());
    malleable.push(if original[64] == 27 { 28 } else { 27 });

    let mut zero_one_v = original.clone();
    zero_one_v[64] -= 27;
    for bad in [
        hex::encode_prefixed(&malleable),
        hex::encode_prefixed(zero_one_v),
        hex::encode_prefixed(&original[..64]),
        hex::encode(&original),
        "0xzz".into(),
    ] {
        let mut tampered = payment.clone();
        edit_proof(&mut tampered, |proof| proof["signature"] = json!(bad));
        assert_refused(
            &facilitator_at(NOW),
            &FacilitatorRequest::new(tampered, sepolia.clone()),
            INVALID_EXACT_EVM_SIGNATURE,
        );
    }
}

// ---------------------------------------------------------------------------------------------
// One authorization, one settlement

#[test]
fn concurrent_settles_of_one_authorization_have_one_winner() {
    const RACERS: usize = 8;
    let facilitator = facilitator_at(NOW);
    let sepolia = accept(&UsdcDeployment::BASE_SEPOLIA);
    let wallet = SandboxWallet::random();
    let request = Arc::new(FacilitatorRequest::new(
        signed(&wallet, &sepolia, |_| {}),
        sepolia,
    ));
    let start = Arc::new(Barrier::new(RACERS));
    let racers: Vec<_> = (0..RACERS)
        .map(|_| {
            let (facilitator, request, start) = (
                facilitator.clone(),
                Arc::clone(&request),
                Arc::clone(&start),
            );
            std::thread::spawn(move || {
                start.wait();
                facilitator.settle_payment(&request)
            })
        })
        .collect();
    let outcomes: Vec<SettleResponse> = racers
        .into_iter()
        .map(|racer| racer.join().unwrap())
        .collect();

    assert_eq!(outcomes.iter().filter(|outcome| outcome.success).count(), 1);
    for lost in outcomes.iter().filter(|outcome| !outcome.success) {
        assert_eq!(
            lost.error_reason.as_deref(),
            Some(INVALID_EXACT_EVM_NONCE_ALREADY_USED)
        );
    }
    assert_eq!(facilitator.settlement_count(), 1);
    assert_eq!(
        facilitator.balance_of(&wallet.address()),
        AtomicAmount(1_000_000_000 - AMOUNT)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_settles_through_the_trait_have_one_winner() {
    let facilitator = facilitator_at(NOW);
    let sepolia = accept(&UsdcDeployment::BASE_SEPOLIA);
    let request = Arc::new(FacilitatorRequest::new(
        signed(&SandboxWallet::random(), &sepolia, |_| {}),
        sepolia,
    ));
    let tasks: Vec<_> = (0..2)
        .map(|_| {
            let (facilitator, request) = (facilitator.clone(), Arc::clone(&request));
            tokio::spawn(async move { Facilitator::settle(&facilitator, &request).await.unwrap() })
        })
        .collect();
    let mut reasons = Vec::new();
    for task in tasks {
        let outcome = task.await.unwrap();
        reasons.push(outcome.error_reason.unwrap_or_else(|| "settled".into()));
    }
    reasons.sort();
    assert_eq!(reasons, ["invalid_exact_evm_nonce_already_used", "settled"]);
    assert_eq!(facilitator.settlement_count(), 1);
}

// ---------------------------------------------------------------------------------------------
// The protocol's signature vector (x402-protocol §3.6, §10.2)

fn spec_payment() -> PaymentPayload {
    serde_json::from_value(json!({
        "x402Version": 2,
        "resource": {"url": "https://api.example.com/premium-data", "description": "Access to premium market data", "mimeType": "application/json"},
        "accepted": {
            "scheme": "exact", "network": "eip155:84532", "amount": "10000",
            "asset": "0x036CbD53842c5426634e7929541eC2318f3dCF7e", "payTo": "0x209693Bc6afc0C5328bA36FaF03C514EF312287C",
            "maxTimeoutSeconds": 60, "extra": {"name": "USDC", "version": "2"}
        },
        "payload": {
            "signature": "0x2d6a7588d6acca505cbf0d9a4a227e0c52c6c34008c8e8986a1283259764173608a2ce6496642e377d6da8dbbf5836e9bd15092f9ecab05ded3d6293af148b571c",
            "authorization": {
                "from": "0x857b06519E91e3A54538791bDbb0E22373e36b66", "to": "0x209693Bc6afc0C5328bA36FaF03C514EF312287C",
                "value": "10000", "validAfter": "1740672089", "validBefore": "1740672154",
                "nonce": "0xf3746613c2d920b5fdabc0856f2aeb2d4f88ee6037b8cc5d04a71a4462f13480"
            }
        },
        "extensions": {}
    }))
    .unwrap()
}

const SPEC_PAYER: &str = "0x857b06519E91e3A54538791bDbb0E22373e36b66";

#[test]
fn spec_vector_hashes_to_the_reference_digest() {
    let payment = spec_payment();
    let digest = authorization_digest(
        &payment.accepted,
        &payment.exact_evm().unwrap().authorization,
    )
    .unwrap();
    assert_eq!(
        alloy_primitives::B256::from(digest.domain_separator).to_string(),
        "0x71f17a3b2ff373b803d70a5a07c046c1a2bc8e89c09ef722fcb047abe94c9818"
    );
    assert_eq!(
        alloy_primitives::B256::from(digest.signing_hash).to_string(),
        "0xf256992871671abcb27ff92885a7afa46218724e5fc0bac35d050115aa1d22e6"
    );
}

#[test]
fn spec_vector_verifies_under_the_base_sepolia_domain() {
    let payment = spec_payment();
    let request = FacilitatorRequest::new(payment.clone(), payment.accepted);
    for inside in [1_740_672_089, 1_740_672_100, 1_740_672_147] {
        let verified = facilitator_at(inside).verify_payment(&request);
        assert!(
            verified.is_valid,
            "at {inside}: {:?}",
            verified.invalid_message
        );
        assert_eq!(verified.payer.as_deref(), Some(SPEC_PAYER));
    }
    let facilitator = facilitator_at(1_740_672_100);
    let settled = facilitator.settle_payment(&request);
    assert!(settled.success);
    assert_eq!(
        facilitator.balance_of(SPEC_PAYER),
        AtomicAmount(1_000_000_000 - 10_000)
    );
}

#[test]
fn spec_vector_is_refused_outside_its_window() {
    let payment = spec_payment();
    let request = FacilitatorRequest::new(payment.clone(), payment.accepted);
    assert_refused(
        &facilitator_at(1_740_672_088),
        &request,
        INVALID_EXACT_EVM_PAYLOAD_AUTHORIZATION_VALID_AFTER,
    );
    // Refused once fewer than 6 s remain before validBefore (1740672154): at t = 1740672148
    // exactly 6 s remain and `validBefore < now + 6` is still false.
    assert!(
        facilitator_at(1_740_672_148)
            .verify_payment(&request)
            .is_valid
    );
    assert_refused(
        &facilitator_at(1_740_672_149),
        &request,
        INVALID_EXACT_EVM_PAYLOAD_AUTHORIZATION_VALID_BEFORE,
    );
}

#[test]
fn spec_vector_fails_under_the_usd_coin_domain() {
    let payment = spec_payment();
    let mut usd_coin = payment.accepted.clone();
    usd_coin
        .extra
        .as_mut()
        .unwrap()
        .insert("name".into(), json!("USD Coin"));
    let request = FacilitatorRequest::new(payment, usd_coin);
    assert_refused(
        &facilitator_at(1_740_672_100),
        &request,
        INVALID_EXACT_EVM_SIGNATURE,
    );
}

// ---------------------------------------------------------------------------------------------
// The HTTP router

async fn serve(router: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    address
}

#[tokio::test]
async fn http_router_speaks_the_facilitator_wire_format() {
    let facilitator = SandboxFacilitator::new();
    let address = serve(facilitator.router()).await;
    let client = HttpFacilitator::new(format!("http://{address}")).unwrap();

    let supported = client.supported().await.unwrap();
    assert!(supported.supports("exact", &Network::BASE));
    assert!(supported.supports("exact", &Network::BASE_SEPOLIA));
    assert!(supported.supports("upto", &Network::BASE));
    assert!(supported.supports("upto", &Network::BASE_SEPOLIA));
    assert!(supported.supports("batch-settlement", &Network::BASE));
    assert!(supported.supports("batch-settlement", &Network::BASE_SEPOLIA));
    assert!(supported.supports("exact", &Network::SOLANA));
    assert!(supported.supports("exact", &Network::SOLANA_DEVNET));
    assert_eq!(supported.kinds.len(), 8);
    assert_eq!(
        supported.signers["eip155:*"],
        [facilitator.signer_address()]
    );

    let sepolia = accept(&UsdcDeployment::BASE_SEPOLIA);
    let wallet = SandboxWallet::random();
    let request = FacilitatorRequest::new(
        wallet.pay(&challenge(vec![sepolia.clone()])).unwrap(),
        sepolia,
    );
    let verified = client.verify(&request).await.unwrap();
    assert!(verified.is_valid, "{:?}", verified.invalid_message);
    assert_eq!(verified.payer.as_deref(), Some(wallet.address().as_str()));
    let settled = client.settle(&request).await.unwrap();
    assert!(settled.success);
    assert_eq!(
        settled.transaction,
        facilitator.settlements()[0].transaction
    );
    let again = client.settle(&request).await.unwrap();
    assert!(!again.success);
    assert_eq!(
        again.error_reason.as_deref(),
        Some(INVALID_EXACT_EVM_NONCE_ALREADY_USED)
    );
    assert_eq!(facilitator.settlement_count(), 1);

    // The raw JSON: camelCase keys, refusals are 200s, failed settlements carry an empty transaction.
    let http = reqwest::Client::new();
    let raw_settle = http
        .post(format!("http://{address}/settle"))
        .json(&request)
        .send()
        .await
        .unwrap();
    assert_eq!(raw_settle.status(), 200);
    let body: Value = raw_settle.json().await.unwrap();
    assert_eq!(body["success"], false);
    assert_eq!(body["errorReason"], INVALID_EXACT_EVM_NONCE_ALREADY_USED);
    assert_eq!(body["transaction"], "");
    assert_eq!(body["network"], "eip155:84532");
    assert_eq!(body["payer"], wallet.address());
    let raw_verify = http
        .post(format!("http://{address}/verify"))
        .json(&request)
        .send()
        .await
        .unwrap();
    assert_eq!(raw_verify.status(), 200);
    let body: Value = raw_verify.json().await.unwrap();
    assert_eq!(body["isValid"], false);
    assert_eq!(body["invalidReason"], INVALID_EXACT_EVM_NONCE_ALREADY_USED);
    let raw_supported: Value = http
        .get(format!("http://{address}/supported"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(raw_supported["kinds"][0]["x402Version"], 2);
    assert_eq!(raw_supported["kinds"][0]["scheme"], "exact");
}

#[tokio::test]
async fn http_router_answers_400_to_bodies_that_are_not_requests() {
    let address = serve(SandboxFacilitator::new().router()).await;
    let http = reqwest::Client::new();
    let sepolia = accept(&UsdcDeployment::BASE_SEPOLIA);
    let payment = serde_json::to_value(signed(&SandboxWallet::random(), &sepolia, |_| {})).unwrap();
    let bodies = [
        "not json".to_owned(),
        "{}".to_owned(),
        json!({"x402Version": 2, "paymentPayload": payment}).to_string(),
        json!({"x402Version": 2, "paymentRequirements": sepolia}).to_string(),
    ];
    for endpoint in ["verify", "settle"] {
        for body in &bodies {
            let response = http
                .post(format!("http://{address}/{endpoint}"))
                .body(body.clone())
                .send()
                .await
                .unwrap();
            assert_eq!(response.status(), 400, "{endpoint} {body}");
            let error: Value = response.json().await.unwrap();
            assert!(
                error["error"]
                    .as_str()
                    .is_some_and(|text| text.contains("not a facilitator request")),
                "{error}"
            );
        }
    }
    // A request whose payload has the wrong shape is a request: 200 with the reason.
    let mut odd = payment.clone();
    odd["payload"] = json!({"signature": 7});
    let request = json!({"x402Version": 2, "paymentPayload": odd, "paymentRequirements": sepolia});
    let response = http
        .post(format!("http://{address}/verify"))
        .json(&request)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(
        (body["isValid"].clone(), body["invalidReason"].clone()),
        (json!(false), json!(INVALID_PAYLOAD))
    );
}

// ---------------------------------------------------------------------------------------------
// A paid request through X402Layer, the way the `pay` buyer (`examples/buyer`) makes it

/// Serves `/report` behind `X402Layer` with the sandbox in process; the handler reports what
/// the layer told it about the payment.
async fn paywalled(facilitator: &SandboxFacilitator, mode: SettlementMode) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/report", listener.local_addr().unwrap());
    let offer = Offer::builder(ResourceInfo::new(url.clone()))
        .usdc(
            &UsdcDeployment::BASE_SEPOLIA,
            "0.01".parse().unwrap(),
            PAY_TO,
        )
        .settlement(mode)
        .build()
        .map(Arc::new)
        .unwrap();
    let report = get(|payment: VerifiedPayment| async move {
        axum::Json(json!({
            "payer": payment.payer,
            "settledBeforeHandler": payment.settlement.map(|settlement| settlement.transaction),
        }))
    });
    let app = Router::new().route(
        "/report",
        report.layer(X402Layer::new(facilitator.clone(), offer)),
    );
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    url
}

/// GET → 402 → pay the challenge → GET with `PAYMENT-SIGNATURE`; returns the settlement and body.
async fn buy(url: &str, wallet: &SandboxWallet) -> (SettleResponse, Value) {
    let http = reqwest::Client::new();
    let unpaid = http.get(url).send().await.unwrap();
    assert_eq!(unpaid.status(), 402);
    let required: PaymentRequired =
        header::decode(unpaid.headers()[PAYMENT_REQUIRED].as_bytes()).unwrap();
    let payment = wallet.pay(&required).unwrap();
    let paid = http
        .get(url)
        .header(PAYMENT_SIGNATURE, header::encode(&payment).unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(paid.status(), 200);
    let settlement: SettleResponse =
        header::decode(paid.headers()[PAYMENT_RESPONSE].as_bytes()).unwrap();
    (settlement, paid.json().await.unwrap())
}

#[tokio::test]
async fn paid_request_through_the_layer_settling_after_the_handler() {
    let facilitator = SandboxFacilitator::new();
    let url = paywalled(&facilitator, SettlementMode::After).await;
    let wallet = SandboxWallet::random();
    let (settlement, body) = buy(&url, &wallet).await;

    assert!(settlement.success);
    assert_eq!(settlement.payer.as_deref(), Some(wallet.address().as_str()));
    assert_eq!(
        settlement.transaction,
        facilitator.settlements()[0].transaction
    );
    assert_eq!(
        body,
        json!({"payer": wallet.address(), "settledBeforeHandler": null})
    );
    assert_eq!(facilitator.settlement_count(), 1);
    assert_eq!(
        facilitator.balance_of(&wallet.address()),
        AtomicAmount(1_000_000_000 - 10_000)
    );
    assert_eq!(
        facilitator.balance_of(PAY_TO),
        AtomicAmount(1_000_000_000 + 10_000)
    );
}

#[tokio::test]
async fn paid_request_through_the_layer_settling_before_the_handler() {
    let facilitator = SandboxFacilitator::new();
    let url = paywalled(&facilitator, SettlementMode::Before).await;
    let wallet = SandboxWallet::random();
    let (settlement, body) = buy(&url, &wallet).await;

    assert!(settlement.success);
    let transaction = &facilitator.settlements()[0].transaction;
    assert_eq!(&settlement.transaction, transaction);
    assert_eq!(
        body,
        json!({"payer": wallet.address(), "settledBeforeHandler": transaction})
    );
    assert_eq!(facilitator.settlement_count(), 1);
    assert_eq!(
        facilitator.balance_of(&wallet.address()),
        AtomicAmount(1_000_000_000 - 10_000)
    );
}

/// Changes the signed proof of `payment` as JSON, as a client tampering with it would.
fn edit_proof(payment: &mut PaymentPayload, edit: impl FnOnce(&mut serde_json::Value)) {
    let mut proof: serde_json::Value = serde_json::from_str(payment.payload.get()).unwrap();
    edit(&mut proof);
    payment.payload = serde_json::value::to_raw_value(&proof).unwrap();
}
