//! Runs the sandbox facilitator as its own HTTP process: `POST /verify`, `POST /settle` and
//! `GET /supported` in the facilitator wire format, with real signature checks and an in-memory
//! ledger.
//!
//! ```text
//! cargo run --example sandbox_facilitator                       # 127.0.0.1:4021
//! cargo run --example sandbox_facilitator -- --listen 127.0.0.1:0
//! ```
//!
//! The first line on stdout is `listening on http://ADDR` with the bound address (so port 0
//! works for scripts); logs go to stderr (`RUST_LOG=tower_x402=debug` shows each refusal).
//! Ctrl-C stops it; the ledger lives only as long as the process.

use std::io::{IsTerminal as _, Write as _};
use std::process::ExitCode;

use tower_x402::proto::AtomicAmount;
use tower_x402_sandbox::SandboxFacilitator;
use tracing_subscriber::EnvFilter;

const USAGE: &str = "\
The sandbox x402 facilitator over HTTP.

usage: sandbox_facilitator [--listen HOST:PORT] [--starting-balance ATOMIC]

  --listen HOST:PORT          address to listen on; port 0 picks a free one
                              [env SANDBOX_LISTEN, default 127.0.0.1:4021]
  --starting-balance ATOMIC   what every address holds before its first transfer, in USDC
                              atomic units [env SANDBOX_STARTING_BALANCE, default 1000000000]
  -h, --help                  this text";

#[derive(Debug)]
struct Args {
    listen: String,
    starting_balance: u128,
}

impl Args {
    /// The command line (flags win over environment variables), or the message to exit with.
    fn from_env() -> Result<Self, String> {
        let mut args = pico_args::Arguments::from_env();
        if args.contains(["-h", "--help"]) {
            println!("{USAGE}");
            std::process::exit(0);
        }
        let listen = args
            .opt_value_from_str("--listen")
            .map_err(|e| e.to_string())?
            .or_else(|| std::env::var("SANDBOX_LISTEN").ok())
            .unwrap_or_else(|| "127.0.0.1:4021".to_owned());
        let starting_balance = match args
            .opt_value_from_str::<_, String>("--starting-balance")
            .map_err(|e| e.to_string())?
            .or_else(|| std::env::var("SANDBOX_STARTING_BALANCE").ok())
        {
            Some(text) => text
                .parse()
                .map_err(|e| format!("--starting-balance `{text}`: {e}"))?,
            None => 1_000_000_000,
        };
        let rest = args.finish();
        if !rest.is_empty() {
            return Err(format!("unexpected arguments {rest:?}\n\n{USAGE}"));
        }
        Ok(Self {
            listen,
            starting_balance,
        })
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    let args = match Args::from_env() {
        Ok(args) => args,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::FAILURE;
        }
    };
    match serve(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("sandbox_facilitator: {message}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(args: Args) -> Result<(), String> {
    let facilitator =
        SandboxFacilitator::new().with_starting_balance(AtomicAmount(args.starting_balance));
    let listener = tokio::net::TcpListener::bind(&args.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", args.listen))?;
    let address = listener
        .local_addr()
        .map_err(|e| format!("bound address: {e}"))?;
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "listening on http://{address}")
        .and_then(|()| stdout.flush())
        .map_err(|e| format!("writing to stdout: {e}"))?;
    drop(stdout);
    tracing::info!(signer = %facilitator.signer_address(), "sandbox facilitator ready");

    axum::serve(listener, facilitator.router())
        .with_graceful_shutdown(async {
            // If Ctrl-C cannot be watched, run until killed.
            if tokio::signal::ctrl_c().await.is_err() {
                std::future::pending::<()>().await;
            }
        })
        .await
        .map_err(|e| format!("server error: {e}"))
}
