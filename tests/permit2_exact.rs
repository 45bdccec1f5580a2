//! `exact` paid through Permit2 end to end against the sandbox: an `X402Layer` offering the
//! Permit2 accept over loopback HTTP, the sandbox facilitator over HTTP, the sandbox wallet's
//! real Permit2 (and EIP-2612) signatures. A purchase moves the price once, whatever replays,
//! concurrent copies or lost answers; a permit that does not pay its accept is refused before
//! `/verify`; a buyer with no Permit2 allowance pays in one request through
//! `eip2612GasSponsoring`.

use std::sync::Arc;

use axum::Router;
use axum::routing::get;
use tower_x402::{HttpFacilitator, Offer, X402Layer};
use tower_x402_evm::EvmRpcReconciler;
use tower_x402_sandbox::{SandboxFacilitator, SandboxWallet, Step};
use x402_wire::{
    Network, PaymentPayload, PaymentRequired, PaymentRequirements, ResourceInfo, UsdcDeployment,
};

#[path = "common/sandbox_shop.rs"]
mod sandbox_shop;

use sandbox_shop::{PAY_TO, PRICE, START, Shop, now, serve, settlement};

fn offer(path: &str) -> Arc<Offer> {
    let usdc = &UsdcDeployment::BASE_SEPOLIA;
    Arc::new(
        Offer::builder(ResourceInfo::new(format!("https://api.example.com{path}")))
            .usdc_permit2(usdc, "0.25".parse().unwrap(), PAY_TO)
            .eip2612_gas_sponsoring()
            .erc20_approval_gas_sponsoring()
            .build()
            .unwrap(),
    )
}

/// A shop selling `/report` and `/other` at the same price through Permit2, its ledger in
/// memory, and (when `reconciled`) the Permit2 reconciler reading the sandbox's chain view.
async fn shop(reconciled: bool) -> Shop {
    Shop::open(
        SandboxFacilitator::new(),
        offer,
        |payments, sandbox| async move {
            if !reconciled {
                return payments;
            }
            let chain = serve(sandbox.rpc_router(Network::BASE_SEPOLIA)).await;
            payments.reconciler(EvmRpcReconciler::new(&chain).unwrap())
        },
    )
    .await
}

/// A Permit2 payment of `accept` whose permit `change` altered before the wallet signed it.
fn tampered(
    wallet: &SandboxWallet,
    required: &PaymentRequired,
    change: impl FnOnce(&mut x402_wire::ExactPermit2Authorization),
) -> PaymentPayload {
    let accept: &PaymentRequirements = &required.accepts[0];
    let mut permit = wallet.exact_permit_at(accept, now()).unwrap();
    change(&mut permit);
    let signed = wallet.sign_exact_permit(accept, &permit).unwrap();
    let mut payment = wallet.pay(required).unwrap();
    payment.payload = serde_json::value::to_raw_value(&signed).unwrap();
    payment
}

