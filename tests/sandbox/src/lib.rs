//! A stand-in x402 facilitator and a payer wallet, with real EIP-712 signatures and no chain,
//! for testing services behind [`tower-x402`](tower_x402): in process, over HTTP on loopback,
//! with scripted answers and faults, and with its ledger served as an Ethereum JSON-RPC chain.
//!
//! In production the facilitator is an external service and the only party that settles. The
//! sandbox behaves like one: [`SandboxFacilitator`] recovers the signer of each EIP-3009
//! `TransferWithAuthorization` (EIP-712 hashing by `alloy-sol-types`, secp256k1 by `k256`),
//! applies the reference facilitator's checks in its order and answers with its reason codes
//! ([`reason`]), and settles into an in-memory ledger where each `(network, asset, payer,
//! nonce)` settles at most once. [`SandboxWallet`] is the other side: it answers a 402
//! challenge with a signed payment, like the reference TypeScript client.
//!
//! The facilitator implements [`Facilitator`](tower_x402::Facilitator), so it plugs into
//! [`X402Layer`](tower_x402::X402Layer) directly; [`SandboxFacilitator::router`] serves the same
//! thing over HTTP for clients that expect a URL. Either way each call follows its script of
//! [`Step`]s: the sandbox's own answer by default, or a refusal, a lost answer, a closed
//! connection, a `settlement_pending`, a delay, an error status. It is also a
//! [`Reconciler`](tower_x402::settlement::Reconciler) (it knows what it settled), and
//! [`SandboxFacilitator::rpc_router`] serves its ledger as an Ethereum JSON-RPC chain, which
//! `tower_x402_evm::EvmRpcReconciler` can read.
//!
//! It settles Solana `exact` too ([`solana`]): the buyer's ed25519 signature over the
//! transaction's message, the official facilitator's checks, a simulated SPL-token ledger, and
//! the Solana JSON-RPC a buyer's client and a reconciler read at `POST /rpc/solana`;
//! [`SandboxSolanaWallet`] pays.
//!
//! The facilitator also speaks `batch-settlement`, payment channels over a simulated
//! `x402BatchSettlement` contract: deposits, vouchers, claims, sweeps, refunds and timed
//! withdrawals, with the wallet's side in [`SandboxWallet`] ([`batch`]).
//!
//! [`SandboxWallet::buy`] makes a buyer's whole round trip against a service in process — the
//! request, its 402, the payment, the paid request — in one call, for tests.
//!
//! [`demo`] holds what the example servers share at start-up: the facilitator at a URL or the
//! sandbox in process, and the `listening on http://ADDR` line scripts wait for.
//!
//! ```
//! use x402_wire::{FacilitatorRequest, ResourceInfo, UsdcDeployment};
//! use tower_x402_sandbox::{SandboxFacilitator, SandboxWallet};
//! use tower_x402::Offer;
//!
//! let offer = Offer::builder(ResourceInfo::new("https://shop.example/report"))
//!     .usdc(&UsdcDeployment::BASE_SEPOLIA, "0.25".parse()?, "0x209693Bc6afc0C5328bA36FaF03C514EF312287C")
//!     .build()?;
//! let facilitator = SandboxFacilitator::new();
//! let wallet = SandboxWallet::random();
//!
//! let payment = wallet.pay(offer.payment_required())?;
//! let request = FacilitatorRequest::new(payment, offer.accepts()[0].clone());
//! assert!(facilitator.verify_payment(&request).is_valid);
//!
//! let settled = facilitator.settle_payment(&request);
//! assert!(settled.success);
//! assert_eq!(facilitator.balance_of(&wallet.address()).get(), 1_000_000_000 - 250_000);
//!
//! let replayed = facilitator.settle_payment(&request);
//! assert_eq!(replayed.error_reason.as_deref(), Some("invalid_exact_evm_nonce_already_used"));
//! # Ok::<_, Box<dyn std::error::Error>>(())
//! ```

#![cfg_attr(docsrs, feature(doc_cfg))]

mod account_code;
pub mod batch;
mod buy;
mod clock;
pub mod demo;
mod eip712;
mod erc20_approval;
mod exact_permit2;
mod facilitator;
mod ledger;
mod permit_checks;
pub mod reason;
mod reconcile;
mod rpc;
mod script;
mod server;
pub mod siwx;
pub mod solana;
mod typed_data;
mod upto;
mod verify;
mod wallet;
mod wallet_permit2;

pub use buy::{BuyError, Purchase};
pub use eip712::{
    AuthorizationDigest, AuthorizationError, DigestError, DomainError, authorization_digest,
};
pub use facilitator::{InvalidAddress, SandboxFacilitator};
pub use ledger::SandboxSettlement;
pub use script::Step;
pub use siwx::SandboxSolanaWallet;
pub use solana::SolanaSettlement;
pub use wallet::{SandboxWallet, WalletError};

/// The README's example, compiled and run as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
