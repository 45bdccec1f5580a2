//! One payment, one delivery of one request: the digest of the request a payment bought, and
//! the rule that decides whether a payment that already settled may be served again.
//!
//! The rule, and what a repeat is answered, are documented on [`RequestDigest`].

use std::fmt::Write as _;
use std::sync::Arc;

use serde_json::{Map, Value};
use sha2::{Digest as _, Sha256};

use super::Refusal;
use crate::settlement::SettlementRecord;

/// Requests whose text is at most this long are recorded as they are; longer ones as their
/// SHA-256, so that what the ledger keeps per payment stays small.
const KEPT_AS_TEXT: usize = 96;

/// The request a payment is presented with, as the ledger records it: the text of the request
/// itself when it is short (`http GET /v1/rows?count=1`), else `sha256:` and the hex SHA-256 of
/// that text. Two requests have equal digests exactly when their texts are equal.
///
/// A payment buys one delivery of one request. Every adapter names the request a payment comes
/// with — the HTTP layer its method, path, query and body ([`http`](Self::http) without a body,
/// [`http_with_body`](Self::http_with_body) with one), paid MCP tools the tool's name and
/// arguments ([`tool`](Self::tool)) — and
/// [`Payments::authorize`](super::Payments::authorize) records it with the payment in the
/// ledger. A payment presented again is answered:
///
/// | the payment, settled for | presented again with | answer |
/// |---|---|---|
/// | a fixed price (`exact`) | the same request (method, target and body) | delivered again: the same work, fully paid, so a lost answer can be fetched again |
/// | a fixed price (`exact`), its body too large to read first ([`http_unread_body`](Self::http_unread_body)) | any request | [`Refusal::AlreadyDelivered`] with the recorded settlement; nothing runs |
/// | a fixed price (`exact`) | another request | [`Refusal::UsedForAnotherRequest`] (409 `payment_used_for_another_request`); nothing runs |
/// | a metered amount (`upto`) | the same request | [`Refusal::AlreadyDelivered`] (409 `payment_already_delivered`) with the recorded settlement; nothing runs |
/// | a metered amount (`upto`) | another request | [`Refusal::UsedForAnotherRequest`] with the recorded settlement; nothing runs |
///
/// A metered payment is not delivered again even for the same request: its charge was decided
/// by the work that served it, and running the work again could serve more than was charged (a
/// longer stream, rows added since) under a settlement that cannot grow. Its answer is not
/// kept either — a streamed body has no bounded size to keep — so the repeat is told what was
/// settled and a buyer who lost the answer pays again. A payment in doubt is recovered only by
/// the request it was sent with; another request is refused the same way and leaves it in
/// doubt. A record written before requests were recorded is delivered again for its resource,
/// as it was sold.
///
/// A body is part of the request: the same payment with another body is another request. The
/// HTTP layer reads the body of a paid request before anything is verified, up to
/// [`X402Layer::max_paid_body`](crate::X402Layer::max_paid_body) (1 MiB by default), hashes
/// it, and hands the same bytes to the handler; nothing is read for a request without a body
/// or without a payment. A body declared larger than the bound (its `Content-Length`) is not
/// read: its payment is delivered once and never again. A body without a declared length that
/// grows past the bound is refused (413) before anything is verified. A buyer who lost the
/// answer to a paid `POST` sends the same payment with the same body again.
///
/// ```
/// use serde_json::json;
/// use tower_x402::payment::RequestDigest;
///
/// let get: http::Uri = "/v1/rows?count=1".parse()?;
/// let one = RequestDigest::http(&http::Method::GET, &get);
/// assert_eq!(one.as_str(), "http GET /v1/rows?count=1");
/// let fifty: http::Uri = "/v1/rows?count=50".parse()?;
/// assert_ne!(one, RequestDigest::http(&http::Method::GET, &fifty));
///
/// // Tool arguments are compared as JSON, whatever their key order or spacing.
/// let a = json!({"symbol": "USDC", "venue": "x"});
/// let b = json!({"venue": "x", "symbol": "USDC"});
/// assert_eq!(
///     RequestDigest::tool("quote", a.as_object()),
///     RequestDigest::tool("quote", b.as_object()),
/// );
/// let long = json!({"text": "a".repeat(500)});
/// assert!(RequestDigest::tool("summarize", long.as_object()).as_str().starts_with("sha256:"));
/// # Ok::<_, Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RequestDigest(Arc<str>);

