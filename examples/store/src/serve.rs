//! Serving the app on a TCP listener with the limits a public server needs against slow, silent
//! and greedy clients (slowloris): a deadline for a new connection's first bytes, one for each
//! request's headers, which also closes an idle HTTP/1 keep-alive connection, an idle deadline
//! for HTTP/2 connections, a bound on open connections, and a deadline for each request.
//!
//! | limit | setting | default |
//! |---|---|---|
//! | a new connection's first bytes (enough to tell HTTP/1 from HTTP/2) | `STORE_FIRST_BYTE_TIMEOUT_SECS` | 10 s |
//! | headers of an HTTP/1 request, and an idle HTTP/1 keep-alive connection | `STORE_HEADER_READ_TIMEOUT_SECS` | 10 s |
//! | an HTTP/2 connection with no open stream (pings do not count) | `STORE_HTTP2_IDLE_TIMEOUT_SECS` | 30 s |
//! | one request, headers received to response ready (free routes) | `STORE_REQUEST_TIMEOUT_SECS` | 30 s |
//! | connections open at once (more wait in the listen backlog) | `STORE_MAX_CONNECTIONS` | 1024 |
//!
//! On shutdown (SIGTERM, Ctrl-C) the listener closes at once and the requests in progress finish
//! within `STORE_SHUTDOWN_GRACE_SECS` (default 30 s).
//!
//! The paid route has no request deadline: it is bounded by the facilitator client's own
//! timeouts.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use http_body_util::BodyExt as _;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};
use tower::ServiceExt as _;

use crate::config::{positive, seconds};

/// More headers than the app's own limit ([`crate::http_errors::MAX_HEADERS`]), so the app (not
/// hyper, whose 431 has no body) answers a request with too many headers.
const HYPER_MAX_HEADERS: usize = 4 * crate::http_errors::MAX_HEADERS;

/// What an HTTP/2 client sends first (RFC 9113 §3.4); any other start is HTTP/1.
const H2_PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// The connection-level limits, settings of the store's command line (their defaults are
/// [`ServeLimits::default`]'s).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::Args)]
pub struct ServeLimits {
    /// Seconds a new connection has to send its first bytes (enough to tell HTTP/1 from HTTP/2:
    /// one byte, or the 24-byte HTTP/2 preface) before it is closed.
    #[arg(long = "first-byte-timeout-secs", env = "STORE_FIRST_BYTE_TIMEOUT_SECS", default_value = "10", value_parser = seconds)]
    pub first_byte_timeout: Duration,
    /// Seconds a client has to send a request's complete headers, counted from the first byte
    /// awaited: on a kept-alive connection, from the end of the previous response (so it also
    /// closes an idle keep-alive connection).
    #[arg(long = "header-read-timeout-secs", env = "STORE_HEADER_READ_TIMEOUT_SECS", default_value = "10", value_parser = seconds)]
    pub header_read_timeout: Duration,
    /// Seconds an HTTP/2 connection may stay open with no request in progress (pings, from
    /// either side, do not count).
    #[arg(long = "http2-idle-timeout-secs", env = "STORE_HTTP2_IDLE_TIMEOUT_SECS", default_value = "30", value_parser = seconds)]
    pub http2_idle_timeout: Duration,
    /// Seconds a request on a free route may take before it is answered 408. The app applies it
    /// ([`crate::app::app`] reads it from the configuration), since only the app knows which
    /// routes are free.
    #[arg(long = "request-timeout-secs", env = "STORE_REQUEST_TIMEOUT_SECS", default_value = "30", value_parser = seconds)]
    pub request_timeout: Duration,
    /// Connections served at once; more wait in the listen backlog.
    #[arg(long, env = "STORE_MAX_CONNECTIONS", default_value = "1024", value_parser = positive::<usize>)]
    pub max_connections: usize,
}

impl Default for ServeLimits {
    fn default() -> Self {
        Self {
            first_byte_timeout: Duration::from_secs(10),
            header_read_timeout: Duration::from_secs(10),
            http2_idle_timeout: Duration::from_secs(30),
            request_timeout: Duration::from_secs(30),
            max_connections: 1024,
        }
    }
}

/// Serves `app` on `listener` within the connection limits of `limits` until `shutdown`
/// resolves, then lets the open connections finish their requests, however long they take.
///
/// # Errors
///
/// Never at present: a failing `accept` is logged and retried after a pause.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: ServeLimits,
    shutdown: impl Future<Output = ()>,
) -> io::Result<()> {
    serve_with_grace(listener, app, limits, None, shutdown).await
}

/// [`serve`], waiting at most `grace` (`STORE_SHUTDOWN_GRACE_SECS`) for the open connections
/// once `shutdown` resolves: the listener closes at once, requests in progress (a payment being
/// settled) finish within the grace, and whatever still runs after it is abandoned.
///
/// # Errors
///
/// Never at present: a failing `accept` is logged and retried after a pause.
pub async fn serve_with_grace(
    listener: TcpListener,
    app: Router,
    limits: ServeLimits,
    grace: Option<Duration>,
    shutdown: impl Future<Output = ()>,
) -> io::Result<()> {
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
    let max_connections = limits.max_connections.clamp(1, Semaphore::MAX_PERMITS);
    let slots = Arc::new(Semaphore::new(max_connections));
    let (stop, stopping) = watch::channel(false);
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
        let builder = Arc::clone(&builder);
        let app = app.clone();
        let stopping = stopping.clone();
        tokio::spawn(async move {
            serve_connection(stream, &builder, app, limits, stopping).await;
            drop(permit);
        });
    }
    drop(listener);
    // Ask every connection to finish, then wait until each has returned its slot.
    let _ = stop.send(true);
    let all = u32::try_from(max_connections).unwrap_or(u32::MAX);
    let drained = slots.acquire_many(all);
    match grace {
        None => drop(drained.await),
        Some(grace) => {
            if tokio::time::timeout(grace, drained).await.is_err() {
                tracing::warn!(
                    ?grace,
                    "shutdown grace over: abandoning the connections still open"
                );
            }
        }
    }
    Ok(())
}

