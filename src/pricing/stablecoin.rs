//! One USD price in each network's stablecoin: [`Stablecoin`] (a token as data: where it lives,
//! its decimals, its EIP-712 domain and how a buyer's signature moves it), [`Stablecoins`] (the
//! table a price is resolved with, the reference packages' defaults that a user extends), and
//! the [`OfferBuilder`] methods that turn a price into accepts — `exact` through EIP-3009 where
//! the token has it, through Permit2 otherwise — and declare the gas-sponsoring extensions.

use std::borrow::Cow;

use serde_json::{Map, Value, json};
use x402_wire::{
    EIP2612_GAS_SPONSORING, ERC20_APPROVAL_GAS_SPONSORING, Extension, Network, PaymentRequirements,
    UsdAmount, UsdcDeployment,
};

use super::OfferError;
use super::offer::{ASSET_TRANSFER_METHOD, OfferBuilder, PERMIT2};

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
/// use tower_x402::pricing::{Stablecoin, TransferMethod};
/// use tower_x402::proto::Network;
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
    ) -> Result<PaymentRequirements, x402_wire::MoneyError> {
        let mut extra = Map::new();
        let domain = match self.transfer_method {
            TransferMethod::Eip3009 => true,
            TransferMethod::Permit2 => {
                extra.insert(ASSET_TRANSFER_METHOD.into(), PERMIT2.into());
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

/// The stablecoin of each network a USD price is offered in: [`Stablecoins::default`] holds
/// the reference packages' defaults (USDC on Base, Base Sepolia, Polygon, Arbitrum, Arbitrum
/// Sepolia and Monad; USDT0 on Stable; MegaUSD on MegaETH and Mezo USD on Mezo testnet through
/// Permit2); [`with`](Self::with) adds a network or replaces its token.
///
/// ```
/// use tower_x402::pricing::{Stablecoins, TransferMethod};
/// use tower_x402::proto::Network;
///
/// let table = Stablecoins::default();
/// let base = table.get(&Network::BASE).unwrap();
/// assert_eq!(base.transfer_method, TransferMethod::Eip3009);
/// let megaeth = table.get(&Network::from_static("eip155:4326")).unwrap();
/// assert_eq!((megaeth.transfer_method, megaeth.decimals), (TransferMethod::Permit2, 18));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stablecoins(Vec<Stablecoin>);

impl Default for Stablecoins {
    fn default() -> Self {
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
        Self(vec![
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
        ])
    }
}

impl Stablecoins {
    /// A table with no token: build one of your own with [`with`](Self::with).
    pub fn empty() -> Self {
        Self(Vec::new())
    }

    /// Adds `coin`, in place of the table's token on its network.
    #[must_use]
    pub fn with(mut self, coin: Stablecoin) -> Self {
        match self.0.iter_mut().find(|own| own.network == coin.network) {
            Some(own) => *own = coin,
            None => self.0.push(coin),
        }
        self
    }

    /// The stablecoin on `network`.
    pub fn get(&self, network: &Network) -> Option<&Stablecoin> {
        self.0.iter().find(|coin| &coin.network == network)
    }

    /// Every token of the table.
    pub fn iter(&self) -> impl Iterator<Item = &Stablecoin> {
        self.0.iter()
    }
}

/// The `eip2612GasSponsoring` and `erc20ApprovalGasSponsoring` declarations: what the server
/// says (what the extension does, its version); the buyer fills in the rest. The schema is the
/// shortest that says `info` is an object: each declaration is repeated in every 402's
/// `PAYMENT-REQUIRED` header, which must fit a reverse proxy's 4 KB buffer.
fn sponsoring(description: &str) -> Extension {
    Extension::new(
        json!({"description": description, "version": "1"}),
        json!({"type": "object"}),
    )
}

impl OfferBuilder {
    /// Adds an `exact` accept of `price` on each of `networks`, each in that network's
    /// stablecoin in `table` with its transfer method, decimals and EIP-712 domain
    /// ([`Stablecoin::requirement`]), paid to `pay_to`.
    ///
    /// ```
    /// use tower_x402::pricing::Stablecoins;
    /// use tower_x402::proto::{Network, ResourceInfo};
    /// use tower_x402::Offer;
    ///
    /// let networks = [Network::BASE, Network::from_static("eip155:988"), Network::from_static("eip155:4326")];
    /// let offer = Offer::builder(ResourceInfo::new("https://api.example.com/report"))
    ///     .stablecoins(&Stablecoins::default(), "0.01".parse()?, &networks, "0x209693Bc6afc0C5328bA36FaF03C514EF312287C")
    ///     .eip2612_gas_sponsoring()
    ///     .build()?;
    /// let amounts: Vec<String> = offer.accepts().iter().map(|a| a.amount.to_string()).collect();
    /// assert_eq!(amounts, ["10000", "10000", "10000000000000000"]);
    /// # Ok::<_, Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// A network `table` has no token for makes [`build`](Self::build) fail with
    /// [`OfferError::NoStablecoin`].
    pub fn stablecoins(
        mut self,
        table: &Stablecoins,
        price: UsdAmount,
        networks: &[Network],
        pay_to: impl Into<String>,
    ) -> Self {
        let pay_to = pay_to.into();
        for network in networks {
            match table.get(network) {
                Some(coin) => self = self.stablecoin(coin, price, pay_to.clone()),
                None => {
                    self.error.get_or_insert(OfferError::NoStablecoin {
                        url: self.resource.url.clone(),
                        network: network.clone(),
                    });
                }
            }
        }
        self
    }

    /// Adds the `exact` accept of `price` in `coin`, paid to `pay_to`
    /// ([`Stablecoin::requirement`]).
    pub fn stablecoin(
        mut self,
        coin: &Stablecoin,
        price: UsdAmount,
        pay_to: impl Into<String>,
    ) -> Self {
        match coin.requirement(price, pay_to, self.max_timeout_seconds) {
            Ok(requirement) => self.accepts.push(requirement),
            Err(source) => {
                self.error.get_or_insert(OfferError::Money {
                    url: self.resource.url.clone(),
                    source,
                });
            }
        }
        self
    }

    /// Adds an `exact` USDC accept for `price` on `usdc`'s network paid through Permit2
    /// (`extra.assetTransferMethod: "permit2"`, with the token's EIP-712 domain for the
    /// `eip2612GasSponsoring` approval), paid to `pay_to`: the buyer signs a permit to the x402
    /// `exact` proxy for exactly the amount. Offer it beside the EIP-3009 accept
    /// ([`usdc`](Self::usdc)) for buyers whose wallets sign Permit2.
    ///
    /// ```
    /// use tower_x402::proto::{ResourceInfo, UsdcDeployment};
    /// use tower_x402::Offer;
    ///
    /// let pay_to = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";
    /// let offer = Offer::builder(ResourceInfo::new("https://api.example.com/report"))
    ///     .usdc(&UsdcDeployment::BASE, "0.25".parse()?, pay_to)
    ///     .usdc_permit2(&UsdcDeployment::BASE, "0.25".parse()?, pay_to)
    ///     .eip2612_gas_sponsoring()
    ///     .build()?;
    /// let permit2 = &offer.accepts()[1];
    /// assert_eq!(permit2.extra.as_ref().unwrap()["assetTransferMethod"], "permit2");
    /// assert!(offer.extensions().unwrap().contains_key("eip2612GasSponsoring"));
    /// # Ok::<_, Box<dyn std::error::Error>>(())
    /// ```
    pub fn usdc_permit2(
        self,
        usdc: &UsdcDeployment,
        price: UsdAmount,
        pay_to: impl Into<String>,
    ) -> Self {
        let coin = Stablecoin::usdc(usdc).with_transfer_method(TransferMethod::Permit2);
        self.stablecoin(&coin, price, pay_to)
    }

    /// Declares the `eip2612GasSponsoring` extension: a buyer with no Permit2 allowance may
    /// send its signed EIP-2612 approval of Permit2 with a Permit2 payment, and the facilitator
    /// submits it (paying the gas) before it settles. The layer passes it to the facilitator
    /// untouched.
    pub fn eip2612_gas_sponsoring(self) -> Self {
        let declared = sponsoring("Gasless Permit2 approval by EIP-2612 permit");
        self.extension(EIP2612_GAS_SPONSORING, declared)
    }

    /// Declares the `erc20ApprovalGasSponsoring` extension, for tokens without EIP-2612: a
    /// buyer with no Permit2 allowance may send its signed `approve(Permit2, amount)`
    /// transaction with a Permit2 payment, and the facilitator broadcasts it (funding its gas)
    /// before it settles. The layer passes it to the facilitator untouched.
    pub fn erc20_approval_gas_sponsoring(self) -> Self {
        let declared = sponsoring("Gasless Permit2 approval by signed approve transaction");
        self.extension(ERC20_APPROVAL_GAS_SPONSORING, declared)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Offer;
    use x402_wire::ResourceInfo;

    const PAY_TO: &str = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";

    #[test]
    fn three_networks_resolve_three_stablecoins_with_their_transfer_methods() {
        let networks = [
            Network::BASE,
            Network::from_static("eip155:988"),
            Network::from_static("eip155:4326"),
        ];
        let offer = Offer::builder(ResourceInfo::new("https://api.example.com/report"))
            .stablecoins(
                &Stablecoins::default(),
                "1.50".parse().unwrap(),
                &networks,
                PAY_TO,
            )
            .build()
            .unwrap();
        let accepts = offer.accepts();
        assert_eq!(accepts.len(), 3);
        let base = &accepts[0];
        assert_eq!(base.asset, UsdcDeployment::BASE.asset);
        assert_eq!(base.amount.to_string(), "1500000");
        assert_eq!(
            base.extra.as_ref().unwrap(),
            &UsdcDeployment::BASE.eip712.unwrap().to_extra()
        );
        let stable = &accepts[1];
        assert_eq!(stable.asset, "0x779Ded0c9e1022225f8E0630b35a9b54bE713736");
        assert_eq!(stable.amount.to_string(), "1500000");
        let extra = stable.extra.as_ref().unwrap();
        assert_eq!(
            (extra["name"].as_str(), extra["version"].as_str()),
            (Some("USDT0"), Some("1"))
        );
        assert!(!extra.contains_key(ASSET_TRANSFER_METHOD));
        let megaeth = &accepts[2];
        assert_eq!(megaeth.asset, "0xFAfDdbb3FC7688494971a79cc65DCa3EF82079E7");
        assert_eq!(megaeth.amount.to_string(), "1500000000000000000");
        let extra = megaeth.extra.as_ref().unwrap();
        assert_eq!(extra[ASSET_TRANSFER_METHOD], "permit2");
        assert_eq!(extra["name"], "MegaUSD");
        assert!(accepts.iter().all(|accept| accept.scheme == "exact"));
    }

    #[test]
    fn the_table_is_data_a_user_extends_and_an_unknown_network_is_refused() {
        let optimism = Network::from_static("eip155:10");
        let refused = Offer::builder(ResourceInfo::new("https://api.example.com/report"))
            .stablecoins(
                &Stablecoins::default(),
                "0.01".parse().unwrap(),
                std::slice::from_ref(&optimism),
                PAY_TO,
            )
            .build();
        assert!(matches!(refused, Err(OfferError::NoStablecoin { .. })));
        let coin = Stablecoin::new(
            optimism.clone(),
            "0x0b2C639c533813f4Aa9D7837CAf62653d097Ff85",
            6,
            TransferMethod::Eip3009,
        )
        .eip712("USD Coin", "2");
        let table = Stablecoins::default().with(coin);
        let offer = Offer::builder(ResourceInfo::new("https://api.example.com/report"))
            .stablecoins(&table, "0.01".parse().unwrap(), &[optimism], PAY_TO)
            .build()
            .unwrap();
        assert_eq!(
            offer.accepts()[0].asset,
            "0x0b2C639c533813f4Aa9D7837CAf62653d097Ff85"
        );
        // Replacing a network's token: Base paid through Permit2.
        let base =
            Stablecoin::usdc(&UsdcDeployment::BASE).with_transfer_method(TransferMethod::Permit2);
        let table = Stablecoins::default().with(base);
        let accept = table.get(&Network::BASE).unwrap();
        assert_eq!(accept.transfer_method, TransferMethod::Permit2);
        assert_eq!(
            table
                .iter()
                .filter(|coin| coin.network == Network::BASE)
                .count(),
            1
        );
    }
}