impl RequestDigest {
    /// An HTTP request without a body: its method, path and query, as sent (not normalised:
    /// the same request sent again is the same text). A request with a body is
    /// [`http_with_body`](Self::http_with_body).
    pub fn http(method: &http::Method, uri: &http::Uri) -> Self {
        let target = uri.path_and_query().map_or("/", |target| target.as_str());
        let parts = ["http ", method.as_str(), " ", target];
        let len: usize = parts.iter().map(|part| part.len()).sum();
        if len <= KEPT_AS_TEXT {
            // Gathered on the stack and copied once into its `Arc`: one allocation per paid
            // request, not two.
            let mut text = [0_u8; KEPT_AS_TEXT];
            let mut at = 0;
            for part in parts {
                text[at..at + part.len()].copy_from_slice(part.as_bytes());
                at += part.len();
            }
            if let Ok(text) = std::str::from_utf8(&text[..len]) {
                return Self(text.into());
            }
        }
        Self::bounded(parts.concat())
    }

    /// An HTTP request with a body: its method, path and query as [`http`](Self::http) reads
    /// them, and the SHA-256 of `body`, the bytes the handler receives. The same payment
    /// presented again with other bytes is another request, refused without running the
    /// handler; with the same bytes it is the same request. An empty body is no body: the
    /// digest is [`http`](Self::http)'s.
    ///
    /// ```
    /// use tower_x402::payment::RequestDigest;
    ///
    /// let target: http::Uri = "/gen".parse()?;
    /// let post = |body: &[u8]| RequestDigest::http_with_body(&http::Method::POST, &target, body);
    /// assert_eq!(post(br#"{"prompt":"a"}"#), post(br#"{"prompt":"a"}"#));
    /// assert_ne!(post(br#"{"prompt":"a"}"#), post(br#"{"prompt":"b"}"#));
    /// assert_eq!(post(b""), RequestDigest::http(&http::Method::POST, &target));
    /// # Ok::<_, Box<dyn std::error::Error>>(())
    /// ```
    pub fn http_with_body(method: &http::Method, uri: &http::Uri, body: &[u8]) -> Self {
        if body.is_empty() {
            return Self::http(method, uri);
        }
        Self::http_with_body_hash(method, uri, &Sha256::digest(body).into())
    }

    /// [`http_with_body`](Self::http_with_body) from the SHA-256 of the body, as the layer
    /// computes it while the body arrives.
    pub(crate) fn http_with_body_hash(
        method: &http::Method,
        uri: &http::Uri,
        body_sha256: &[u8; 32],
    ) -> Self {
        let target = uri.path_and_query().map_or("/", |target| target.as_str());
        let mut text = String::with_capacity(5 + method.as_str().len() + target.len() + 80);
        text.push_str("http ");
        text.push_str(method.as_str());
        text.push(' ');
        text.push_str(target);
        text.push_str(" body:sha256:");
        push_hex(&mut text, body_sha256);
        Self::bounded(text)
    }

    /// An HTTP request whose body was too large to read before the handler ran: its method,
    /// path and query, marked as deliverable once. Its payment is delivered for it once and
    /// never again, whatever a repeat carries ([`Refusal::AlreadyDelivered`]); a payment left
    /// in doubt is still recovered by it.
    ///
    /// ```
    /// use tower_x402::payment::RequestDigest;
    ///
    /// let upload: http::Uri = "/upload".parse()?;
    /// let once = RequestDigest::http_unread_body(&http::Method::PUT, &upload);
    /// assert!(once.is_delivered_once());
    /// assert!(!RequestDigest::http(&http::Method::PUT, &upload).is_delivered_once());
    /// # Ok::<_, Box<dyn std::error::Error>>(())
    /// ```
    pub fn http_unread_body(method: &http::Method, uri: &http::Uri) -> Self {
        let target = uri.path_and_query().map_or("/", |target| target.as_str());
        let inner = Self::bounded(["http ", method.as_str(), " ", target, " body:unread"].concat());
        Self([ONCE, inner.as_str()].concat().into())
    }

