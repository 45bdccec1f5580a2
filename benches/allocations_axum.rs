//! Heap allocations of a paid request and of a 402 through `X402Layer` on an axum route, counted
//! by the harness the peers' counts use (`benches/peers/src/allocations.rs`): the same handler,
//! every paid request carrying its own EIP-3009 authorization signed for the layer's own 402
//! challenge, verified and settled by an in-process facilitator that answers at once. Prints
//! tower-x402's line of the table `bash benches/peers/allocations.sh` prints, and fails when a
//! paid request or a 402 allocates more than its budget. Run with
//! `cargo test -p tower-x402-benches --test allocations_axum -- --nocapture`.

use axum::Router;
use axum::routing::get;
use tower_x402::X402Layer;
use tower_x402_benches::{InstantFacilitator, offer};
use tower_x402_sandbox::SandboxWallet;
use x402_wire::{PaymentRequired, UsdcDeployment, header};

#[allow(unreachable_pub, dead_code)]
#[path = "peers/src/allocations.rs"]
mod harness;

use harness::{PATH, Row, handler, measure};

#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

/// The most heap blocks a paid request may allocate beyond the bare route: what it allocates
/// today.
const PAID_BLOCKS: u64 = 37;

/// The most heap blocks a 402 may allocate beyond the bare route: what it allocates today.
const UNPAID_BLOCKS: u64 = 2;

#[test]
fn allocations_per_request_on_an_axum_route() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let priced = offer(&UsdcDeployment::BASE);
    let pricing =
        move |parts: &http::request::Parts| (parts.uri.path() == PATH).then(|| priced.clone());
    let paid = Router::new().route(
        PATH,
        get(handler).layer(X402Layer::new(InstantFacilitator, pricing)),
    );
    let wallet = SandboxWallet::random();
    let row = measure(&runtime, "tower-x402", paid, |challenge, _nonce| {
        let required: PaymentRequired = header::decode(challenge).expect("a challenge");
        let payment = wallet.pay(&required).expect("a payment");
        let payment = header::encode(&payment).expect("a header");
        payment.to_str().expect("base64").to_owned()
    });
    println!("{}", Row::header());
    println!("{}", row.line());
    assert!(
        row.paid.blocks <= PAID_BLOCKS,
        "a paid request allocates {} blocks beyond the bare route, more than {PAID_BLOCKS}",
        row.paid.blocks
    );
    assert!(
        row.unpaid.blocks <= UNPAID_BLOCKS,
        "a 402 allocates {} blocks beyond the bare route, more than {UNPAID_BLOCKS}",
        row.unpaid.blocks
    );
}
