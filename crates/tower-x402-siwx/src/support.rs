//! Small helpers the sign-in modules share: addresses, origins, comparison, the clock.

use std::cell::Cell;
use std::time::Duration;

use hmac::{Hmac, Mac as _};
use sha2::Sha256;
use siphasher::sip128::{Hasher128 as _, SipHasher24};
use std::hash::Hasher as _;

use tower_x402::BoxError;

/// An EVM address lower-cased; anything else (base58) as is.
pub(crate) fn normalise_address(address: &str) -> String {
    if address.len() == 42 && (address.starts_with("0x") || address.starts_with("0X")) {
        address.to_ascii_lowercase()
    } else {
        address.to_owned()
    }
}

pub(crate) fn parse_origin(origin: &str) -> Result<(String, String), BoxError> {
    let uri: http::Uri = origin.parse()?;
    let scheme = match uri.scheme_str() {
        Some(scheme @ ("http" | "https")) => scheme,
        _ => {
            return Err(format!("the origin must start with https:// or http://: {origin}").into());
        }
    };
    let authority = uri
        .authority()
        .ok_or_else(|| format!("the origin has no host: {origin}"))?;
    if authority.as_str().contains('@') {
        return Err("the origin must not carry credentials".into());
    }
    if uri.query().is_some() || !matches!(uri.path(), "" | "/") {
        return Err(format!("the origin must have no path or query: {origin}").into());
    }
    let host = authority.as_str().to_ascii_lowercase();
    Ok((format!("{scheme}://{host}"), host))
}

pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Unix seconds ([`x402_wire::unix_time`]).
pub(crate) fn unix_now() -> u64 {
    x402_wire::unix_time().as_secs()
}

/// Unix milliseconds ([`x402_wire::unix_time`]).
pub(crate) fn now_ms() -> u128 {
    x402_wire::unix_time().as_millis()
}

/// The length of a [`timestamp`].
pub(crate) const TIMESTAMP_LEN: usize = 24;

/// Where the milliseconds start in a [`timestamp`].
const MILLIS_AT: usize = 20;

/// Which of a challenge's two times a timestamp is, each formatted to the second once per
/// second and thread ([`write_timestamp`]).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Time {
    IssuedAt = 0,
    ExpirationTime = 1,
}

thread_local! {
    /// The second last formatted for each [`Time`] on this thread, and its text.
    static FORMATTED: [Cell<(u64, [u8; TIMESTAMP_LEN])>; 2] = const {
        [
            Cell::new((u64::MAX, [0; TIMESTAMP_LEN])),
            Cell::new((u64::MAX, [0; TIMESTAMP_LEN])),
        ]
    };
}

/// `2026-11-23T21:46:52.123Z`: RFC 3339 in UTC with milliseconds, as browsers write it.
#[cfg(test)]
pub(crate) fn timestamp(ms: u128) -> String {
    let mut text = [0; TIMESTAMP_LEN];
    let at = Duration::from_millis(u64::try_from(ms).unwrap_or(u64::MAX));
    write_timestamp(at, Time::IssuedAt, &mut text);
    String::from_utf8_lossy(&text).into_owned()
}

/// Writes the [`timestamp`] of `at` (since the epoch) into `out`. The date and time to the
/// second are formatted once per second for each [`Time`] on a thread, then copied: every 402
/// writes two timestamps, of the same two seconds for a whole second.
pub(crate) fn write_timestamp(at: Duration, time: Time, out: &mut [u8; TIMESTAMP_LEN]) {
    let second = at.as_secs();
    *out = FORMATTED.with(|formatted| {
        let slot = &formatted[time as usize];
        let (cached, text) = slot.get();
        if cached == second {
            return text;
        }
        let text = format_second(second);
        slot.set((second, text));
        text
    });
    let mut millis = at.subsec_millis();
    for place in (MILLIS_AT..MILLIS_AT + 3).rev() {
        out[place] = b'0' + (millis % 10) as u8;
        millis /= 10;
    }
}

/// The [`timestamp`] of `second` (years past 9999 written as 9999), with `.000` milliseconds.
fn format_second(second: u64) -> [u8; TIMESTAMP_LEN] {
    let at = i64::try_from(second)
        .ok()
        .and_then(|second| time::OffsetDateTime::from_unix_timestamp(second).ok())
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    let year = u32::try_from(at.year()).unwrap_or(0).min(9999);
    let fields: [(u32, usize, usize); 6] = [
        (year, 0, 4),
        (u32::from(u8::from(at.month())), 5, 2),
        (u32::from(at.day()), 8, 2),
        (u32::from(at.hour()), 11, 2),
        (u32::from(at.minute()), 14, 2),
        (u32::from(at.second()), 17, 2),
    ];
    let mut out = *b"0000-00-00T00:00:00.000Z";
    for (mut value, start, digits) in fields {
        for place in (start..start + digits).rev() {
            out[place] = b'0' + (value % 10) as u8;
            value /= 10;
        }
    }
    out
}

