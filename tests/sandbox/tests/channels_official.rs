//! The sandbox's `batch-settlement` agrees with the official x402 Python package (2.25.0) on
//! the wire: its channel id, voucher, claim-batch and refund signatures are byte for byte those
//! the package computed for the same keys (`vectors/batch_settlement.json`), and a deposit
//! payload built by the package's client verifies and settles on the sandbox, after which the
//! package's claim row and authorizer signature claim it; so does its Permit2 deposit.

use serde_json::Value;
use tower_x402_sandbox::batch::{BatchPayload, ChannelConfig, SignedVoucher, VoucherClaim};
use tower_x402_sandbox::{SandboxFacilitator, SandboxWallet};
use x402_wire::{FacilitatorRequest, Network, PaymentPayload, PaymentRequirements, X402Version};

fn vectors() -> Value {
    serde_json::from_str(include_str!("vectors/batch_settlement.json")).unwrap()
}

fn field<T: serde::de::DeserializeOwned>(vectors: &Value, key: &str) -> T {
    serde_json::from_value(vectors[key].clone()).unwrap()
}

#[test]
fn ids_and_signatures_are_the_official_packages() {
    let vectors = vectors();
    let network = Network::BASE_SEPOLIA;
    let payer = SandboxWallet::from_private_key_hex(vectors["payerKey"].as_str().unwrap()).unwrap();
    let authorizer =
        SandboxWallet::from_private_key_hex(vectors["receiverAuthorizerKey"].as_str().unwrap())
            .unwrap();
    assert_eq!(authorizer.address(), vectors["receiverAuthorizer"]);
    let config: ChannelConfig = field(&vectors, "channelConfig");
    let id = SandboxWallet::channel_id(&config, &network).unwrap();
    assert_eq!(id, vectors["channelId"]);

    let voucher: SignedVoucher = field(&vectors, "voucher");
    assert_eq!(payer.sign_voucher(&network, &id, 5_000).unwrap(), voucher);
    let claim: VoucherClaim = field(&vectors, "claim");
    assert_eq!(VoucherClaim::new(&config, &voucher, 4_200), claim);
    assert_eq!(
        authorizer.sign_claim_batch(&network, &[claim]).unwrap(),
        vectors["claimAuthorizerSignature"]
    );
    assert_eq!(
        authorizer.sign_refund(&network, &id, 3, 777).unwrap(),
        vectors["refund"]["signature"]
    );
}

#[test]
fn the_official_clients_deposit_verifies_and_settles_and_its_claim_is_accepted() {
    let vectors = vectors();
    let now = vectors["now"].as_u64().unwrap();
    let facilitator = SandboxFacilitator::new().with_clock(move || now + 5);
    let requirements: PaymentRequirements = field(&vectors, "requirements");
    let payment = PaymentPayload {
        x402_version: X402Version::V2,
        resource: None,
        accepted: requirements.clone(),
        payload: serde_json::value::to_raw_value(&vectors["deposit"]).unwrap(),
        extensions: None,
    };
    let request = FacilitatorRequest::new(payment, requirements.clone());
    let verified = facilitator.verify_batch(&request);
    assert!(verified.is_valid, "{verified:?}");
    let settled = facilitator.settle_batch(&request);
    assert!(settled.success, "{settled:?}");
    assert_eq!(settled.amount, "100000");

    let claim = BatchPayload::Claim {
        claims: vec![field(&vectors, "claim")],
        claim_authorizer_signature: Some(field(&vectors, "claimAuthorizerSignature")),
    };
    let mut claim_requirements = requirements;
    claim_requirements.amount = x402_wire::AtomicAmount(0);
    let claim = PaymentPayload {
        x402_version: X402Version::V2,
        resource: None,
        accepted: claim_requirements.clone(),
        payload: serde_json::value::to_raw_value(&claim).unwrap(),
        extensions: None,
    };
    let claimed = facilitator.settle_batch(&FacilitatorRequest::new(claim, claim_requirements));
    assert!(claimed.success, "{claimed:?}");
    let id = vectors["channelId"].as_str().unwrap();
    let state = facilitator
        .channel_state(&Network::BASE_SEPOLIA, id)
        .unwrap();
    assert_eq!((state.balance, state.total_claimed), (100_000, 4_200));
}

#[test]
fn the_official_clients_permit2_deposit_verifies_and_settles() {
    let vectors = vectors();
    let now = vectors["now"].as_u64().unwrap();
    let facilitator = SandboxFacilitator::new().with_clock(move || now + 5);
    let requirements: PaymentRequirements = field(&vectors, "permit2Requirements");
    let payment = PaymentPayload {
        x402_version: X402Version::V2,
        resource: None,
        accepted: requirements.clone(),
        payload: serde_json::value::to_raw_value(&vectors["permit2Deposit"]).unwrap(),
        extensions: None,
    };
    let request = FacilitatorRequest::new(payment, requirements);
    let verified = facilitator.verify_batch(&request);
    assert!(verified.is_valid, "{verified:?}");
    let settled = facilitator.settle_batch(&request);
    assert!(settled.success, "{settled:?}");
    assert_eq!(settled.amount, "50000");
    let payer = vectors["channelConfig"]["payer"].as_str().unwrap();
    assert_eq!(facilitator.balance_of(payer).get(), 1_000_000_000 - 50_000);
    let again = facilitator.settle_batch(&request);
    assert_eq!(
        again.error_reason.as_deref(),
        Some(tower_x402_sandbox::batch::reason::DEPOSIT_SIMULATION_FAILED),
        "the Permit2 nonce is spent"
    );
}
