//! Instruction budgets (callgrind `Ir`) of the layer's paths, checked by `cargo bench -p
//! tower-x402-benches --bench instructions`, which fails when a path exceeds its budget. Each
//! budget is the count measured on the current code plus about 2–3 % headroom (measured, with the
//! benchmark crate built as one codegen unit: free 2,617, challenge 4,316, challenge with sign-in
//! 35,833 (30,812 on the store's SKU since), decode + match 16,172–16,218, paid 50,070 — the paid
//! path includes the payment ledger's *in progress*, *settling* and *settled* writes around
//! `/settle`; repeated runs differ by under 2 %). The headroom is tight on purpose: reading the
//! payment header's bytes once more in the measured call adds about 4,000 instructions to the paid
//! path and fails the check, and so would parsing the payment's proof into a `serde_json::Value`
//! again (that took decode + match from 23,816 to 33,802 and the paid path from 89,502 to 102,136),
//! or encoding a sign-in route's whole challenge again for each 402 (822,566 with a catalog-sized
//! discovery extension). Raise a budget only with a reason in the commit that does it.

/// A request the pricing says is free, through the layer (includes the bare call).
pub(crate) const FREE_PATH: u64 = 2_690;
/// An unpaid request for a priced route, answered with the precomputed 402 (measured 4,316;
/// 4,152 once the core was one builder with its schemes and metrics as plug-ins, the
/// refusal reported through one list of event observers).
pub(crate) const CHALLENGE_PATH: u64 = 4_280;
/// An unpaid request for one SKU of the example store, its offer (the `bazaar` extension the store
/// sends) and sign-in-with-x built by the store's own code: a fresh sign-in challenge spliced into
/// the challenge prebuilt for the offer, a 2,840-byte `PAYMENT-REQUIRED` header (about 2,300 since
/// 2026-11-28). Until 2026-11-26 the fixture was a made-up catalog-sized discovery extension (about
/// 5 KB of JSON, a 7.2 KB header no stock nginx passes): on the same code, 36,054 with it and
/// 35,361 with the store's SKU. 30,812 (30,358 in a full run) with the body and header built in one
/// buffer (each prebuilt part copied once, the rest's base64 through `base64-simd`) and the nonce
/// and times written straight into the rest (no intermediate strings); 30,707 in the full run after
/// the merges. 16,423 once every setup ends by letting glibc merge the small blocks it freed
/// (`settle_allocator` in `instructions.rs`): that merge (`malloc_consolidate`, about 10,400, and
/// `unlink_chunk`) ran inside the count, in the 402's one allocation too large for the small bins,
/// paying for the setup's garbage rather than the 402's. What remains: the plain challenge's path
/// (4,136), the hook's rest (about 4,500, its nonce's SipHash 1,810), `http`'s check of the
/// header's bytes (2,121), the copies (2,012) and the allocator (`malloc` 1,038, `free` 1,471).
/// Before the fixture changed, a catalog-sized discovery extension (measured 63,601 while the layer
/// called sign-in itself; 65,950 with sign-in a lifecycle hook: the hooks' gate boxed, the hook's
/// answer a boxed future, the request's headers and path copied for it; 62,927 with the sign-in
/// extension's schema trimmed to what clients read, so that every 402 fits a reverse proxy's 4 KB
/// header buffer; 63,034 before the next change). 35,833 with the challenge prebuilt up to the
/// sign-in template once per offer (its JSON padded to a multiple of three bytes, and its base64),
/// each 402 encoding only the URI, nonce and times, and the nonce's MAC SipHash-2-4 rather than
/// HMAC-SHA256 (17,385 instructions of SHA-256 compression per 402 before). What remained then was
/// mostly that fixture's 7.2 KB header: copying the prebuilt 5 KB of JSON and 7.2 KB of base64
/// (11,841, `rep movsb` counted per byte) and `http`'s check of every byte of the new header value
/// (7,227). On the store's SKU, from 16,423: 14,325 once the hooks are asked synchronously whether
/// they consider a request (`considers_request`), so that a 402 no hook decides about goes on
/// without the hooks' boxed gate, the copied headers and URI, the inner service's clone and the
/// hook's boxed future; 13,400 with the nonce's MAC in one SipHash write, the timestamps formatted
/// once per second and the URI written without `serde_json`; 13,197 with the hook's rest written
/// into a buffer each thread reuses; 12,446 with the MAC over the random bytes, the times as
/// milliseconds, the URI and the resource (the origin in the key; about 150 bytes hashed rather
/// than 243); 12,010 with the header looked up by its name (`header_field`); 11,786 with the
/// resource marked as the URI by one byte. What remains: the plain challenge's path (4,133),
/// `http`'s check of the header's 2,840 bytes (2,121), the hook's rest (2,222, the MAC 909 of it),
/// the copies and base64 of the splice (1,540), the allocator, and dropping the extended offer
/// (11,782 after merging; 11,839 on main before the hooks declared the request's stage; 11,906
/// after, with the hooks' gate asking only the hooks that declare `HookStages::REQUEST`, each
/// hook's prebuilt challenge owned by a handle of its own, and the layer's gate in a module of its
/// own, +0.6 %). 11,179 once the header shrank to about 2,300 bytes (no `resources` repeating the
/// sign-in URI, no field list of the answer in the store's `bazaar` extension), from 11,870 in the
/// same run.
pub(crate) const CHALLENGE_SIGN_IN_PATH: u64 = 11_500;
/// Decoding a `PAYMENT-SIGNATURE` header and matching it against the offer.
pub(crate) const DECODE_AND_MATCH: u64 = 16_700;
/// A paid request, verified and settled by an in-process facilitator that answers at once
/// (76,442 while each payment copied its requirement into the facilitator request, the
/// handler's `VerifiedPayment` and the settlement record; 55,774 with one requirement shared by
/// all of them and the offer; 53,193–53,275 with the payment key hashed once; 50,070 with the
/// ledger's states sharing their owner, fingerprint, resource and facilitator label; 50,552
/// with the request's digest recorded with each payment, so that a payment buys one delivery
/// of one request; 52,152 with the lifecycle hooks in the core, none registered, 52,255 with
/// the wire types in a crate of their own; 48,569 with the hooks' calls boxed out of every
/// payment's future — a path only registered hooks take no longer sizes, and is no longer
/// moved with, the futures of payments without hooks — and the layer resolving a payment
/// through the core's `Cleared::conclude`, its release state folded into the settlement's;
/// 50,199 with observers as hooks, the scheme points `batch-settlement` needs, and a refusal
/// after verification cancelled in one future boxed out of every payment's; 49,823 once the
/// setup lets glibc merge the blocks it freed, outside the count; 48,880 with the ledger's and
/// single-flight's maps using the hash each payment key carries rather than hashing it again
/// per lookup; 47,794 with the uncancellable settlement boxed once where it is made, and
/// recovery, reconciliation, *in doubt* and the re-read of a changed record boxed out of every
/// payment's future; 46,636 with the decoded payment shared from the layer, the ledger's claim
/// holding no entry across its writes and the hooks' cancellation boxed — the gate's future
/// 7,744 → 2,464 bytes; 46,110 with a `Refusal` of 48 bytes rather than 320, the gate 2,400;
/// 45,503 with the settlement's futures holding each value once — `async` blocks rather than
/// `async fn`s where large arguments move in, borrowed answers dropped before the next await,
/// the payment moved into its `Paid` before it settles, the hooks' and refusals' paths boxed
/// out — the uncancellable settlement 2,192 → about 800 bytes, `Cleared::conclude` 1,728 → 960,
/// the core's `pay` 2,368 → 1,168; 43,058 with every block a paid request allocates under
/// glibc's 1,032-byte per-thread cache, so that no large chunk is carved, merged or freed — the
/// layer boxing one future per way a payment resolves rather than `Cleared::conclude`'s, the
/// verification's failure path and the claim's *in progress* write boxed out of the core's
/// `pay`, 1,168 → 928 bytes — and the memory store answering a write or an absent entry with a
/// future of no size, boxed without an allocation; 43,480 with a paid request's body bound to
/// its payment — a bodiless request reads nothing — and the schemes' own verification and
/// settlement steps asked of registered schemes only; 43,746 with `exact` paid through Permit2
/// beside EIP-3009 — the accept's transfer method compared when a payment is matched, scanning
/// `extra` rather than hashing a key, and the scheme asked whether it refuses a new payment;
/// 43,844 with the hooks' request stage, the settle-first check and the channels' scheme steps
/// beside it — +0.87 % on 43,468 before them).
pub(crate) const PAID_PATH: u64 = 43_900;
/// The paid request of `PAID_PATH` settled before the work, `/settle` alone (one facilitator
/// call instead of two; measured 42,112, `PAID_PATH` 43,475 in the same run).
pub(crate) const PAID_FIRST_PATH: u64 = 43_000;
/// The paid request of `PAID_PATH` with one hook observing it, as a metrics hook does: it counts
/// the payments received and settled, and declares only the settlement's end among the
/// asynchronous stages (measured 44,049; 49,932 for the same hook taking part in every stage,
/// as every hook did before hooks declared their stages: a boxed future per stage and hook at
/// the verification's and the settlement's start, and a copy of the payment kept for its
/// cancellation; 44,474 with the body binding and the scheme steps, as `PAID_PATH`'s; 44,816
/// with Permit2 `exact`, the one `observe` method and the settle-first check, +0.74 % on 44,486).
pub(crate) const PAID_OBSERVED_PATH: u64 = 44_900;
/// A paid metered (`upto`) request: a Permit2 payment verified, the inner service setting its
/// charge, and that amount settled by the in-process facilitator that answers at once (measured
/// 136,486 with the shared settling request and the sign-in gate merged; 139,033 once the
/// settling intent names the facilitator that verified the payment and `/settle` goes through
/// the facilitator list's lookup and breaker; 112,352–112,414 with the proof kept as raw JSON;
/// 104,834–106,529 with base64 through `base64-simd`; 102,104 with the settlement polled in
/// place rather than spawned; 76,489 with the requirement and the payment shared rather than
/// copied; 66,174 with the Permit2 permit read in place, and first, for its key; 64,823 with
/// the charged request made anew rather than changed in place; 61,856 with the ledger's states
/// sharing their text; 62,584 with the request's digest recorded; 64,088 with the lifecycle
/// hooks in the core, none registered; 64,498 with the wire types in a crate of their own;
/// 60,896 with the hooks' calls boxed out of every payment's future and the scheme a plug-in;
/// 62,399 with observers as hooks and the scheme points `batch-settlement` needs; 62,252 with
/// the setup's freed blocks merged outside the count; 58,666 with the paid path's smaller
/// futures, the payment-keyed maps' carried hash and the smaller `Refusal`, as `paid`'s;
/// 57,551 with the settlement's futures holding each value once, as `paid`'s; 55,835 with every
/// block under glibc's per-thread cache and the memory store's answers unallocated, as
/// `paid`'s; 57,275 with a paid request's body bound to its payment and the schemes' own
/// verification and settlement steps, a regression of 2.6 %: a settlement future of the metered
/// path grew past an allocation size class; 57,225 on main then, 57,327 with the hooks' stages,
/// the module graph cut and the one clock; 56,598 with a charge of zero and a charge above the
/// maximum settled in boxed futures of their own, so that the settlement's future holds the
/// `/settle` path alone; then `exact` paid through Permit2 — the permit's witness read with an
/// optional `facilitator`, since an `exact` permit's has none and both are keyed alike, and the
/// scheme asked whether it refuses a new payment).
pub(crate) const PAID_UPTO_PATH: u64 = 57_700;
/// A payment channel's voucher request (`batch-settlement`), the channel opened beforehand: the
/// voucher verified locally (its EIP-712 digest and one ECDSA public-key recovery with
/// libsecp256k1, compared with the channel's payer authorizer; the cumulative check), the inner
/// service charging 0.001 USDC, the new cumulative committed to the memory channel store; no
/// facilitator call (measured 742,803: libsecp256k1's recovery about 450,000 of them, Keccak
/// about 121,000 — some fifty permutations for the digest, the channel id and addresses;
/// 759,225 with the scheme's verification, refund and flow split into modules of their own;
/// 762,683 once a deposit recovered from doubt commits its voucher; 644,497 with the domain
/// separator computed once per chain, the voucher's type hash once, and the channel id hashed
/// only for a configuration that is not the one stored with the channel; 665,349 after the
/// merges that brought a recovered deposit's commit and the refund's resolution against the
/// chain into the scheme; 663,805 with the setup's freed blocks merged outside the count;
/// 654,934 with the paid path's smaller futures and `Refusal`; 656,896 with a settlement before
/// the work boxed out of the payment's future; 644,774 with the paid path's blocks under
/// glibc's per-thread cache).
pub(crate) const PAID_VOUCHER_PATH: u64 = 661_500;
/// One `/verify` and one `/settle` through `HttpFacilitator` over an open HTTP/1.1 connection to
/// the sandbox facilitator on loopback: the client's side only (measured 158,806 to 159,352 while
/// each call encoded the request; 149,867 with the request encoded once for both calls; the
/// wake-ups of a real socket vary a little, by up to 1,200 in earlier runs).
pub(crate) const CLIENT_HTTP1: u64 = 154_000;
/// The same over HTTP/2, prior-knowledge h2c (measured 240,552 to 241,021 while each call encoded
/// the request, 231,832 with it encoded once; up to 2,000 apart in earlier runs).
pub(crate) const CLIENT_HTTP2: u64 = 238_500;
/// Not the crate's own work: the same two calls through a plain `reqwest::Client` with the
/// bodies encoded beforehand and the answers read as bytes, the floor under `CLIENT_HTTP1`
/// (what reqwest, hyper and tokio spend on the wire's work; measured 139,467). Held so that a
/// dependency update that moves the floor shows up beside the rows it moves.
pub(crate) const REQWEST_ALONE: u64 = 143_500;
