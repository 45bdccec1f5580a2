//! Serving the app on a TCP listener with the limits a public server needs against slow and
//! greedy clients (slowloris): a deadline for each request's headers, which also closes an idle
//! keep-alive connection, a bound on open connections, and a deadline for each request.
//!
//! | limit | setting | default |
//! |---|---|---|
//! | headers of a request, and an idle keep-alive connection | `STORE_HEADER_READ_TIMEOUT_SECS` | 10 s |
//! | one request, headers received to response ready (free routes) | `STORE_REQUEST_TIMEOUT_SECS` | 30 s |
//! | connections open at once (more wait in the listen backlog) | `STORE_MAX_CONNECTIONS` | 1024 |
//!
//! The paid route has no request deadline: a payment being settled is never abandoned halfway;
//! it is bounded by the facilitator client's own timeouts.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::Request;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tower::ServiceExt as _;

/// More headers than the app's own limit ([`crate::http_errors::MAX_HEADERS`]), so the app (not
/// hyper, whose 431 has no body) answers a request with too many headers.
const HYPER_MAX_HEADERS: usize = 4 * crate::http_errors::MAX_HEADERS;

/// The connection-level limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServeLimits {
    /// How long a client has to send a request's complete headers, counted from the first byte
    /// awaited: on a kept-alive connection, from the end of the previous response.
    pub header_read_timeout: Duration,
    /// How long a request on a free route may take before it is answered 408. The app applies
    /// it ([`crate::app::app`] reads it from the configuration), since only the app knows which
    /// routes are free.
    pub request_timeout: Duration,
    /// How many connections are served at once.
    pub max_connections: usize,
}

impl Default for ServeLimits {
    fn default() -> Self {
        Self {
            header_read_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(30),
            max_connections: 1024,
        }
    }
}

/// Serves `app` on `listener` within the connection limits of `limits` (header read timeout and
/// connection bound) until `shutdown` resolves, then lets the open
/// connections finish their requests.
///
/// # Errors
///
/// Never at present: a failing `accept` is logged and retried after a pause.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: ServeLimits,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_headers(HYPER_MAX_HEADERS);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(limits.header_read_timeout)
        .keep_alive_timeout(limits.header_read_timeout);
    let builder = Arc::new(builder);
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let graceful = GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        // Wait for a free slot before accepting: extra clients wait in the backlog.
        let permit = tokio::select! {
            permit = Arc::clone(&slots).acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break,
            },
            () = &mut shutdown => break,
        };
        let (stream, _) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let app = app.clone();
        let service = hyper::service::service_fn(move |request: Request<Incoming>| {
            app.clone().oneshot(request)
        });
        let connection = builder
            .serve_connection_with_upgrades(TokioIo::new(stream), service)
            .into_owned();
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%error, "connection closed with an error");
            }
            drop(permit);
        });
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}
