//! Payment schemes on the server's side: [`Scheme`], the plug-in a scheme is, and `exact` and
//! `upto`, the two registered on every [`Payments`](super::Payments) core.

use std::fmt;
use std::sync::Arc;

use http::Extensions;
use serde_json::{Map, Value};
use x402_wire::{
    AtomicAmount, FacilitatorRequest, PaymentPayload, PaymentRequirements, SettleResponse,
    VerifyResponse,
};

use super::context::{PaymentContext, is_uncertain};
use super::refusal::Refusal;
#[cfg(doc)]
use super::verified::VerifiedPayment;
use crate::boxed::BoxFuture;
use crate::settlement::{Fingerprint, PaymentKey};

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
/// A scheme takes the requirements named after it on every network, or only those of one CAIP-2
/// namespace ([`namespace`](Self::namespace): `eip155`, `solana`), so that one chain's `exact`
/// and another's are two plug-ins side by side. A requirement is answered by the scheme
/// registered under its `scheme` for its network's namespace, else by the one registered under
/// its `scheme` for every network, else by the built-in one.
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

    /// The CAIP-2 namespace of the networks whose requirements this scheme takes (`eip155`,
    /// `solana`: a requirement whose `network` is `<namespace>:<reference>`), or `None` (the
    /// default) for every network. A scheme registered for a namespace answers before one
    /// registered for every network, which answers before the built-in scheme of that name:
    /// `exact` for `solana` beside `exact` for `eip155` are two plug-ins, each seeing only its
    /// own chain's payments.
    ///
    /// ```
    /// use tower_x402::payment::{Scheme, built_in_exact};
    ///
    /// struct EvmOnly;
    ///
    /// impl Scheme for EvmOnly {
    ///     fn name(&self) -> &str {
    ///         "exact"
    ///     }
    ///
    ///     fn namespace(&self) -> Option<&str> {
    ///         Some("eip155")
    ///     }
    /// }
    ///
    /// assert_eq!(EvmOnly.namespace(), Some("eip155"));
    /// assert_eq!(built_in_exact().namespace(), None);
    /// ```
    fn namespace(&self) -> Option<&str> {
        None
    }

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

    /// Refuses a new payment — one this core holds no record of — before it is verified, for
    /// what only the time tells: `requirement` is the offer's accept it pays. `Some` answers it
    /// at once, nothing verified nor moved, the payment released; a payment already settled or
    /// in doubt is never asked. By default `None`. `exact` refuses a Permit2 permit past its
    /// deadline here.
    fn refuse_new(
        &self,
        requirement: &PaymentRequirements,
        payload: &PaymentPayload,
    ) -> Option<Refusal> {
        let _ = (requirement, payload);
        None
    }

    /// The scheme's check of a new payment — one this core holds no record of — that may wait
    /// (a lookup on chain), before any facilitator is asked anything: after
    /// [`refuse_new`](Self::refuse_new), before the [hooks](super::PaymentHooks)'
    /// `before_verify`, the scheme's [verify step](Self::verify), `/verify`, and the `/settle`
    /// a payment settled before the work is sent without `/verify`
    /// ([`Payments::verify_before_settling`](super::Payments::verify_before_settling)) — in both
    /// settlement modes. A future resolving to `Some` refuses the payment at once, nothing
    /// verified, settled nor held; a [`Refusal::InvalidPayment`] is remembered as a `/verify`
    /// refusal is ([`Payments::refusal_memory`](super::Payments::refusal_memory)). `None` (the
    /// default) checks nothing; a future resolving to `None` lets the payment go on. Asked only
    /// of a scheme registered from outside: the built-in schemes check nothing here.
    fn check_new<'a>(
        &'a self,
        payment: &'a PaymentContext<'a>,
    ) -> Option<BoxFuture<'a, Option<Refusal>>> {
        let _ = payment;
        None
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

    /// The request written ahead into the payment's *settling* intent and sent to `/settle`,
    /// completed from the payment's `notes` (what its [verify step](Self::verify) wrote), or
    /// `None` (the default) to send `request` as it is. Asked once, before the intent is
    /// written, for the payment's first settlement: a retry after a lost answer sends the
    /// request written ahead again, unchanged. A payment channel's refund is completed here
    /// with its amount, the channel's refund nonce, the claim of what was charged and the
    /// receiver authorizer's signatures.
    fn completed_request(
        &self,
        request: &FacilitatorRequest,
        notes: &Extensions,
    ) -> Option<FacilitatorRequest> {
        let _ = (request, notes);
        None
    }

    /// The scheme's verification of a new payment, or `None` (the default) for the core's:
    /// the payment sent to the core's facilitators' `/verify`.
    ///
    /// A scheme that verifies some payments itself (a payment-channel voucher checked
    /// locally) answers here, and reaches the facilitator, when it needs it, through the core:
    /// [`payment.verify_at_facilitator()`](PaymentContext::verify_at_facilitator). What the
    /// scheme must remember about the payment until its end it writes into `notes`, the
    /// payment's own slot ([`VerifiedPayment::notes`]). An `isValid: false` answer refuses the
    /// payment with its reason (402); an `Err` refuses it as it says
    /// ([`Refusal::Facilitator`] like a facilitator that failed). A payment that does not
    /// verify is never settled nor released: the step undoes what it took before it answers.
    fn verify<'a>(
        &'a self,
        payment: &'a PaymentContext<'a>,
        notes: &'a mut Extensions,
    ) -> Option<BoxFuture<'a, Result<VerifyResponse, Refusal>>> {
        let _ = (payment, notes);
        None
    }

    /// The scheme's settlement of a verified payment, or `None` (the default) for the core's:
    /// `payment.request` sent to `/settle` at the facilitator the payment's intent names.
    ///
    /// Asked once the *settling* intent is written to the ledger — for the payment's first
    /// settlement and for the recovery of one in doubt (then `notes` holds what this process
    /// noted before the doubt, or nothing after a restart). A scheme that settles through the
    /// facilitator calls
    /// [`payment.settle_at_facilitator()`](PaymentContext::settle_at_facilitator), which
    /// sends the request written ahead, to that facilitator. What the step answers decides the
    /// payment's end, as the facilitator's answer does: a settlement with `success: true` is
    /// recorded and delivered; `success: false` (or [`Refusal::SettlementRefused`]) is released
    /// — unless the scheme says [it may have moved](Self::may_have_moved) — or kept in doubt on a
    /// recovery; [`Refusal::Facilitator`] is an answer lost, the payment kept *in doubt* (503,
    /// never 402) until a retry or the reconciler resolves it; any other refusal says nothing
    /// moved: the payment is released and refused with it (kept in doubt on a recovery).
    fn settle<'a>(
        &'a self,
        payment: &'a PaymentContext<'a>,
        notes: &'a mut Extensions,
    ) -> Option<BoxFuture<'a, Result<SettleResponse, Refusal>>> {
        let _ = (payment, notes);
        None
    }

    /// A settlement the core proved without the scheme's [settle step](Self::settle)
    /// answering it: the [reconciler](crate::settlement::Reconciler) found on chain that a
    /// payment in doubt settled. The scheme completes what its settle step would have done on
    /// a success (a payment channel's deposit commits the request's voucher), and may add to
    /// `settlement`'s `extra`. Given the payment's `notes` (empty after a restart, when the
    /// step works from the payment alone). By default (`None`) nothing is done.
    fn proven<'a>(
        &'a self,
        payment: &'a PaymentContext<'a>,
        notes: &'a mut Extensions,
        settlement: &'a mut SettleResponse,
    ) -> Option<BoxFuture<'a, ()>> {
        let _ = (payment, notes, settlement);
        None
    }

    /// Whether a settlement answered `success: false` leaves it open that money moved: the
    /// payment is then kept in doubt and recovered, never released. By default, the reasons
    /// that say a transaction may be on its way or the authorization was used already
    /// (`settlement_pending`, a used nonce, `unexpected_settle_error`, ...).
    fn may_have_moved(&self, refused: &SettleResponse) -> bool {
        is_uncertain(refused)
    }

    /// Fields the scheme adds to a settlement's `extra` (a payment channel's state after the
    /// request), from the payment's `notes`: asked once its settle step (or the facilitator)
    /// answered a settlement, before the hooks' additions and the record, so a repeat answered
    /// from the record carries them too. A settlement the reconciler proved has none.
    fn settlement_extra(
        &self,
        payment: &PaymentContext<'_>,
        notes: &Extensions,
        settlement: &SettleResponse,
    ) -> Option<Map<String, Value>> {
        let _ = (payment, notes, settlement);
        None
    }

    /// The payer of `payload` and what names its transfer on chain (a nonce, a transaction
    /// message's hash), for the log line of a payment *in doubt*, from which an operator finds
    /// it. By default `None`: the core reads an EIP-3009 authorization's or a Permit2 permit's
    /// signer and nonce itself.
    fn payer_and_transfer(&self, payload: &PaymentPayload) -> Option<(String, String)> {
        let _ = payload;
        None
    }

    /// Lets go of what the scheme holds for the payment `key`, which ended without settling:
    /// cancelled (the work failed, a hook refused it after verification, it was dropped),
    /// refused by the settlement, or found never settled once in doubt. Given the payment's
    /// `notes`, and asked only when it has some (a scheme that noted nothing holds nothing),
    /// once: a payment in doubt recovered by a process that did not verify it carries none, and
    /// what the scheme held for it is the scheme's to expire. The future returned is run to its
    /// end, on a task of its own when the payment was dropped.
    fn release(&self, key: &PaymentKey, notes: Extensions) -> Option<BoxFuture<'static, ()>> {
        let _ = (key, notes);
        None
    }
}

