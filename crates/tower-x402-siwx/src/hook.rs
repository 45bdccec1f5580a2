//! Sign-in as a lifecycle hook of the payment core, written against the crate's public API
//! alone: the challenge extension of every 402, the proof that grants a request without
//! payment, and the entitlement every settled payment records.

use http::Extensions;
use x402_wire::SettleResponse;

use tower_x402::BoxFuture;
use tower_x402::payment::{
    Decision, HookStages, MissingPayment, PaymentContext, PaymentHooks, ProtectedRequest, Refusal,
    RefusalKind,
};
use tower_x402::pricing::{ExtensionTemplate, Offer};

use super::entitlement::{entitles, fixed_price, record_purchase};
use super::sign_in::SignInWithX;
use super::{EXTENSION, SIGN_IN_WITH_X};

/// Why a signed-in request carries no payment, for a handler that asks for one.
const SIGNED_IN_NOT_PAID: &str = "this request was signed in (sign-in-with-x) by a buyer who \
     paid before, so it carries no payment: behind a layer with sign-in a handler takes \
     `tower_x402_siwx::Buyer` (paid or signed in), or `Option<VerifiedPayment>` and \
     `Option<SignedIn>`";

/// Sign-in-with-x as a [lifecycle hook](PaymentHooks): register it with
/// [`Payments::hook`](tower_x402::payment::Payments::hook) on the core an `X402Layer` or
/// `PaidTools` (tower-x402's feature `mcp`; an
/// MCP tool call carries its proof in `_meta["sign-in-with-x"]`, and signs the tool's resource
/// URL as its URI). A granted request finds [`SignedIn`](crate::SignedIn) and a
/// [`MissingPayment`] in its extensions.
impl PaymentHooks for SignInWithX {
    /// The chains, the proof's schema and the first fields of `info`: the same in every 402 of
    /// `offer`.
    /// None for an offer that is not fixed-price only: sign-in never opens a metered or
    /// channel route.
    fn challenge_extension_template(&self, offer: &Offer) -> Option<ExtensionTemplate> {
        fixed_price(offer).then(|| ExtensionTemplate::new(EXTENSION, self.template(offer)))
    }

    /// The URI, a fresh nonce and the times.
    fn challenge_extension_rest(&self, request: &ProtectedRequest<'_>, rest: &mut Vec<u8>) -> bool {
        fixed_price(request.offer()) && self.write_rest(request.offer(), request.path(), rest)
    }

    /// A request that carries a proof to a fixed-price route, unless it is a HEAD (which never
    /// signs in, as it never pays): every other request goes on without a future built for it.
    /// On a metered or channel route a proof is not looked at: the request goes on to payment
    /// as if unsigned.
    fn considers_request(&self, request: &ProtectedRequest<'_>) -> bool {
        !request.is_head()
            && request.header_field(&SIGN_IN_WITH_X).is_some()
            && fixed_price(request.offer())
    }

    /// Signs in before any payment (`on_protected_request`, for the requests it considers),
    /// and records a purchase once its payment settled.
    fn stages(&self) -> HookStages {
        HookStages::REQUEST | HookStages::AFTER_SETTLE
    }

    fn on_protected_request<'a>(
        &'a self,
        request: &'a ProtectedRequest<'a>,
    ) -> BoxFuture<'a, Decision<Extensions>> {
        Box::pin(async move {
            // A HEAD never signs in, as it never pays.
            if request.is_head() {
                return Decision::Continue;
            }
            let Some(proof) = request.header_field(&SIGN_IN_WITH_X) else {
                return Decision::Continue;
            };
            // A metered or channel route is never served free: on to payment, as if unsigned.
            if !fixed_price(request.offer()) {
                return Decision::Continue;
            }
            match self.check(request.offer(), proof, request.path()).await {
                Ok(signed_in) => {
                    tracing::debug!(address = %signed_in.address(), resource = %signed_in.resource(), "signed in");
                    let mut extensions = Extensions::new();
                    extensions.insert(signed_in);
                    extensions.insert(MissingPayment::granted(SIGNED_IN_NOT_PAID));
                    Decision::Handled(extensions)
                }
                // The payment the request also carries decides.
                Err(rejection) if request.is_paying() => {
                    tracing::debug!(%rejection, "sign-in proof refused; the payment decides");
                    Decision::Continue
                }
                // The entitlements could not be read: the buyer may own this, so never a 402.
                Err(rejection) if rejection.is_unavailable() => {
                    tracing::debug!(%rejection, "sign-in proof not checked: entitlements unavailable");
                    Decision::Abort(Refusal::Hook {
                        kind: RefusalKind::RetrySamePayment,
                        reason: rejection.to_string(),
                    })
                }
                Err(rejection) => {
                    tracing::debug!(%rejection, "sign-in proof refused");
                    Decision::Abort(Refusal::Hook {
                        kind: RefusalKind::PaymentRequired,
                        reason: rejection.to_string(),
                    })
                }
            }
        })
    }

    /// Records the payer's entitlement to the resource the payment was made for, when it was a
    /// fixed-price (`exact`) payment settled for its full price: a metered (`upto`) or channel
    /// payment records none, whatever it was charged.
    fn after_settle<'a>(
        &'a self,
        payment: &'a PaymentContext<'a>,
        settlement: &'a SettleResponse,
    ) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            if !entitles(payment.offer, payment.request, settlement) {
                return;
            }
            let payer = settlement
                .payer
                .clone()
                .or_else(|| payment.request.payment_payload().payer());
            if let Some(payer) = payer {
                record_purchase(&self.store, payment.resource, payment.request, &payer).await;
            }
        })
    }
}
