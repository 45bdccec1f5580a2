//! Passports: proof of purchase, their citation record and `GET /api/passport/{id}`.
//!
//! A Passport id is `pp_` followed by 22 base64url characters (16 random bytes): unguessable,
//! URL-safe, and meant to be shared as a citation. Knowing one proves nothing beyond what the
//! verification route shows to anyone; it never unlocks files (see [`crate::sales::fulfillment`]).
//!
//! Verification shows anyone the citation record, the Passport's state and the settlement's
//! network. The settlement transaction would link a shared citation to the payer's wallet, so
//! it is shown only with `?key=` set to one of the order's fulfillment keys (what the buyer
//! holds); a key that does not unlock the Passport gets 403.

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::http_errors::json_error;
use crate::sales::fulfillment_key::FulfillmentKey;
use crate::storage::{Order, Store};

/// The prefix of every Passport id.
pub const PREFIX: &str = "pp_";

/// Random bytes in a Passport id.
const ID_BYTES: usize = 16;

/// Characters after [`PREFIX`]: base64url of [`ID_BYTES`] without padding.
const ID_CHARS: usize = 22;

/// What every Passport answer says about itself.
pub const NOTICE: &str = "A Passport is proof of purchase only. It is not proof that the file is useful \
     and not proof that any third-party index lists this store.";

/// A well-formed Passport id.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PassportId(String);

/// A Passport id that is not `pp_` + 22 base64url characters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("malformed Passport id: expected `pp_` followed by 22 base64url characters")]
pub struct MalformedPassport;

impl PassportId {
    /// A new random id.
    pub fn generate() -> Self {
        let bytes: [u8; ID_BYTES] = rand::random();
        Self(format!("{PREFIX}{}", URL_SAFE_NO_PAD.encode(bytes)))
    }

    /// Parses an id, rejecting anything that is not exactly the generated form.
    pub fn parse(text: &str) -> Result<Self, MalformedPassport> {
        let body = text.strip_prefix(PREFIX).ok_or(MalformedPassport)?;
        if body.len() != ID_CHARS {
            return Err(MalformedPassport);
        }
        // Decoding also refuses non-canonical trailing bits, so each id has one spelling.
        match URL_SAFE_NO_PAD.decode(body) {
            Ok(bytes) if bytes.len() == ID_BYTES => Ok(Self(text.to_owned())),
            _ => Err(MalformedPassport),
        }
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// `/api/passport/{id}`.
pub fn verify_path(id: &str) -> String {
    format!("/api/passport/{id}")
}

/// The names of the seven citation fields, in order.
pub const CITATION_FIELDS: [&str; 7] = [
    "passport",
    "sku",
    "resource",
    "verify",
    "amountUsdc",
    "demo",
    "issued",
];

/// The seven citation fields of a Passport (spec 2.4): what a buyer quotes and what
/// `X-REFERRER-PASSPORT` points at.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Citation {
    /// Passport id.
    pub passport: String,
    /// SKU slug bought.
    pub sku: String,
    /// x402 resource URL paid for.
    pub resource: String,
    /// Verification path, `/api/passport/{id}`.
    pub verify: String,
    /// Amount paid, decimal USDC (`"1.00"`).
    pub amount_usdc: String,
    /// Whether the Passport came from the sandbox (demo Passports never count as referrals).
    pub demo: bool,
    /// Issue time, RFC 3339 UTC.
    pub issued: String,
}

impl Citation {
    /// The citation record of `order`.
    pub fn of(order: &Order) -> Self {
        Self {
            passport: order.passport.clone(),
            sku: order.sku.clone(),
            resource: order.resource.clone(),
            verify: verify_path(&order.passport),
            amount_usdc: order.amount.to_string(),
            demo: order.demo,
            issued: rfc3339(order.issued),
        }
    }
}

/// `live` or `demo`.
pub fn status(demo: bool) -> &'static str {
    if demo { "demo" } else { "live" }
}

/// The settlement behind a Passport.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SettlementSummary {
    /// CAIP-2 network.
    pub network: String,
    /// Transaction hash.
    pub transaction: String,
}

impl SettlementSummary {
    /// The settlement of `order`.
    pub fn of(order: &Order) -> Self {
        Self {
            network: order.network.clone(),
            transaction: order.transaction.clone(),
        }
    }
}

/// The body of `GET /api/passport/{id}`.
#[derive(Debug, Serialize)]
struct Verification {
    passport: Citation,
    status: &'static str,
    settlement: VerifiedSettlement,
    notice: &'static str,
}

