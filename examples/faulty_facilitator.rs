//! The sandbox facilitator with a fault on its first `/settle`, and the same ledger served as a
//! chain over Ethereum JSON-RPC: for trying how a server recovers a payment whose settlement
//! answer was lost.
//!
//! ```text
//! cargo run --example faulty_facilitator -- \
//!     --listen 127.0.0.1:4021 --rpc-listen 127.0.0.1:8545 --fault answer-lost
//! ```
//!
//! Faults: `answer-lost` (settles, answers 504), `connection-reset` (settles, resets),
//! `no-answer` (settles, never answers), `lost-before-settling`, `pending-then-settled`,
//! `stays-pending`, `refused`, `server-error` (answers 500, settles nothing), `none`. Later
//! `/settle` calls answer normally, unless `--every` gives every one the fault (a facilitator
//! that verifies but cannot settle, for trying failover). `--delay-ms` holds the
//! first `/settle` open that long before its fault (with `--fault none`: a slow settlement, for trying
//! a buyer who hangs up mid-settlement). The chain id of the JSON-RPC
//! endpoint is Base's (`--network` to change). Prints `facilitator http://…` and `rpc http://…`,
//! then one line per settlement.

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use tower_x402::proto::Network;
use tower_x402_sandbox::{SandboxFacilitator, Step};

/// A fault-injecting sandbox facilitator and its ledger as a JSON-RPC chain.
#[derive(Debug, Parser)]
#[command(name = "faulty_facilitator")]
struct Args {
    /// Facilitator address; port 0 picks a free one.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:4021")]
    listen: String,
    /// JSON-RPC address.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8545")]
    rpc_listen: String,
    /// What the first /settle does: answer-lost, connection-reset, no-answer,
    /// lost-before-settling, pending-then-settled, stays-pending, refused, server-error or none.
    #[arg(long, value_name = "NAME", default_value = "answer-lost")]
    fault: String,
    /// Give every /settle the fault, not only the first.
    #[arg(long)]
    every: bool,
    /// How long the first /settle is held open before its fault, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 0)]
    delay_ms: u64,
    /// The chain the JSON-RPC endpoint serves.
    #[arg(long, value_name = "CAIP2", default_value = "eip155:8453", value_parser = network)]
    network: Network,
}

fn network(text: &str) -> Result<Network, String> {
    text.parse()
        .map_err(|e: <Network as std::str::FromStr>::Err| e.to_string())
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    let Some(fault) = Step::from_name(&args.fault) else {
        eprintln!("faulty_facilitator: unknown fault `{}`", args.fault);
        return ExitCode::FAILURE;
    };
    let fault = match args.delay_ms {
        0 => fault,
        delay => fault.after(Duration::from_millis(delay)),
    };
    let sandbox = if args.every {
        SandboxFacilitator::new().with_settle(fault)
    } else {
        let sandbox = SandboxFacilitator::new();
        sandbox.queue_settle(fault);
        sandbox
    };
    let (facilitator, rpc) = match (
        tokio::net::TcpListener::bind(&args.listen).await,
        tokio::net::TcpListener::bind(&args.rpc_listen).await,
    ) {
        (Ok(facilitator), Ok(rpc)) => (facilitator, rpc),
        (Err(error), _) | (_, Err(error)) => {
            eprintln!("faulty_facilitator: cannot listen: {error}");
            return ExitCode::FAILURE;
        }
    };
    let mut stop = std::pin::pin!(tower_x402_sandbox::demo::stop_signal());
    for (name, listener) in [("facilitator", &facilitator), ("rpc", &rpc)] {
        match listener.local_addr() {
            Ok(address) => println!("{name} http://{address}"),
            Err(error) => {
                eprintln!("faulty_facilitator: {error}");
                return ExitCode::FAILURE;
            }
        }
    }
    let chain = sandbox.rpc_router(args.network);
    tokio::spawn(async move { axum::serve(rpc, chain).await });
    tokio::spawn(sandbox.clone().serve(facilitator));
    let mut reported = 0;
    loop {
        tokio::select! {
            () = &mut stop => return ExitCode::SUCCESS,
            () = tokio::time::sleep(Duration::from_millis(200)) => {}
        }
        for settlement in sandbox.settlements().into_iter().skip(reported) {
            reported += 1;
            println!(
                "settled {} from {} to {} amount {} (/settle calls so far: {})",
                settlement.transaction,
                settlement.from,
                settlement.to,
                settlement.amount,
                sandbox.settle_calls()
            );
        }
    }
}
