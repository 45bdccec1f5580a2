//! [`EvmExact`]: the `exact` scheme on `eip155` networks, with the payer's signature checked
//! before the facilitator is asked.

use std::fmt;
use std::sync::Arc;

use alloy_primitives::{Address, B256, Signature, hex};
use tower_x402::BoxFuture;
use tower_x402::payment::{PaymentContext, Refusal, Scheme, built_in_exact};
use x402_wire::{PaymentPayload, PaymentRequirements};

use crate::code::AccountCode;
use crate::typed_data::{address, authorization_digest, exact_permit_digest};

/// The reason a payment whose signature is not its payer's is refused with: the facilitator's.
pub const INVALID_SIGNATURE: &str = "invalid_exact_evm_signature";

/// The suffix of an ERC-6492 signature: a wallet not deployed yet, with what deploys it.
const ERC6492_MAGIC: [u8; 32] = [
    0x64, 0x92, 0x64, 0x92, 0x64, 0x92, 0x64, 0x92, 0x64, 0x92, 0x64, 0x92, 0x64, 0x92, 0x64, 0x92,
    0x64, 0x92, 0x64, 0x92, 0x64, 0x92, 0x64, 0x92, 0x64, 0x92, 0x64, 0x92, 0x64, 0x92, 0x64, 0x92,
];

/// The `exact` scheme for EVM networks (`namespace() == Some("eip155")`), registered beside
/// the core's `exact` ([`Payments::scheme`](tower_x402::payment::Payments::scheme)): matching,
/// identity and the refusals of a permit that does not pay its accept stay the core's (it
/// answers with [`built_in_exact`]); what it adds is the payer's signature, checked before
/// anything is sent to the facilitator — before `/verify`, and before the `/settle` a payment
/// settled before the work is sent alone.
///
/// For both transfer methods — an EIP-3009 `TransferWithAuthorization` (under the token's
/// EIP-712 domain: the accept's `extra.name` and `extra.version`, the network's chain id, the
/// asset) and a Permit2 `PermitWitnessTransferFrom` with the `exact` witness (under Permit2's
/// domain) — the signer is recovered from the digest ([`typed_data`](crate::typed_data)):
///
/// - a 65-byte signature that recovers to the payer (`from`) goes on to the facilitator, at the
///   cost of one recovery and no I/O;
/// - anything else may still be a smart wallet's (EIP-1271, an EIP-7702-delegated account, an
///   ERC-6492-wrapped wallet not deployed yet), which only the chain can judge. An ERC-6492
///   signature goes on; otherwise the payer's account is looked up in the
///   [source of account code](AccountCode): an account **without code** is refused at once —
///   402 with `invalid_exact_evm_signature`, nothing verified, nothing held, remembered as a
///   `/verify` refusal is — while an account with code, a lookup that failed, or no source of
///   code configured leaves the payment to the facilitator, the authority on signatures.
///
/// A payload that does not parse, or an accept without its EIP-712 domain, is left to the
/// facilitator too, which answers it with its own reason.
///
/// ```
/// use tower_x402::payment::Payments;
/// use tower_x402_evm::EvmExact;
/// use tower_x402_sandbox::SandboxFacilitator;
///
/// let sandbox = SandboxFacilitator::new();
/// // The sandbox's simulated chain tells contract wallets from keys.
/// let payments = Payments::new(sandbox.clone()).scheme(EvmExact::new().account_code(sandbox));
/// # let _ = payments;
/// ```
#[derive(Clone)]
pub struct EvmExact {
    /// The core's `exact`: matching, identity and the permit refusals.
    built_in: Arc<dyn Scheme>,
    /// Whether a payer holds code, asked of a signature that is not its key's.
    code: Option<Arc<dyn AccountCode>>,
}

impl EvmExact {
    /// The scheme, without a source of account code: a signature that does not recover to its
    /// payer is left to the facilitator. Add one with [`account_code`](Self::account_code).
    pub fn new() -> Self {
        Self {
            built_in: built_in_exact(),
            code: None,
        }
    }