/// The settlement as verification shows it: the transaction only to the key holder.
#[derive(Debug, Serialize)]
struct VerifiedSettlement {
    network: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    transaction: Option<String>,
}

/// The optional `?key=` of a verification.
#[derive(Debug, Deserialize)]
pub struct HolderKey {
    key: Option<String>,
}

/// `GET /api/passport/{id}`: 200 with the citation record, `status` and the settlement's
/// network (and its transaction with a `?key=` that unlocks the Passport); 404 for an unknown
/// id; 400 for a malformed one; 403 for a key that does not unlock it. Never shows the payer or
/// any fulfillment key.
pub async fn verify(
    State(store): State<Store>,
    Path(id): Path<String>,
    Query(holder): Query<HolderKey>,
) -> Response {
    let Ok(id) = PassportId::parse(&id) else {
        return json_error(StatusCode::BAD_REQUEST, MalformedPassport.to_string());
    };
    match store.order_by_passport(id.as_str()).await {
        Ok(Some(order)) => {
            let holder = match &holder.key {
                None => false,
                Some(key) => {
                    let unlocks = match FulfillmentKey::parse(key) {
                        Some(key) => store.grant_matches(&order.passport, &key.hash()).await,
                        None => Ok(false),
                    };
                    match unlocks {
                        Ok(true) => true,
                        Ok(false) => {
                            return json_error(
                                StatusCode::FORBIDDEN,
                                "this key does not unlock this Passport",
                            );
                        }
                        Err(error) => {
                            tracing::error!(%error, "fulfillment key lookup failed");
                            return json_error(
                                StatusCode::SERVICE_UNAVAILABLE,
                                "Passport records are unavailable, retry later",
                            );
                        }
                    }
                }
            };
            let body = Verification {
                passport: Citation::of(&order),
                status: status(order.demo),
                settlement: VerifiedSettlement {
                    network: order.network.clone(),
                    transaction: holder.then(|| order.transaction.clone()),
                },
                notice: NOTICE,
            };
            let mut response = Json(body).into_response();
            // A Passport never changes once issued; the holder's view is the holder's only.
            response.headers_mut().insert(
                header::CACHE_CONTROL,
                HeaderValue::from_static(if holder {
                    "private, no-store"
                } else {
                    "public, max-age=300"
                }),
            );
            response
        }
        Ok(None) => json_error(StatusCode::NOT_FOUND, "no Passport with this id"),
        Err(error) => {
            tracing::error!(%error, "passport lookup failed");
            json_error(
                StatusCode::SERVICE_UNAVAILABLE,
                "Passport records are unavailable, retry later",
            )
        }
    }
}

/// Formats unix seconds as RFC 3339 UTC (`2026-09-08T12:00:00Z`); a time outside the years
/// -9999 to 9999 is written as the nearest one inside them.
pub fn rfc3339(unix: i64) -> String {
    let (min, max) = (Timestamp::MIN.as_second(), Timestamp::MAX.as_second());
    Timestamp::from_second(unix.clamp(min, max))
        .unwrap_or(Timestamp::UNIX_EPOCH)
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_ids_parse_and_differ() {
        let a = PassportId::generate();
        let b = PassportId::generate();
        assert_ne!(a, b);
        assert_eq!(a.as_str().len(), PREFIX.len() + ID_CHARS);
        assert_eq!(PassportId::parse(a.as_str()), Ok(a.clone()));
        assert_eq!(
            verify_path(a.as_str()),
            format!("/api/passport/{}", a.as_str())
        );
    }

    #[test]
    fn malformed_ids_are_refused() {
        for bad in [
            "",
            "pp_",
            "pp_short",
            "xx_AAAAAAAAAAAAAAAAAAAAAA",
            "pp_AAAAAAAAAAAAAAAAAAAAA=",
            "pp_AAAAAAAAAAAAAAAAAAAAA+",
            "pp_AAAAAAAAAAAAAAAAAAAAAAA",
            // Non-canonical: the last character carries bits beyond 16 bytes.
            "pp_AAAAAAAAAAAAAAAAAAAAAB",
        ] {
            assert_eq!(PassportId::parse(bad), Err(MalformedPassport), "{bad:?}");
        }
        assert!(PassportId::parse("pp_AAAAAAAAAAAAAAAAAAAAAA").is_ok());
    }

    #[test]
    fn formats_rfc3339() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_788_868_800), "2026-09-08T12:00:00Z");
        assert_eq!(rfc3339(-1), "1969-12-31T23:59:59Z");
        assert!(
            rfc3339(i64::MAX).starts_with("9999-12-"),
            "{}",
            rfc3339(i64::MAX)
        );
    }
}
