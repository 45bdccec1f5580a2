//! The payment doors: the networks a product can be paid on, and whether each is open.
//!
//! - Canonical (Base, USDC): always `live`.
//! - Second (Solana mainnet, USDC mint): `gated` until `STORE_SECOND_PAY_TO` is set; then `live`
//!   as an extra accept paying that deposit address (never the canonical one) when the
//!   facilitator's `/supported` lists `exact` on Solana, and `mapped` when it does not.
//! - Third (Algorand mainnet, ASA 31566704): `mapped` (no accept) unless the facilitator's
//!   `/supported` lists the network *and* `STORE_THIRD_PAY_TO` is set. When `/supported` could
//!   not be read the door stays mapped: it never opens on a guess.
//!
//! A non-canonical accept carries the `extra` of the facilitator's `/supported` kind for that
//! network and scheme (for Solana, `feePayer`: clients need it to build the transaction); when
//! the kind has no `extra`, the accept has none either.

use serde::Serialize;
use serde_json::{Map, Value};
use x402_wire::{MoneyError, PaymentRequirements, SupportedResponse, UsdAmount, UsdcDeployment};

use crate::config::Config;

/// How long a payment signed for another door stays usable: the window `Offer::builder` gives
/// the canonical accept (300 s, the reference servers' value).
const MAX_TIMEOUT_SECONDS: u64 = 300;

/// Whether a door takes payments.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DoorStatus {
    /// Offered as an accept on every product.
    Live,
    /// Waiting for the merchant's deposit address on that network.
    Gated,
    /// Known, but not wired: the facilitator or the treasury is not ready.
    Mapped,
}

/// One payment door, with every field of the specification's door record.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Door {
    /// Stable identifier.
    pub id: &'static str,
    /// Display name.
    pub name: &'static str,
    /// CAIP-2 chain id.
    pub caip2: String,
    /// Always `USDC`.
    pub asset: &'static str,
    /// Token contract, mint or asset id.
    pub asset_id: &'static str,
    /// `live`, `gated` or `mapped`.
    pub status: DoorStatus,
    /// The receiving address on that network (empty until configured).
    pub treasury: String,
    /// Who verifies and settles.
    pub facilitator: String,
    /// How a buyer pays through this door.
    pub how: String,
    /// Why the door is in its state.
    pub notes: String,
    /// The schemes the facilitator handles on this network, per the store's specification.
    pub schemes: &'static [&'static str],
    #[serde(skip)]
    extra: Option<Map<String, Value>>,
    #[serde(skip)]
    deployment: UsdcDeployment,
}

/// The three doors, canonical first.
#[derive(Clone, Debug)]
pub struct Doors(Vec<Door>);

