//! An example store: 45 fixed-price digital products, each a GET behind [`tower_x402::X402Layer`],
//! with free discovery surfaces (`/.well-known/x402.json`, `/openapi.json`, `/mcp`, `/llms.txt`,
//! `/bazaar`) and Passports as proof of purchase.
//!
//! ```text
//! cargo run --release -p x402-store          # demo mode: in-process sandbox facilitator
//! STORE_FACILITATOR_URL=https://… STORE_PAY_TO=0x… cargo run --release -p x402-store
//! ```
//!
//! Every setting is a flag with a `STORE_…` environment variable (`--help` lists them).

use std::io::IsTerminal as _;
use std::process::ExitCode;

use clap::Parser;
use tracing_subscriber::EnvFilter;

use x402_store::config::Config;
use x402_store::{app, ops, serve, state};

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| EnvFilter::new("info,tower_http=info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    match run(Config::parse()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("store: {message}");
            ExitCode::FAILURE
        }
    }
}

async fn run(config: Config) -> Result<(), String> {
    let base_url_given = !config.base_url.is_empty();
    let mut config = config.checked().map_err(|e| e.to_string())?;
    // One process per SQLite file, for as long as this one runs.
    let _owner = x402_store::storage::lock_sqlite_file(&config.database_url)
        .map_err(|e| format!("STORE_DATABASE_URL: {e}"))?;
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|e| format!("STORE_LISTEN: cannot listen on {}: {e}", config.listen))?;
    let address = listener
        .local_addr()
        .map_err(|e| format!("STORE_LISTEN: {e}"))?;
    if !base_url_given {
        config.base_url = format!("http://{address}");
    }
    if config.is_demo() {
        tracing::warn!(
            "DEMO MODE: no STORE_FACILITATOR_URL, so payments are verified and settled by an in-process sandbox. \
             No real funds move and every Passport is marked demo."
        );
    }
    // Installed before the state is built, so that start-up's calls are counted too.
    let metrics = match config.metrics_listen {
        Some(metrics_listen) => {
            let handle = ops::install_recorder().map_err(|e| format!("metrics: {e}"))?;
            let listener = tokio::net::TcpListener::bind(metrics_listen)
                .await
                .map_err(|e| {
                    format!("STORE_METRICS_LISTEN: cannot listen on {metrics_listen}: {e}")
                })?;
            Some((listener, handle))
        }
        None => None,
    };
    let state = state::build_state(config)
        .await
        .map_err(|e| e.to_string())?;
    let draining = ops::Draining::default();
    if let Some((listener, handle)) = metrics {
        let local = listener
            .local_addr()
            .map_err(|e| format!("STORE_METRICS_LISTEN: {e}"))?;
        let router = ops::router(&state, handle, draining.clone());
        // Served until the process exits, within the shop's connection limits: `/readyz` says
        // 503 while the shop drains.
        let limits = state.config.limits;
        tokio::spawn(serve::serve(
            listener,
            router,
            limits,
            std::future::pending(),
        ));
        println!("metrics on http://{local}");
    }
    println!("listening on http://{address}");
    let standing = state.standing.clone();
    let payments = state.payments.clone();
    let limits = state.config.limits;
    let grace = state.config.shutdown_grace;
    let shutdown = async move {
        shutdown_signal().await;
        draining.start();
    };
    serve::serve_with_grace(listener, app::app(state), limits, Some(grace), shutdown)
        .await
        .map_err(|e| format!("server error: {e}"))?;
    // Settlements still running (their buyers hung up) finish before the process exits; one
    // cut short by the deadline stays *settling* in the ledger, recovered on its retry.
    if tokio::time::timeout(grace, payments.until_idle())
        .await
        .is_err()
    {
        tracing::warn!(
            ?grace,
            "settlements still in progress at exit; their retries recover them"
        );
    }
    // Persist the last funnel counts before exiting.
    standing
        .flush()
        .await
        .map_err(|e| format!("saving the funnel counts: {e}"))
}

/// Resolves on Ctrl-C or SIGTERM; if neither can be installed, never (run until killed).
async fn shutdown_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = terminate => {}
    }
    tracing::info!("shutting down");
}
