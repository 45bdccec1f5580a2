//! Runs the sandbox facilitator as its own HTTP process: `POST /verify`, `POST /settle` and
//! `GET /supported` in the facilitator wire format (`exact`, `upto`, and `batch-settlement` over
//! a simulated channel contract), with real signature checks and an in-memory ledger, and that
//! ledger as the Base chain over Ethereum JSON-RPC at `POST /rpc` (the transfers as `Transfer`
//! logs, `nonceBitmap`, `authorizationState` and the channel contract's views through
//! `eth_call`; and `sandbox_initiateWithdraw`, `sandbox_finalizeWithdraw` and `evm_increaseTime`,
//! for trying a server against a payer who withdraws behind its back).
//!
//! ```text
//! cargo run --example sandbox_facilitator                       # 127.0.0.1:4021
//! cargo run --example sandbox_facilitator -- --listen 127.0.0.1:0
//! ```
//!
//! The first line on stdout is `listening on http://ADDR` with the bound address (so port 0
//! works for scripts); logs go to stderr (`RUST_LOG=tower_x402=debug` shows each refusal).
//! SIGTERM or Ctrl-C stops it (the requests in progress are answered first); the ledger lives
//! only as long as the process.

use std::process::ExitCode;

use clap::Parser;
use tower_x402::proto::{AtomicAmount, Network};
use tower_x402_sandbox::{SandboxFacilitator, demo};

/// The sandbox x402 facilitator over HTTP.
#[derive(Debug, Parser)]
#[command(name = "sandbox_facilitator")]
struct Args {
    /// Address to listen on; port 0 picks a free one.
    #[arg(
        long,
        value_name = "HOST:PORT",
        env = "SANDBOX_LISTEN",
        default_value = "127.0.0.1:4021"
    )]
    listen: String,
    /// What every address holds before its first transfer, in USDC atomic units.
    #[arg(
        long,
        value_name = "ATOMIC",
        env = "SANDBOX_STARTING_BALANCE",
        default_value_t = 1_000_000_000
    )]
    starting_balance: u128,
}

#[tokio::main]
async fn main() -> ExitCode {
    demo::log_to_stderr();
    demo::exit_code("sandbox_facilitator", serve(Args::parse()).await)
}

async fn serve(args: Args) -> Result<(), String> {
    let facilitator =
        SandboxFacilitator::new().with_starting_balance(AtomicAmount(args.starting_balance));
    let (listener, _) = demo::listen(&args.listen).await?;
    tracing::info!(signer = %facilitator.signer_address(), "sandbox facilitator ready");

    let app = facilitator
        .router()
        .nest("/rpc", facilitator.rpc_router(Network::BASE));
    demo::serve_until_stopped(listener, app).await
}
