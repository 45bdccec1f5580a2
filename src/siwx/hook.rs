//! Sign-in as a lifecycle hook of the payment core, written against the crate's public API
//! alone: the challenge extension of every 402, the proof that grants a request without
//! payment, and the entitlement every settled payment records.

use http::Extensions;
use serde_json::value::RawValue;
use x402_wire::SettleResponse;

use super::{EXTENSION, SIGN_IN_WITH_X, SignInWithX, record_purchase};
use crate::boxed::BoxFuture;
use crate::payment::{
    PaymentContext, PaymentHooks, Payments, ProtectedRequest, Refusal, RefusalKind, RequestDecision,
};

/// Sign-in-with-x as a [lifecycle hook](PaymentHooks): register it on the
/// [`Payments`](crate::payment::Payments) of a layer or of
/// `PaidTools` (feature `mcp`) (an MCP tool call carries its proof in
/// `_meta["sign-in-with-x"]`, and signs the tool's resource URL as its URI).
impl PaymentHooks for SignInWithX {
    fn challenge_extension(
        &self,
        request: &ProtectedRequest<'_>,
    ) -> Option<(String, Box<RawValue>)> {
        let challenge = self.challenge(request.offer(), request.path())?;
        Some((EXTENSION.to_owned(), challenge))
    }

    fn on_protected_request<'a>(
        &'a self,
        request: &'a ProtectedRequest<'a>,
    ) -> BoxFuture<'a, RequestDecision> {
        Box::pin(async move {
            // A HEAD never signs in, as it never pays.
            if request.is_head() {
                return RequestDecision::Continue;
            }
            let Some(proof) = request.field(SIGN_IN_WITH_X.as_str()) else {
                return RequestDecision::Continue;
            };
            match self.check(request.offer(), proof, request.path()).await {
                Ok(signed_in) => {
                    tracing::debug!(address = %signed_in.address(), resource = %signed_in.resource(), "signed in");
                    let mut extensions = Extensions::new();
                    extensions.insert(signed_in);
                    RequestDecision::Grant(extensions)
                }
                // The payment the request also carries decides.
                Err(rejection) if request.is_paying() => {
                    tracing::debug!(%rejection, "sign-in proof refused; the payment decides");
                    RequestDecision::Continue
                }
                // The entitlements could not be read: the buyer may own this, so never a 402.
                Err(rejection) if rejection.is_unavailable() => {
                    tracing::debug!(%rejection, "sign-in proof not checked: entitlements unavailable");
                    RequestDecision::Abort(Refusal::Hook {
                        kind: RefusalKind::RetrySamePayment,
                        reason: rejection.to_string(),
                    })
                }
                Err(rejection) => {
                    tracing::debug!(%rejection, "sign-in proof refused");
                    RequestDecision::Abort(Refusal::Hook {
                        kind: RefusalKind::PaymentRequired,
                        reason: rejection.to_string(),
                    })
                }
            }
        })
    }

    /// Records the payer's entitlement to the resource the payment was made for.
    fn after_settle<'a>(
        &'a self,
        payment: &'a PaymentContext<'a>,
        settlement: &'a SettleResponse,
    ) -> BoxFuture<'a, ()> {
        Box::pin(async move {
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

impl Payments {
    /// Turns on sign-in-with-x ([`siwx`](crate::siwx), feature `siwx`): every 402 carries a
    /// sign-in challenge; a request whose `SIGN-IN-WITH-X` proof comes from a wallet that paid
    /// for the resource is served without payment and without calling the facilitator (the
    /// inner service finds [`SignedIn`](crate::siwx::SignedIn) in its extensions); every
    /// payment this core settles records its payer's entitlement in `siwx`'s store. The same
    /// as registering `siwx` as a [hook](Payments::hook).
    #[cfg_attr(docsrs, doc(cfg(feature = "siwx")))]
    pub fn sign_in_with_x(self, siwx: SignInWithX) -> Self {
        self.hook(siwx)
    }
}
