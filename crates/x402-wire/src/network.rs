//! CAIP-2 networks and the USDC deployments on them.

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Why a network identifier was rejected.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a CAIP-2 chain id (`namespace:reference`)")]
pub struct NetworkError(String);

/// A CAIP-2 chain identifier such as `eip155:8453` or
/// `solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp`.
///
/// The namespace is 3–32 characters of `[-a-z0-9]` and the reference 1–64 visible ASCII
/// characters. CAIP-2 proper is stricter (8 and 32 characters of fewer symbols), but x402 uses
/// `cloudflare:402`, and Algorand's genesis-hash references contain `/`, `+` and `=`.
///
/// ```
/// use x402_wire::Network;
///
/// let base: Network = "eip155:8453".parse()?;
/// assert_eq!(base, Network::BASE);
/// assert_eq!(base.namespace(), "eip155");
/// assert_eq!(base.evm_chain_id(), Some(8453));
/// assert!("base".parse::<Network>().is_err());
/// # Ok::<_, x402_wire::NetworkError>(())
/// ```
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Network(Cow<'static, str>);

impl Network {
    /// Base mainnet.
    pub const BASE: Self = Self::from_static("eip155:8453");
    /// Base Sepolia testnet.
    pub const BASE_SEPOLIA: Self = Self::from_static("eip155:84532");
    /// Solana mainnet.
    pub const SOLANA: Self = Self::from_static("solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp");
    /// Solana devnet.
    pub const SOLANA_DEVNET: Self = Self::from_static("solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1");
    /// Algorand mainnet.
    pub const ALGORAND: Self =
        Self::from_static("algorand:wGHE2Pwdvd7S12BL5FaOP20EGYesN73ktiC1qzkkit8=");
    /// Algorand testnet.
    pub const ALGORAND_TESTNET: Self =
        Self::from_static("algorand:SGO1GKSzyE7IEPItTxCByw9x8FmnrCDexi9/cOUJOiI=");

    /// A network from a string known at compile time. The string is not validated: use it only
    /// for literals, and [`str::parse`] for anything else.
    pub const fn from_static(id: &'static str) -> Self {
        Self(Cow::Borrowed(id))
    }

    /// The identifier, e.g. `eip155:8453`.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The part before the colon, e.g. `eip155`.
    pub fn namespace(&self) -> &str {
        self.0
            .split_once(':')
            .map_or(&*self.0, |(namespace, _)| namespace)
    }

    /// The part after the colon, e.g. `8453`.
    pub fn reference(&self) -> &str {
        self.0
            .split_once(':')
            .map_or("", |(_, reference)| reference)
    }

    /// The numeric chain id of an `eip155` network.
    pub fn evm_chain_id(&self) -> Option<u64> {
        if self.namespace() == "eip155" {
            self.reference().parse().ok()
        } else {
            None
        }
    }
}

impl FromStr for Network {
    type Err = NetworkError;

    fn from_str(id: &str) -> Result<Self, Self::Err> {
        let error = || NetworkError(id.to_owned());
        let (namespace, reference) = id.split_once(':').ok_or_else(error)?;
        let namespace_ok = (3..=32).contains(&namespace.len())
            && namespace
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        let reference_ok = (1..=64).contains(&reference.len())
            && reference.bytes().all(|b| b.is_ascii_graphic() && b != b':');
        if namespace_ok && reference_ok {
            // A network this crate knows is shared, not copied: parsing and cloning it allocate
            // nothing.
            if let Some(known) = UsdcDeployment::ALL.iter().find(|usdc| usdc.network.0 == id) {
                return Ok(known.network.clone());
            }
            Ok(Self(Cow::Owned(id.to_owned())))
        } else {
            Err(error())
        }
    }
}

impl fmt::Display for Network {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Network {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Network({})", self.0)
    }
}

impl Serialize for Network {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for Network {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        crate::money::parsed(deserializer)
    }
}

/// The EIP-712 domain `name` and `version` of a token, sent in a requirement's `extra`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Eip712Domain {
    /// Domain name, e.g. `USD Coin`.
    pub name: &'static str,
    /// Domain version, e.g. `2`.
    pub version: &'static str,
}

impl Eip712Domain {
    /// The domain as the `extra` object of a requirement: `{"name": …, "version": …}`.
    pub fn to_extra(self) -> serde_json::Map<String, serde_json::Value> {
        let mut extra = serde_json::Map::with_capacity(2);
        extra.insert("name".into(), self.name.into());
        extra.insert("version".into(), self.version.into());
        extra
    }
}

