//! Payment schemes on the server's side: [`Scheme`], the plug-in a scheme is, and `exact` and
//! `upto`, the two registered on every [`Payments`](super::Payments) core.

use std::fmt;
use std::sync::Arc;

use super::refusal::Refusal;
use crate::settlement::Fingerprint;
use x402_wire::{AtomicAmount, FacilitatorRequest, PaymentPayload, PaymentRequirements};

/// A payment scheme, as the payment core on the server's side sees it: how a payment is
/// matched against an offer's requirement of the scheme and identified, what amount is settled,
/// and what the facilitator is asked to settle. The core calls it for every payment whose
/// requirement names it; single-flight, the ledger, verification, recovery and the one-delivery
/// rule stay the core's, whatever the scheme.
///
/// `exact` (a fixed price) and `upto` (the work charges up to a signed maximum) are registered on
/// every core; a new scheme is a type that implements this trait, registered with
/// [`Payments::scheme`](super::Payments::scheme) — the core is not touched. An offer states the
/// scheme's requirements with [`OfferBuilder::accept`](crate::pricing::OfferBuilder::accept).
///
/// ```
/// use std::sync::Arc;
/// use tower_x402::payment::{Payments, Refusal, Scheme};
/// use tower_x402::proto::PaymentPayload;
///
/// /// Prepaid vouchers: one voucher code is one payment, whatever else the proof says.
/// struct Voucher;
///
/// impl Scheme for Voucher {
///     fn name(&self) -> &str {
///         "voucher"
///     }
///
///     fn identify(&self, payload: &PaymentPayload) -> Result<Arc<str>, Refusal> {
///         #[derive(serde::Deserialize)]
///         struct Proof<'a> {
///             code: &'a str,
///         }
///         let proof: Proof<'_> = serde_json::from_str(payload.payload.get())
///             .map_err(|_| Refusal::InvalidPayment { reason: "invalid_voucher".into() })?;
///         Ok(format!("voucher:{}", proof.code).into())
///     }
/// }
/// # fn demo(payments: Payments) -> Payments {
/// payments.scheme(Voucher)
/// # }
/// ```
pub trait Scheme: Send + Sync + 'static {
    /// The name requirements of this scheme carry in `scheme` (`exact`, `upto`).
    fn name(&self) -> &str;

    /// The first field in which `accepted`, the requirement a payment names, differs from
    /// `own`, an offer's requirement of this scheme; `None` when the payment pays `own`.
    /// By default the scheme, network, amount, asset and payTo are compared
    /// ([`PaymentRequirements::mismatch`]).
    fn mismatch(
        &self,
        own: &PaymentRequirements,
        accepted: &PaymentRequirements,
    ) -> Option<&'static str> {
        own.mismatch(accepted)
    }

    /// What identifies the signed payment, whatever request carries it: the payment's
    /// [`PaymentKey`](crate::PaymentKey) when it names no `payment-identifier`, and recorded
    /// with it to tell a reused identifier from the same payment. Two payments identified alike
    /// are one payment, settled once. An `Err` refuses the payment before anything else is done
    /// with it (nothing verified, nothing held). By default, the scheme, the network and the
    /// proof as compact JSON.
    // A `Refusal` is large, but it is answered at once.
    #[allow(clippy::result_large_err)]
    fn identify(&self, payload: &PaymentPayload) -> Result<Arc<str>, Refusal> {
        Ok(Fingerprint::of_proof(payload).into_shared())
    }

    /// Whether the work decides the amount settled, up to the requirement's amount (the
    /// signed maximum): the work sets a [`Charge`](super::Charge), the payment settles after
    /// the work and is never delivered twice. Otherwise (the default) the requirement's amount
    /// is settled: a fixed price, delivered again for the same request.
    fn metered(&self) -> bool {
        false
    }

    /// Whether a metered payment charged zero still goes through settlement — the
    /// [`before_settle`](super::PaymentHooks::before_settle) hooks, `/settle` unless a hook
    /// settles it, and the record. By default (`false`) a charge of zero settles nothing and
    /// releases the payment, its authorization unused; a scheme whose payments are accounted
    /// off-chain (a payment channel, which records each request's voucher whatever it cost)
    /// answers `true`.
    fn settles_zero(&self) -> bool {
        false
    }

    /// Whether `payload` is an operation on the payment itself rather than a payment for the
    /// work (a payment channel's cooperative refund): verified and settled at once, whatever
    /// the offer's settlement mode, and answered with its settlement
    /// ([`Outcome::Answered`](super::Outcome::Answered)) — the work is not run. By default
    /// (`false`) every payment pays for the work.
    fn settles_without_work(&self, payload: &PaymentPayload) -> bool {
        let _ = payload;
        false
    }

    /// The request sent to `/settle` for a payment verified with `verified` that settles
    /// `amount` (the requirement's for a fixed price, the work's charge for a metered one), or
    /// `None` to send `verified` as it is. By default the requirement's `amount` is set to
    /// `amount` when it differs. The request is written into the ledger before it is sent, so
    /// a retry after a lost answer sends it again unchanged.
    fn settle_request(
        &self,
        verified: &FacilitatorRequest,
        amount: AtomicAmount,
    ) -> Option<FacilitatorRequest> {
        let requirement = verified.payment_requirements();
        (requirement.amount != amount).then(|| {
            let mut charged = PaymentRequirements::clone(requirement);
            charged.amount = amount;
            verified.with_requirements(charged)
        })
    }
}

