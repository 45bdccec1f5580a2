//! [`FaultyFacilitator`]: the sandbox facilitator over HTTP on loopback, with faults injected
//! into `/settle` — the ways a real facilitator's answer gets lost after the money moved.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};

use super::SandboxFacilitator;
use crate::proto::{FacilitatorRequest, SettleResponse};

/// The largest request the server reads.
const MAX_REQUEST: usize = 1 << 20;

/// What the next `/settle` does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SettleFault {
    /// Settles and answers, like a healthy facilitator.
    None,
    /// Settles, then answers 504, as a proxy whose upstream answer timed out.
    AnswerLost,
    /// Reads the request, settles, then resets the connection without answering.
    ConnectionReset,
    /// Settles, then never answers (the caller's settle timeout decides).
    NoAnswer,
    /// Answers 504 without settling: the request never reached the facilitator.
    LostBeforeSettling,
    /// Settles, but answers `success: false`, `settlement_pending` with the transaction, as a
    /// facilitator whose receipt wait timed out; the identical re-sent payload is then answered
    /// with the settlement (the facilitator's pending-settlement store).
    PendingThenSettled,
    /// Answers `settlement_pending` without ever settling.
    StaysPending,
    /// Answers `success: false`, `insufficient_funds`, without settling.
    Refused,
}

/// What the next `/verify` does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum VerifyFault {
    /// Answers HTTP 500 with a body that is not the protocol's.
    ServerError,
    /// Answers 200 with a body that is not JSON.
    Garbage,
}

impl SettleFault {
    /// The fault named `name` in kebab case (`answer-lost`, `connection-reset`, …).
    pub fn from_name(name: &str) -> Option<Self> {
        Some(match name {
            "none" => Self::None,
            "answer-lost" => Self::AnswerLost,
            "connection-reset" => Self::ConnectionReset,
            "no-answer" => Self::NoAnswer,
            "lost-before-settling" => Self::LostBeforeSettling,
            "pending-then-settled" => Self::PendingThenSettled,
            "stays-pending" => Self::StaysPending,
            "refused" => Self::Refused,
            _ => return None,
        })
    }
}

/// A [`SandboxFacilitator`] served over HTTP/1.1 whose `/settle` calls take the faults queued
/// with [`inject`](Self::inject), one per call (then [`SettleFault::None`]). `/verify` and
/// `/supported` always answer. Cheap to clone; clones share the queue and counters.
///
/// ```no_run
/// use tower_x402::sandbox::{FaultyFacilitator, SandboxFacilitator, SettleFault};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> std::io::Result<()> {
/// let faulty = FaultyFacilitator::new(SandboxFacilitator::new());
/// faulty.inject(SettleFault::AnswerLost);
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
/// println!("facilitator at http://{}", listener.local_addr()?);
/// faulty.serve(listener).await
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct FaultyFacilitator {
    sandbox: SandboxFacilitator,
    faults: Arc<Mutex<VecDeque<SettleFault>>>,
    verify_faults: Arc<Mutex<VecDeque<VerifyFault>>>,
    /// Settlements answered `settlement_pending`, by request body, answered on a re-send.
    pending: Arc<Mutex<HashMap<String, SettleResponse>>>,
    settle_calls: Arc<AtomicUsize>,
}

impl FaultyFacilitator {
    /// Serves `sandbox` (clones share its ledger: check transfers there).
    pub fn new(sandbox: SandboxFacilitator) -> Self {
        Self {
            sandbox,
            faults: Arc::default(),
            verify_faults: Arc::default(),
            pending: Arc::default(),
            settle_calls: Arc::default(),
        }
    }

    /// Queues `fault` for the next `/settle` that has no fault queued before it.
    pub fn inject(&self, fault: SettleFault) {
        lock(&self.faults).push_back(fault);
    }

    /// Queues `fault` for the next `/verify` that has no fault queued before it.
    pub fn inject_verify(&self, fault: VerifyFault) {
        lock(&self.verify_faults).push_back(fault);
    }

    /// How many `/settle` requests arrived.
    pub fn settle_calls(&self) -> usize {
        self.settle_calls.load(Ordering::SeqCst)
    }

    /// The sandbox behind it.
    pub fn sandbox(&self) -> &SandboxFacilitator {
        &self.sandbox
    }

    /// Answers connections on `listener` until an accept fails.
    ///
    /// # Errors
    ///
    /// The accept error.
    pub async fn serve(self, listener: TcpListener) -> std::io::Result<()> {
        loop {
            let (stream, _) = listener.accept().await?;
            let this = self.clone();
            tokio::spawn(async move { this.connection(stream).await });
        }
    }