#[tokio::test]
async fn a_permit2_purchase_settles_once_and_a_replay_is_delivered_again() {
    let shop = shop(false).await;
    let challenge = shop.challenge().await;
    let accept = &challenge.accepts[0];
    assert_eq!(accept.scheme, "exact");
    assert_eq!(
        accept.extra.as_ref().unwrap()["assetTransferMethod"],
        "permit2"
    );
    assert!(
        challenge
            .extensions
            .as_ref()
            .unwrap()
            .contains_key("eip2612GasSponsoring")
    );
    let wallet = SandboxWallet::random();
    let payment = wallet.pay(&challenge).unwrap();
    assert!(
        payment.exact_permit2().is_ok(),
        "the wallet signs a Permit2 permit"
    );

    let response = shop.buy(&payment).await;
    assert_eq!(response.status(), 200);
    let settled = settlement(&response);
    assert!(settled.success);
    assert_eq!(settled.payer.as_deref(), Some(wallet.address().as_str()));
    assert_eq!(response.text().await.unwrap(), "the report");
    let recorded = &shop.sandbox.settlements()[0];
    assert_eq!(
        (recorded.scheme.as_str(), recorded.transfer_method.as_str()),
        ("exact", "permit2")
    );
    assert_eq!(shop.balance(&wallet), START - PRICE);

    // The same payment for the same request: delivered again from the record, settled once.
    let replay = shop.buy(&payment).await;
    assert_eq!(replay.status(), 200);
    assert_eq!(settlement(&replay).transaction, settled.transaction);
    assert_eq!(replay.text().await.unwrap(), "the report");
    assert_eq!(shop.sandbox.settlement_count(), 1);
    assert_eq!(shop.sandbox.settle_calls(), 1);
    assert_eq!(shop.balance(&wallet), START - PRICE);

    // The same permit for another resource of the same price is refused, nothing run or moved.
    let verifies = shop.sandbox.verify_calls();
    let mut elsewhere = payment.clone();
    elsewhere.resource = Some(ResourceInfo::new("https://api.example.com/other"));
    for (path, sent) in [("/other", &payment), ("/other", &elsewhere)] {
        let refused = shop.buy_at(path, sent).await;
        let status = refused.status().as_u16();
        assert!(matches!(status, 402 | 409), "{path}: {status}");
        let body: serde_json::Value = refused.json().await.unwrap();
        assert!(body["error"].is_string(), "{body}");
    }
    assert_eq!(shop.sandbox.verify_calls(), verifies);
    assert_eq!(shop.sandbox.settlement_count(), 1);
    assert_eq!(shop.balance(&wallet), START - PRICE);
}

#[tokio::test]
async fn twenty_concurrent_copies_of_a_permit_settle_once() {
    let shop = Arc::new(shop(false).await);
    let wallet = SandboxWallet::random();
    let payment = Arc::new(wallet.pay(&shop.challenge().await).unwrap());
    let copies: Vec<_> = (0..20)
        .map(|_| {
            let (shop, payment) = (Arc::clone(&shop), Arc::clone(&payment));
            tokio::spawn(async move {
                let response = shop.buy(&payment).await;
                let status = response.status().as_u16();
                (
                    status,
                    (status == 200).then(|| settlement(&response).transaction),
                )
            })
        })
        .collect();
    let mut delivered = 0;
    for copy in copies {
        let (status, transaction) = copy.await.unwrap();
        // Each copy is delivered (from the one settlement) or asked to retry the same payment.
        assert!(matches!(status, 200 | 503), "status {status}");
        if let Some(transaction) = transaction {
            assert_eq!(transaction, shop.sandbox.settlements()[0].transaction);
            delivered += 1;
        }
    }
    assert!(delivered >= 1);
    assert_eq!(shop.sandbox.settlement_count(), 1);
    assert_eq!(shop.balance(&wallet), START - PRICE);
}

