//! The sandbox speaks `upto`: real Permit2 signatures verify and settle the charged amount, at
//! most the permitted maximum, once per Permit2 nonce; every tampered field is refused; a zero
//! charge moves nothing; `/supported` names the facilitator; the chain view answers
//! `nonceBitmap` and shows the transfer.

use alloy_primitives::{Address, U256};
use alloy_sol_types::{SolCall, SolEvent};
use serde_json::{Value, json};
use tower_x402_evm::eip3009::Transfer;
use tower_x402_evm::permit2::{self, nonceBitmapCall};
use tower_x402_sandbox::reason::*;
use tower_x402_sandbox::{SandboxFacilitator, SandboxWallet};
use x402_wire::{
    AtomicAmount, FacilitatorRequest, Network, PERMIT2_ADDRESS, PaymentPayload, PaymentRequired,
    PaymentRequirements, ResourceInfo, UPTO_PROXY_ADDRESS, UPTO_SCHEME, UsdcDeployment,
    X402Version,
};

const PAY_TO: &str = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";
const NOW: u64 = 1_750_000_000;
const MAX: u128 = 500_000;

fn facilitator() -> SandboxFacilitator {
    SandboxFacilitator::new().with_clock(|| NOW)
}

fn upto_accept(facilitator: &SandboxFacilitator) -> PaymentRequirements {
    let usdc = &UsdcDeployment::BASE_SEPOLIA;
    let mut extra = usdc.eip712.map(|d| d.to_extra()).unwrap_or_default();
    extra.insert("assetTransferMethod".into(), json!("permit2"));
    extra.insert(
        "facilitatorAddress".into(),
        json!(facilitator.signer_address()),
    );
    PaymentRequirements {
        scheme: UPTO_SCHEME.into(),
        network: usdc.network.clone(),
        amount: AtomicAmount(MAX),
        asset: usdc.asset.into(),
        pay_to: PAY_TO.into(),
        max_timeout_seconds: 300,
        extra: Some(extra),
    }
}

fn challenge(accept: &PaymentRequirements) -> PaymentRequired {
    PaymentRequired {
        x402_version: X402Version::V2,
        error: None,
        resource: ResourceInfo::new("https://shop.example/rows"),
        accepts: vec![accept.clone()],
        extensions: None,
    }
}

/// The settle request for `payment` charging `amount`.
fn charge(
    payment: &PaymentPayload,
    accept: &PaymentRequirements,
    amount: u128,
) -> FacilitatorRequest {
    let mut requirements = accept.clone();
    requirements.amount = AtomicAmount(amount);
    FacilitatorRequest::new(payment.clone(), requirements)
}

#[test]
fn a_signed_permit_verifies_and_settles_the_charged_amount_once() {
    let facilitator = facilitator();
    let accept = upto_accept(&facilitator);
    let wallet = SandboxWallet::random();
    let payment = wallet.pay_at(&challenge(&accept), NOW).unwrap();
    let permit = payment.upto_evm().unwrap().permit2_authorization;
    assert_eq!(permit.spender, UPTO_PROXY_ADDRESS);
    assert_eq!(permit.permitted.amount, MAX.to_string());
    assert_eq!(permit.witness.facilitator, facilitator.signer_address());
    assert_eq!(permit.deadline, (NOW + 300).to_string());

    let verified = facilitator.verify_payment(&charge(&payment, &accept, MAX));
    assert!(verified.is_valid, "{verified:?}");
    assert_eq!(verified.payer.as_deref(), Some(wallet.address().as_str()));

    let settled = facilitator.settle_payment(&charge(&payment, &accept, 123_000));
    assert!(settled.success, "{settled:?}");
    assert_eq!(settled.amount, Some(AtomicAmount(123_000)));
    assert!(settled.transaction.starts_with("0x"));
    assert_eq!(
        facilitator.balance_of(&wallet.address()).get(),
        1_000_000_000 - 123_000
    );
    assert_eq!(
        facilitator.balance_of(PAY_TO).get(),
        1_000_000_000 + 123_000
    );

    // Once per Permit2 nonce, whatever the amount.
    for amount in [123_000, 1] {
        let again = facilitator.settle_payment(&charge(&payment, &accept, amount));
        assert!(!again.success);
        assert_eq!(again.error_reason.as_deref(), Some(PERMIT2_INVALID_NONCE));
    }
    assert_eq!(facilitator.settlement_count(), 1);
    let record = &facilitator.settlements()[0];
    assert_eq!(record.scheme, "upto");
    assert_eq!(record.amount, AtomicAmount(123_000));
}

