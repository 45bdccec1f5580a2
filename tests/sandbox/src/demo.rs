//! What the example servers share at start-up: logs on stderr, the listener and its address,
//! the facilitator (one at a URL, or the sandbox in process), the `listening on http://ADDR`
//! line scripts wait for, serving until SIGTERM or Ctrl-C, and the exit status.

use std::io::{IsTerminal as _, Write as _};
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;

use tokio::net::TcpListener;
use tower_x402::HttpFacilitator;
use tower_x402::facilitator::Facilitator;
use tracing_subscriber::EnvFilter;

use crate::SandboxFacilitator;

/// Sends logs to stderr, filtered by `RUST_LOG` (`info` when unset), in colour only on a
/// terminal; stdout stays free for the `listening on` line.
///
/// ```
/// tower_x402_sandbox::demo::log_to_stderr();
/// tracing::info!("on stderr");
/// ```
pub fn log_to_stderr() {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .init();
}

/// Binds `listen` (`HOST:PORT`; port 0 picks a free one) and returns the listener with the
/// address it got.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), String> {
/// let (_listener, address) = tower_x402_sandbox::demo::listen("127.0.0.1:0").await?;
/// assert_ne!(address.port(), 0);
/// assert!(tower_x402_sandbox::demo::listen("not an address").await.is_err());
/// # Ok(())
/// # }
/// ```
pub async fn listen(listen: &str) -> Result<(TcpListener, SocketAddr), String> {
    let listener = TcpListener::bind(listen)
        .await
        .map_err(|e| format!("cannot listen on {listen}: {e}"))?;
    let address = listener
        .local_addr()
        .map_err(|e| format!("bound address: {e}"))?;
    Ok((listener, address))
}

/// The facilitator at `url` over HTTP, or a fresh in-process [`SandboxFacilitator`] without one.
///
/// ```
/// use tower_x402_sandbox::demo::facilitator_or_sandbox;
///
/// assert!(facilitator_or_sandbox(None).is_ok());
/// assert!(facilitator_or_sandbox(Some("http://127.0.0.1:4021")).is_ok());
/// assert!(facilitator_or_sandbox(Some("not a url")).is_err());
/// ```
pub fn facilitator_or_sandbox(url: Option<&str>) -> Result<Arc<dyn Facilitator>, String> {
    Ok(match url {
        Some(url) => {
            Arc::new(HttpFacilitator::new(url).map_err(|e| format!("facilitator {url}: {e}"))?)
        }
        None => Arc::new(SandboxFacilitator::new()),
    })
}

/// Writes `listening on http://ADDR` as the first line on stdout, then serves `app` on
/// `listener` until SIGTERM or Ctrl-C, letting the requests in progress finish (a `/settle`
/// answered) before it returns.
///
/// ```no_run
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), String> {
/// use tower_x402_sandbox::demo;
///
/// let (listener, _) = demo::listen("127.0.0.1:0").await?;
/// demo::serve_until_stopped(listener, axum::Router::new()).await
/// # }
/// ```
pub async fn serve_until_stopped(listener: TcpListener, app: axum::Router) -> Result<(), String> {
    let address = listener
        .local_addr()
        .map_err(|e| format!("bound address: {e}"))?;
    let stop = stop_signal();
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "listening on http://{address}")
        .and_then(|()| stdout.flush())
        .map_err(|e| format!("writing to stdout: {e}"))?;
    drop(stdout);
    axum::serve(listener, app)
        .with_graceful_shutdown(stop)
        .await
        .map_err(|e| format!("server error: {e}"))
}

/// Resolves on SIGTERM (how Docker, systemd and Kubernetes stop a process) or Ctrl-C; never
/// where neither can be watched. The handlers are installed when it is called, not when it is
/// first awaited: call it before telling anyone the process is ready.
///
/// ```no_run
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// tower_x402_sandbox::demo::stop_signal().await;
/// println!("stopping");
/// # }
/// ```
pub fn stop_signal() -> impl std::future::Future<Output = ()> {
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

/// The process's exit status for how serving ended; a failure is told on stderr as
/// `PROGRAM: MESSAGE`.
///
/// ```
/// use std::process::ExitCode;
/// use tower_x402_sandbox::demo::exit_code;
///
/// assert_eq!(exit_code("demo", Ok(())), ExitCode::SUCCESS);
/// assert_eq!(exit_code("demo", Err("cannot listen".into())), ExitCode::FAILURE);
/// ```
pub fn exit_code(program: &str, outcome: Result<(), String>) -> ExitCode {
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("{program}: {message}");
            ExitCode::FAILURE
        }
    }
}