#[tokio::test]
async fn a_permit_that_does_not_pay_its_accept_is_refused_before_verify() {
    let shop = shop(false).await;
    let challenge = shop.challenge().await;
    let wallet = SandboxWallet::random();
    let other = "0x1111111111111111111111111111111111111111".to_owned();
    let cases: Vec<(&str, PaymentPayload)> = vec![
        (
            "amount",
            tampered(&wallet, &challenge, |p| {
                p.permitted.amount = (PRICE - 1).to_string()
            }),
        ),
        (
            "payTo",
            tampered(&wallet, &challenge, |p| p.witness.to = other.clone()),
        ),
        (
            "token",
            tampered(&wallet, &challenge, |p| {
                p.permitted.token = UsdcDeployment::BASE.asset.to_owned()
            }),
        ),
        (
            "spender",
            tampered(&wallet, &challenge, |p| {
                p.spender = x402_wire::UPTO_PROXY_ADDRESS.to_owned()
            }),
        ),
        (
            "deadline",
            tampered(&wallet, &challenge, |p| {
                p.deadline = (now() - 1).to_string()
            }),
        ),
    ];
    for (field, payment) in cases {
        let response = shop.buy(&payment).await;
        assert_eq!(response.status(), 402, "{field}");
        let body: serde_json::Value = response.json().await.unwrap();
        let error = body["error"].as_str().unwrap_or_default().to_owned();
        if field == "deadline" {
            assert!(error.contains("expired"), "{field}: {error}");
        } else {
            assert!(error.contains(field), "{field}: {error}");
        }
    }
    assert_eq!(shop.sandbox.verify_calls(), 0, "nothing reached /verify");

    // A forged signature reaches the facilitator, which refuses it; nothing moves.
    let mut forged = wallet.pay(&challenge).unwrap();
    let mut proof = forged.exact_permit2().unwrap();
    proof.signature = SandboxWallet::random()
        .sign_exact_permit(&challenge.accepts[0], &proof.permit2_authorization)
        .unwrap()
        .signature;
    forged.payload = serde_json::value::to_raw_value(&proof).unwrap();
    let response = shop.buy(&forged).await;
    assert_eq!(response.status(), 402);
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(body["error"], "invalid_permit2_signature");
    assert_eq!(shop.sandbox.settlement_count(), 0);
    assert_eq!(shop.balance(&wallet), START);
}

#[tokio::test]
async fn a_lost_settle_answer_is_resolved_from_the_nonce_bitmap() {
    let shop = shop(true).await;
    let wallet = SandboxWallet::random();
    let payment = wallet.pay(&shop.challenge().await).unwrap();
    // The settlement happens and its answer is lost; the identical re-send is refused as the
    // nonce used: the reconciler finds the nonce consumed and the transfer in the logs.
    shop.sandbox.queue_settle(Step::AnswerLost);
    let mut statuses = Vec::new();
    let mut delivered = None;
    for _ in 0..3 {
        let response = shop.buy(&payment).await;
        statuses.push(response.status().as_u16());
        if response.status() == 200 {
            delivered = Some(settlement(&response));
            break;
        }
    }
    let delivered = delivered.unwrap_or_else(|| panic!("never delivered: {statuses:?}"));
    assert!(delivered.success);
    assert_eq!(
        delivered.transaction,
        shop.sandbox.settlements()[0].transaction
    );
    assert!(!statuses.contains(&402), "{statuses:?}");
    assert_eq!(shop.sandbox.settlement_count(), 1);
    assert_eq!(shop.balance(&wallet), START - PRICE);
}

#[tokio::test]
async fn a_buyer_with_no_allowance_pays_in_one_request_through_eip2612() {
    let shop = shop(false).await;
    let challenge = shop.challenge().await;
    let network = &challenge.accepts[0].network;
    let wallet = SandboxWallet::random();
    shop.sandbox
        .set_permit2_allowance(network, &wallet.address(), 0)
        .unwrap();

    // Without an approval the facilitator refuses it: nothing moves.
    let unapproved = wallet.pay(&challenge).unwrap();
    let refused = shop.buy(&unapproved).await;
    assert_eq!(refused.status(), 402);
    let body: serde_json::Value = refused.json().await.unwrap();
    assert_eq!(body["error"], "permit2_allowance_required");
    assert_eq!(shop.balance(&wallet), START);

    // With its EIP-2612 approval of Permit2 in the extension: one request, settled.
    let mut payment = wallet.pay(&challenge).unwrap();
    let nonce = shop
        .sandbox
        .eip2612_nonce(network, &wallet.address())
        .unwrap();
    wallet.sponsor_eip2612(&mut payment, nonce, now()).unwrap();
    let response = shop.buy(&payment).await;
    assert_eq!(response.status(), 200);
    assert!(settlement(&response).success);
    assert_eq!(shop.balance(&wallet), START - PRICE);
    assert_eq!(
        shop.sandbox
            .permit2_allowance(network, &wallet.address())
            .unwrap(),
        u128::MAX,
        "the permit approved Permit2 for everything"
    );
    assert_eq!(
        shop.sandbox
            .eip2612_nonce(network, &wallet.address())
            .unwrap(),
        nonce + 1
    );

    // An approval signed by another key is refused by the facilitator, nothing moves.
    let other = SandboxWallet::random();
    shop.sandbox
        .set_permit2_allowance(network, &other.address(), 0)
        .unwrap();
    let mut forged = other.pay(&challenge).unwrap();
    wallet.sponsor_eip2612(&mut forged, nonce, now()).unwrap();
    let response = shop.buy(&forged).await;
    assert_eq!(response.status(), 402);
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(body["error"], "eip2612_from_mismatch");
    assert_eq!(shop.balance(&other), START);
}

