//! The signature check against the protocol's reference vectors, and against the sandbox
//! wallet's own EIP-712 signer: two implementations checking each other.

use alloy_primitives::hex;
use serde_json::json;
use tower_x402_sandbox::SandboxWallet;
use x402_wire::{Network, PaymentPayload, PaymentRequirements, UsdcDeployment};

use super::not_signed_by_payer;
use crate::typed_data::{authorization_digest, exact_permit_digest};

const PAYER: &str = "0x857b06519E91e3A54538791bDbb0E22373e36b66";
const PAY_TO: &str = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";
const USDC_SEPOLIA: &str = "0x036CbD53842c5426634e7929541eC2318f3dCF7e";

/// The specification's EIP-3009 requirement (§3.6 of the protocol notes).
fn eip3009_requirement() -> PaymentRequirements {
    serde_json::from_value(json!({
        "scheme": "exact", "network": "eip155:84532", "amount": "10000",
        "asset": USDC_SEPOLIA, "payTo": PAY_TO, "maxTimeoutSeconds": 60,
        "extra": {"name": "USDC", "version": "2"}
    }))
    .unwrap()
}

/// The specification's EIP-3009 payment, whose signature is real.
fn eip3009_payment(requirement: &PaymentRequirements) -> PaymentPayload {
    serde_json::from_value(json!({
        "x402Version": 2,
        "accepted": requirement,
        "payload": {
            "signature": "0x2d6a7588d6acca505cbf0d9a4a227e0c52c6c34008c8e8986a1283259764173608a2ce6496642e377d6da8dbbf5836e9bd15092f9ecab05ded3d6293af148b571c",
            "authorization": {
                "from": PAYER, "to": PAY_TO, "value": "10000",
                "validAfter": "1740672089", "validBefore": "1740672154",
                "nonce": "0xf3746613c2d920b5fdabc0856f2aeb2d4f88ee6037b8cc5d04a71a4462f13480"
            }
        }
    }))
    .unwrap()
}

/// The specification's Permit2 permit (§3.4), with `signature`.
fn permit2_payment(requirement: &PaymentRequirements, signature: &str) -> PaymentPayload {
    serde_json::from_value(json!({
        "x402Version": 2,
        "accepted": requirement,
        "payload": {
            "signature": signature,
            "permit2Authorization": {
                "permitted": {"token": USDC_SEPOLIA, "amount": "10000"},
                "from": PAYER,
                "spender": "0x402085c248EeA27D92E8b30b2C58ed07f9E20001",
                "nonce": "33247007178036348590600198031289925668252061821958005840077069883511451257277",
                "deadline": "1740672154",
                "witness": {"to": PAY_TO, "validAfter": "1740672089"}
            }
        }
    }))
    .unwrap()
}

fn permit2_requirement() -> PaymentRequirements {
    let mut requirement = eip3009_requirement();
    requirement.extra = Some(
        json!({"assetTransferMethod": "permit2"})
            .as_object()
            .unwrap()
            .clone(),
    );
    requirement
}

/// `payment`'s signature with its byte `at` flipped.
fn flipped(payment: &PaymentPayload, at: usize) -> PaymentPayload {
    let mut proof: serde_json::Value = serde_json::from_str(payment.payload.get()).unwrap();
    let mut bytes = hex::decode(proof["signature"].as_str().unwrap()).unwrap();
    bytes[at] ^= 0x01;
    proof["signature"] = hex::encode_prefixed(bytes).into();
    let mut changed = payment.clone();
    changed.payload = serde_json::value::to_raw_value(&proof).unwrap();
    changed
}

fn payer() -> alloy_primitives::Address {
    PAYER.parse().unwrap()
}

#[test]
fn the_reference_eip3009_digest_and_signature() {
    let requirement = eip3009_requirement();
    let payment = eip3009_payment(&requirement);
    let authorization = payment.exact_evm().unwrap().authorization;
    assert_eq!(
        authorization_digest(&requirement, &authorization)
            .unwrap()
            .to_string(),
        "0xf256992871671abcb27ff92885a7afa46218724e5fc0bac35d050115aa1d22e6"
    );
    assert_eq!(not_signed_by_payer(&requirement, &payment), None);
    // The wrong domain (another token name) recovers someone else.
    let mut other_domain = requirement;
    other_domain
        .extra
        .as_mut()
        .unwrap()
        .insert("name".into(), "USD Coin".into());
    assert_eq!(not_signed_by_payer(&other_domain, &payment), Some(payer()));
}

