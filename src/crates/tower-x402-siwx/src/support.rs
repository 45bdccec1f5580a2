//! Small helpers the sign-in modules share: addresses, origins, comparison, the clock.

use std::time::{SystemTime, UNIX_EPOCH};

use hmac::{Hmac, Mac as _};
use sha2::Sha256;

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

pub(crate) fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_secs())
}

pub(crate) fn now_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_millis())
}

/// The length of a [`timestamp`].
pub(crate) const TIMESTAMP_LEN: usize = 24;

/// `2026-11-23T21:46:52.123Z`: RFC 3339 in UTC with milliseconds, as browsers write it.
#[cfg(test)]
pub(crate) fn timestamp(ms: u128) -> String {
    let mut text = [0; TIMESTAMP_LEN];
    write_timestamp(ms, &mut text);
    String::from_utf8_lossy(&text).into_owned()
}

/// Writes the [`timestamp`] of `ms` (years past 9999 written as 9999) into `out`, digit by
/// digit: every 402 writes two.
pub(crate) fn write_timestamp(ms: u128, out: &mut [u8; TIMESTAMP_LEN]) {
    let at = i128::try_from(ms)
        .ok()
        .and_then(|ms| time::OffsetDateTime::from_unix_timestamp_nanos(ms * 1_000_000).ok())
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    let year = u32::try_from(at.year()).unwrap_or(0).min(9999);
    let fields: [(u32, usize, usize); 7] = [
        (year, 0, 4),
        (u32::from(u8::from(at.month())), 5, 2),
        (u32::from(at.day()), 8, 2),
        (u32::from(at.hour()), 11, 2),
        (u32::from(at.minute()), 14, 2),
        (u32::from(at.second()), 17, 2),
        (u32::from(at.millisecond()), 20, 3),
    ];
    *out = *b"0000-00-00T00:00:00.000Z";
    for (mut value, start, digits) in fields {
        for place in (start..start + digits).rev() {
            out[place] = b'0' + (value % 10) as u8;
            value /= 10;
        }
    }
}

/// The nonce MAC's key: the server's secret (at least 32 bytes) condensed through
/// HMAC-SHA256, so that all of it counts.
pub(crate) fn nonce_key(secret: &[u8]) -> Result<[u8; 16], BoxError> {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret)?;
    mac.update(b"x402-siwx-nonce/2");
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