    /// Asks `source` whether a payer whose signature does not recover to it holds code: one
    /// that does not is refused before the facilitator is asked.
    #[must_use]
    pub fn account_code(mut self, source: impl AccountCode) -> Self {
        self.code = Some(Arc::new(source));
        self
    }
}

impl Default for EvmExact {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for EvmExact {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EvmExact")
            .field("account_code", &self.code.is_some())
            .finish_non_exhaustive()
    }
}

impl Scheme for EvmExact {
    fn name(&self) -> &str {
        "exact"
    }

    /// Only EVM networks: the core's `exact` (or another plug-in) answers for the others.
    fn namespace(&self) -> Option<&str> {
        Some("eip155")
    }

    fn mismatch(
        &self,
        own: &PaymentRequirements,
        accepted: &PaymentRequirements,
    ) -> Option<&'static str> {
        self.built_in.mismatch(own, accepted)
    }

    fn identify(&self, payload: &PaymentPayload) -> Result<Arc<str>, Refusal> {
        self.built_in.identify(payload)
    }

    fn refuse_new(
        &self,
        requirement: &PaymentRequirements,
        payload: &PaymentPayload,
    ) -> Option<Refusal> {
        self.built_in.refuse_new(requirement, payload)
    }

    fn payer_and_transfer(&self, payload: &PaymentPayload) -> Option<(String, String)> {
        self.built_in.payer_and_transfer(payload)
    }

    /// The signature check: nothing to wait for when it recovers to the payer (or cannot be
    /// judged here); a lookup of the payer's code otherwise.
    fn check_new<'a>(
        &'a self,
        payment: &'a PaymentContext<'a>,
    ) -> Option<BoxFuture<'a, Option<Refusal>>> {
        let requirement = payment.request.payment_requirements();
        let payer = not_signed_by_payer(requirement, payment.request.payment_payload())?;
        let code = self.code.as_ref()?;
        Some(Box::pin(async move {
            match code.has_code(&requirement.network, payer).await {
                Ok(false) => Some(Refusal::InvalidPayment {
                    reason: INVALID_SIGNATURE.to_owned(),
                }),
                // A smart wallet, or no answer: the facilitator judges.
                Ok(true) | Err(_) => None,
            }
        }))
    }
}

/// The payer of an `exact` payment whose signature is not its key's: `None` when the signature
/// recovers to the payer, is an ERC-6492 wrapper, or the payment cannot be read here (left to
/// the facilitator).
pub(crate) fn not_signed_by_payer(
    requirement: &PaymentRequirements,
    payload: &PaymentPayload,
) -> Option<Address> {
    let (from, digest, signature) = signed(requirement, payload)?;
    let from = address("from", &from).ok()?;
    let Ok(bytes) = hex::decode(signature.as_bytes()) else {
        return Some(from);
    };
    if bytes.ends_with(&ERC6492_MAGIC) {
        return None;
    }
    if recovers_to(&bytes, &digest, from) {
        return None;
    }
    Some(from)
}

/// The payer, the digest it signed and the signature, of either transfer method.
fn signed(
    requirement: &PaymentRequirements,
    payload: &PaymentPayload,
) -> Option<(String, B256, String)> {
    if requirement.pays_through_permit2() {
        let proof = payload.exact_permit2().ok()?;
        let permit = proof.permit2_authorization;
        let digest = exact_permit_digest(&requirement.network, &permit).ok()?;
        Some((permit.from, digest, proof.signature))
    } else {
        let proof = payload.exact_evm().ok()?;
        let digest = authorization_digest(requirement, &proof.authorization).ok()?;
        Some((proof.authorization.from, digest, proof.signature))
    }
}

/// Whether `bytes` is a 65-byte signature of `digest` by `signer`'s key.
fn recovers_to(bytes: &[u8], digest: &B256, signer: Address) -> bool {
    bytes.len() == 65
        && Signature::from_raw(bytes)
            .and_then(|signature| signature.recover_address_from_prehash(digest))
            .is_ok_and(|recovered| recovered == signer)
}

#[cfg(test)]
#[path = "exact_tests.rs"]
mod tests;
