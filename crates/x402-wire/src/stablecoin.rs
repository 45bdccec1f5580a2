//! A stablecoin as data ([`Stablecoin`]): where it lives, its decimals, its EIP-712 domain and
//! how a buyer's signature moves it ([`TransferMethod`]), and the `exact` accept of a USD price
//! in it; [`Stablecoin::defaults`] is the reference packages' table of each network's
//! stablecoin.

use std::borrow::Cow;

use serde_json::{Map, Value};

use crate::{
    ASSET_TRANSFER_METHOD, MoneyError, Network, PERMIT2_TRANSFER_METHOD, PaymentRequirements,
    UsdAmount, UsdcDeployment,
};

/// How a buyer's signature moves a token in an `exact` payment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TransferMethod {
    /// The token's own EIP-3009 `transferWithAuthorization` (USDC, USDT0): no approval needed.
    Eip3009,
    /// A Permit2 permit to the x402 `exact` proxy (`extra.assetTransferMethod: "permit2"`),
    /// for any ERC-20: the buyer must have approved Permit2, or pays through a gas-sponsoring
    /// extension.
    Permit2,
}

/// A stablecoin on one network, as data: its contract, decimals, EIP-712 domain (for EIP-3009
/// and EIP-2612 signatures), transfer method and whether it has EIP-2612 `permit`.
///
/// ```
/// use x402_wire::{Stablecoin, TransferMethod};
/// use x402_wire::Network;
///
/// // A token the defaults do not know: an 18-decimal dollar with EIP-2612 but no EIP-3009.
/// let coin = Stablecoin::new(
///     Network::from_static("eip155:10"),
///     "0x1111111111111111111111111111111111111111",
///     18,
///     TransferMethod::Permit2,
/// )
/// .eip712("Example Dollar", "1")
/// .eip2612();
/// let accept = coin.requirement("0.01".parse()?, "0x209693Bc6afc0C5328bA36FaF03C514EF312287C", 300)?;
/// assert_eq!(accept.amount.to_string(), "10000000000000000");
/// assert_eq!(accept.extra.unwrap()["assetTransferMethod"], "permit2");
/// # Ok::<_, Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stablecoin {
    /// The network.
    pub network: Network,
    /// The token contract.
    pub asset: Cow<'static, str>,
    /// Fraction digits.
    pub decimals: u8,
    /// The token's EIP-712 domain `name` and `version`, when it has one.
    pub eip712: Option<(Cow<'static, str>, Cow<'static, str>)>,
    /// How a buyer's signature moves it.
    pub transfer_method: TransferMethod,
    /// Whether the token has EIP-2612 `permit` (then a Permit2 accept carries its domain, so
    /// that a buyer can sign the `eip2612GasSponsoring` approval).
    pub eip2612: bool,
}

impl Stablecoin {
    /// A token at `asset` on `network`, with `decimals` and moved by `transfer_method`; no
    /// EIP-712 domain and no EIP-2612 until said.
    pub fn new(
        network: Network,
        asset: impl Into<Cow<'static, str>>,
        decimals: u8,
        transfer_method: TransferMethod,
    ) -> Self {
        Self {
            network,
            asset: asset.into(),
            decimals,
            eip712: None,
            transfer_method,
            eip2612: false,
        }
    }

    /// Sets the token's EIP-712 domain `name` and `version`.
    #[must_use]
    pub fn eip712(
        mut self,
        name: impl Into<Cow<'static, str>>,
        version: impl Into<Cow<'static, str>>,
    ) -> Self {
        self.eip712 = Some((name.into(), version.into()));
        self
    }

    /// Says the token has EIP-2612 `permit`.
    #[must_use]
    pub fn eip2612(mut self) -> Self {
        self.eip2612 = true;
        self
    }

    /// The same token moved by `method`.
    #[must_use]
    pub fn with_transfer_method(mut self, method: TransferMethod) -> Self {
        self.transfer_method = method;
        self
    }

    /// USDC at `usdc` (EIP-3009, EIP-2612, its domain).
    pub fn usdc(usdc: &UsdcDeployment) -> Self {
        let coin = Self::new(
            usdc.network.clone(),
            usdc.asset,
            usdc.decimals,
            TransferMethod::Eip3009,
        );
        match usdc.eip712 {
            Some(domain) => coin.eip712(domain.name, domain.version).eip2612(),
            None => coin,
        }
    }

