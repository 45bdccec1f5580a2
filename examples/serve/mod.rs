//! Serving an axum app the way a server that faces clients must, with hyper, hyper-util and
//! tokio only (the example servers share this file; copy it into your own server as it is):
//!
//! | limit | default |
//! |---|---|
//! | a request's headers, counted from the first byte awaited — a new connection that sends nothing and an idle keep-alive connection are closed too | 10 s |
//! | connections open at once (more wait in the listen backlog) | 256 |
//! | on SIGTERM or Ctrl-C: the requests and streams in progress finish within | 30 s |
//! | then the settlements of what was delivered finish within | 30 s |
//!
//! On SIGTERM (how Docker, systemd and Kubernetes stop a process) or Ctrl-C the listener closes
//! at once, each connection finishes the request it is serving and closes, and the payments in
//! progress are settled before the process exits with status 0. A response still streaming when
//! the grace runs out is cut, and charged for what it sent.
//!
//! HTTP/1.1 only: put a reverse proxy in front for HTTP/2 and TLS.

use std::future::Future;
use std::io::{IsTerminal as _, Write as _};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tracing_subscriber::EnvFilter;

/// The connection limits and the shutdown's deadlines, as flags.
#[derive(Clone, Copy, Debug, clap::Args)]
pub(crate) struct Limits {
    /// Seconds a client has to send a request's headers; a connection that sends nothing, or
    /// stays idle between requests, is closed after as long.
    #[arg(long, value_name = "SECS", default_value_t = 10)]
    pub(crate) header_timeout_secs: u64,
    /// Connections served at once; more wait in the listen backlog.
    #[arg(long, value_name = "N", default_value_t = 256)]
    pub(crate) max_connections: usize,
    /// On SIGTERM or Ctrl-C, seconds the requests and streams in progress have to finish.
    #[arg(long, value_name = "SECS", default_value_t = 30)]
    pub(crate) shutdown_grace_secs: u64,
}

/// How long the settlements of what was delivered may take once the connections are closed.
const SETTLEMENT_GRACE: Duration = Duration::from_secs(30);

/// Sends logs to stderr, filtered by `RUST_LOG` (`info` when unset); stdout stays free for the
/// `listening on` line.
pub(crate) fn log_to_stderr() {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .init();
}

/// The process's exit status; a failure is told on stderr as `PROGRAM: MESSAGE`.
pub(crate) fn exit_code(program: &str, outcome: Result<(), String>) -> ExitCode {
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("{program}: {message}");
            ExitCode::FAILURE
        }
    }
}

/// Binds `listen` (`HOST:PORT`; port 0 picks a free one).
pub(crate) async fn listen(listen: &str) -> Result<(TcpListener, std::net::SocketAddr), String> {
    let listener = TcpListener::bind(listen)
        .await
        .map_err(|e| format!("cannot listen on {listen}: {e}"))?;
    let address = listener
        .local_addr()
        .map_err(|e| format!("bound address: {e}"))?;
    Ok((listener, address))
}

/// Writes `listening on http://ADDR` on stdout, serves `app` within `limits` until SIGTERM or
/// Ctrl-C, lets the requests in progress finish, then waits for `settled` (the payment core's
/// [`until_idle`](tower_x402::payment::Payments::until_idle)).
pub(crate) async fn serve(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    settled: impl Future<Output = ()>,
) -> Result<(), String> {
    let address = listener
        .local_addr()
        .map_err(|e| format!("bound address: {e}"))?;
    let mut stop = std::pin::pin!(shutdown_signal());
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "listening on http://{address}")
        .and_then(|()| stdout.flush())
        .map_err(|e| format!("writing to stdout: {e}"))?;
    drop(stdout);

    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(Duration::from_secs(limits.header_timeout_secs));
    let graceful = GracefulShutdown::new();
    let slots = Arc::new(Semaphore::new(
        limits.max_connections.clamp(1, Semaphore::MAX_PERMITS),
    ));
    let mut connections = JoinSet::new();
    loop {
        while connections.try_join_next().is_some() {}
        // A free slot first: extra clients wait in the backlog, not in memory.
        let permit = tokio::select! {
            permit = Arc::clone(&slots).acquire_owned() => permit.map_err(|e| e.to_string())?,
            () = &mut stop => break,
        };
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(error) => {
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            () = &mut stop => break,
        };
        let service = TowerToHyperService::new(app.clone());
        let connection = graceful.watch(http.serve_connection(TokioIo::new(stream), service));
        connections.spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%error, "connection closed with an error");
            }
            drop(permit);
        });
    }
    drop(listener);
    tracing::info!("shutting down: finishing the requests in progress");
    let grace = Duration::from_secs(limits.shutdown_grace_secs);
    if tokio::time::timeout(grace, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            ?grace,
            "shutdown grace over: cutting the connections still open"
        );
    }
    // Cut what is left while the runtime still runs, so that a stream cut short settles what it
    // sent.
    connections.shutdown().await;
    if tokio::time::timeout(SETTLEMENT_GRACE, settled)
        .await
        .is_err()
    {
        tracing::error!(
            "settlements still in progress after {SETTLEMENT_GRACE:?}; exiting without them"
        );
    }
    tracing::info!("stopped");
    Ok(())
}

/// Resolves on SIGTERM or Ctrl-C.
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    // Both handlers are installed now, before the caller says it is listening: a signal sent
    // from then on is never missed (or met by the default action, which kills).
    #[cfg(unix)]
    let (mut interrupt, mut terminate) = {
        use tokio::signal::unix::{SignalKind, signal};
        (
            signal(SignalKind::interrupt()).ok(),
            signal(SignalKind::terminate()).ok(),
        )
    };
    async move {
        #[cfg(unix)]
        {
            let interrupt = async {
                match interrupt.as_mut() {
                    Some(signal) => drop(signal.recv().await),
                    None => std::future::pending().await,
                }
            };
            let terminate = async {
                match terminate.as_mut() {
                    Some(signal) => drop(signal.recv().await),
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = interrupt => {}
                () = terminate => {}
            }
        }
        #[cfg(not(unix))]
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}
