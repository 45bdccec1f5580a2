//! The codec of the three x402 headers: standard base64 (RFC 4648, with padding) over the UTF-8
//! JSON of the object.
//!
//! ```
//! use x402_wire::{header, Network, SettleResponse};
//!
//! let settled = SettleResponse::failure(Network::BASE, "insufficient_funds");
//! let value = header::encode(&settled)?;
//! let back: SettleResponse = header::decode(value.as_bytes())?;
//! assert_eq!(back, settled);
//! # Ok::<_, Box<dyn std::error::Error>>(())
//! ```

use std::cell::RefCell;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use http::HeaderValue;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::facilitator::SettleResponse;
use crate::payment::{PaymentPayload, PaymentRequired, X402Version};

/// Largest encoded header value [`decode`] accepts: 16 KiB, several times a real EIP-3009
/// payload (about 1.1 KB) and well under common proxy header limits.
pub const DEFAULT_MAX_LEN: usize = 16 * 1024;

/// Why a header value could not be decoded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HeaderError {
    /// Longer than the limit; rejected before decoding.
    #[error("header value is {len} bytes, over the {limit}-byte limit")]
    TooLarge {
        /// Length of the encoded value.
        len: usize,
        /// The limit in force.
        limit: usize,
    },
    /// Not standard base64 with padding.
    #[error("header value is not standard base64: {0}")]
    NotBase64(#[source] base64::DecodeError),
    /// Decoded, but not JSON.
    #[error("header value is not JSON: {0}")]
    NotJson(#[source] serde_json::Error),
    /// JSON, but not the expected object.
    #[error("header value is not a valid {what}: {source}")]
    Shape {
        /// The object that was expected.
        what: &'static str,
        /// What serde found wrong.
        #[source]
        source: serde_json::Error,
    },
    /// The object names a protocol version other than 2.
    #[error("x402Version {found} is not supported; this server speaks version 2")]
    WrongVersion {
        /// The version found, as written.
        found: String,
    },
    /// The object could not be encoded (never happens for this crate's types).
    #[error("could not encode header value: {0}")]
    Encode(#[source] serde_json::Error),
}

/// A wire object that may travel in an x402 header.
pub trait HeaderObject: Serialize + DeserializeOwned {
    /// Name used in error messages.
    const NAME: &'static str;

    /// The object's `x402Version`, for objects that carry one.
    fn x402_version(&self) -> Option<X402Version> {
        None
    }
}

impl HeaderObject for PaymentRequired {
    const NAME: &'static str = "PaymentRequired";
    fn x402_version(&self) -> Option<X402Version> {
        Some(self.x402_version)
    }
}

impl HeaderObject for PaymentPayload {
    const NAME: &'static str = "PaymentPayload";
    fn x402_version(&self) -> Option<X402Version> {
        Some(self.x402_version)
    }
}

impl HeaderObject for SettleResponse {
    const NAME: &'static str = "SettleResponse";
}

/// Encodes `object` as a header value.
///
/// # Errors
///
/// Only if serialization fails, which this crate's types never do.
pub fn encode<T: HeaderObject>(object: &T) -> Result<HeaderValue, HeaderError> {
    // Sized for the usual object (a `PAYMENT-RESPONSE` is about 150 bytes of JSON), so that
    // writing it does not grow the buffer step by step.
    let mut json = Vec::with_capacity(256);
    serde_json::to_writer(&mut json, object).map_err(HeaderError::Encode)?;
    encode_json(&json)
}

/// The header value carrying `json`, already serialized: its padded standard base64. For a party
/// that writes the JSON itself (a challenge cached as bytes, extensions spliced in per request);
/// [`decode`] reads it back.
///
/// ```
/// use x402_wire::{header, Network, SettleResponse};
///
/// let json = br#"{"success":false,"errorReason":"insufficient_funds","transaction":"","network":"eip155:8453"}"#;
/// let value = header::encode_json(json)?;
/// let back: SettleResponse = header::decode(value.as_bytes())?;
/// assert_eq!(back, SettleResponse::failure(Network::BASE, "insufficient_funds"));
/// # Ok::<_, Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
///
/// None in practice: base64 is always a valid header value.
pub fn encode_json(json: &[u8]) -> Result<HeaderValue, HeaderError> {
    let encoded = base64_simd::STANDARD.encode_to_string(json);
    // Base64 output is always a valid header value.
    HeaderValue::try_from(encoded).map_err(|_| unreachable_invalid_header())
}

#[cold]
fn unreachable_invalid_header() -> HeaderError {
    HeaderError::Encode(serde::ser::Error::custom(
        "base64 produced an invalid header",
    ))
}

/// Decodes a header value, accepting at most 16 KiB (16,384 bytes).
///
/// # Errors
///
/// A [`HeaderError`] saying what was wrong: too large, not base64, not JSON, wrong shape, or a
/// protocol version other than 2.
pub fn decode<T: HeaderObject>(value: &[u8]) -> Result<T, HeaderError> {
    decode_with_limit(value, DEFAULT_MAX_LEN)
}

/// Decodes a header value of at most `limit` encoded bytes.
///
/// The limit is checked before anything is decoded or allocated.
///
/// # Errors
///
/// As [`decode`].
pub fn decode_with_limit<T: HeaderObject>(value: &[u8], limit: usize) -> Result<T, HeaderError> {
    if value.len() > limit {
        return Err(HeaderError::TooLarge {
            len: value.len(),
            limit,
        });
    }
    DECODED.with(|scratch| match scratch.try_borrow_mut() {
        Ok(mut scratch) => {
            let decoded = decode_json(value, &mut scratch);
            if scratch.capacity() > DEFAULT_MAX_LEN {
                // A larger limit let a large header through: do not keep its buffer.
                *scratch = Vec::new();
            }
            decoded
        }
        // Only if decoding re-entered itself: decode into a buffer of its own.
        Err(_) => decode_json(value, &mut Vec::new()),
    })
}

thread_local! {
    /// The decoded JSON of the last header, kept so that decoding the next one allocates no
    /// buffer (at most [`DEFAULT_MAX_LEN`] bytes per thread).
    static DECODED: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Decodes the base64 `value` into `json` (emptied first), then the object from it.
fn decode_json<T: HeaderObject>(value: &[u8], json: &mut Vec<u8>) -> Result<T, HeaderError> {
    json.clear();
    // The SIMD decoder does the work (the base64 of a payment was a third of its decoding's
    // instructions); it says only that something failed, so the `base64` crate looks again and
    // says which byte, where. Both accept exactly the padded standard alphabet (a test holds
    // them to it).
    if base64_simd::STANDARD
        .decode_append(value, &mut *json)
        .is_err()
    {
        json.clear();
        STANDARD
            .decode_vec(value, json)
            .map_err(HeaderError::NotBase64)?;
    }
    // Checked as UTF-8 once, whole: parsing from `str` then checks no string again (parsing
    // from bytes checks each string it reads, and the proof's raw JSON once more).
    let parsed = match std::str::from_utf8(json) {
        Ok(text) => serde_json::from_str::<T>(text),
        // Parsed from bytes for `serde_json`'s own error, which says where the bad byte is.
        Err(_) => serde_json::from_slice::<T>(json),
    };
    match parsed {
        Ok(object) => match object.x402_version() {
            Some(version) if version != X402Version::V2 => Err(HeaderError::WrongVersion {
                found: version.0.to_string(),
            }),
            _ => Ok(object),
        },
        Err(source) => Err(explain_failure::<T>(json, source)),
    }
}

/// Works out why `json` did not parse as `T`: bad JSON, an unsupported version, or a wrong shape.
#[cold]
fn explain_failure<T: HeaderObject>(json: &[u8], source: serde_json::Error) -> HeaderError {
    if source.is_syntax() || source.is_eof() {
        return HeaderError::NotJson(source);
    }
    // Only a JSON object can name a version; `[5]` is a wrong shape, not version 5.
    match serde_json::from_slice::<serde_json::Value>(json) {
        Ok(serde_json::Value::Object(object)) => match object.get("x402Version") {
            Some(version) if *version != 2 => HeaderError::WrongVersion {
                found: version.to_string(),
            },
            _ => HeaderError::Shape {
                what: T::NAME,
                source,
            },
        },
        _ => HeaderError::Shape {
            what: T::NAME,
            source,
        },
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// What each decoder makes of `text`: the bytes, or `None` when it refuses it.
    fn both(text: &str) -> (Option<Vec<u8>>, Option<Vec<u8>>) {
        (
            base64_simd::STANDARD.decode_to_vec(text).ok(),
            STANDARD.decode(text).ok(),
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4096))]

        #[test]
        fn the_simd_decoder_accepts_exactly_what_the_base64_crate_does(
            text in "[A-Za-z0-9+/=_ \\-]{0,40}",
        ) {
            let (simd, base64) = both(&text);
            prop_assert_eq!(simd, base64, "{:?}", text);
        }

        #[test]
        fn so_does_one_changed_character_of_a_valid_encoding(
            bytes in proptest::collection::vec(any::<u8>(), 0..64),
            at in any::<prop::sample::Index>(),
            to in "[A-Za-z0-9+/=_ \\-]",
        ) {
            let mut text = STANDARD.encode(&bytes);
            prop_assert_eq!(both(&text).0, Some(bytes));
            if !text.is_empty() {
                let at = at.index(text.len());
                text.replace_range(at..=at, &to);
                let (simd, base64) = both(&text);
                prop_assert_eq!(simd, base64, "{:?}", text);
            }
        }

        #[test]
        fn the_simd_encoder_writes_what_the_base64_crate_does(
            bytes in proptest::collection::vec(any::<u8>(), 0..300),
        ) {
            let value = encode_json(&bytes).expect("base64 is a valid header value");
            let expected = STANDARD.encode(&bytes);
            prop_assert_eq!(value.as_bytes(), expected.as_bytes());
        }
    }

    fn decode_json<T: HeaderObject>(json: &str) -> Result<T, HeaderError> {
        decode(STANDARD.encode(json).as_bytes())
    }

    #[test]
    fn a_json_array_is_a_wrong_shape_not_a_version() {
        let error = decode_json::<PaymentRequired>("[5]").unwrap_err();
        assert!(
            matches!(
                error,
                HeaderError::Shape {
                    what: "PaymentRequired",
                    ..
                }
            ),
            "{error}"
        );
        let error = decode_json::<PaymentPayload>(r#"{"x402Version":5}"#).unwrap_err();
        assert!(
            matches!(&error, HeaderError::WrongVersion { found } if found == "5"),
            "{error}"
        );
    }

    #[test]
    fn version_two_with_a_wrong_shape_is_a_shape_error() {
        let error = decode_json::<PaymentPayload>(r#"{"x402Version":2,"accepted":7}"#).unwrap_err();
        assert!(
            matches!(
                error,
                HeaderError::Shape {
                    what: "PaymentPayload",
                    ..
                }
            ),
            "{error}"
        );
    }
}