    /// Whether a payment bought with this request is delivered once and never again, even
    /// for the same request ([`http_unread_body`](Self::http_unread_body)).
    pub fn is_delivered_once(&self) -> bool {
        self.0.starts_with(ONCE)
    }

    /// A call of the MCP tool `name` with `arguments`, as canonical JSON (object keys sorted, no
    /// spacing): the same arguments in another order are the same request.
    pub fn tool(name: &str, arguments: Option<&Map<String, Value>>) -> Self {
        let mut text = String::from("mcp ");
        write_canonical(&mut text, &Value::String(name.to_owned()));
        text.push(' ');
        match arguments {
            Some(arguments) => write_object(&mut text, arguments),
            None => text.push_str("{}"),
        }
        Self::bounded(text)
    }

    /// A digest read back from storage.
    pub fn from_stored(text: impl Into<Arc<str>>) -> Self {
        Self(text.into())
    }

    /// The digest as text, as the ledger stores it.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The digest's text, to share with the ledger's states.
    pub(crate) fn into_shared(self) -> Arc<str> {
        self.0
    }

    /// `text` itself when short, else its SHA-256. A text never starts with `sha256:` (it
    /// starts with `http ` or `mcp `), so the two forms never meet.
    fn bounded(text: String) -> Self {
        if text.len() <= KEPT_AS_TEXT {
            return Self(text.into());
        }
        let hash = Sha256::digest(text.as_bytes());
        let mut hex = String::with_capacity(7 + 64);
        hex.push_str("sha256:");
        push_hex(&mut hex, &hash);
        Self(hex.into())
    }
}

/// The prefix of a digest whose payment is delivered once, never again
/// ([`RequestDigest::http_unread_body`]). A text starts with `http `, `mcp ` or `sha256:`, so
/// no other digest starts with it.
const ONCE: &str = "once ";

fn push_hex(out: &mut String, bytes: &[u8]) {
    for byte in bytes {
        // Writing to a String cannot fail.
        let _ = write!(out, "{byte:02x}");
    }
}

impl std::fmt::Display for RequestDigest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// `value` as JSON with every object's keys sorted.
fn write_canonical(out: &mut String, value: &Value) {
    match value {
        Value::Object(object) => write_object(out, object),
        Value::Array(items) => {
            out.push('[');
            for (n, item) in items.iter().enumerate() {
                if n > 0 {
                    out.push(',');
                }
                write_canonical(out, item);
            }
            out.push(']');
        }
        // Scalars print as compact JSON (strings escaped).
        scalar => out.push_str(&scalar.to_string()),
    }
}

fn write_object(out: &mut String, object: &Map<String, Value>) {
    let mut entries: Vec<_> = object.iter().collect();
    entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
    out.push('{');
    for (n, (key, value)) in entries.into_iter().enumerate() {
        if n > 0 {
            out.push(',');
        }
        write_canonical(out, &Value::String(key.clone()));
        out.push(':');
        write_canonical(out, value);
    }
    out.push('}');
}

/// Whether a request recorded as `recorded` (`None`: recorded before requests were) is the
/// request `request`.
pub(super) fn same_request(recorded: Option<&str>, request: &RequestDigest) -> bool {
    // A record written before digests were kept was sold under the rule of its time: the same
    // resource. Refusing it would strand a buyer whose answer was lost across the upgrade.
    recorded.is_none_or(|recorded| recorded == request.as_str())
}

