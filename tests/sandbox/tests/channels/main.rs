//! The sandbox speaks `batch-settlement` over HTTP on loopback: one deposit, then vouchers
//! claimed in one batch and swept; claims beyond the balance or the ceiling, or with a forged
//! signature, refused and stale ones changing nothing; cooperative refunds with their nonce; a
//! timed withdrawal that completes only after its delay, beaten by a claim; several channels in
//! one claim; the contract's views over JSON-RPC.

mod claims;
mod deposits;
mod refunds;
mod support;
mod withdrawals;