#[test]
fn never_settles_above_the_permitted_maximum() {
    let facilitator = facilitator();
    let accept = upto_accept(&facilitator);
    let wallet = SandboxWallet::random();
    let payment = wallet.pay_at(&challenge(&accept), NOW).unwrap();
    let over = facilitator.settle_payment(&charge(&payment, &accept, MAX + 1));
    assert!(!over.success);
    assert_eq!(
        over.error_reason.as_deref(),
        Some(UPTO_AMOUNT_EXCEEDS_PERMITTED)
    );
    assert_eq!(facilitator.settlement_count(), 0);
    // The permit is still good for the maximum itself.
    assert!(
        facilitator
            .settle_payment(&charge(&payment, &accept, MAX))
            .success
    );
}

#[test]
fn a_zero_charge_moves_nothing_and_leaves_the_nonce_unused() {
    let facilitator = facilitator();
    let accept = upto_accept(&facilitator);
    let wallet = SandboxWallet::random();
    let payment = wallet.pay_at(&challenge(&accept), NOW).unwrap();
    let zero = facilitator.settle_payment(&charge(&payment, &accept, 0));
    assert!(zero.success);
    assert_eq!(zero.transaction, "");
    assert_eq!(zero.amount, Some(AtomicAmount(0)));
    assert_eq!(facilitator.settlement_count(), 0);
    assert_eq!(
        facilitator.balance_of(&wallet.address()).get(),
        1_000_000_000
    );
    assert!(
        facilitator
            .settle_payment(&charge(&payment, &accept, 7))
            .success
    );
    assert_eq!(facilitator.settlement_count(), 1);
}

#[test]
fn every_tampered_field_is_refused_with_its_reason() {
    let facilitator = facilitator();
    let accept = upto_accept(&facilitator);
    let wallet = SandboxWallet::random();
    let signed = |edit: &dyn Fn(&mut x402_wire::Permit2Authorization)| {
        let mut permit = wallet.permit_at(&accept, NOW).unwrap();
        edit(&mut permit);
        wallet.sign_permit(&accept, &permit).unwrap()
    };
    let request = |payload: &x402_wire::UptoEvmPayload| {
        let payment = PaymentPayload {
            x402_version: X402Version::V2,
            resource: None,
            accepted: accept.clone(),
            payload: serde_json::value::to_raw_value(&serde_json::to_value(payload).unwrap())
                .expect("a JSON payload"),
            extensions: None,
        };
        charge(&payment, &accept, 1_000)
    };
    let refusal = |request: &FacilitatorRequest| {
        let answer = facilitator.verify_payment(request);
        assert!(!answer.is_valid);
        answer.invalid_reason.unwrap()
    };
    let other = "0x1111111111111111111111111111111111111111";

    // Signed as tampered: the checks of the terms refuse them.
    let cases: [(&str, &dyn Fn(&mut _), &str); 7] = [
        (
            "spender",
            &|p: &mut x402_wire::Permit2Authorization| p.spender = other.into(),
            INVALID_PERMIT2_SPENDER,
        ),
        (
            "witness.to",
            &|p| p.witness.to = other.into(),
            INVALID_PERMIT2_RECIPIENT_MISMATCH,
        ),
        (
            "witness.facilitator",
            &|p| p.witness.facilitator = other.into(),
            UPTO_FACILITATOR_MISMATCH,
        ),
        (
            "deadline",
            &|p| p.deadline = (NOW + 3).to_string(),
            PERMIT2_DEADLINE_EXPIRED,
        ),
        (
            "validAfter",
            &|p| p.witness.valid_after = (NOW + 10).to_string(),
            PERMIT2_NOT_YET_VALID,
        ),
        (
            "token",
            &|p| p.permitted.token = other.into(),
            PERMIT2_TOKEN_MISMATCH,
        ),
        (
            "amount",
            &|p| p.permitted.amount = "999".into(),
            UPTO_AMOUNT_EXCEEDS_PERMITTED,
        ),
    ];
    for (field, edit, reason) in cases {
        assert_eq!(refusal(&request(&signed(edit))), reason, "{field}");
    }

    // Changed after signing: only the signature can tell, and it does.
    let good = signed(&|_| {});
    assert!(facilitator.verify_payment(&request(&good)).is_valid);
    let after: [(&str, &dyn Fn(&mut x402_wire::Permit2Authorization)); 4] = [
        ("permitted.amount", &|p| {
            p.permitted.amount = "600000".into()
        }),
        ("nonce", &|p| p.nonce = "1".into()),
        ("witness.validAfter", &|p| {
            p.witness.valid_after = "1".into()
        }),
        ("deadline", &|p| p.deadline = (NOW + 301).to_string()),
    ];
    for (field, edit) in after {
        let mut tampered = good.clone();
        edit(&mut tampered.permit2_authorization);
        assert_eq!(
            refusal(&request(&tampered)),
            INVALID_PERMIT2_SIGNATURE,
            "{field}"
        );
    }
    // Another signer, or another chain's domain.
    let mut stranger = good.clone();
    stranger.permit2_authorization.from = SandboxWallet::random().address();
    assert_eq!(refusal(&request(&stranger)), INVALID_PERMIT2_SIGNATURE);
    let mut mainnet = accept.clone();
    mainnet.network = Network::BASE;
    let foreign = wallet
        .sign_permit(&mainnet, &good.permit2_authorization)
        .unwrap();
    assert_eq!(refusal(&request(&foreign)), INVALID_PERMIT2_SIGNATURE);

    // Not enough funds for the charge.
    facilitator
        .set_balance(&wallet.address(), AtomicAmount(999))
        .unwrap();
    assert_eq!(refusal(&request(&good)), INSUFFICIENT_FUNDS);
}