/// `exact`: a fixed price, paid with an EIP-3009 authorization (on EVM networks), the
/// authorization the key, or with a Permit2 permit to the `exact` proxy
/// (`extra.assetTransferMethod: "permit2"`), the owner's nonce the key. A permit for another
/// amount, token, `payTo` or spender is refused before it is verified, and a new one past its
/// deadline too.
struct Exact;

impl Scheme for Exact {
    fn name(&self) -> &str {
        "exact"
    }

    /// The default fields, then the transfer method: an offer may list the same price in the
    /// same token twice, through EIP-3009 and through Permit2, and a payment pays the one it
    /// names.
    fn mismatch(
        &self,
        own: &PaymentRequirements,
        accepted: &PaymentRequirements,
    ) -> Option<&'static str> {
        own.mismatch(accepted).or_else(|| {
            (own.pays_through_permit2() != accepted.pays_through_permit2())
                .then_some("extra.assetTransferMethod")
        })
    }

    fn identify(&self, payload: &PaymentPayload) -> Result<Arc<str>, Refusal> {
        let fingerprint = Fingerprint::read_first(payload, false).0;
        if fingerprint.is_permit2() {
            super::permit2::check_exact(payload)?;
        }
        Ok(fingerprint.into_shared())
    }

    fn refuse_new(
        &self,
        requirement: &PaymentRequirements,
        payload: &PaymentPayload,
    ) -> Option<Refusal> {
        if !requirement.pays_through_permit2() {
            return None;
        }
        super::permit2::expired(payload, x402_wire::unix_time().as_secs())
    }
}

