//! The value parsers of the settings: each answers what is wrong with a value; clap's refusal
//! shows the value itself and the flag with its variable: `invalid value 'x' for '--listen
//! <STORE_LISTEN>': …`.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use reqwest::Url;

use super::{ChannelList, Lifetime, Secret};

/// A number of at least 1.
pub fn positive<T>(text: &str) -> Result<T, String>
where
    T: FromStr + Default + PartialEq,
    T::Err: fmt::Display,
{
    let value: T = text.parse().map_err(|e| format!("{e}"))?;
    if value == T::default() {
        return Err("must be at least 1".to_owned());
    }
    Ok(value)
}

/// A whole number of seconds, at least 1.
pub fn seconds(text: &str) -> Result<Duration, String> {
    positive::<u64>(text).map(Duration::from_secs)
}

/// A whole number of seconds, 0 included.
pub fn whole_seconds(text: &str) -> Result<Duration, String> {
    text.parse()
        .map(Duration::from_secs)
        .map_err(|e| format!("{e}"))
}

/// A whole number of seconds, `0` for ever.
pub fn seconds_or_for_ever(text: &str) -> Result<Lifetime, String> {
    whole_seconds(text).map(|lifetime| (!lifetime.is_zero()).then_some(lifetime))
}

/// A secret's bytes, checked by [`Config::checked`](super::Config::checked) so that no refusal shows them.
pub fn secret(text: &str) -> Result<Secret, String> {
    Ok(text.as_bytes().to_vec())
}

/// An absolute http(s) URL with a host.
pub fn http_url(text: &str) -> Result<String, String> {
    parse_http_url(text).map(|_| text.to_owned())
}

fn parse_http_url(text: &str) -> Result<Url, String> {
    let url = Url::parse(text).map_err(|e| format!("not an absolute URL: {e}"))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err("must be an http(s) URL with a host".to_owned());
    }
    Ok(url)
}

/// The store's public base URL: an http(s) URL without query or fragment, kept without its
/// trailing slashes; empty for the bound address.
pub fn base_url(text: &str) -> Result<String, String> {
    if text.is_empty() {
        return Ok(String::new());
    }
    let trimmed = text.trim_end_matches('/');
    let url = parse_http_url(trimmed)?;
    if url.query().is_some() || url.fragment().is_some() {
        return Err("must not carry a query or fragment".to_owned());
    }
    Ok(trimmed.to_owned())
}

/// Facilitator base URLs, comma-separated, each an http(s) URL; kept as one comma-separated
/// list of the URLs without blanks around them and trailing slashes.
pub fn facilitator_urls(text: &str) -> Result<String, String> {
    let urls = text
        .split(',')
        .enumerate()
        .map(|(index, entry)| {
            http_url(entry.trim().trim_end_matches('/'))
                .map_err(|problem| format!("entry {} ({entry:?}): {problem}", index + 1))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(urls.join(","))
}

/// 1–32 lowercase letters, digits and inner hyphens.
pub fn slug_prefix(text: &str) -> Result<String, String> {
    let fits = (1..=32).contains(&text.len())
        && !text.starts_with('-')
        && !text.ends_with('-')
        && !text.contains("--")
        && text
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if !fits {
        return Err("must be 1–32 lowercase letters, digits and inner hyphens".to_owned());
    }
    Ok(text.to_owned())
}

/// A Base address; empty for none.
pub fn evm_address(text: &str) -> Result<String, String> {
    if !text.is_empty() && !is_evm_address(text) {
        return Err("not a Base address (0x followed by 40 hex digits)".to_owned());
    }
    Ok(text.to_owned())
}

/// A Solana address.
pub fn solana_address(text: &str) -> Result<String, String> {
    if !is_solana_address(text) {
        return Err("not a Solana address (32–44 base58 characters)".to_owned());
    }
    Ok(text.to_owned())
}

/// An Algorand address.
pub fn algorand_address(text: &str) -> Result<String, String> {
    if !is_algorand_address(text) {
        return Err("not an Algorand address (58 base32 characters A–Z, 2–7)".to_owned());
    }
    Ok(text.to_owned())
}

/// An http(s) URL template holding the placeholder `{sku}`.
pub fn checkout_url(text: &str) -> Result<String, String> {
    if !text.contains("{sku}") {
        return Err("must contain the placeholder {sku}".to_owned());
    }
    parse_http_url(&text.replace("{sku}", "sku"))?;
    Ok(text.to_owned())
}

/// One web origin of a comma-separated list, kept without surrounding blanks and trailing
/// slashes; an empty item (`a,,b`, a trailing comma) is empty and left out of the list.
pub fn cors_origin(text: &str) -> Result<String, String> {
    let origin = text.trim().trim_end_matches('/');
    if origin.is_empty() {
        return Ok(String::new());
    }
    http_url(origin)
}

/// An existing directory.
pub fn directory(text: &str) -> Result<PathBuf, String> {
    let path = PathBuf::from(text);
    if !path.is_dir() {
        return Err("not a directory".to_owned());
    }
    Ok(path)
}

/// A JSON file listing discovery channels, each of them valid.
pub fn channel_list(text: &str) -> Result<ChannelList, String> {
    let json = std::fs::read_to_string(text).map_err(|e| format!("cannot read it: {e}"))?;
    let channels: ChannelList =
        serde_json::from_str(&json).map_err(|e| format!("not a channel list: {e}"))?;
    for channel in &channels {
        channel.validate()?;
    }
    Ok(channels)
}

/// `0x` followed by 40 hex digits (any case; the checksum is only a spelling).
pub fn is_evm_address(address: &str) -> bool {
    address
        .strip_prefix("0x")
        .is_some_and(|hex| hex.len() == 40 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// 32–44 characters of the base58 alphabet (no `0`, `O`, `I`, `l`).
pub fn is_solana_address(address: &str) -> bool {
    (32..=44).contains(&address.len())
        && address
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() && !matches!(b, b'0' | b'O' | b'I' | b'l'))
}

/// 58 characters of the RFC 4648 base32 alphabet (the public key and its checksum; the checksum
/// itself is not recomputed here).
pub fn is_algorand_address(address: &str) -> bool {
    address.len() == 58
        && address
            .bytes()
            .all(|b| b.is_ascii_uppercase() || (b'2'..=b'7').contains(&b))
}
