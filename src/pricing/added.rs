//! An extension added to an offer's challenge for one request, without encoding the challenge
//! again: the encoded JSON is extended in place, and the object only built when asked for.

use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use x402_wire::PaymentRequired;

/// The extension an [`Offer`](super::Offer) gained for one request.
#[derive(Debug)]
pub(super) struct AddedExtension {
    key: Arc<str>,
    value: AddedValue,
    /// The whole challenge with the extension, built the first time it is asked for: a 402 is
    /// written from the encoded bytes alone.
    challenge: OnceLock<PaymentRequired>,
}

/// The added extension's JSON text: whole, or a template's head and one request's rest.
#[derive(Debug)]
pub(super) enum AddedValue {
    Raw(Box<RawValue>),
    /// The rest is a slice of the challenge's body, which holds it already.
    Spliced {
        head: Arc<str>,
        rest: Bytes,
    },
}

impl AddedExtension {
    pub(super) fn new(key: Arc<str>, value: AddedValue) -> Self {
        Self {
            key,
            value,
            challenge: OnceLock::new(),
        }
    }

    /// `without` (the offer's challenge) with this extension.
    pub(super) fn challenge(&self, without: &PaymentRequired) -> &PaymentRequired {
        self.challenge.get_or_init(|| {
            let mut with = without.clone();
            // The text was serialized from a value, or checked once as part of the challenge,
            // so it reads back as one.
            let value = match &self.value {
                AddedValue::Raw(raw) => serde_json::from_str(raw.get()),
                AddedValue::Spliced { head, rest } => {
                    let mut text = Vec::with_capacity(head.len() + rest.len());
                    text.extend_from_slice(head.as_bytes());
                    text.extend_from_slice(rest);
                    serde_json::from_slice(&text)
                }
            }
            .unwrap_or(Value::Null);
            with.extensions
                .get_or_insert_with(Map::new)
                .insert(self.key.to_string(), value);
            with
        })
    }
}

/// `body`, a challenge serialized with `extensions` (which it does not hold under `key`) as its
/// last field, with `"key": value` appended to them: the bytes serializing the challenge with
/// the extension inserted would give.
pub(super) fn append_extension(
    body: &[u8],
    extensions: Option<&Map<String, Value>>,
    key: &str,
    value: &RawValue,
) -> Option<Vec<u8>> {
    let (kept, between) = split_for_append(body, extensions)?;
    let entry = key.len() + 3 + value.get().len(); // `"key":value`, escapes aside
    let mut appended = Vec::with_capacity(kept.len() + between.len() + entry + 2);
    appended.extend_from_slice(kept);
    appended.extend_from_slice(between);
    serde_json::to_writer(&mut appended, key).ok()?;
    appended.push(b':');
    appended.extend_from_slice(value.get().as_bytes());
    appended.extend_from_slice(b"}}");
    Some(appended)
}

/// What is kept of `body` (a challenge serialized with `extensions` as its last field) to
/// append an extension, and what comes between it and the new entry; `}}` closes both after it.
pub(super) fn split_for_append<'b>(
    body: &'b [u8],
    extensions: Option<&Map<String, Value>>,
) -> Option<(&'b [u8], &'static [u8])> {
    Some(match extensions {
        None => (body.strip_suffix(b"}")?, b",\"extensions\":{"),
        Some(map) if map.is_empty() => (body.strip_suffix(b"}}")?, b""),
        Some(_) => (body.strip_suffix(b"}}")?, b","),
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use serde_json::value::to_raw_value;

    use super::*;
    use crate::pricing::{Offer, OfferBuilder};
    use x402_wire::{Extension, ResourceInfo, UsdcDeployment};

    fn builder() -> OfferBuilder {
        Offer::builder(ResourceInfo::new("https://shop.example/report")).usdc(
            &UsdcDeployment::BASE,
            "1.00".parse().expect("a price"),
            "0x209693Bc6afc0C5328bA36FaF03C514EF312287C",
        )
    }

    fn nonce() -> Value {
        json!({"info": {"nonce": "a1\"b2", "uri": "https://shop.example/report?x=é"}, "schema": {}})
    }

    /// The challenge with the extension, serialized whole.
    fn encoded_whole(offer: &Offer, key: &str, value: &Value) -> Vec<u8> {
        let mut required = offer.payment_required().clone();
        required
            .extensions
            .get_or_insert_with(Map::new)
            .insert(key.to_owned(), value.clone());
        serde_json::to_vec(&required).expect("a challenge serializes")
    }

    #[test]
    fn appending_writes_the_bytes_encoding_the_whole_challenge_would() {
        let bazaar = Extension::new(
            json!({"input": {"type": "http"}}),
            json!({"type": "object"}),
        );
        let offers = [
            builder().build(),
            builder().extension("bazaar", bazaar).build(),
        ];
        for offer in offers {
            let offer = offer.expect("an offer");
            for value in [nonce(), json!(null), json!("text"), json!([1, {"a": []}])] {
                let raw = to_raw_value(&value).expect("serializes");
                let appended = offer
                    .with_extension("sign-in-with-x", raw)
                    .expect("the challenge extends");
                let whole = encoded_whole(&offer, "sign-in-with-x", &value);
                assert_eq!(
                    String::from_utf8_lossy(appended.challenge_body()),
                    String::from_utf8_lossy(&whole)
                );
                let header = x402_wire::header::encode_json(&whole).expect("a header");
                assert_eq!(appended.challenge_header(), &header);
                let parsed: PaymentRequired =
                    serde_json::from_slice(&whole).expect("the challenge reads back");
                assert_eq!(appended.payment_required(), &parsed);
                assert_eq!(appended.accepts(), offer.accepts());
            }
        }
    }

    #[test]
    fn an_empty_extension_map_is_extended_too() {
        let offer = builder().build().expect("an offer");
        let mut required = offer.payment_required().clone();
        required.extensions = Some(Map::new());
        let body = serde_json::to_vec(&required).expect("serializes");
        let one = to_raw_value(&json!(1)).expect("serializes");
        let appended =
            append_extension(&body, Some(&Map::new()), "k", &one).expect("the body extends");
        assert_eq!(appended, encoded_whole(&offer, "k", &json!(1)));
    }

    #[test]
    fn an_extension_the_offer_has_is_replaced_by_encoding_the_whole_challenge() {
        let offer = builder()
            .extension(
                "sign-in-with-x",
                Extension::new(json!({"old": true}), json!({})),
            )
            .build()
            .expect("an offer");
        let replaced = offer
            .with_extension(
                "sign-in-with-x",
                to_raw_value(&nonce()).expect("serializes"),
            )
            .expect("the challenge extends");
        let whole = encoded_whole(&offer, "sign-in-with-x", &nonce());
        assert_eq!(replaced.challenge_body().as_ref(), whole.as_slice());
        let twice = replaced
            .with_extension("another", to_raw_value(&json!(2)).expect("serializes"))
            .expect("the challenge extends");
        let extensions = twice.extensions().expect("extensions");
        assert_eq!(extensions["sign-in-with-x"], nonce());
        assert_eq!(extensions["another"], json!(2));
    }
}