/// A USDC deployment: where the token lives and how it is addressed.
///
/// ```
/// use x402_wire::{Network, UsdcDeployment};
///
/// let usdc = UsdcDeployment::for_network(&Network::BASE).unwrap();
/// assert_eq!(usdc.asset, "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913");
/// assert_eq!(usdc.eip712.unwrap().name, "USD Coin");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UsdcDeployment {
    /// The chain.
    pub network: Network,
    /// Contract address, mint or asset id of USDC on that chain.
    pub asset: &'static str,
    /// Fraction digits (6 everywhere USDC is deployed).
    pub decimals: u8,
    /// The EIP-712 domain for EIP-3009 signatures, on EVM chains.
    pub eip712: Option<Eip712Domain>,
}

impl UsdcDeployment {
    /// USDC on Base mainnet.
    pub const BASE: Self = Self::evm(
        Network::BASE,
        "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913",
        "USD Coin",
    );
    /// USDC on Base Sepolia. Its EIP-712 name differs from mainnet's.
    pub const BASE_SEPOLIA: Self = Self::evm(
        Network::BASE_SEPOLIA,
        "0x036CbD53842c5426634e7929541eC2318f3dCF7e",
        "USDC",
    );
    /// USDC on Polygon PoS.
    pub const POLYGON: Self = Self::evm(
        Network::from_static("eip155:137"),
        "0x3c499c542cEF5E3811e1192ce70d8cC03d5c3359",
        "USD Coin",
    );
    /// USDC on Arbitrum One.
    pub const ARBITRUM: Self = Self::evm(
        Network::from_static("eip155:42161"),
        "0xaf88d065e77c8cC2239327C5EDb3A432268e5831",
        "USD Coin",
    );
    /// USDC on Solana mainnet (the mint).
    pub const SOLANA: Self = Self::other(
        Network::SOLANA,
        "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v",
    );
    /// USDC on Solana devnet (the mint).
    pub const SOLANA_DEVNET: Self = Self::other(
        Network::SOLANA_DEVNET,
        "4zMMC9srt5Ri5X14GAgXhaHii3GnPAEERYPJgZJDncDU",
    );
    /// USDC on Algorand mainnet (ASA id).
    pub const ALGORAND: Self = Self::other(Network::ALGORAND, "31566704");
    /// USDC on Algorand testnet (ASA id).
    pub const ALGORAND_TESTNET: Self = Self::other(Network::ALGORAND_TESTNET, "10458941");

    /// Every deployment this crate knows.
    pub const ALL: &'static [Self] = &[
        Self::BASE,
        Self::BASE_SEPOLIA,
        Self::POLYGON,
        Self::ARBITRUM,
        Self::SOLANA,
        Self::SOLANA_DEVNET,
        Self::ALGORAND,
        Self::ALGORAND_TESTNET,
    ];

    const fn evm(network: Network, asset: &'static str, name: &'static str) -> Self {
        Self {
            network,
            asset,
            decimals: 6,
            eip712: Some(Eip712Domain { name, version: "2" }),
        }
    }

    const fn other(network: Network, asset: &'static str) -> Self {
        Self {
            network,
            asset,
            decimals: 6,
            eip712: None,
        }
    }

    /// The known USDC deployment on `network`.
    pub fn for_network(network: &Network) -> Option<&'static Self> {
        Self::ALL
            .iter()
            .find(|deployment| &deployment.network == network)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_caip2_and_rejects_the_rest() {
        for ok in [
            "eip155:8453",
            "solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp",
            Network::ALGORAND.as_str(),
            "cloudflare:402",
        ] {
            assert_eq!(ok.parse::<Network>().unwrap().as_str(), ok);
        }
        for bad in [
            "",
            "base",
            ":8453",
            "eip155:",
            "EIP155:8453",
            "ab:1",
            "eip155:84 53",
            "a-namespace-far-too-long-for-caip2:1",
            "a:b:c",
        ] {
            assert!(bad.parse::<Network>().is_err(), "{bad}");
        }
    }

    #[test]
    fn constants_are_valid_and_consistent() {
        for deployment in UsdcDeployment::ALL {
            let reparsed: Network = deployment.network.as_str().parse().unwrap();
            assert_eq!(reparsed, deployment.network);
            assert_eq!(
                deployment.eip712.is_some(),
                deployment.network.evm_chain_id().is_some()
            );
        }
        assert_eq!(Network::BASE_SEPOLIA.evm_chain_id(), Some(84532));
        assert_eq!(Network::SOLANA.evm_chain_id(), None);
        assert_eq!(UsdcDeployment::BASE_SEPOLIA.eip712.unwrap().name, "USDC");
    }
}
