//! Word of mouth (spec 2.5): a purchase may cite a prior buyer's Passport in
//! `X-REFERRER-PASSPORT`; the funnel's `referred` stage counts the live orders whose citation
//! counted.
//!
//! The header is read after the payment settled, so it never blocks a sale: a malformed value is
//! recorded as `malformed` and the purchase completes. A citation counts only when
//!
//! 1. this order is live (the store is not in demo mode),
//! 2. the cited Passport exists and is live, and
//! 3. the cited Passport's payer is not this order's payer (addresses compared
//!    case-insensitively; an unknown payer on either side cannot be told apart, so it does not
//!    count).
//!
//! The header accepts a Passport id (`pp_…`), its verify path (`/api/passport/pp_…`) or a full
//! URL ending in that path.

use axum::http::{HeaderMap, HeaderName};
use serde::Serialize;
use serde_json::{Value, json};

use crate::config::Config;
use crate::sales::passport::{self, CITATION_FIELDS, MalformedPassport, PassportId};
use crate::storage::{Order, Referral, StorageError, Store};

/// The citation header.
pub const HEADER: HeaderName = HeaderName::from_static("x-referrer-passport");

/// The header's name as documented (`X-REFERRER-PASSPORT`).
pub const HEADER_DISPLAY: &str = "X-REFERRER-PASSPORT";

/// The referral schema version.
pub const VERSION: &str = "0.1";

/// Longest header value looked at; anything longer is malformed.
const MAX_VALUE_LEN: usize = 512;

/// How much of a malformed value is kept with the order.
const KEPT_MALFORMED_CHARS: usize = 128;

/// Why a citation did or did not count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    /// It counts in `referred`.
    Counted,
    /// The header was not a Passport id, verify path or URL ending in one (or appeared twice).
    Malformed,
    /// This purchase is a demo order.
    DemoOrder,
    /// No Passport with the cited id exists here.
    UnknownPassport,
    /// The cited Passport is a demo Passport.
    DemoPassport,
    /// The cited Passport was bought by this payer.
    SelfCitation,
    /// A payer is unknown, so a self-citation cannot be ruled out.
    PayerUnknown,
}

impl Reason {
    /// Every reason, for documentation.
    pub const ALL: [Reason; 7] = [
        Self::Counted,
        Self::Malformed,
        Self::DemoOrder,
        Self::UnknownPassport,
        Self::DemoPassport,
        Self::SelfCitation,
        Self::PayerUnknown,
    ];

    /// The machine-readable reason.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Counted => "counted",
            Self::Malformed => "malformed",
            Self::DemoOrder => "demo_order",
            Self::UnknownPassport => "unknown_passport",
            Self::DemoPassport => "demo_passport",
            Self::SelfCitation => "self_citation",
            Self::PayerUnknown => "payer_unknown",
        }
    }

    /// A sentence explaining the reason.
    pub fn explanation(self) -> &'static str {
        match self {
            Self::Counted => "the citation counts in the referred stage",
            Self::Malformed => {
                "the X-REFERRER-PASSPORT value is not a Passport id, its verify path or a URL ending in it; the sale completed without a citation"
            }
            Self::DemoOrder => "this is a demo order; demo orders never count as referrals",
            Self::UnknownPassport => "no Passport with the cited id was issued by this store",
            Self::DemoPassport => {
                "the cited Passport is a demo Passport; demo Passports never count"
            }
            Self::SelfCitation => {
                "the cited Passport was bought by the same payer; self-citations do not count"
            }
            Self::PayerUnknown => {
                "a payer address is unknown, so a self-citation cannot be ruled out"
            }
        }
    }

    fn from_stored(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|reason| reason.as_str() == text)
    }
}