#[test]
fn a_flipped_byte_is_not_the_payers_signature() {
    let requirement = eip3009_requirement();
    let payment = eip3009_payment(&requirement);
    for at in [0, 31, 40, 63] {
        assert_eq!(
            not_signed_by_payer(&requirement, &flipped(&payment, at)),
            Some(payer()),
            "byte {at}"
        );
    }
}

#[test]
fn the_reference_permit2_digest() {
    let requirement = permit2_requirement();
    let payment = permit2_payment(&requirement, "0x00");
    let permit = payment.exact_permit2().unwrap().permit2_authorization;
    assert_eq!(
        exact_permit_digest(&Network::BASE_SEPOLIA, &permit)
            .unwrap()
            .to_string(),
        "0x21528e1468aac114016416353e2309329f217dc180b21baa1d81cde941095685"
    );
    // Not a signature at all: not the payer's.
    assert_eq!(not_signed_by_payer(&requirement, &payment), Some(payer()));
}

/// The sandbox wallet signs with its own EIP-712 code; this crate must recover it.
#[test]
fn the_sandbox_wallets_signatures_recover_to_it_and_anothers_do_not() {
    let wallet = SandboxWallet::random();
    let stranger = SandboxWallet::random();
    let usdc = &UsdcDeployment::BASE_SEPOLIA;
    let offer = tower_x402::Offer::builder(x402_wire::ResourceInfo::new("https://a.example/r"))
        .usdc(usdc, "0.25".parse().unwrap(), PAY_TO)
        .usdc_permit2(usdc, "0.25".parse().unwrap(), PAY_TO)
        .build()
        .unwrap();
    for accept in offer.accepts() {
        let mut required = offer.payment_required().clone();
        required.accepts = vec![PaymentRequirements::clone(accept)];
        let payment = wallet.pay(&required).unwrap();
        let signer = wallet.address().parse().unwrap();
        assert_eq!(not_signed_by_payer(accept, &payment), None, "{accept:?}");
        assert_eq!(
            not_signed_by_payer(accept, &flipped(&payment, 5)),
            Some(signer)
        );
        // The stranger's signature over the same message.
        let forged = forge(&stranger, accept, &payment);
        assert_eq!(not_signed_by_payer(accept, &forged), Some(signer));
    }
}

/// `payment` with its message signed by `signer` instead.
fn forge(
    signer: &SandboxWallet,
    accept: &PaymentRequirements,
    payment: &PaymentPayload,
) -> PaymentPayload {
    let mut forged = payment.clone();
    forged.payload = match payment.exact_permit2() {
        Ok(proof) => serde_json::value::to_raw_value(
            &signer
                .sign_exact_permit(accept, &proof.permit2_authorization)
                .unwrap(),
        ),
        Err(_) => serde_json::value::to_raw_value(
            &signer
                .sign_authorization(accept, &payment.exact_evm().unwrap().authorization)
                .unwrap(),
        ),
    }
    .unwrap();
    forged
}

#[test]
fn an_erc6492_wrapped_signature_is_left_to_the_facilitator() {
    let requirement = eip3009_requirement();
    let payment = eip3009_payment(&requirement);
    let mut proof: serde_json::Value = serde_json::from_str(payment.payload.get()).unwrap();
    let wrapped = format!("0x{}{}", "ab".repeat(200), "6492".repeat(16));
    proof["signature"] = wrapped.into();
    let mut wrapped_payment = payment;
    wrapped_payment.payload = serde_json::value::to_raw_value(&proof).unwrap();
    assert_eq!(not_signed_by_payer(&requirement, &wrapped_payment), None);
}

#[test]
fn a_payment_without_its_domain_is_left_to_the_facilitator() {
    let mut requirement = eip3009_requirement();
    requirement.extra = None;
    let payment = flipped(&eip3009_payment(&eip3009_requirement()), 3);
    assert_eq!(not_signed_by_payer(&requirement, &payment), None);
}