/// Whether the settled payment `record` may be delivered again for `request`: only a
/// fixed-price payment, only for the request it bought, and only when that request could be
/// compared whole (see [`RequestDigest`]).
// A `Refusal` is large, but this one is built on the refusal path only and answered at once.
#[allow(clippy::result_large_err)]
pub(super) fn redelivery(
    record: &SettlementRecord,
    request: &RequestDigest,
    metered: bool,
) -> Result<(), Refusal> {
    if !same_request(record.request_digest.as_deref(), request) {
        return Err(Refusal::UsedForAnotherRequest {
            settlement: Some(Box::new(record.settlement.clone())),
        });
    }
    // A request whose body was not read cannot be told from another with the same target:
    // delivered once only.
    if metered
        || record
            .request_digest
            .as_deref()
            .is_some_and(|d| d.starts_with(ONCE))
    {
        return Err(Refusal::AlreadyDelivered {
            settlement: Box::new(record.settlement.clone()),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_request_is_its_method_path_and_query() {
        let uri = |text: &str| text.parse::<http::Uri>().unwrap();
        let get = RequestDigest::http(&http::Method::GET, &uri("/rows?count=1"));
        assert_eq!(get.as_str(), "http GET /rows?count=1");
        assert_ne!(
            get,
            RequestDigest::http(&http::Method::POST, &uri("/rows?count=1"))
        );
        assert_ne!(
            get,
            RequestDigest::http(&http::Method::GET, &uri("/rows?count=1&"))
        );
        // An absolute-form target is the same request as its origin form.
        assert_eq!(
            get,
            RequestDigest::http(&http::Method::GET, &uri("http://shop.example/rows?count=1"))
        );
        let long = format!("/rows?q={}", "x".repeat(200));
        let hashed = RequestDigest::http(&http::Method::GET, &uri(&long));
        assert_eq!(hashed.as_str().len(), 7 + 64);
        assert!(hashed.as_str().starts_with("sha256:"), "{hashed}");
        let longer = format!("{long}y");
        assert_ne!(
            hashed,
            RequestDigest::http(&http::Method::GET, &uri(&longer))
        );
    }

    #[test]
    fn only_a_fixed_price_payment_is_delivered_again_and_only_for_its_request() {
        let record = |scheme: &str, digest: Option<&str>| {
            let requirement: x402_wire::PaymentRequirements = serde_json::from_value(json!({
                "scheme": scheme, "network": "eip155:8453", "amount": "1000",
                "asset": "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913",
                "payTo": "0x209693Bc6afc0C5328bA36FaF03C514EF312287C", "maxTimeoutSeconds": 60
            }))
            .unwrap();
            let settlement = x402_wire::SettleResponse::failure(requirement.network.clone(), "");
            let record = SettlementRecord::from_parts(
                crate::settlement::PaymentKey::from_stored("k"),
                "f",
                "https://shop.example/rows",
                requirement,
                settlement,
            );
            match digest {
                Some(digest) => record.for_request(digest),
                None => record,
            }
        };
        let uri = |text: &str| text.parse::<http::Uri>().unwrap();
        let one = RequestDigest::http(&http::Method::GET, &uri("/rows?count=1"));
        let fifty = RequestDigest::http(&http::Method::GET, &uri("/rows?count=50"));

        let exact = record("exact", Some(one.as_str()));
        assert!(redelivery(&exact, &one, false).is_ok());
        assert!(matches!(
            redelivery(&exact, &fifty, false),
            Err(Refusal::UsedForAnotherRequest {
                settlement: Some(_)
            })
        ));
        let upto = record("upto", Some(one.as_str()));
        assert!(matches!(
            redelivery(&upto, &one, true),
            Err(Refusal::AlreadyDelivered { .. })
        ));
        assert!(matches!(
            redelivery(&upto, &fifty, true),
            Err(Refusal::UsedForAnotherRequest { .. })
        ));
        // Recorded before requests were: sold for the resource, a metered one still once.
        assert!(redelivery(&record("exact", None), &fifty, false).is_ok());
        assert!(redelivery(&record("upto", None), &one, true).is_err());
    }

    #[test]
    fn tool_arguments_are_compared_as_canonical_json() {
        let quote = |arguments: Value| RequestDigest::tool("quote", arguments.as_object());
        let nested = quote(json!({"b": [1, {"y": 2, "x": "é\""}], "a": null}));
        assert_eq!(
            nested.as_str(),
            r#"mcp "quote" {"a":null,"b":[1,{"x":"é\"","y":2}]}"#
        );
        assert_eq!(
            nested,
            quote(json!({"a": null, "b": [1, {"x": "é\"", "y": 2}]}))
        );
        assert_ne!(
            quote(json!({"symbol": "USDC"})),
            quote(json!({"symbol": "BTC"}))
        );
        assert_ne!(quote(json!({})), RequestDigest::tool("quote2", None));
        assert_eq!(quote(json!({})), RequestDigest::tool("quote", None));
    }
}