/// The built-in `exact` scheme, for a scheme registered in its place to answer with for what it
/// leaves to the core: an `exact` for one namespace (`eip155`) that adds a check of its own and
/// delegates matching, identity and the permit refusals to the core's.
///
/// ```
/// let exact = tower_x402::payment::built_in_exact();
/// assert_eq!(exact.name(), "exact");
/// ```
#[must_use]
pub fn built_in_exact() -> Arc<dyn Scheme> {
    Arc::new(Exact)
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

impl super::Payments {
    /// The scheme's refusal of a new payment before it is verified
    /// ([`Scheme::refuse_new`]); a function of its own, so that the verification's future
    /// carries nothing of it.
    #[inline(never)]
    pub(super) fn refuse_new(&self, request: &FacilitatorRequest) -> Option<Refusal> {
        let requirement = request.payment_requirements();
        self.schemes
            .get(requirement)
            .refuse_new(requirement, request.payment_payload())
    }
}

/// The schemes registered on a core from outside, each for a namespace or for every network;
/// `exact` and `upto` answer for the names no registered scheme takes.
#[derive(Clone, Default)]
pub(super) struct Schemes(Vec<Arc<dyn Scheme>>);

impl Schemes {
    /// Registers `scheme`, in place of one registered before under its name for its namespace
    /// (or for every network, when it names none). One for every network named as a built-in
    /// scheme answers in its place; one for a namespace, only for that namespace's networks.
    pub(super) fn register(&mut self, scheme: Arc<dyn Scheme>) {
        let same = |own: &Arc<dyn Scheme>| {
            own.name() == scheme.name() && own.namespace() == scheme.namespace()
        };
        match self.0.iter().position(same) {
            Some(at) => self.0[at] = scheme,
            None => self.0.push(scheme),
        }
    }

    /// The scheme that answers for `requirement`: the one registered under its `scheme` for
    /// its network's namespace, else the one registered under it for every network, else the
    /// built-in one, else the core's handling of a scheme no one registered.
    #[inline]
    pub(super) fn get(&self, requirement: &PaymentRequirements) -> &dyn Scheme {
        if let Some(scheme) = self.registered(requirement) {
            return scheme;
        }
        match requirement.scheme.as_str() {
            "exact" => &Exact,
            x402_wire::UPTO_SCHEME => &Upto,
            _ => &Unregistered,
        }
    }

    /// The scheme registered from outside (not `exact`, `upto` nor an unregistered name) that
    /// answers for `requirement`, as [`get`](Self::get) finds it: only such a scheme has steps
    /// of its own to ask. Compares names, no allocation: a core with none registered looks at
    /// nothing.
    #[inline]
    pub(super) fn registered(&self, requirement: &PaymentRequirements) -> Option<&dyn Scheme> {
        if self.0.is_empty() {
            return None;
        }
        let name = requirement.scheme.as_str();
        let namespace = requirement.network.namespace();
        let mut everywhere = None;
        for scheme in self.0.iter().filter(|scheme| scheme.name() == name) {
            match scheme.namespace() {
                Some(own) if own == namespace => return Some(&**scheme),
                Some(_) => {}
                None => everywhere = everywhere.or(Some(&**scheme)),
            }
        }
        everywhere
    }

    /// Whether payments of `requirement`'s scheme are metered.
    pub(super) fn metered(&self, requirement: &PaymentRequirements) -> bool {
        self.get(requirement).metered()
    }
}

impl fmt::Debug for Schemes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let built_in: [&dyn Scheme; 2] = [&Exact, &Upto];
        f.debug_list()
            .entries(
                built_in
                    .into_iter()
                    .chain(self.0.iter().map(|scheme| &**scheme))
                    .map(|scheme| match scheme.namespace() {
                        Some(namespace) => format!("{} ({namespace})", scheme.name()),
                        None => scheme.name().to_owned(),
                    }),
            )
            .finish()
    }
}
