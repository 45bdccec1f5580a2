//! The payment doors: the networks a product can be paid on, and whether each is open.
//!
//! - Canonical (Base, USDC): always `live`.
//! - Second (Solana mainnet, USDC mint): `gated` until `STORE_SECOND_PAY_TO` is set, then `live`
//!   as an extra accept paying that deposit address — never the canonical one.
//! - Third (Algorand mainnet, ASA 31566704): `mapped` (no accept) unless the facilitator's
//!   `/supported` lists the network *and* `STORE_THIRD_PAY_TO` is set. When `/supported` could
//!   not be read the door stays mapped: it never opens on a guess.
//!
//! A non-EVM accept carries `extra.feePayer` only when the facilitator's `/supported` kind for
//! that network names one; otherwise `extra` is left out (the crate's [`UsdcDeployment`] has no
//! EIP-712 domain to put there), and a client must learn the fee payer elsewhere.

use serde::Serialize;
use serde_json::{Map, Value};
use tower_x402::proto::{
    MoneyError, PaymentRequirements, SupportedResponse, UsdAmount, UsdcDeployment,
};

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
    fee_payer: Option<String>,
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
        let fee_payer = |deployment: &UsdcDeployment| {
            let kinds = supported.ok()?;
            kinds.kinds.iter().find_map(|kind| {
                (kind.scheme == "exact" && kind.network == deployment.network)
                    .then(|| {
                        kind.extra
                            .as_ref()?
                            .get("feePayer")?
                            .as_str()
                            .map(str::to_owned)
                    })
                    .flatten()
            })
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
            fee_payer: None,
            deployment: UsdcDeployment::BASE,
        };

        let solana = UsdcDeployment::SOLANA;
        let second = match &config.second_pay_to {
            Some(address) => {
                let fee_payer = fee_payer(&solana);
                let listed = supported.is_ok_and(|kinds| kinds.supports("exact", &solana.network));
                if !listed {
                    tracing::warn!(network = %solana.network, "second door is live but the facilitator does not list it");
                }
                Door {
                    status: DoorStatus::Live,
                    treasury: address.clone(),
                    how: "Take the `exact` accept on the Solana network from the 402 (USDC mint, payTo = this \
                          door's treasury) and repeat the GET with PAYMENT-SIGNATURE."
                        .to_owned(),
                    notes: match (&fee_payer, listed) {
                        (Some(_), _) => "Live: deposit address configured; fee payer from the facilitator's /supported.",
                        (None, true) => "Live: deposit address configured; the facilitator names no fee payer, so the accept has no extra.",
                        (None, false) => "Live: deposit address configured, but the facilitator's /supported does not list this network.",
                    }
                    .to_owned(),
                    fee_payer,
                    ..door("solana", "Solana", solana, &facilitator, &["exact"])
                }
            }
            None => Door {
                status: DoorStatus::Gated,
                how: "Not offered yet: pay through the canonical door.".to_owned(),
                notes: "Gated until the merchant's Solana deposit address (STORE_SECOND_PAY_TO) is configured.".to_owned(),
                ..door("solana", "Solana", solana, &facilitator, &["exact"])
            },
        };

        let algorand = UsdcDeployment::ALGORAND;
        let listed = supported.map(|kinds| kinds.supports_network(&algorand.network));
        let third = match (&config.third_pay_to, listed) {
            (Some(address), Ok(true)) => Door {
                status: DoorStatus::Live,
                treasury: address.clone(),
                how: "Take the `exact` accept on the Algorand network from the 402 (ASA 31566704, payTo = this \
                      door's treasury) and repeat the GET with PAYMENT-SIGNATURE."
                    .to_owned(),
                notes: "Live: the facilitator lists Algorand mainnet and the deposit address is configured.".to_owned(),
                fee_payer: fee_payer(&algorand),
                ..door("algorand", "Algorand", algorand.clone(), &facilitator, &["exact"])
            },
            (address, listed) => {
                let why = match listed {
                    Err(reason) => format!("the facilitator's /supported could not be read at start-up ({reason})"),
                    Ok(false) => "the facilitator's /supported does not list Algorand mainnet".to_owned(),
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
                    ..door("algorand", "Algorand", algorand.clone(), &facilitator, &[])
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
                let extra = door.fee_payer.as_ref().map(|payer| {
                    let mut extra = Map::new();
                    extra.insert("feePayer".to_owned(), Value::String(payer.clone()));
                    extra
                });
                Ok(PaymentRequirements {
                    scheme: "exact".to_owned(),
                    network: door.deployment.network.clone(),
                    amount: price.to_atomic(door.deployment.decimals)?,
                    asset: door.deployment.asset.to_owned(),
                    pay_to: door.treasury.clone(),
                    max_timeout_seconds: MAX_TIMEOUT_SECONDS,
                    extra,
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
        fee_payer: None,
        deployment,
    }
}