/// The referral schema object (spec 2.5), for the doctrine and `llms.txt`.
pub fn schema(config: &Config) -> Value {
    json!({
        "protocol": protocol(config),
        "version": VERSION,
        "kind": "buyer_quote",
        "header": HEADER_DISPLAY,
        "verify": "/api/passport/{id}",
        "fields": CITATION_FIELDS,
        "accepts": "a Passport id (pp_…), its verify path /api/passport/{id}, or a full URL ending in that path",
        "metric": "referred: live orders that cited another buyer's live Passport",
        "rules": [
            "the sale always proceeds; the paid response says whether the citation counted and why not",
            "demo orders and demo Passports never count",
            "a Passport cited by its own payer (a self-citation) does not count",
        ],
        "reasons": Reason::ALL.map(Reason::as_str),
        "commission": "none",
    })
}

/// `{slug_prefix}-word-of-mouth/0.1`.
pub fn protocol(config: &Config) -> String {
    let prefix = config.slug_prefix.trim_end_matches('-');
    format!("{prefix}-word-of-mouth/{VERSION}")
}

/// Reads a header value as a Passport id: the id itself, `/api/passport/{id}`, or a URL
/// ending in that path.
pub fn parse_citation(value: &str) -> Result<PassportId, MalformedPassport> {
    let value = value.trim();
    if value.len() > MAX_VALUE_LEN {
        return Err(MalformedPassport);
    }
    let id = if value.starts_with(passport::PREFIX) {
        value
    } else if let Some(id) = value.strip_prefix("/api/passport/") {
        id
    } else if value.starts_with("https://") || value.starts_with("http://") {
        let (_, id) = value
            .rsplit_once("/api/passport/")
            .ok_or(MalformedPassport)?;
        id
    } else {
        return Err(MalformedPassport);
    };
    PassportId::parse(id)
}

/// Judges the citation in `headers` (if any) for an order paid by `payer` in a store that is
/// (or is not) in demo mode.
///
/// # Errors
///
/// Only when the cited Passport cannot be looked up.
pub async fn evaluate(
    store: &Store,
    headers: &HeaderMap,
    payer: Option<&str>,
    demo: bool,
) -> Result<Option<Referral>, StorageError> {
    let mut values = headers.get_all(HEADER).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    let raw = String::from_utf8_lossy(value.as_bytes());
    let parsed = match (values.next(), value.to_str()) {
        (None, Ok(text)) => parse_citation(text),
        _ => Err(MalformedPassport),
    };
    let id = match parsed {
        Ok(id) => id,
        Err(MalformedPassport) => {
            let kept: String = raw.chars().take(KEPT_MALFORMED_CHARS).collect();
            return Ok(Some(verdict(kept, Reason::Malformed)));
        }
    };
    let cited = id.as_str().to_owned();
    let prior = if demo {
        None
    } else {
        store.order_by_passport(&cited).await?
    };
    Ok(Some(verdict(cited, judge(demo, prior.as_ref(), payer))))
}

/// The rules, given this order's mode and payer and the cited order (if it exists).
fn judge(demo: bool, prior: Option<&Order>, payer: Option<&str>) -> Reason {
    if demo {
        return Reason::DemoOrder;
    }
    let Some(prior) = prior else {
        return Reason::UnknownPassport;
    };
    if prior.demo {
        return Reason::DemoPassport;
    }
    match (payer, prior.payer.as_deref()) {
        (Some(payer), Some(prior_payer)) if payer.eq_ignore_ascii_case(prior_payer) => {
            Reason::SelfCitation
        }
        (Some(_), Some(_)) => Reason::Counted,
        _ => Reason::PayerUnknown,
    }
}

fn verdict(cited: String, reason: Reason) -> Referral {
    Referral {
        cited,
        counted: reason == Reason::Counted,
        reason: reason.as_str().to_owned(),
    }
}

/// The `referral` object of a paid response.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ReferralAnswer {
    /// The header read.
    pub header: &'static str,
    /// The Passport cited (the raw value, shortened, when malformed), or `null` without a header.
    pub cited: Option<String>,
    /// Whether this order counts in `referred`.
    pub counted: bool,
    /// `none` without a header, otherwise one of the [`Reason`]s.
    pub reason: String,
    /// The reason in a sentence.
    pub detail: &'static str,
    /// How a later buyer cites this purchase's Passport.
    pub cite: CiteThis,
}

