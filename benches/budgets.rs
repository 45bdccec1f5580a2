//! Instruction budgets (callgrind `Ir`) of the layer's paths, checked by
//! `cargo bench -p tower-x402-benches --bench instructions`, which fails when a path exceeds its
//! budget. Each budget is the count measured on the current code plus about 2–3 % headroom
//! (measured: free 2,596, challenge 4,288, decode + match 34,167–34,247, paid 102,517 — the
//! paid path includes the payment ledger's *in progress*, *settling* and *settled* writes around
//! `/settle`; repeated runs differ by well under 0.1 %). The headroom is tight on purpose:
//! reading the payment header's bytes once more in the measured call adds 4,109 instructions to
//! the paid path (+4.0 %, measured) and fails the check; one more copy of the payment payload
//! (its `clone` counts 7,358 in the profile) would too.
//! Raise a budget only with a reason in the commit that does it.

/// A request the pricing says is free, through the layer (includes the bare call).
pub(crate) const FREE_PATH: u64 = 2_740;
/// An unpaid request for a priced route, answered with the precomputed 402.
pub(crate) const CHALLENGE_PATH: u64 = 4_520;
/// Decoding a `PAYMENT-SIGNATURE` header and matching it against the offer.
pub(crate) const DECODE_AND_MATCH: u64 = 35_000;
/// A paid request, verified and settled by an in-process facilitator that answers at once.
pub(crate) const PAID_PATH: u64 = 105_000;
/// A paid metered (`upto`) request: a Permit2 payment verified, the inner service setting its
/// charge, and that amount settled by the in-process facilitator that answers at once (measured
/// 136,486 with the shared settling request and the sign-in gate merged; 139,033 once the
/// settling intent names the facilitator that verified the payment and `/settle` goes through
/// the facilitator list's lookup and breaker).
pub(crate) const PAID_UPTO_PATH: u64 = 142_500;
/// One `/verify` and one `/settle` through `HttpFacilitator` over an open HTTP/1.1 connection to
/// the sandbox facilitator on loopback: the client's side only (measured 168,571 to 169,707 in
/// three runs: the wake-ups of a real socket vary a little).
pub(crate) const CLIENT_HTTP1: u64 = 173_000;
/// The same over HTTP/2, prior-knowledge h2c (measured 250,066 to 252,126 in three runs).
pub(crate) const CLIENT_HTTP2: u64 = 259_000;