/// `exact`: a fixed price, paid with an EIP-3009 authorization (on EVM networks), the
/// authorization the key.
struct Exact;

impl Scheme for Exact {
    fn name(&self) -> &str {
        "exact"
    }

    fn identify(&self, payload: &PaymentPayload) -> Result<Arc<str>, Refusal> {
        Ok(Fingerprint::read_first(payload, false).0.into_shared())
    }
}

/// `upto`: the work charges up to the maximum a Permit2 permit signs, the owner's nonce the
/// key; a permit signing another amount than the requirement's maximum is refused.
struct Upto;

impl Scheme for Upto {
    fn name(&self) -> &str {
        x402_wire::UPTO_SCHEME
    }

    fn identify(&self, payload: &PaymentPayload) -> Result<Arc<str>, Refusal> {
        match Fingerprint::read_first(payload, true) {
            // The buyer would leave a permit for another amount with the merchant.
            (_, true) => Err(Refusal::PermitAmountMismatch),
            (fingerprint, false) => Ok(fingerprint.into_shared()),
        }
    }

    fn metered(&self) -> bool {
        true
    }

    fn settle_request(
        &self,
        verified: &FacilitatorRequest,
        amount: AtomicAmount,
    ) -> Option<FacilitatorRequest> {
        // A new request for the charge: the signed maximum's encoding is not reused for it.
        let mut charged = PaymentRequirements::clone(verified.payment_requirements());
        charged.amount = amount;
        Some(verified.with_requirements(charged))
    }
}

/// A requirement whose scheme no registered [`Scheme`] names: identified as the built-in
/// schemes' proofs are (an EIP-3009 authorization, a Permit2 permit, else the proof itself),
/// at a fixed price.
struct Unregistered;

impl Scheme for Unregistered {
    fn name(&self) -> &str {
        ""
    }

    fn identify(&self, payload: &PaymentPayload) -> Result<Arc<str>, Refusal> {
        Ok(Fingerprint::read(payload).0.into_shared())
    }
}

/// The schemes registered on a core, `exact` and `upto` first.
#[derive(Clone)]
pub(super) struct Schemes(Vec<Arc<dyn Scheme>>);

impl Default for Schemes {
    fn default() -> Self {
        Self(vec![Arc::new(Exact), Arc::new(Upto)])
    }
}

impl Schemes {
    /// Registers `scheme`, in place of one registered under its name before.
    pub(super) fn register(&mut self, scheme: Arc<dyn Scheme>) {
        match self.0.iter_mut().find(|own| own.name() == scheme.name()) {
            Some(own) => *own = scheme,
            None => self.0.push(scheme),
        }
    }

    /// The scheme named `name`.
    #[inline]
    pub(super) fn get(&self, name: &str) -> &dyn Scheme {
        self.0
            .iter()
            .find(|scheme| scheme.name() == name)
            .map_or(&Unregistered, |scheme| &**scheme)
    }

    /// Whether payments of the scheme named `name` are metered.
    pub(super) fn metered(&self, name: &str) -> bool {
        self.get(name).metered()
    }
}

impl fmt::Debug for Schemes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(|scheme| scheme.name()))
            .finish()
    }
}
