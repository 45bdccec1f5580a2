//! EVM `exact` payments checked for their payer's signature before the facilitator is asked,
//! end to end: an `X402Layer` over loopback HTTP with `EvmExact` registered, the sandbox
//! facilitator over HTTP counting its `/verify` and `/settle` calls, the sandbox wallet's real
//! EIP-3009 and Permit2 signatures (its own EIP-712 signer, not the crate's). A signature that
//! is not the payer's key's, from an account without code, reaches neither `/verify` nor the
//! `/settle` sent alone when settling first; a contract wallet's goes on to the facilitator.

use std::sync::Arc;

use serde_json::Value;
use tower_x402::{Offer, SettlementMode};
use tower_x402_evm::EvmExact;
use tower_x402_sandbox::{SandboxFacilitator, SandboxWallet, Step};
use x402_wire::{PaymentPayload, PaymentRequirements, ResourceInfo, UsdcDeployment};

#[path = "common/sandbox_shop.rs"]
mod sandbox_shop;

use sandbox_shop::{PAY_TO, PRICE, START, Shop, now};

#[derive(Clone, Copy, Debug)]
enum Method {
    Eip3009,
    Permit2,
}

const MODES: [SettlementMode; 2] = [SettlementMode::After, SettlementMode::Before];

/// An offer of one accept on Base Sepolia USDC through `method`, settled in `mode`.
fn offer(method: Method, mode: SettlementMode) -> impl Fn(&str) -> Arc<Offer> {
    move |path| {
        let usdc = &UsdcDeployment::BASE_SEPOLIA;
        let price = "0.25".parse().unwrap();
        let builder = Offer::builder(ResourceInfo::new(format!("https://api.example.com{path}")));
        let builder = match method {
            Method::Eip3009 => builder.usdc(usdc, price, PAY_TO),
            Method::Permit2 => builder.usdc_permit2(usdc, price, PAY_TO),
        };
        Arc::new(builder.settlement(mode).build().unwrap())
    }
}

/// A shop selling through `sandbox` with `EvmExact` registered — the sandbox's simulated chain
/// its source of account code when `code`.
async fn shop(
    sandbox: SandboxFacilitator,
    method: Method,
    mode: SettlementMode,
    code: bool,
) -> Shop {
    Shop::open(
        sandbox,
        offer(method, mode),
        move |payments, sandbox| async move {
            let scheme = match code {
                true => EvmExact::new().account_code(sandbox),
                false => EvmExact::new(),
            };
            payments.scheme(scheme)
        },
    )
    .await
}

/// `payment` with byte `at` of its signature flipped.
fn flipped(payment: &PaymentPayload, at: usize) -> PaymentPayload {
    let mut proof: Value = serde_json::from_str(payment.payload.get()).unwrap();
    let mut text = proof["signature"].as_str().unwrap().to_owned();
    // The low hex digit of byte `at`, after the `0x`.
    let digit = 2 + 2 * at + 1;
    let flipped = u8::from_str_radix(&text[digit..=digit], 16).unwrap() ^ 0x01;
    text.replace_range(digit..=digit, &format!("{flipped:x}"));
    proof["signature"] = text.into();
    with_proof(payment, &proof)
}

/// `payment`'s message, unchanged, signed by `signer`.
fn signed_by(
    signer: &SandboxWallet,
    accept: &PaymentRequirements,
    payment: &PaymentPayload,
) -> PaymentPayload {
    let proof = match payment.exact_permit2() {
        Ok(proof) => {
            let signed = signer.sign_exact_permit(accept, &proof.permit2_authorization);
            serde_json::to_value(signed.unwrap())
        }
        Err(_) => {
            let authorization = payment.exact_evm().unwrap().authorization;
            serde_json::to_value(signer.sign_authorization(accept, &authorization).unwrap())
        }
    };
    with_proof(payment, &proof.unwrap())
}

fn with_proof(payment: &PaymentPayload, proof: &Value) -> PaymentPayload {
    let mut changed = payment.clone();
    changed.payload = serde_json::value::to_raw_value(proof).unwrap();
    changed
}

async fn error_of(response: reqwest::Response) -> (u16, Value) {
    let status = response.status().as_u16();
    (
        status,
        response.json::<Value>().await.unwrap()["error"].clone(),
    )
}

