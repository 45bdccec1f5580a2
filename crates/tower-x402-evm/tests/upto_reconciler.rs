//! The Permit2 reconciler for `upto` payments over real JSON-RPC on loopback, against the
//! sandbox ledger's chain view: a consumed nonce with the payment's transfer is settled, an
//! unconsumed one is not, and a consumed one without the transfer stays in doubt.

use serde_json::json;
use tower_x402::settlement::{Reconciler, Reconciliation};
use tower_x402_evm::EvmRpcReconciler;
use tower_x402_sandbox::{SandboxFacilitator, SandboxWallet};
use x402_wire::{
    AtomicAmount, FacilitatorRequest, Network, PaymentPayload, PaymentRequired,
    PaymentRequirements, ResourceInfo, UPTO_SCHEME, UsdcDeployment, X402Version,
};

const PAY_TO: &str = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";
const NOW: u64 = 1_750_000_000;

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
        amount: AtomicAmount(500_000),
        asset: usdc.asset.into(),
        pay_to: PAY_TO.into(),
        max_timeout_seconds: 300,
        extra: Some(extra),
    }
}

fn pay(wallet: &SandboxWallet, accept: &PaymentRequirements, now: u64) -> PaymentPayload {
    let required = PaymentRequired {
        x402_version: X402Version::V2,
        error: None,
        resource: ResourceInfo::new("https://shop.example/rows"),
        accepts: vec![accept.clone()],
        extensions: None,
    };
    wallet.pay_at(&required, now).unwrap()
}

/// What the server sends to `/settle`: the client's payload, the requirement charging `amount`.
fn charging(
    payment: &PaymentPayload,
    accept: &PaymentRequirements,
    amount: u128,
) -> FacilitatorRequest {
    let mut requirements = accept.clone();
    requirements.amount = AtomicAmount(amount);
    FacilitatorRequest::new(payment.clone(), requirements)
}

async fn serve_chain(sandbox: &SandboxFacilitator, network: Network) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let router = sandbox.rpc_router(network);
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    url
}

#[tokio::test]
async fn the_permit2_reconciler_reads_nonce_bitmap_and_transfer_logs() {
    let sandbox = SandboxFacilitator::new().with_clock(|| NOW);
    let accept = upto_accept(&sandbox);
    let wallet = SandboxWallet::random();

    // Three metered payments of one payer to the same payTo, in blocks 1 to 3, and an exact one.
    let amounts = [120_000, 35_000, 500_000];
    let paid: Vec<_> = amounts
        .iter()
        .map(|amount| charging(&pay(&wallet, &accept, NOW), &accept, *amount))
        .collect();
    for payment in &paid {
        assert!(sandbox.settle_payment(payment).success);
    }
    let url = serve_chain(&sandbox, Network::BASE_SEPOLIA).await;
    let reconciler = EvmRpcReconciler::new(&url)
        .unwrap()
        .chunk_blocks(1)
        .search_blocks(10);

    // Consumed, with the transfer of the amount charged: settled, in its own transaction.
    for (index, payment) in paid.iter().enumerate() {
        let transaction = sandbox.settlements()[index].transaction.clone();
        assert_eq!(
            reconciler.reconcile(payment).await,
            Reconciliation::Settled { transaction },
            "payment {index}"
        );
        assert_eq!(
            sandbox.reconcile_payment(payment),
            reconciler.reconcile(payment).await
        );
    }

    // Not consumed, deadline ahead: not settled (yet); the payment core keeps it in doubt.
    let pending = charging(&pay(&wallet, &accept, NOW), &accept, 10_000);
    assert_eq!(
        reconciler.reconcile(&pending).await,
        Reconciliation::NotSettled
    );
    assert_eq!(
        sandbox.reconcile_payment(&pending),
        Reconciliation::NotSettled
    );

    // Not consumed, deadline passed: not settled; the payment core releases it as expired.
    let expired = charging(&pay(&wallet, &accept, NOW - 10_000), &accept, 10_000);
    assert_eq!(
        reconciler.reconcile(&expired).await,
        Reconciliation::NotSettled
    );

    // A zero charge used no nonce: not settled, whatever was answered.
    let zero = charging(&pay(&wallet, &accept, NOW), &accept, 0);
    assert!(sandbox.settle_payment(&zero).success);
    assert_eq!(
        reconciler.reconcile(&zero).await,
        Reconciliation::NotSettled
    );

    // Consumed, but for another amount than the one asked about: never taken as proof.
    let mut requirement = paid[1].payment_requirements().as_ref().clone();
    requirement.amount = AtomicAmount(35_001);
    let other_amount = paid[1].with_requirements(requirement);
    assert!(matches!(
        reconciler.reconcile(&other_amount).await,
        Reconciliation::Unknown { .. }
    ));
    assert!(matches!(
        sandbox.reconcile_payment(&other_amount),
        Reconciliation::Unknown { .. }
    ));

    // Consumed, but the transfer is older than the searched blocks: in doubt, never "not settled".
    let narrow = EvmRpcReconciler::new(&url)
        .unwrap()
        .chunk_blocks(1)
        .search_blocks(1);
    match narrow.reconcile(&paid[0]).await {
        Reconciliation::Unknown { reason } => assert!(reason.contains("consumed"), "{reason}"),
        other => panic!("{other:?}"),
    }

    // A node on another chain is never trusted.
    let mainnet = serve_chain(&sandbox, Network::BASE).await;
    assert!(matches!(
        EvmRpcReconciler::new(&mainnet)
            .unwrap()
            .reconcile(&paid[0])
            .await,
        Reconciliation::Unknown { .. }
    ));
}
