//! A challenge extension most of whose bytes are the same in every 402 of an offer (a sign-in
//! challenge, whose nonce and times alone change): the offer's challenge with the extension's
//! constant part is prebuilt once, JSON and base64, and each 402 appends only the rest.
//!
//! The prebuilt JSON is padded with whitespace to a multiple of three bytes, so that its base64
//! ends on a group boundary and the base64 of the rest can simply follow it.

use std::any::Any;
use std::cell::Cell;
use std::sync::{Arc, PoisonError, RwLock, Weak};

use base64::Engine as _;
use bytes::Bytes;
use serde_json::{Map, Value};

/// Who owns a prebuilt challenge: the hook that gave its template, held weakly.
pub(crate) type Owner = Weak<dyn Any + Send + Sync>;

/// The part of a challenge extension that is the same in every 402 of an offer, given by a
/// [`PaymentHooks::challenge_extension_template`](crate::payment::PaymentHooks::challenge_extension_template):
/// the extension's key, and the start of its JSON value (`head`), which each 402's rest
/// completes into one JSON value.
///
/// ```
/// use tower_x402::pricing::ExtensionTemplate;
///
/// // Each 402 writes the rest, e.g. `"nonce":"5f1c…"}`.
/// let template = ExtensionTemplate::new("sign-in-with-x", r#"{"domain":"shop.example","#);
/// assert_eq!(template.key(), "sign-in-with-x");
/// ```
#[derive(Clone, Debug)]
pub struct ExtensionTemplate {
    key: String,
    head: String,
}

impl ExtensionTemplate {
    /// The extension `key`, whose value starts with `head` in every 402.
    pub fn new(key: impl Into<String>, head: impl Into<String>) -> Self {
        Self {
            key: key.into(),
            head: head.into(),
        }
    }

    /// The extension's key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The start of the extension's JSON value.
    pub fn head(&self) -> &str {
        &self.head
    }
}

/// An offer's challenge up to and including a template's head, encoded.
#[derive(Debug)]
pub(crate) struct Prebuilt {
    pub(super) key: Arc<str>,
    pub(super) head: Arc<str>,
    /// The challenge's JSON up to the end of the head (a multiple of three bytes).
    pub(super) json: Vec<u8>,
    /// The base64 of `json`.
    pub(super) base64: String,
}

/// Most templates an offer keeps prebuilt (one per hook that gives one; more are built per 402).
const MAX_PREBUILT: usize = 8;

/// The prebuilt challenges of an offer, one per hook (held weakly: a hook dropped keeps its
/// address from being reused while its entry is here), shared by the offer's clones.
#[derive(Debug, Default)]
pub(crate) struct Splices(RwLock<Vec<(Owner, Option<Arc<Prebuilt>>)>>);

/// What [`Splices::get`] knows of a hook.
pub(crate) enum Cached {
    /// Nothing yet: ask the hook.
    Unknown,
    /// The hook gives no usable template.
    None,
    /// The prebuilt challenge.
    Prebuilt(Arc<Prebuilt>),
}

impl Splices {
    /// What is kept for the hook at `owner`.
    pub(crate) fn get(&self, owner: *const ()) -> Cached {
        let entries = self.0.read().unwrap_or_else(PoisonError::into_inner);
        match entries
            .iter()
            .find(|(hook, _)| hook.as_ptr().cast::<()>() == owner)
        {
            None => Cached::Unknown,
            Some((_, None)) => Cached::None,
            Some((_, Some(prebuilt))) => Cached::Prebuilt(Arc::clone(prebuilt)),
        }
    }

    /// Keeps `prebuilt` for `owner` (when there is room).
    pub(crate) fn put(&self, owner: Owner, prebuilt: Option<Arc<Prebuilt>>) {
        let mut entries = self.0.write().unwrap_or_else(PoisonError::into_inner);
        let address = owner.as_ptr().cast::<()>();
        if entries.len() < MAX_PREBUILT
            && !entries
                .iter()
                .any(|(hook, _)| hook.as_ptr().cast::<()>() == address)
        {
            entries.push((owner, prebuilt));
        }
    }
}

/// `body` (a challenge serialized with `extensions`, which do not hold `key`, as its last field)
/// up to `"key":head`, padded to a multiple of three bytes, and its base64.
pub(super) fn prebuild(
    body: &[u8],
    extensions: Option<&Map<String, Value>>,
    template: &ExtensionTemplate,
) -> Option<Prebuilt> {
    let (kept, between) = super::added::split_for_append(body, extensions)?;
    let mut key = Vec::new();
    serde_json::to_writer(&mut key, template.key()).ok()?;
    let unpadded = kept.len() + between.len() + key.len() + 1 + template.head().len();
    // Whitespace between `{` or `,` and the key is insignificant in JSON.
    let padding = (3 - unpadded % 3) % 3;
    let mut json = Vec::with_capacity(unpadded + padding);
    json.extend_from_slice(kept);
    json.extend_from_slice(between);
    json.extend(std::iter::repeat_n(b' ', padding));
    json.extend_from_slice(&key);
    json.push(b':');
    json.extend_from_slice(template.head().as_bytes());
    let base64 = base64::engine::general_purpose::STANDARD.encode(&json);
    Some(Prebuilt {
        key: template.key().into(),
        head: template.head().into(),
        json,
        base64,
    })
}

