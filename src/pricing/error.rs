//! Why an [`Offer`](super::Offer) could not be built.

use x402_wire::{MoneyError, Network, header};

/// Why an [`Offer`](super::Offer) could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OfferError {
    /// An offer needs at least one accept.
    #[error("offer for {url} has no accepts")]
    NoAccepts {
        /// The resource URL.
        url: String,
    },
    /// The resource URL is not absolute.
    #[error("resource URL `{url}` is not an absolute http(s) or mcp URL")]
    RelativeUrl {
        /// The URL given.
        url: String,
    },
    /// A price could not be converted to the asset's units.
    #[error("price of {url}: {source}")]
    Money {
        /// The resource URL.
        url: String,
        /// The money error.
        #[source]
        source: MoneyError,
    },
    /// A metered (`upto`) accept cannot be offered as built.
    #[error("metered accept of {url}: {reason}")]
    Metered {
        /// The resource URL.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The facilitator's `/supported` could not be read to complete the metered accepts.
    #[error("offer for {url}: the facilitator's /supported could not be read: {source}")]
    Supported {
        /// The resource URL.
        url: String,
        /// The facilitator's error.
        #[source]
        source: crate::facilitator::FacilitatorError,
    },
    /// A network named for a USD price has no stablecoin in the table it was resolved with
    /// ([`OfferBuilder::stablecoins`](super::OfferBuilder::stablecoins)).
    #[error("price of {url}: no stablecoin is known on {network}")]
    NoStablecoin {
        /// The resource URL.
        url: String,
        /// The network.
        network: Network,
    },
    /// The challenge could not be encoded.
    #[error("challenge of {url} could not be encoded: {source}")]
    Encode {
        /// The resource URL.
        url: String,
        /// The encoding error.
        #[source]
        source: header::HeaderError,
    },
}
