//! One USD price in each network's stablecoin: the [`OfferBuilder`] methods that turn a price
//! into accepts — `exact` through EIP-3009 where the token has it, through Permit2 otherwise —
//! and declare the gas-sponsoring extensions. A token is data in the wire crate
//! ([`Stablecoin`](x402_wire::Stablecoin)); a table of them is a slice,
//! `Stablecoin::defaults()` the reference packages' that a user extends.

use serde_json::json;
use x402_wire::{
    EIP2612_GAS_SPONSORING, ERC20_APPROVAL_GAS_SPONSORING, Extension, Network, Stablecoin,
    TransferMethod, UsdAmount, UsdcDeployment,
};

use super::OfferError;
use super::offer::OfferBuilder;

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
    /// stablecoin in `table` (the last one listed for it; [`Stablecoin::defaults`](x402_wire::Stablecoin::defaults) for the
    /// reference packages' table) with its transfer method, decimals and EIP-712 domain
    /// ([`Stablecoin::requirement`](x402_wire::Stablecoin::requirement)), paid to `pay_to`.
    ///
    /// ```
    /// use tower_x402::proto::Stablecoin;
    /// use tower_x402::proto::{Network, ResourceInfo};
    /// use tower_x402::Offer;
    ///
    /// let networks = [Network::BASE, Network::from_static("eip155:988"), Network::from_static("eip155:4326")];
    /// let offer = Offer::builder(ResourceInfo::new("https://api.example.com/report"))
    ///     .stablecoins(&Stablecoin::defaults(), "0.01".parse()?, &networks, "0x209693Bc6afc0C5328bA36FaF03C514EF312287C")
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
        table: &[Stablecoin],
        price: UsdAmount,
        networks: &[Network],
        pay_to: impl Into<String>,
    ) -> Self {
        let pay_to = pay_to.into();
        for network in networks {
            match table.iter().rev().find(|coin| &coin.network == network) {
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
    /// ([`Stablecoin::requirement`](x402_wire::Stablecoin::requirement)).
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
                &Stablecoin::defaults(),
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
        assert!(!extra.contains_key("assetTransferMethod"));
        let megaeth = &accepts[2];
        assert_eq!(megaeth.asset, "0xFAfDdbb3FC7688494971a79cc65DCa3EF82079E7");
        assert_eq!(megaeth.amount.to_string(), "1500000000000000000");
        let extra = megaeth.extra.as_ref().unwrap();
        assert_eq!(extra["assetTransferMethod"], "permit2");
        assert_eq!(extra["name"], "MegaUSD");
        assert!(accepts.iter().all(|accept| accept.scheme == "exact"));
    }

    #[test]
    fn the_table_is_data_a_user_extends_and_an_unknown_network_is_refused() {
        let optimism = Network::from_static("eip155:10");
        let refused = Offer::builder(ResourceInfo::new("https://api.example.com/report"))
            .stablecoins(
                &Stablecoin::defaults(),
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
        let mut table = Stablecoin::defaults();
        table.push(coin);
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
        let mut table = Stablecoin::defaults();
        table.push(base);
        let offer = Offer::builder(ResourceInfo::new("https://api.example.com/report"))
            .stablecoins(&table, "0.01".parse().unwrap(), &[Network::BASE], PAY_TO)
            .build()
            .unwrap();
        assert_eq!(offer.accepts().len(), 1);
        assert_eq!(
            offer.accepts()[0].extra.as_ref().unwrap()["assetTransferMethod"],
            "permit2"
        );
    }
}