    async fn connection(self, mut stream: TcpStream) {
        let Some((path, body)) = read_request(&mut stream).await else {
            return;
        };
        let (status, answer) = match path.as_str() {
            "/supported" => (200, to_json(&*self.sandbox.supported_response())),
            "/verify" => match lock(&self.verify_faults).pop_front() {
                Some(VerifyFault::ServerError) => (500, "internal error".to_owned()),
                Some(VerifyFault::Garbage) => (200, "<html>not json</html>".to_owned()),
                None => match serde_json::from_slice::<FacilitatorRequest>(&body) {
                    Ok(request) => (200, to_json(&self.sandbox.verify_payment(&request))),
                    Err(error) => (
                        400,
                        serde_json::json!({ "error": error.to_string() }).to_string(),
                    ),
                },
            },
            "/settle" => {
                self.settle_calls.fetch_add(1, Ordering::SeqCst);
                let fault = lock(&self.faults).pop_front().unwrap_or(SettleFault::None);
                match serde_json::from_slice::<FacilitatorRequest>(&body) {
                    Ok(request) => {
                        let key = String::from_utf8_lossy(&body).into_owned();
                        match self.settle(&key, &request, fault) {
                            Some(answer) => answer,
                            None if fault == SettleFault::ConnectionReset => {
                                // RST instead of FIN: the caller sees a reset connection.
                                let _ = stream.set_zero_linger();
                                return;
                            }
                            None => {
                                tokio::time::sleep(Duration::from_secs(3600)).await;
                                return;
                            }
                        }
                    }
                    Err(error) => (
                        400,
                        serde_json::json!({ "error": error.to_string() }).to_string(),
                    ),
                }
            }
            _ => (404, r#"{"error":"not found"}"#.to_owned()),
        };
        let response = format!(
            "HTTP/1.1 {status} {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{answer}",
            if status == 200 { "OK" } else { "Error" },
            answer.len()
        );
        let _ = stream.write_all(response.as_bytes()).await;
        let _ = stream.shutdown().await;
    }

    /// The status and body for `/settle`, or `None` for no answer at all.
    fn settle(
        &self,
        key: &str,
        request: &FacilitatorRequest,
        fault: SettleFault,
    ) -> Option<(u16, String)> {
        let remembered = lock(&self.pending).get(key).cloned();
        if let Some(settled) = remembered.filter(|_| fault == SettleFault::None) {
            return Some((200, to_json(&settled)));
        }
        let network = request.payment_requirements.network.clone();
        let lost = r#"{"error":"upstream facilitator timed out"}"#.to_owned();
        match fault {
            SettleFault::LostBeforeSettling => Some((504, lost)),
            SettleFault::Refused => Some((
                200,
                to_json(&SettleResponse::failure(network, "insufficient_funds")),
            )),
            SettleFault::StaysPending => {
                let mut pending = SettleResponse::failure(network, "settlement_pending");
                pending.transaction = format!("0x{}", "0".repeat(64));
                Some((200, to_json(&pending)))
            }
            _ => {
                let settled = self.sandbox.settle_payment(request);
                match fault {
                    SettleFault::None => Some((200, to_json(&settled))),
                    SettleFault::AnswerLost => Some((504, lost)),
                    SettleFault::PendingThenSettled if settled.success => {
                        let mut pending = SettleResponse::failure(network, "settlement_pending");
                        pending.transaction = settled.transaction.clone();
                        lock(&self.pending).insert(key.to_owned(), settled);
                        Some((200, to_json(&pending)))
                    }
                    SettleFault::PendingThenSettled => Some((200, to_json(&settled))),
                    _ => None,
                }
            }
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

fn to_json<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_default()
}

/// Reads one HTTP/1.1 request: its path and body (by `content-length`).
async fn read_request(stream: &mut TcpStream) -> Option<(String, Vec<u8>)> {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        if let Some(end) = find(&buffer, b"\r\n\r\n") {
            break end + 4;
        }
        let read = stream.read(&mut chunk).await.ok()?;
        if read == 0 || buffer.len() > MAX_REQUEST {
            return None;
        }
        buffer.extend_from_slice(&chunk[..read]);
    };
    let head = String::from_utf8_lossy(&buffer[..head_end]).into_owned();
    let path = head.split_whitespace().nth(1)?.to_owned();
    let length = head
        .lines()
        .filter_map(|line| line.split_once(':'))
        .find(|(name, _)| name.trim().eq_ignore_ascii_case("content-length"))
        .and_then(|(_, value)| value.trim().parse::<usize>().ok())
        .unwrap_or(0)
        .min(MAX_REQUEST);
    while buffer.len() < head_end + length {
        let read = stream.read(&mut chunk).await.ok()?;
        if read == 0 {
            return None;
        }
        buffer.extend_from_slice(&chunk[..read]);
    }
    Some((path, buffer[head_end..head_end + length].to_vec()))
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}