/// The label of the nonce MAC's key, mixed with the server's origin so that a nonce is this
/// origin's alone.
pub(crate) const NONCE_KEY_LABEL: &[u8] = b"x402-siwx-nonce/3";

/// The label of the key of the nonces issued before [`NONCE_KEY_LABEL`]'s, which the MAC of
/// every field as text used, with no origin mixed in: still accepted from proofs.
pub(crate) const LEGACY_NONCE_KEY_LABEL: &[u8] = b"x402-siwx-nonce/2";

/// A nonce MAC's key: the server's secret (at least 32 bytes) condensed through HMAC-SHA256
/// with `label` and then `context` (empty for none), so that all of the secret counts.
pub(crate) fn nonce_key(secret: &[u8], label: &[u8], context: &[u8]) -> Result<[u8; 16], BoxError> {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret)?;
    mac.update(label);
    mac.update(context);
    let digest = mac.finalize().into_bytes();
    let mut key = [0; 16];
    key.copy_from_slice(&digest[..16]);
    Ok(key)
}

/// Milliseconds since the epoch of an RFC 3339 time.
pub(crate) fn parse_timestamp(text: &str) -> Option<i128> {
    let at =
        time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339).ok()?;
    Some(at.unix_timestamp_nanos() / 1_000_000)
}

/// The input of a nonce's MAC, gathered into one buffer and hashed in few long writes:
/// SipHash hashes a stream, so the MAC is the same as with a write per field, and one long
/// write costs much less than a dozen short ones.
pub(crate) struct MacInput {
    mac: SipHasher24,
    buffer: [u8; MAC_BUFFER],
    len: usize,
}

/// The bytes a [`MacInput`] gathers before it writes them: a nonce's fields for a URI and
/// resource of up to about 230 bytes each.
const MAC_BUFFER: usize = 512;

impl MacInput {
    pub(crate) fn new(key: &[u8; 16]) -> Self {
        Self {
            mac: SipHasher24::new_with_key(key),
            buffer: [0; MAC_BUFFER],
            len: 0,
        }
    }

    /// One field of a length that varies: its length (big-endian `u64`), then its bytes,
    /// which are `parts` joined.
    pub(crate) fn field(&mut self, parts: [&[u8]; 2]) {
        let len = parts[0].len() + parts[1].len();
        self.write(&(len as u64).to_be_bytes());
        self.write(parts[0]);
        self.write(parts[1]);
    }

    pub(crate) fn write(&mut self, bytes: &[u8]) {
        if bytes.len() > MAC_BUFFER - self.len {
            self.mac.write(&self.buffer[..self.len]);
            self.len = 0;
            if bytes.len() > MAC_BUFFER {
                self.mac.write(bytes);
                return;
            }
        }
        self.buffer[self.len..self.len + bytes.len()].copy_from_slice(bytes);
        self.len += bytes.len();
    }

    /// The 128-bit MAC of every field written.
    pub(crate) fn finish(mut self) -> [u8; 16] {
        self.mac.write(&self.buffer[..self.len]);
        self.mac.finish128().as_bytes()
    }
}

/// Appends the JSON string of `parts` joined to `out`, as `serde_json` writes it: bytes that
/// need no escape (every one in a URI an HTTP request can carry) are copied, anything else is
/// escaped by `serde_json`. `false` when it could not be written.
pub(crate) fn write_json_string(out: &mut Vec<u8>, parts: [&str; 2]) -> bool {
    // Every byte looked at (no early exit), which the compiler turns into wide compares.
    let plain = |part: &str| {
        !part.bytes().fold(false, |escape, byte| {
            escape | (byte < 0x20) | (byte == b'"') | (byte == b'\\')
        })
    };
    if parts.iter().all(|part| plain(part)) {
        out.push(b'"');
        out.extend_from_slice(parts[0].as_bytes());
        out.extend_from_slice(parts[1].as_bytes());
        out.push(b'"');
        return true;
    }
    serde_json::to_writer(out, &[parts[0], parts[1]].concat()).is_ok()
}
