//! How large a 402's challenge may grow before a reverse proxy refuses the response.
//!
//! A 402 carries its whole challenge, base64-encoded, in the `PAYMENT-REQUIRED` response header.
//! Reverse proxies read a response's status line and headers into one buffer before forwarding
//! anything: nginx's `proxy_buffer_size` defaults to one memory page (4 KB on x86-64), and an
//! upstream whose headers do not fit is answered `502 Bad Gateway` ("upstream sent too big
//! header"). Other proxies have similar limits. A challenge larger than [`WARN_LEN`] leaves the
//! rest of the 402's headers too little of those 4 KB, so building one logs a warning, once per
//! resource URL.

use std::collections::HashSet;
use std::sync::{Mutex, PoisonError};

/// The header buffer of a stock nginx (`proxy_buffer_size`, one 4 KB page) that every 402 should
/// fit in: status line, every header and the blank line after them.
pub const PROXY_HEADER_BUFFER: usize = 4096;

/// The largest `PAYMENT-REQUIRED` value built without a warning, in bytes: 512 bytes under
/// [`PROXY_HEADER_BUFFER`], for the status line and the 402's other headers (content type,
/// length, date, CORS, the header's own name).
pub const WARN_LEN: usize = PROXY_HEADER_BUFFER - 512;

/// Resource URLs already warned about; past this many, no more warnings (offers built per
/// request must not grow it without bound).
const MAX_WARNED: usize = 1024;

static WARNED: Mutex<Option<HashSet<String>>> = Mutex::new(None);

/// Warns, once per `resource`, when a challenge header of `len` bytes passes [`WARN_LEN`];
/// `what` says which challenge (`""` for the offer's own, `" with …"` for what was added).
pub(crate) fn check(resource: &str, len: usize, what: &str) {
    if len <= WARN_LEN {
        return;
    }
    let mut warned = WARNED.lock().unwrap_or_else(PoisonError::into_inner);
    let warned = warned.get_or_insert_with(HashSet::new);
    if warned.len() >= MAX_WARNED || !warned.insert(resource.to_owned()) {
        return;
    }
    tracing::warn!(
        offer = %resource,
        bytes = len,
        limit = WARN_LEN,
        "the 402 challenge of this offer{what} is {len} bytes of PAYMENT-REQUIRED header: with the \
         402's other headers it passes the 4 KB a stock nginx reads (proxy_buffer_size), which \
         answers 502 instead; trim its extensions, or raise the proxy's buffer"
    );
}
