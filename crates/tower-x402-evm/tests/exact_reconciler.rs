//! The EIP-3009 (`exact`) reconciler over real JSON-RPC on loopback, against the sandbox
//! ledger's chain view: a used authorization with the payment's transfer is settled, an unused
//! one is not, and anything less than the payment's own transfer on the node's own chain stays
//! in doubt.

use tower_x402::Offer;
use tower_x402::settlement::{Reconciler as _, Reconciliation};
use tower_x402_evm::EvmRpcReconciler;
use tower_x402_sandbox::{SandboxFacilitator, SandboxWallet};
use x402_wire::{FacilitatorRequest, Network, PaymentPayload, ResourceInfo, UsdcDeployment};

const URL: &str = "https://shop.example/report";
const PAY_TO: &str = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";

/// The sandbox ledger's chain view of `network` on a loopback port.
async fn serve_chain(sandbox: &SandboxFacilitator, network: Network) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let router = sandbox.rpc_router(network);
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    url
}

#[tokio::test]
async fn the_eip3009_reconciler_reads_authorization_state_and_its_logs() {
    let sandbox = SandboxFacilitator::new();
    let offer = Offer::builder(ResourceInfo::new(URL))
        .usdc(
            &UsdcDeployment::BASE_SEPOLIA,
            "0.25".parse().unwrap(),
            PAY_TO,
        )
        .build()
        .unwrap();
    let request =
        |payment: PaymentPayload| FacilitatorRequest::new(payment, offer.accepts()[0].clone());
    let wallet = SandboxWallet::random();
    let paid: Vec<_> = (0..5)
        .map(|_| request(wallet.pay(offer.payment_required()).unwrap()))
        .collect();
    for payment in &paid {
        assert!(sandbox.settle_payment(payment).success);
    }
    let unpaid = request(wallet.pay(offer.payment_required()).unwrap());
    let url = serve_chain(&sandbox, Network::BASE_SEPOLIA).await;

    // The oldest payment sits in block 1: found by walking back in chunks of one block.
    let reconciler = EvmRpcReconciler::new(&url)
        .unwrap()
        .chunk_blocks(1)
        .search_blocks(10);
    let transaction = sandbox.settlements()[0].transaction.clone();
    assert_eq!(
        reconciler.reconcile(&paid[0]).await,
        Reconciliation::Settled { transaction }
    );
    assert_eq!(
        reconciler.reconcile(&unpaid).await,
        Reconciliation::NotSettled
    );

    // Used, but outside the searched range: unknown, never "not settled".
    let narrow = EvmRpcReconciler::new(&url)
        .unwrap()
        .chunk_blocks(1)
        .search_blocks(2);
    assert!(matches!(
        narrow.reconcile(&paid[0]).await,
        Reconciliation::Unknown { .. }
    ));

    // The transfer must be this payment's: another amount is not proof.
    let mut requirement = paid[1].payment_requirements().as_ref().clone();
    requirement.amount = 1u128.into();
    let cheaper = paid[1].with_requirements(requirement);
    assert!(matches!(
        reconciler.reconcile(&cheaper).await,
        Reconciliation::Unknown { .. }
    ));

    // A node on another chain is never trusted.
    let mainnet = serve_chain(&sandbox, Network::BASE).await;
    let wrong_chain = EvmRpcReconciler::new(&mainnet).unwrap();
    match wrong_chain.reconcile(&paid[0]).await {
        Reconciliation::Unknown { reason } => assert!(reason.contains("chain 8453"), "{reason}"),
        other => panic!("{other:?}"),
    }

    // No node at all.
    let closed = EvmRpcReconciler::new("http://127.0.0.1:1").unwrap();
    assert!(matches!(
        closed.reconcile(&paid[0]).await,
        Reconciliation::Unknown { .. }
    ));
}