/// Serves one connection: its first bytes within the deadline, then HTTP until the client
/// leaves, an HTTP/2 connection stays idle too long, or the server stops.
async fn serve_connection(
    mut stream: TcpStream,
    builder: &auto::Builder<TokioExecutor>,
    app: Router,
    limits: ServeLimits,
    mut stopping: watch::Receiver<bool>,
) {
    let first = tokio::select! {
        first = tokio::time::timeout(limits.first_byte_timeout, first_bytes(&mut stream)) => first,
        _ = stopping.wait_for(|stop| *stop) => return,
    };
    let prefix = match first {
        Ok(Ok(prefix)) if !prefix.is_empty() => prefix,
        Ok(Ok(_)) => return, // closed before sending anything
        Ok(Err(error)) => {
            tracing::debug!(%error, "connection failed before its first bytes");
            return;
        }
        Err(_) => {
            tracing::debug!("connection closed: no request within the first-byte deadline");
            return;
        }
    };
    let http2 = prefix.as_slice() == H2_PREFACE;
    let activity = Arc::new(Activity::new());
    let service = {
        let activity = Arc::clone(&activity);
        hyper::service::service_fn(move |request: Request<Incoming>| {
            // Only HTTP/2 connections are closed for idleness (HTTP/1 has its header deadline).
            let in_progress = http2.then(|| activity.begin());
            let app = app.clone();
            async move {
                let response = app.oneshot(request).await?;
                let Some(in_progress) = in_progress else {
                    return Ok(response);
                };
                // The stream is in progress until its response body is sent (or dropped).
                Ok::<_, std::convert::Infallible>(response.map(|body| {
                    Body::new(body.map_frame(move |frame| {
                        let _in_progress = &in_progress;
                        frame
                    }))
                }))
            }
        })
    };
    let io = TokioIo::new(Prefixed {
        prefix,
        read: 0,
        stream,
    });
    let connection = builder.serve_connection_with_upgrades(io, service);
    let mut connection = std::pin::pin!(connection);
    tokio::select! {
        result = connection.as_mut() => {
            if let Err(error) = result {
                tracing::debug!(%error, "connection closed with an error");
            }
            return;
        }
        _ = stopping.wait_for(|stop| *stop) => {}
        () = activity.idle_for(limits.http2_idle_timeout), if http2 => {
            tracing::debug!("HTTP/2 connection closed: idle");
        }
    }
    // Stop taking requests; those in progress finish.
    connection.as_mut().graceful_shutdown();
    if let Err(error) = connection.await {
        tracing::debug!(%error, "connection closed with an error");
    }
}

/// Reads until the protocol is known: the HTTP/2 preface whole, or the first byte that departs
/// from it (HTTP/1). Empty if the client closed first.
async fn first_bytes(stream: &mut TcpStream) -> io::Result<Vec<u8>> {
    let mut read = Vec::with_capacity(H2_PREFACE.len());
    let mut chunk = [0u8; 24];
    while read.len() < H2_PREFACE.len() && H2_PREFACE.starts_with(&read) {
        let n = stream
            .read(&mut chunk[..H2_PREFACE.len() - read.len()])
            .await?;
        if n == 0 {
            break;
        }
        read.extend_from_slice(&chunk[..n]);
    }
    Ok(read)
}

/// A stream whose first bytes were already read: they are read again first.
struct Prefixed {
    prefix: Vec<u8>,
    read: usize,
    stream: TcpStream,
}

impl AsyncRead for Prefixed {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.read < this.prefix.len() {
            let rest = &this.prefix[this.read..];
            let n = rest.len().min(buf.remaining());
            buf.put_slice(&rest[..n]);
            this.read += n;
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Prefixed {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

/// The requests in progress on one connection, and since when it has had none.
struct Activity {
    state: Mutex<(usize, Instant)>,
}

/// One request in progress; dropping it ends it.
struct InProgress(Arc<Activity>);

impl Activity {
    fn new() -> Self {
        Self {
            state: Mutex::new((0, Instant::now())),
        }
    }

    fn begin(self: &Arc<Self>) -> InProgress {
        self.update(|(open, _)| *open += 1);
        InProgress(Arc::clone(self))
    }

    fn update(&self, change: impl FnOnce(&mut (usize, Instant))) {
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        change(&mut state);
    }

    /// Resolves once no request has been in progress for `period`.
    async fn idle_for(&self, period: Duration) {
        loop {
            let (open, since) = *self
                .state
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let wait = if open > 0 {
                period
            } else {
                match period.checked_sub(since.elapsed()) {
                    Some(left) if !left.is_zero() => left,
                    _ => return,
                }
            };
            tokio::time::sleep(wait).await;
        }
    }
}

impl Drop for InProgress {
    fn drop(&mut self) {
        self.0.update(|(open, since)| {
            *open = open.saturating_sub(1);
            if *open == 0 {
                *since = Instant::now();
            }
        });
    }
}
