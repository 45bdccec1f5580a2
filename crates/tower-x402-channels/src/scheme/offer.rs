//! [`ChannelOffer`]: the terms a `batch-settlement` accept states beside its price, and the
//! accept built from them.

use serde_json::{Map, Value};
use tower_x402::Facilitator;
use x402_wire::{AtomicAmount, Network, PaymentRequirements, UsdcDeployment};

use crate::wire::BATCH_SETTLEMENT_SCHEME;

/// The shortest withdrawal delay the contract accepts: 15 minutes.
pub const MIN_WITHDRAW_DELAY: u64 = 900;
/// The longest withdrawal delay the contract accepts: 30 days.
pub const MAX_WITHDRAW_DELAY: u64 = 2_592_000;

/// How many requests' worth the `minDeposit` hint asks a buyer to deposit at least.
const MIN_DEPOSIT_REQUESTS: u128 = 10;

/// The channel terms of a `batch-settlement` accept: who authorizes claims and refunds
/// (`extra.receiverAuthorizer`) and how long a buyer's timed withdrawal waits
/// (`extra.withdrawDelay`). Every channel a buyer opens from the accept carries them.
///
/// ```
/// use tower_x402::{Offer, SettlementMode};
/// use tower_x402::proto::{AtomicAmount, ResourceInfo, UsdcDeployment};
/// use tower_x402_channels::ChannelOffer;
///
/// let terms = ChannelOffer::new("0x3f1Eae7D46d88F08fc2F8ed27FCb2AB183EB2d0E").withdraw_delay(3_600);
/// let accept = terms.usdc(
///     &UsdcDeployment::BASE,
///     AtomicAmount(10_000), // at most 0.01 USDC a request
///     "0x209693Bc6afc0C5328bA36FaF03C514EF312287C",
/// );
/// let extra = accept.extra.as_ref().expect("extra");
/// assert_eq!(extra["withdrawDelay"], 3_600);
/// assert_eq!(extra["name"], "USD Coin");
/// assert_eq!(extra["minDeposit"], "100000");
/// let offer = Offer::builder(ResourceInfo::new("https://api.example.com/v1/rows"))
///     .accept(accept)
///     .settlement(SettlementMode::After)
///     .build()?;
/// assert_eq!(offer.accepts()[0].scheme, "batch-settlement");
/// # Ok::<_, Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChannelOffer {
    receiver_authorizer: String,
    withdraw_delay: u64,
}

/// The facilitator names no receiver authorizer for `batch-settlement` on a network.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ChannelOfferError {
    /// `/supported` could not be read.
    #[error("the facilitator's /supported could not be read: {0}")]
    Facilitator(#[from] tower_x402::FacilitatorError),
    /// `/supported` lists no `batch-settlement` kind with a non-zero `extra.receiverAuthorizer`
    /// on the network.
    #[error("the facilitator names no batch-settlement receiverAuthorizer on {0}")]
    NoReceiverAuthorizer(Network),
}

impl ChannelOffer {
    /// Terms with `receiver_authorizer` (the server's own key's address, or the facilitator's)
    /// and the shortest withdrawal delay, 900 seconds.
    pub fn new(receiver_authorizer: impl Into<String>) -> Self {
        Self {
            receiver_authorizer: receiver_authorizer.into(),
            withdraw_delay: MIN_WITHDRAW_DELAY,
        }
    }

    /// Terms delegating claims and refunds to `facilitator`: the receiver authorizer its
    /// `/supported` names for `batch-settlement` on `network`.
    ///
    /// # Errors
    ///
    /// `/supported` could not be read or names none.
    pub async fn from_facilitator(
        facilitator: &impl Facilitator,
        network: &Network,
    ) -> Result<Self, ChannelOfferError> {
        let supported = facilitator.supported().await?;
        supported
            .kinds
            .iter()
            .filter(|kind| kind.scheme == BATCH_SETTLEMENT_SCHEME && kind.network == *network)
            .find_map(|kind| {
                let authorizer = kind.extra.as_ref()?.get("receiverAuthorizer")?.as_str()?;
                let zero = authorizer
                    .trim_start_matches("0x")
                    .bytes()
                    .all(|digit| digit == b'0');
                (!zero).then(|| Self::new(authorizer))
            })
            .ok_or_else(|| ChannelOfferError::NoReceiverAuthorizer(network.clone()))
    }

    /// The withdrawal delay in seconds, clamped to what the contract accepts (900 s to 30 days).
    #[must_use]
    pub fn withdraw_delay(mut self, seconds: u64) -> Self {
        self.withdraw_delay = seconds.clamp(MIN_WITHDRAW_DELAY, MAX_WITHDRAW_DELAY);
        self
    }

    /// The receiver authorizer.
    pub fn receiver_authorizer(&self) -> &str {
        &self.receiver_authorizer
    }

    /// The `batch-settlement` accept of `usdc`, paid to `pay_to`, charging at most `amount`
    /// atomic units a request: `extra` carries the terms, the token's EIP-712 `name` and
    /// `version`, and a `minDeposit` hint of ten requests' worth. Add it to an offer with
    /// [`OfferBuilder::accept`](tower_x402::pricing::OfferBuilder::accept), settled
    /// [after the work](tower_x402::SettlementMode::After).
    pub fn usdc(
        &self,
        usdc: &UsdcDeployment,
        amount: AtomicAmount,
        pay_to: impl Into<String>,
    ) -> PaymentRequirements {
        let mut extra = usdc
            .eip712
            .map(|domain| domain.to_extra())
            .unwrap_or_default();
        self.write_terms(&mut extra, amount);
        PaymentRequirements {
            scheme: BATCH_SETTLEMENT_SCHEME.to_owned(),
            network: usdc.network.clone(),
            amount,
            asset: usdc.asset.to_owned(),
            pay_to: pay_to.into(),
            max_timeout_seconds: 300,
            extra: Some(extra),
        }
    }

    fn write_terms(&self, extra: &mut Map<String, Value>, amount: AtomicAmount) {
        extra.insert(
            "receiverAuthorizer".into(),
            self.receiver_authorizer.clone().into(),
        );
        extra.insert("withdrawDelay".into(), self.withdraw_delay.into());
        extra.insert(
            "minDeposit".into(),
            amount
                .0
                .saturating_mul(MIN_DEPOSIT_REQUESTS)
                .to_string()
                .into(),
        );
    }
}
