//! The buyer's `batch-settlement` payloads as the server reads them: `deposit`, `voucher` and
//! `refund`, each with its channel and its voucher.

use serde::Deserialize;
use x402_wire::PaymentPayload;

use crate::wire::ChannelConfig;

/// A buyer's payload, told apart by `type`.
#[derive(Clone, Debug, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub(crate) enum BuyerPayload {
    /// Opens or tops up a channel (moved on chain by the facilitator), with the request's
    /// voucher.
    #[serde(rename_all = "camelCase")]
    Deposit {
        channel_config: ChannelConfig,
        voucher: SignedVoucher,
        deposit: serde_json::Value,
    },
    /// Pays a request on an open channel.
    #[serde(rename_all = "camelCase")]
    Voucher {
        channel_config: ChannelConfig,
        voucher: SignedVoucher,
    },
    /// Asks for a cooperative refund.
    #[serde(rename_all = "camelCase")]
    Refund {
        channel_config: ChannelConfig,
        voucher: SignedVoucher,
        /// The amount to refund; absent for everything that is left.
        #[serde(default)]
        amount: Option<String>,
    },
}

/// A voucher as signed: the channel id, the cumulative ceiling and the signature.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SignedVoucher {
    pub(crate) channel_id: String,
    #[serde(deserialize_with = "decimal")]
    pub(crate) max_claimable_amount: u128,
    pub(crate) signature: String,
}

/// What kind of payload a request carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Deposit,
    Voucher,
    Refund,
}

impl BuyerPayload {
    /// The payload of `payment`, or `None` when it is not a `batch-settlement` buyer payload.
    pub(crate) fn read(payment: &PaymentPayload) -> Option<Self> {
        serde_json::from_str(payment.payload.get()).ok()
    }

    pub(crate) fn kind(&self) -> Kind {
        match self {
            Self::Deposit { .. } => Kind::Deposit,
            Self::Voucher { .. } => Kind::Voucher,
            Self::Refund { .. } => Kind::Refund,
        }
    }

    pub(crate) fn config(&self) -> &ChannelConfig {
        match self {
            Self::Deposit { channel_config, .. }
            | Self::Voucher { channel_config, .. }
            | Self::Refund { channel_config, .. } => channel_config,
        }
    }

    pub(crate) fn voucher(&self) -> &SignedVoucher {
        match self {
            Self::Deposit { voucher, .. }
            | Self::Voucher { voucher, .. }
            | Self::Refund { voucher, .. } => voucher,
        }
    }

    /// The refund amount a `refund` asks for: `Some(None)` for everything, `None` when this is
    /// not a refund or the amount is not a positive decimal.
    pub(crate) fn refund_amount(&self) -> Option<Option<u128>> {
        let Self::Refund { amount, .. } = self else {
            return None;
        };
        match amount {
            None => Some(None),
            Some(text) => x402_wire::AtomicAmount::parse_u128(text)
                .ok()
                .filter(|amount| *amount > 0)
                .map(Some),
        }
    }

    /// The amount a deposit moves into its channel.
    pub(crate) fn deposit_amount(&self) -> Option<u128> {
        let Self::Deposit { deposit, .. } = self else {
            return None;
        };
        x402_wire::AtomicAmount::parse_u128(deposit.get("amount")?.as_str()?).ok()
    }

    /// What tells this deposit apart from any other: its token authorization's signature.
    pub(crate) fn deposit_signature(&self) -> Option<String> {
        let Self::Deposit { deposit, .. } = self else {
            return None;
        };
        let authorization = deposit.get("authorization")?;
        ["erc3009Authorization", "permit2Authorization"]
            .iter()
            .find_map(|method| authorization.get(method)?.get("signature")?.as_str())
            .map(str::to_owned)
    }
}

fn decimal<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<u128, D::Error> {
    let text = String::deserialize(deserializer)?;
    x402_wire::AtomicAmount::parse_u128(&text)
        .map_err(|_| serde::de::Error::custom(format!("`{text}` is not a decimal uint128")))
}

/// What identifies a deposit's ERC-3009 authorization on chain.
#[cfg(feature = "rpc")]
pub(crate) struct DepositFacts {
    pub(crate) token: String,
    pub(crate) payer: String,
    pub(crate) channel_id: String,
    pub(crate) salt: String,
}

/// The facts of `payment`'s deposit, when it is a `batch-settlement` deposit pulled with
/// ERC-3009.
#[cfg(feature = "rpc")]
pub(crate) fn deposit_facts(payment: &PaymentPayload) -> Option<DepositFacts> {
    if payment.accepted.scheme != crate::wire::BATCH_SETTLEMENT_SCHEME {
        return None;
    }
    let buyer = BuyerPayload::read(payment)?;
    let BuyerPayload::Deposit {
        channel_config,
        voucher,
        deposit,
    } = buyer
    else {
        return None;
    };
    let salt = deposit
        .get("authorization")?
        .get("erc3009Authorization")?
        .get("salt")?
        .as_str()?
        .to_owned();
    Some(DepositFacts {
        token: channel_config.token,
        payer: channel_config.payer,
        channel_id: voucher.channel_id,
        salt,
    })
}