impl Doors {
    /// Decides each door's state from the settings and the facilitator's `/supported` answer
    /// (`Err` with the reason when it could not be read).
    pub fn resolve(config: &Config, supported: Result<&SupportedResponse, &str>) -> Self {
        let facilitator = config
            .facilitator_url
            .clone()
            .unwrap_or_else(|| "in-process sandbox facilitator (demo mode)".to_owned());
        // `Some(extra)` when the facilitator lists `exact` on the network, with that kind's `extra`.
        let listed_kind = |deployment: &UsdcDeployment| {
            let kinds = supported.ok()?;
            kinds
                .kinds
                .iter()
                .find(|kind| kind.scheme == "exact" && kind.network == deployment.network)
                .map(|kind| kind.extra.clone())
        };

        let canonical = Door {
            id: "base",
            name: "Base (canonical)",
            caip2: UsdcDeployment::BASE.network.to_string(),
            asset: "USDC",
            asset_id: UsdcDeployment::BASE.asset,
            status: DoorStatus::Live,
            treasury: config.pay_to.clone(),
            facilitator: facilitator.clone(),
            how: "Take the `exact` accept on eip155:8453 from the 402's PAYMENT-REQUIRED header, sign an \
                  EIP-3009 USDC transferWithAuthorization to the treasury, and repeat the GET with PAYMENT-SIGNATURE."
                .to_owned(),
            notes: "Facilitator schemes: exact, upto, batch-settlement; the store's accepts use exact.".to_owned(),
            schemes: &["exact", "upto", "batch-settlement"],
            extra: None,
            deployment: UsdcDeployment::BASE,
        };

        let solana = UsdcDeployment::SOLANA;
        let second = match (&config.second_pay_to, listed_kind(&solana)) {
            (Some(address), Some(extra)) => Door {
                status: DoorStatus::Live,
                treasury: address.clone(),
                how: "Take the `exact` accept on the Solana network from the 402 (USDC mint, payTo = this \
                      door's treasury, extra as the facilitator advertises it) and repeat the GET with \
                      PAYMENT-SIGNATURE."
                    .to_owned(),
                notes: match &extra {
                    Some(_) => "Live: deposit address configured; the facilitator lists exact on Solana and its extra is on the accept.",
                    None => "Live: deposit address configured; the facilitator lists exact on Solana with no extra.",
                }
                .to_owned(),
                extra,
                ..door("solana", "Solana", solana, &facilitator, &["exact"])
            },
            (Some(_), None) => {
                let why = match supported {
                    Err(reason) => format!("the facilitator's /supported could not be read at start-up ({reason})"),
                    Ok(_) => "the facilitator's /supported does not list exact on Solana mainnet".to_owned(),
                };
                Door {
                    status: DoorStatus::Mapped,
                    how: "Not offered: pay through the canonical door.".to_owned(),
                    notes: format!("Mapped, not wired: the deposit address is configured, but {why}."),
                    ..door("solana", "Solana", solana, &facilitator, &["exact"])
                }
            }
            (None, _) => Door {
                status: DoorStatus::Gated,
                how: "Not offered yet: pay through the canonical door.".to_owned(),
                notes: "Gated until the merchant's Solana deposit address (STORE_SECOND_PAY_TO) is configured.".to_owned(),
                ..door("solana", "Solana", solana, &facilitator, &["exact"])
            },
        };

        let algorand = UsdcDeployment::ALGORAND;
        let algorand_kind = listed_kind(&algorand);
        let listed = supported.map(|_| algorand_kind.is_some());
        let third = match (&config.third_pay_to, listed) {
            (Some(address), Ok(true)) => Door {
                status: DoorStatus::Live,
                treasury: address.clone(),
                how: "Take the `exact` accept on the Algorand network from the 402 (ASA 31566704, payTo = this \
                      door's treasury) and repeat the GET with PAYMENT-SIGNATURE."
                    .to_owned(),
                notes: "Live: the facilitator lists Algorand mainnet and the deposit address is configured.".to_owned(),
                extra: algorand_kind.flatten(),
                ..door("algorand", "Algorand", algorand, &facilitator, &["exact"])
            },
            (address, listed) => {
                let why = match listed {
                    Err(reason) => format!("the facilitator's /supported could not be read at start-up ({reason})"),
                    Ok(false) => "the facilitator's /supported does not list Algorand mainnet (scheme exact)".to_owned(),
                    Ok(true) => "no deposit address (STORE_THIRD_PAY_TO) is configured".to_owned(),
                };
                let also = if address.is_none() && !matches!(listed, Ok(true)) {
                    " and no deposit address (STORE_THIRD_PAY_TO) is configured"
                } else {
                    ""
                };
                Door {
                    status: DoorStatus::Mapped,
                    how: "Not offered: pay through the canonical door.".to_owned(),
                    notes: format!("Mapped, not wired: {why}{also}."),
                    ..door("algorand", "Algorand", algorand, &facilitator, &[])
                }
            }
        };
        Self(vec![canonical, second, third])
    }

    /// Every door, canonical first.
    pub fn iter(&self) -> impl Iterator<Item = &Door> {
        self.0.iter()
    }

    /// The accepts the open non-canonical doors add to a product priced `price`.
    ///
    /// # Errors
    ///
    /// When the price cannot be written in the token's units.
    pub fn extra_accepts(&self, price: UsdAmount) -> Result<Vec<PaymentRequirements>, MoneyError> {
        self.0
            .iter()
            .skip(1)
            .filter(|door| door.status == DoorStatus::Live)
            .map(|door| {
                Ok(PaymentRequirements {
                    scheme: "exact".to_owned(),
                    network: door.deployment.network.clone(),
                    amount: price.to_atomic(door.deployment.decimals)?,
                    asset: door.deployment.asset.to_owned(),
                    pay_to: door.treasury.clone(),
                    max_timeout_seconds: MAX_TIMEOUT_SECONDS,
                    extra: door.extra.clone(),
                })
            })
            .collect()
    }
}

/// A closed door on `deployment`'s network; callers fill in status and texts.
fn door(
    id: &'static str,
    name: &'static str,
    deployment: UsdcDeployment,
    facilitator: &str,
    schemes: &'static [&'static str],
) -> Door {
    Door {
        id,
        name,
        caip2: deployment.network.to_string(),
        asset: "USDC",
        asset_id: deployment.asset,
        status: DoorStatus::Mapped,
        treasury: String::new(),
        facilitator: facilitator.to_owned(),
        how: String::new(),
        notes: String::new(),
        schemes,
        extra: None,
        deployment,
    }
}