/// In both settlement modes: a signature with one byte flipped, and one by another key, are
/// refused 402 `invalid_exact_evm_signature` and nothing reaches the facilitator (again when
/// presented twice); the payer's own signature then buys, settling first with `/settle` alone.
async fn forged_signatures_never_reach_the_facilitator(method: Method) {
    for mode in MODES {
        let shop = shop(SandboxFacilitator::new(), method, mode, true).await;
        let challenge = shop.challenge().await;
        let accept = &challenge.accepts[0];
        let wallet = SandboxWallet::random();
        let payment = wallet.pay(&challenge).unwrap();
        let forgeries = [
            ("a flipped byte in r", flipped(&payment, 7)),
            ("a flipped byte in s", flipped(&payment, 40)),
            (
                "another key",
                signed_by(&SandboxWallet::random(), accept, &payment),
            ),
        ];
        for (what, forged) in &forgeries {
            for attempt in ["first", "again"] {
                let (status, error) = error_of(shop.buy(forged).await).await;
                assert_eq!(status, 402, "{method:?} {mode:?} {what} ({attempt})");
                assert_eq!(
                    error, "invalid_exact_evm_signature",
                    "{method:?} {mode:?} {what} ({attempt})"
                );
            }
        }
        let calls = (shop.sandbox.verify_calls(), shop.sandbox.settle_calls());
        assert_eq!(
            calls,
            (0, 0),
            "{method:?} {mode:?}: nothing sent to the facilitator"
        );
        assert_eq!(shop.balance(&wallet), START);

        let response = shop.buy(&payment).await;
        assert_eq!(response.status(), 200, "{method:?} {mode:?}");
        assert_eq!(response.text().await.unwrap(), "the report");
        assert_eq!(shop.balance(&wallet), START - PRICE);
        let verifies = usize::from(matches!(mode, SettlementMode::After));
        let calls = (shop.sandbox.verify_calls(), shop.sandbox.settle_calls());
        assert_eq!(calls, (verifies, 1), "{method:?} {mode:?}");
    }
}

#[tokio::test]
async fn a_forged_permit2_signature_is_refused_before_the_facilitator_in_both_modes() {
    forged_signatures_never_reach_the_facilitator(Method::Permit2).await;
}

#[tokio::test]
async fn a_forged_eip3009_signature_is_refused_before_the_facilitator_in_both_modes() {
    forged_signatures_never_reach_the_facilitator(Method::Eip3009).await;
}

/// A contract wallet on the sandbox's chain signs with its owner's key: not its own address's,
/// so only the facilitator can judge it. It goes on (here to a facilitator that trusts it).
#[tokio::test]
async fn a_contract_wallets_signature_is_passed_to_the_facilitator() {
    for method in [Method::Eip3009, Method::Permit2] {
        let sandbox = SandboxFacilitator::new()
            .with_verify(Step::Trust)
            .with_settle(Step::Trust);
        let shop = shop(sandbox, method, SettlementMode::After, true).await;
        let challenge = shop.challenge().await;
        let accept = &challenge.accepts[0];
        let owner = SandboxWallet::random();
        let wallet = shop
            .sandbox
            .deploy_contract_wallet(&owner.address())
            .unwrap();
        let proof = match method {
            Method::Eip3009 => {
                let mut authorization = owner.authorization_at(accept, now()).unwrap();
                authorization.from.clone_from(&wallet);
                serde_json::to_value(owner.sign_authorization(accept, &authorization).unwrap())
            }
            Method::Permit2 => {
                let mut permit = owner.exact_permit_at(accept, now()).unwrap();
                permit.from.clone_from(&wallet);
                serde_json::to_value(owner.sign_exact_permit(accept, &permit).unwrap())
            }
        };
        let payment = with_proof(&owner.pay(&challenge).unwrap(), &proof.unwrap());
        let response = shop.buy(&payment).await;
        assert_eq!(response.status(), 200, "{method:?}");
        assert_eq!(shop.sandbox.verify_calls(), 1, "{method:?}");
        assert_eq!(shop.sandbox.settle_calls(), 1, "{method:?}");
        assert_eq!(shop.sandbox.balance_of(&wallet).get(), START - PRICE);
    }
}

/// Without a source of account code, a signature that is not the payer's cannot be told from a
/// smart wallet's: the facilitator judges it, and refuses it.
#[tokio::test]
async fn without_a_source_of_code_the_facilitator_judges_a_forged_signature() {
    let shop = shop(
        SandboxFacilitator::new(),
        Method::Eip3009,
        SettlementMode::After,
        false,
    )
    .await;
    let challenge = shop.challenge().await;
    let wallet = SandboxWallet::random();
    let payment = wallet.pay(&challenge).unwrap();
    let forged = signed_by(&SandboxWallet::random(), &challenge.accepts[0], &payment);
    let (status, error) = error_of(shop.buy(&forged).await).await;
    assert_eq!(status, 402);
    assert!(
        error.as_str().is_some_and(|e| e.contains("signature")),
        "{error}"
    );
    assert_eq!(shop.sandbox.verify_calls(), 1);
    assert_eq!(shop.sandbox.settle_calls(), 0);
    assert_eq!(shop.balance(&wallet), START);
}