    /// The `exact` accept of `price` in this token, paid to `pay_to`: `extra` holds the
    /// EIP-712 domain for EIP-3009; for Permit2, `assetTransferMethod: "permit2"` and the
    /// domain when the token has EIP-2612 (as the reference servers write it).
    ///
    /// # Errors
    ///
    /// When the price cannot be written in the token's decimals.
    pub fn requirement(
        &self,
        price: UsdAmount,
        pay_to: impl Into<String>,
        max_timeout_seconds: u64,
    ) -> Result<PaymentRequirements, MoneyError> {
        let mut extra = Map::new();
        let domain = match self.transfer_method {
            TransferMethod::Eip3009 => true,
            TransferMethod::Permit2 => {
                extra.insert(ASSET_TRANSFER_METHOD.into(), PERMIT2_TRANSFER_METHOD.into());
                self.eip2612
            }
        };
        if let (true, Some((name, version))) = (domain, &self.eip712) {
            extra.insert("name".into(), Value::from(name.as_ref()));
            extra.insert("version".into(), Value::from(version.as_ref()));
        }
        Ok(PaymentRequirements {
            scheme: "exact".to_owned(),
            network: self.network.clone(),
            amount: price.to_atomic(self.decimals)?,
            asset: self.asset.clone().into_owned(),
            pay_to: pay_to.into(),
            max_timeout_seconds,
            extra: (!extra.is_empty()).then_some(extra),
        })
    }
}

impl Stablecoin {
    /// The stablecoin of each network as the reference packages default to: USDC on Base, Base
    /// Sepolia, Polygon, Arbitrum, Arbitrum Sepolia and Monad; USDT0 on Stable; MegaUSD on
    /// MegaETH and Mezo USD on Mezo testnet through Permit2. A table is data: push a token of
    /// your own, and an offer built from a table takes the last token listed for a network, so a
    /// token pushed after the defaults replaces theirs.
    ///
    /// ```
    /// use x402_wire::{Stablecoin, TransferMethod};
    /// use x402_wire::Network;
    ///
    /// let table = Stablecoin::defaults();
    /// let base = table.iter().find(|coin| coin.network == Network::BASE).unwrap();
    /// assert_eq!(base.transfer_method, TransferMethod::Eip3009);
    /// let megaeth = Network::from_static("eip155:4326");
    /// let megaeth = table.iter().find(|coin| coin.network == megaeth).unwrap();
    /// assert_eq!((megaeth.transfer_method, megaeth.decimals), (TransferMethod::Permit2, 18));
    /// ```
    pub fn defaults() -> Vec<Self> {
        let usdc = |network: &'static str, asset: &'static str, name: &'static str| {
            Stablecoin::new(
                Network::from_static(network),
                asset,
                6,
                TransferMethod::Eip3009,
            )
            .eip712(name, "2")
            .eip2612()
        };
        let eip3009 = |network: &'static str, asset: &'static str, name: &'static str| {
            Stablecoin::new(
                Network::from_static(network),
                asset,
                6,
                TransferMethod::Eip3009,
            )
            .eip712(name, "1")
        };
        let permit2 = |network: &'static str, asset: &'static str, name: &'static str| {
            Stablecoin::new(
                Network::from_static(network),
                asset,
                18,
                TransferMethod::Permit2,
            )
            .eip712(name, "1")
            .eip2612()
        };
        vec![
            Stablecoin::usdc(&UsdcDeployment::BASE),
            Stablecoin::usdc(&UsdcDeployment::BASE_SEPOLIA),
            Stablecoin::usdc(&UsdcDeployment::POLYGON),
            Stablecoin::usdc(&UsdcDeployment::ARBITRUM),
            usdc(
                "eip155:421614",
                "0x75faf114eafb1BDbe2F0316DF893fd58CE46AA4d",
                "USD Coin",
            ),
            usdc(
                "eip155:143",
                "0x754704Bc059F8C67012fEd69BC8A327a5aafb603",
                "USD Coin",
            ),
            eip3009(
                "eip155:988",
                "0x779Ded0c9e1022225f8E0630b35a9b54bE713736",
                "USDT0",
            ),
            eip3009(
                "eip155:2201",
                "0x78Cf24370174180738C5B8E352B6D14c83a6c9A9",
                "USDT0",
            ),
            permit2(
                "eip155:4326",
                "0xFAfDdbb3FC7688494971a79cc65DCa3EF82079E7",
                "MegaUSD",
            ),
            permit2(
                "eip155:31611",
                "0x118917a40FAF1CD7a13dB0Ef56C86De7973Ac503",
                "Mezo USD",
            ),
        ]
    }
}