#[tokio::test]
async fn an_offer_listing_both_methods_settles_the_one_the_payment_names() {
    let sandbox = SandboxFacilitator::new();
    let facilitator = HttpFacilitator::new(serve(sandbox.router()).await).unwrap();
    let usdc = &UsdcDeployment::BASE_SEPOLIA;
    let offer = Offer::builder(ResourceInfo::new("https://api.example.com/report"))
        .usdc(usdc, "0.25".parse().unwrap(), PAY_TO)
        .usdc_permit2(usdc, "0.25".parse().unwrap(), PAY_TO)
        .build()
        .unwrap();
    let layer = X402Layer::new(facilitator, Arc::new(offer));
    let shop = Shop {
        base: serve(Router::new().route("/report", get(|| async { "the report" }).layer(layer)))
            .await,
        sandbox,
    };
    let mut challenge = shop.challenge().await;
    assert_eq!(challenge.accepts.len(), 2);
    // The two accepts differ only in their transfer method: pay the second, through Permit2.
    challenge.accepts.remove(0);
    let wallet = SandboxWallet::random();
    let payment = wallet.pay(&challenge).unwrap();
    let response = shop.buy(&payment).await;
    assert_eq!(response.status(), 200);
    let settled = &shop.sandbox.settlements()[0];
    assert_eq!(settled.transfer_method, "permit2");
    assert_eq!(shop.balance(&wallet), START - PRICE);
}

#[tokio::test]
async fn a_buyer_with_no_allowance_pays_in_one_request_through_a_signed_approve() {
    let shop = shop(false).await;
    let challenge = shop.challenge().await;
    let extensions = challenge.extensions.as_ref().unwrap();
    assert!(extensions.contains_key("erc20ApprovalGasSponsoring"));
    let network = &challenge.accepts[0].network;
    let wallet = SandboxWallet::random();
    shop.sandbox
        .set_permit2_allowance(network, &wallet.address(), 0)
        .unwrap();

    // An approve transaction signed by another key is refused; nothing moves.
    let mut forged = wallet.pay(&challenge).unwrap();
    SandboxWallet::random()
        .sponsor_erc20_approval(&mut forged, 0)
        .unwrap();
    let response = shop.buy(&forged).await;
    assert_eq!(response.status(), 402);
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(body["error"], "erc20_approval_from_mismatch");
    assert_eq!(shop.balance(&wallet), START);

    // Its own signed approve(Permit2, max), broadcast by the facilitator, then the transfer.
    let mut payment = wallet.pay(&challenge).unwrap();
    wallet.sponsor_erc20_approval(&mut payment, 0).unwrap();
    let response = shop.buy(&payment).await;
    assert_eq!(response.status(), 200);
    assert!(settlement(&response).success);
    assert_eq!(shop.balance(&wallet), START - PRICE);
    assert_eq!(
        shop.sandbox
            .permit2_allowance(network, &wallet.address())
            .unwrap(),
        u128::MAX,
        "the transaction approved Permit2 for everything"
    );
}