#[test]
fn supported_names_this_facilitator_for_upto() {
    let facilitator = facilitator();
    let supported = facilitator.supported_response();
    for network in [Network::BASE, Network::BASE_SEPOLIA] {
        assert!(supported.supports("exact", &network));
        assert!(supported.supports(UPTO_SCHEME, &network));
        let kind = supported
            .kinds
            .iter()
            .find(|kind| kind.scheme == UPTO_SCHEME && kind.network == network)
            .unwrap();
        let extra = kind.extra.as_ref().unwrap();
        assert_eq!(
            extra["facilitatorAddress"],
            json!(facilitator.signer_address())
        );
    }
}

async fn rpc(url: &str, method: &str, params: Value) -> Value {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let answer: Value = reqwest::Client::new()
        .post(url)
        .json(&body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    answer["result"].clone()
}

#[tokio::test]
async fn the_chain_view_answers_nonce_bitmap_and_shows_the_transfer() {
    let facilitator = facilitator();
    let accept = upto_accept(&facilitator);
    let wallet = SandboxWallet::random();
    let payment = wallet.pay_at(&challenge(&accept), NOW).unwrap();
    let nonce: U256 = payment
        .upto_evm()
        .unwrap()
        .permit2_authorization
        .nonce
        .parse()
        .unwrap();
    let settled = facilitator.settle_payment(&charge(&payment, &accept, 42_000));
    assert!(settled.success);

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let router = facilitator.rpc_router(Network::BASE_SEPOLIA);
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });

    let owner: Address = wallet.address().parse().unwrap();
    let bitmap = |word_pos: U256, owner: Address| {
        let data = nonceBitmapCall {
            owner,
            wordPos: word_pos,
        }
        .abi_encode();
        let url = url.clone();
        async move {
            let params = json!([{"to": PERMIT2_ADDRESS, "input": alloy_primitives::hex::encode_prefixed(data)}, "latest"]);
            let answer = rpc(&url, "eth_call", params).await;
            let bytes = alloy_primitives::hex::decode(answer.as_str().unwrap()).unwrap();
            nonceBitmapCall::abi_decode_returns(&bytes).unwrap()
        }
    };
    let (word_pos, bit) = permit2::nonce_position(nonce);
    let word = bitmap(word_pos, owner).await;
    assert_eq!(word, U256::from(1) << bit);
    assert!(permit2::nonce_used(word, nonce));
    assert_eq!(bitmap(word_pos + U256::from(1), owner).await, U256::ZERO);
    assert_eq!(bitmap(word_pos, Address::repeat_byte(7)).await, U256::ZERO);

    let receipt = rpc(
        &url,
        "eth_getTransactionReceipt",
        json!([settled.transaction]),
    )
    .await;
    assert_eq!(receipt["status"], json!("0x1"));
    assert_eq!(receipt["to"], json!(UPTO_PROXY_ADDRESS));
    let logs = receipt["logs"].as_array().unwrap();
    assert_eq!(logs.len(), 1, "{logs:?}");
    assert_eq!(
        logs[0]["topics"][0],
        json!(Transfer::SIGNATURE_HASH.to_string())
    );
    let value = U256::from_str_radix(
        logs[0]["data"].as_str().unwrap().trim_start_matches("0x"),
        16,
    )
    .unwrap();
    assert_eq!(value, U256::from(42_000));

    // Found by topics: Transfer(from = payer, to = payTo).
    let pay_to: Address = PAY_TO.parse().unwrap();
    let filter = json!([{
        "address": accept.asset,
        "topics": [Transfer::SIGNATURE_HASH.to_string(), owner.into_word().to_string(), pay_to.into_word().to_string()],
        "fromBlock": "0x0", "toBlock": "latest"
    }]);
    let found = rpc(&url, "eth_getLogs", filter).await;
    assert_eq!(found.as_array().unwrap().len(), 1);
    assert_eq!(found[0]["transactionHash"], json!(settled.transaction));
}

