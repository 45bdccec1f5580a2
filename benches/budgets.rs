//! Instruction budgets (callgrind `Ir`) of the layer's paths, checked by
//! `cargo bench -p tower-x402-benches --bench instructions`, which fails when a path exceeds its
//! budget. Each budget is the count measured on the current code plus about 2–3 % headroom
//! (measured: free 2,590, challenge 4,118, decode + match 37,073, paid 137,292 — the paid path
//! includes the payment ledger's *in progress*, *settling* and *settled* writes around `/settle`;
//! repeated runs differ by well under 0.1 %). The headroom is tight on purpose: one extra clone of
//! the payment payload on the paid path costs about 6,100 instructions (+4.4 %) and fails the
//! check.
//! Raise a budget only with a reason in the commit that does it.

/// A request the pricing says is free, through the layer (includes the bare call).
pub(crate) const FREE_PATH: u64 = 2_650;
/// An unpaid request for a priced route, answered with the precomputed 402.
pub(crate) const CHALLENGE_PATH: u64 = 4_200;
/// Decoding a `PAYMENT-SIGNATURE` header and matching it against the offer.
pub(crate) const DECODE_AND_MATCH: u64 = 37_700;
/// A paid request, verified and settled by an in-process facilitator that answers at once.
pub(crate) const PAID_PATH: u64 = 140_700;