/// How to cite a Passport in a later purchase.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CiteThis {
    /// `X-REFERRER-PASSPORT`.
    pub header: &'static str,
    /// The Passport id to send.
    pub value: String,
}

impl ReferralAnswer {
    /// The answer for an order whose Passport is `own` and whose citation was `referral`.
    pub fn new(referral: Option<&Referral>, own: &str) -> Self {
        let cite = CiteThis {
            header: HEADER_DISPLAY,
            value: own.to_owned(),
        };
        match referral {
            None => Self {
                header: HEADER_DISPLAY,
                cited: None,
                counted: false,
                reason: "none".to_owned(),
                detail: "the request carried no X-REFERRER-PASSPORT header",
                cite,
            },
            Some(referral) => Self {
                header: HEADER_DISPLAY,
                cited: Some(referral.cited.clone()),
                counted: referral.counted,
                reason: referral.reason.clone(),
                detail: Reason::from_stored(&referral.reason).map_or("", Reason::explanation),
                cite,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_ids_paths_and_urls() {
        let id = PassportId::generate();
        let forms = [
            id.as_str().to_owned(),
            format!(" {} ", id.as_str()),
            passport::verify_path(id.as_str()),
            format!("https://shop.example{}", passport::verify_path(id.as_str())),
            format!(
                "http://127.0.0.1:4020{}",
                passport::verify_path(id.as_str())
            ),
        ];
        for form in forms {
            assert_eq!(parse_citation(&form), Ok(id.clone()), "{form}");
        }
    }

    #[test]
    fn refuses_everything_else() {
        let id = PassportId::generate();
        let forms = [
            String::new(),
            "hello".to_owned(),
            "pp_nope".to_owned(),
            format!("/api/passport/{}/extra", id.as_str()),
            format!("https://shop.example/api/passport/{}?x=1", id.as_str()),
            format!("ftp://shop.example{}", passport::verify_path(id.as_str())),
            format!("{}{}", id.as_str(), "A".repeat(600)),
        ];
        for form in forms {
            assert_eq!(parse_citation(&form), Err(MalformedPassport), "{form}");
        }
    }

    fn prior(payer: Option<&str>, demo: bool) -> Order {
        Order {
            passport: PassportId::generate().as_str().to_owned(),
            sku: "store-rail-receipt".to_owned(),
            resource: "http://127.0.0.1:4020/api/x402/store-rail-receipt".to_owned(),
            payer: payer.map(str::to_owned),
            network: "eip155:8453".to_owned(),
            transaction: "0x01".to_owned(),
            amount: x402_wire::UsdAmount::from_micros(1_000_000),
            payment_key: "key".to_owned(),
            demo,
            issued: 0,
            referral: None,
        }
    }

    #[test]
    fn judges_each_rule() {
        let alice = "0xAbCdEf0000000000000000000000000000000001";
        let alice_lower = alice.to_ascii_lowercase();
        let bob = "0x0000000000000000000000000000000000000002";
        let live = prior(Some(alice), false);
        assert_eq!(judge(false, Some(&live), Some(bob)), Reason::Counted);
        assert_eq!(
            judge(false, Some(&live), Some(&alice_lower)),
            Reason::SelfCitation
        );
        assert_eq!(judge(true, Some(&live), Some(bob)), Reason::DemoOrder);
        assert_eq!(judge(false, None, Some(bob)), Reason::UnknownPassport);
        assert_eq!(
            judge(false, Some(&prior(Some(alice), true)), Some(bob)),
            Reason::DemoPassport
        );
        assert_eq!(
            judge(false, Some(&prior(None, false)), Some(bob)),
            Reason::PayerUnknown
        );
        assert_eq!(judge(false, Some(&live), None), Reason::PayerUnknown);
    }

    #[test]
    fn reasons_round_trip() {
        for reason in Reason::ALL {
            assert_eq!(Reason::from_stored(reason.as_str()), Some(reason));
        }
    }
}
