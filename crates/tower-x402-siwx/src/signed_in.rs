//! [`SignedIn`]: who signed in, put in the request's extensions.

/// Who signed in: put in the request's extensions by the layer when a sign-in proof was
/// accepted (the request was served without payment), beside a
/// [`MissingPayment`](tower_x402::payment::MissingPayment) that tells a handler
/// asking for a payment why there is none. With the feature `axum`, an extractor
/// (`Option<SignedIn>` in a handler that also serves payments).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SignedIn {
    pub(crate) address: String,
    pub(crate) chain_id: String,
    pub(crate) resource: String,
}

impl SignedIn {
    /// The address that signed, as the proof wrote it (EIP-55 for EVM, base58 for Solana).
    pub fn address(&self) -> &str {
        &self.address
    }

    /// The CAIP-2 chain it signed on (`eip155:8453`, `solana:5eykt4…`).
    pub fn chain_id(&self) -> &str {
        &self.chain_id
    }

    /// The resource it is entitled to: the offer's resource URL (its entitlement is recorded
    /// under that URL and the price paid, [`entitlement_key`](crate::entitlement_key)).
    pub fn resource(&self) -> &str {
        &self.resource
    }
}
