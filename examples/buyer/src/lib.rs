//! The wallet behind `pay` and `siwx-proof`: a secp256k1 key that answers x402 challenges with
//! signed payments and `sign-in-with-x` challenges with EIP-4361 proofs.
//!
//! The signatures are real: `k256` signs the EIP-712 prehash of an EIP-3009
//! `TransferWithAuthorization` (`exact`), of a Permit2 `PermitWitnessTransferFrom` with the
//! `exact` witness (`exact` paid through Permit2) or the `upto` witness (`upto`), and the
//! EIP-191 hash of a sign-in message. The typed messages
//! are hashed field by field with `sha3`'s keccak-256, so the buyer builds with the wire types,
//! an HTTP client and these two crates only — no server side, no alloy `sol!` macros. Its tests
//! check every signature against the sandbox facilitator, which hashes with alloy.
//!
//! ```
//! use x402_buyer::Wallet;
//! use x402_wire::{header, PaymentRequired};
//!
//! let value = "eyJ4NDAyVmVyc2lvbiI6MiwicmVzb3VyY2UiOnsidXJsIjoiaHR0cHM6Ly9leGFtcGxlLmNvbS9hIn0sImFjY2VwdHMiOlt7InNjaGVtZSI6ImV4YWN0IiwibmV0d29yayI6ImVpcDE1NTo4NDUzMiIsImFtb3VudCI6IjEwMDAwIiwiYXNzZXQiOiIweDAzNkNiRDUzODQyYzU0MjY2MzRlNzkyOTU0MWVDMjMxOGYzZENGN2UiLCJwYXlUbyI6IjB4MjA5NjkzQmM2YWZjMEM1MzI4YkEzNkZhRjAzQzUxNEVGMzEyMjg3QyIsIm1heFRpbWVvdXRTZWNvbmRzIjo2MH1dfQ==";
//! let mut required: PaymentRequired = header::decode(value.as_bytes())?;
//! let extra = serde_json::json!({"name": "USDC", "version": "2"});
//! required.accepts[0].extra = extra.as_object().cloned();
//!
//! let wallet = Wallet::random()?;
//! let payment = wallet.pay(&required)?;
//! assert_eq!(payment.accepted, required.accepts[0]);
//! let signature = header::encode(&payment)?; // the PAYMENT-SIGNATURE value
//! assert!(signature.len() > 500);
//! # Ok::<_, Box<dyn std::error::Error>>(())
//! ```

#![cfg_attr(docsrs, feature(doc_cfg))]

mod eip712;
mod exact_permit2;
mod sign_in;
mod solana;
mod wallet;

pub use solana::SolanaWallet;
pub use wallet::{Wallet, WalletError};