thread_local! {
    /// Each thread's buffer for the rests hooks write, reused from one 402 to the next.
    static REST: Cell<Vec<u8>> = const { Cell::new(Vec::new()) };
}

/// The largest rest buffer a thread keeps for the next 402.
const MAX_KEPT_REST: usize = 16 * 1024;

/// Calls `write` with an empty buffer for a hook's rest: this thread's, whose allocation is
/// kept from one 402 to the next.
pub(crate) fn with_rest_buffer<R>(write: impl FnOnce(&mut Vec<u8>) -> R) -> R {
    let mut rest = REST.take();
    rest.clear();
    let result = write(&mut rest);
    if rest.capacity() <= MAX_KEPT_REST {
        REST.set(rest);
    }
    result
}

impl Prebuilt {
    /// The extension's key.
    pub(crate) fn key(&self) -> &str {
        &self.key
    }

    /// The challenge's JSON and its base64 with `rest` completing the extension, built in one
    /// buffer: the prebuilt JSON, `rest` and the closing braces, then the prebuilt base64 and
    /// the base64 of what follows the prebuilt JSON. Returns the buffer and where the base64
    /// starts; one allocation and one copy of each prebuilt part per 402.
    pub(super) fn complete(&self, rest: &[u8]) -> Option<(Bytes, usize)> {
        const CLOSE: &[u8] = b"}}";
        let tail_len = rest.len() + CLOSE.len();
        let json_len = self.json.len() + tail_len;
        let tail_base64_len = tail_len.div_ceil(3) * 4;
        let mut buffer = Vec::with_capacity(json_len + self.base64.len() + tail_base64_len);
        buffer.extend_from_slice(&self.json);
        buffer.extend_from_slice(rest);
        buffer.extend_from_slice(CLOSE);
        buffer.extend_from_slice(self.base64.as_bytes());
        let encoded_from = buffer.len();
        buffer.resize(encoded_from + tail_base64_len, 0);
        let (written_so_far, encoded) = buffer.split_at_mut(encoded_from);
        let tail = &written_so_far[self.json.len()..json_len];
        // Sized above for exactly this tail (checked: the encoder panics on too little room).
        let expected = encoded.len();
        if base64_simd::STANDARD.encoded_length(tail.len()) != expected {
            return None;
        }
        let written = base64_simd::STANDARD.encode(tail, base64_simd::Out::from_slice(encoded));
        (written.len() == expected).then(|| (Bytes::from(buffer), json_len))
    }
}

#[cfg(test)]
mod tests {
    use base64::Engine as _;
    use serde_json::json;
    use x402_wire::{Extension, PaymentRequired, ResourceInfo, UsdcDeployment};

    use super::*;
    use crate::pricing::Offer;

    fn offers() -> Vec<Offer> {
        let builder = || {
            Offer::builder(ResourceInfo::new("https://shop.example/report")).usdc(
                &UsdcDeployment::BASE,
                "1.00".parse().expect("a price"),
                "0x209693Bc6afc0C5328bA36FaF03C514EF312287C",
            )
        };
        let bazaar = Extension::new(json!({"input": {"type": "http"}}), json!({}));
        vec![
            builder().build().expect("an offer"),
            builder()
                .extension("bazaar", bazaar)
                .build()
                .expect("an offer"),
        ]
    }

    #[test]
    fn a_spliced_challenge_is_the_whole_challenge_with_the_extension() {
        let template = ExtensionTemplate::new("sign-in-with-x", r#"{"info":{"domain":"a","#);
        for offer in offers() {
            for rest in [
                &br#""nonce":"1"}}"#[..],
                br#""nonce":"12"}}"#,
                br#""nonce":"123"}}"#,
            ] {
                let prebuilt = offer.prebuild(&template).expect("prebuilt");
                assert_eq!(prebuilt.json.len() % 3, 0, "ends on a base64 group");
                let spliced = offer.with_spliced(&prebuilt, rest).expect("spliced");
                let body = spliced.challenge_body();
                let decoded = base64::engine::general_purpose::STANDARD
                    .decode(spliced.challenge_header().as_bytes())
                    .expect("base64");
                assert_eq!(&decoded, body, "the header is the body's base64");
                let parsed: PaymentRequired = serde_json::from_slice(body).expect("JSON");
                let mut value = template.head().as_bytes().to_vec();
                value.extend_from_slice(rest);
                let mut expected = offer.payment_required().clone();
                expected.extensions.get_or_insert_with(Map::new).insert(
                    template.key().to_owned(),
                    serde_json::from_slice(&value).expect("the extension's JSON"),
                );
                assert_eq!(parsed, expected);
                assert_eq!(spliced.payment_required(), &expected);
                assert_eq!(spliced.accepts(), offer.accepts());
            }
        }
    }

    #[test]
    fn an_offer_holding_the_key_or_extended_already_is_not_prebuilt() {
        let offer = offers().remove(0);
        let holding = ExtensionTemplate::new("bazaar", "{");
        assert!(offers()[1].prebuild(&holding).is_none());
        let extended = offer
            .with_extension("x", serde_json::value::to_raw_value(&1).expect("JSON"))
            .expect("extended");
        assert!(extended.splices().is_none());
        assert!(
            extended
                .prebuild(&ExtensionTemplate::new("y", "{"))
                .is_none()
        );
    }
}
