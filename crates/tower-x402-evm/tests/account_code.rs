//! `EvmRpcReconciler` as a source of account code: `eth_getCode` over loopback HTTP against the
//! sandbox's chain view, where a deployed contract wallet has code and a key's account has none.

use alloy_primitives::Address;
use tower_x402_evm::{AccountCode, EvmRpcReconciler};
use tower_x402_sandbox::{SandboxFacilitator, SandboxWallet};
use x402_wire::Network;

#[tokio::test]
async fn eth_get_code_tells_a_contract_wallet_from_a_key() {
    let sandbox = SandboxFacilitator::new();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let router = sandbox.rpc_router(Network::BASE_SEPOLIA);
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    let node = EvmRpcReconciler::new(&url).unwrap();

    let key = SandboxWallet::random();
    let wallet = sandbox.deploy_contract_wallet(&key.address()).unwrap();
    let address = |text: &str| text.parse::<Address>().unwrap();
    let on = Network::BASE_SEPOLIA;
    assert!(node.has_code(&on, address(&wallet)).await.unwrap());
    assert!(!node.has_code(&on, address(&key.address())).await.unwrap());
    // A node of another chain does not answer for this one: the payment goes to the facilitator.
    assert!(
        node.has_code(&Network::BASE, address(&wallet))
            .await
            .is_err()
    );
}