#[tokio::test]
async fn the_script_applies_to_upto_payments() {
    use tower_x402::Facilitator as _;
    use tower_x402::facilitator::FacilitatorError;
    use tower_x402_sandbox::Step;

    let facilitator = facilitator();
    let accept = upto_accept(&facilitator);
    let wallet = SandboxWallet::random();

    // A lost answer after the money moved: one transfer; the identical re-send is refused with
    // the nonce already used, as an EIP-3009 one is.
    let payment = wallet.pay_at(&challenge(&accept), NOW).unwrap();
    let request = charge(&payment, &accept, 30_000);
    facilitator.queue_settle(Step::AnswerLost);
    assert!(matches!(
        facilitator.settle(&request).await,
        Err(FacilitatorError::Status { .. })
    ));
    assert_eq!(facilitator.settlement_count(), 1);
    let again = facilitator.settle(&request).await.unwrap();
    assert_eq!(again.error_reason.as_deref(), Some(PERMIT2_INVALID_NONCE));
    assert_eq!(again.payer, Some(wallet.address()));
    assert_eq!(facilitator.settlement_count(), 1);

    // Pending, then settled: the identical re-send gets the settlement, amount included.
    let payment = wallet.pay_at(&challenge(&accept), NOW).unwrap();
    let request = charge(&payment, &accept, 12_345);
    facilitator.queue_settle(Step::PendingThenSettled);
    let pending = facilitator.settle(&request).await.unwrap();
    assert_eq!(pending.error_reason.as_deref(), Some("settlement_pending"));
    let settled = facilitator.settle(&request).await.unwrap();
    assert!(settled.success);
    assert_eq!(settled.amount, Some(AtomicAmount(12_345)));
    assert_eq!(facilitator.settlement_count(), 2);

    // Refused by script: the claimed payer is reported, nothing moves.
    let payment = wallet.pay_at(&challenge(&accept), NOW).unwrap();
    facilitator.queue_settle(Step::Refuse("insufficient_funds".into()));
    let refused = facilitator
        .settle(&charge(&payment, &accept, 1))
        .await
        .unwrap();
    assert!(!refused.success);
    assert_eq!(refused.payer, Some(wallet.address()));
    assert_eq!(facilitator.settlement_count(), 2);

    // Trusted: the signature is not read, every other term still is.
    let trusting = facilitator.clone().with_settle(Step::Trust);
    let mut permit = wallet.permit_at(&accept, NOW).unwrap();
    let mut unsigned = wallet.sign_permit(&accept, &permit).unwrap();
    unsigned.signature = "0x00".into();
    let forged = PaymentPayload {
        x402_version: X402Version::V2,
        resource: None,
        accepted: accept.clone(),
        payload: serde_json::value::to_raw_value(&serde_json::to_value(&unsigned).unwrap())
            .expect("a JSON payload"),
        extensions: None,
    };
    assert!(
        trusting
            .settle(&charge(&forged, &accept, 5))
            .await
            .unwrap()
            .success
    );
    permit.permitted.amount = "4".into();
    unsigned.permit2_authorization = permit;
    let over = PaymentPayload {
        payload: serde_json::value::to_raw_value(&serde_json::to_value(&unsigned).unwrap())
            .expect("a JSON payload"),
        ..forged
    };
    let refused = trusting.settle(&charge(&over, &accept, 5)).await.unwrap();
    assert_eq!(
        refused.error_reason.as_deref(),
        Some(UPTO_AMOUNT_EXCEEDS_PERMITTED)
    );
}
