//! The sandbox facilitator with a fault on its first `/settle`, and the same ledger served as a
//! chain over Ethereum JSON-RPC: for trying how a server recovers a payment whose settlement
//! answer was lost.
//!
//! ```text
//! cargo run --features evm-rpc --example faulty_facilitator -- \
//!     --listen 127.0.0.1:4021 --rpc-listen 127.0.0.1:8545 --fault answer-lost
//! ```
//!
//! Faults: `answer-lost` (settles, answers 504), `connection-reset` (settles, resets),
//! `no-answer` (settles, never answers), `lost-before-settling`, `pending-then-settled`,
//! `stays-pending`, `refused`, `none`. Later `/settle` calls answer normally. The chain id of the JSON-RPC
//! endpoint is Base's (`--network` to change). Prints `facilitator http://…` and `rpc http://…`,
//! then one line per settlement.

use std::process::ExitCode;
use std::time::Duration;

use tower_x402::proto::Network;
use tower_x402_sandbox::{SandboxFacilitator, Step};

const USAGE: &str = "\
A fault-injecting sandbox facilitator and its ledger as a JSON-RPC chain.

usage: faulty_facilitator [--listen ADDR] [--rpc-listen ADDR] [--fault NAME] [--network CAIP2]

  --listen ADDR      facilitator address (default 127.0.0.1:4021; port 0 picks a free one)
  --rpc-listen ADDR  JSON-RPC address (default 127.0.0.1:8545)
  --fault NAME       what the first /settle does (default answer-lost)
  --network CAIP2    the chain the JSON-RPC endpoint serves (default eip155:8453)";

#[derive(Debug)]
struct Args {
    listen: String,
    rpc_listen: String,
    fault: String,
    network: Network,
}

impl Args {
    fn from_env() -> Result<Self, String> {
        let mut args = pico_args::Arguments::from_env();
        if args.contains(["-h", "--help"]) {
            println!("{USAGE}");
            std::process::exit(0);
        }
        let text = |args: &mut pico_args::Arguments, name: &'static str, default: &str| {
            args.opt_value_from_str::<_, String>(name)
                .map(|value| value.unwrap_or_else(|| default.to_owned()))
                .map_err(|e| e.to_string())
        };
        let parsed = Self {
            listen: text(&mut args, "--listen", "127.0.0.1:4021")?,
            rpc_listen: text(&mut args, "--rpc-listen", "127.0.0.1:8545")?,
            fault: text(&mut args, "--fault", "answer-lost")?,
            network: text(&mut args, "--network", "eip155:8453")?
                .parse()
                .map_err(|e| format!("--network: {e}"))?,
        };
        let rest = args.finish();
        if !rest.is_empty() {
            return Err(format!("unexpected arguments {rest:?}\n\n{USAGE}"));
        }
        Ok(parsed)
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = match Args::from_env() {
        Ok(args) => args,
        Err(message) => {
            eprintln!("faulty_facilitator: {message}");
            return ExitCode::FAILURE;
        }
    };
    let Some(fault) = Step::from_name(&args.fault) else {
        eprintln!("faulty_facilitator: unknown fault `{}`", args.fault);
        return ExitCode::FAILURE;
    };
    let sandbox = SandboxFacilitator::new();
    sandbox.queue_settle(fault);
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
            _ = tokio::signal::ctrl_c() => return ExitCode::SUCCESS,
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
