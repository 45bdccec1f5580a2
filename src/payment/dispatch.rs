//! The hooks registered on a core ([`Hooks`]), asked in order, each at the stages it takes part
//! in, with the challenges their extension templates splice kept with the offer.

use std::any::Any;
use std::sync::Arc;

use http::Extensions;
use serde_json::Map;
use serde_json::value::RawValue;
use x402_wire::{SettleResponse, VerifyResponse};

use super::context::PaymentContext;
use super::decision::{Considering, Decision, Opening, Prelude};
use super::event::PaymentEvent;
use super::hooks::PaymentHooks;
use super::missing::MissingPayment;
use super::refusal::Refusal;
use super::request::ProtectedRequest;
use super::stages::HookStages;
use super::verified::VerifiedPayment;
use crate::facilitator::FacilitatorError;
use crate::pricing::{Cached, Offer, header_budget, with_rest_buffer};

/// The hooks registered on a core, asked in order.
#[derive(Clone)]
pub(crate) struct Hooks {
    list: Vec<Arc<dyn PaymentHooks>>,
    /// Each hook again, as the owner of the challenges its template prebuilt (kept with the
    /// offers), in the same order.
    owners: Vec<Arc<dyn Any + Send + Sync>>,
    /// Each hook's [`PaymentHooks::stages`], in the same order.
    stages: Vec<HookStages>,
    /// Every stage some hook declared.
    declared: HookStages,
}

/// What a hook's extension template made of a request's offer.
enum Spliced {
    /// The offer with the extension spliced in.
    Offer(Offer),
    /// The hook adds nothing to this 402.
    Nothing,
    /// The hook has no usable template for this offer.
    NoTemplate,
}

/// The request's offer with `hook`'s templated extension, its challenge prebuilt up to the
/// template on the offer's first 402 and kept with the offer.
fn spliced(
    hook: &Arc<dyn PaymentHooks>,
    owner: &Arc<dyn Any + Send + Sync>,
    request: &ProtectedRequest<'_>,
) -> Spliced {
    let offer = request.offer();
    let Some(splices) = offer.splices() else {
        return Spliced::NoTemplate;
    };
    let (prebuilt, first) = match splices.get(Arc::as_ptr(hook).cast()) {
        Cached::Prebuilt(prebuilt) => (prebuilt, false),
        Cached::None => return Spliced::NoTemplate,
        Cached::Unknown => {
            let prebuilt = hook
                .challenge_extension_template(offer)
                .and_then(|template| offer.prebuild(&template))
                .map(Arc::new);
            match prebuilt {
                Some(prebuilt) => (prebuilt, true),
                None => {
                    splices.put(Arc::downgrade(owner), None);
                    return Spliced::NoTemplate;
                }
            }
        }
    };
    let extended = with_rest_buffer(|rest| {
        hook.challenge_extension_rest(request, rest)
            .then(|| offer.with_spliced(&prebuilt, rest))
    });
    let Some(extended) = extended else {
        return Spliced::Nothing;
    };
    if first {
        // The template and its first rest, checked once as the whole challenge.
        let valid = extended.as_ref().is_some_and(|extended| {
            serde_json::from_slice::<x402_wire::PaymentRequired>(extended.challenge_body()).is_ok()
        });
        if !valid {
            tracing::warn!(key = %prebuilt.key(), "a hook's challenge extension template does not make JSON; encoded whole instead");
        }
        splices.put(Arc::downgrade(owner), valid.then_some(prebuilt));
        if !valid {
            return Spliced::NoTemplate;
        }
    }
    match extended {
        Some(offer) => Spliced::Offer(offer),
        None => Spliced::Nothing,
    }
}

/// `hook`'s extension for this 402 as one JSON value: its template and rest joined, or what
/// [`PaymentHooks::challenge_extension`] gives.
fn extension_whole(
    hook: &Arc<dyn PaymentHooks>,
    request: &ProtectedRequest<'_>,
) -> Option<(String, Box<RawValue>)> {
    let Some(template) = hook.challenge_extension_template(request.offer()) else {
        return hook.challenge_extension(request);
    };
    let mut rest = Vec::new();
    if !hook.challenge_extension_rest(request, &mut rest) {
        return None;
    }
    let mut text = template.head().as_bytes().to_vec();
    text.extend_from_slice(&rest);
    let value = String::from_utf8(text)
        .ok()
        .and_then(|text| RawValue::from_string(text).ok());
    if value.is_none() {
        tracing::warn!(key = %template.key(), "a hook's challenge extension template does not make JSON; left out");
    }
    Some((template.key().to_owned(), value?))
}

impl Default for Hooks {
    fn default() -> Self {
        Self {
            list: Vec::new(),
            owners: Vec::new(),
            stages: Vec::new(),
            declared: HookStages::NONE,
        }
    }
}

impl Hooks {
    /// Registers `hook`, given twice: as the hook, and as the owner of its prebuilt challenges.
    pub(super) fn push(&mut self, hook: Arc<dyn PaymentHooks>, owner: Arc<dyn Any + Send + Sync>) {
        let stages = hook.stages();
        self.list.push(hook);
        self.owners.push(owner);
        self.stages.push(stages);
        self.declared |= stages;
    }

    /// Whether some hook takes part in `stage`: the core builds no future for it otherwise.
    #[inline]
    pub(crate) fn take_part(&self, stage: HookStages) -> bool {
        self.declared.contains(stage)
    }

    /// The hooks that take part in `stage`, in order.
    fn at(&self, stage: HookStages) -> impl Iterator<Item = &Arc<dyn PaymentHooks>> {
        self.list
            .iter()
            .zip(&self.stages)
            .filter(move |(_, stages)| stages.contains(stage))
            .map(|(hook, _)| hook)
    }

    /// Whether no hook is registered: the synchronous calls are skipped then (the asynchronous
    /// stages ask [`take_part`](Self::take_part)).
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    pub(super) fn len(&self) -> usize {
        self.list.len()
    }

    /// The hooks' part of a priced request that needs no waiting: its challenge's extensions,
    /// and whether a hook [considers](PaymentHooks::considers_request) the request.
    pub(super) fn open(&self, request: &ProtectedRequest<'_>) -> Opening {
        let offer = self
            .decorate(request)
            .unwrap_or_else(|| Arc::clone(request.offer));
        let decorated = request.with_offer(&offer);
        if !self.take_part(HookStages::REQUEST) {
            return Opening::Continue(offer);
        }
        match self
            .at(HookStages::REQUEST)
            .position(|hook| hook.considers_request(&decorated))
        {
            Some(first) => Opening::Ask(offer, Considering(first)),
            None => Opening::Continue(offer),
        }
    }

    /// The decision of the hooks that consider `request` (priced with the offer
    /// [`open`](Self::open) gave).
    pub(super) async fn decide(
        &self,
        request: &ProtectedRequest<'_>,
        considering: Considering,
    ) -> Prelude {
        let offer = request.offer;
        match self.on_protected_request(request, considering).await {
            Decision::Handled(mut extensions) => {
                // Every grant says so: the work learns how the request got in, never a 500.
                if extensions.get::<MissingPayment>().is_none() {
                    extensions.insert(MissingPayment::HOOK_GRANT);
                }
                Prelude::Granted(extensions)
            }
            Decision::Abort(refusal) => Prelude::Refused(Arc::clone(offer), refusal),
            Decision::Continue => Prelude::Continue(Arc::clone(offer)),
        }
    }

    async fn on_protected_request(
        &self,
        request: &ProtectedRequest<'_>,
        Considering(first): Considering,
    ) -> Decision<Extensions> {
        for (index, hook) in self.at(HookStages::REQUEST).enumerate().skip(first) {
            if index > first && !hook.considers_request(request) {
                continue;
            }
            match hook.on_protected_request(request).await {
                Decision::Continue => {}
                decided => return decided,
            }
        }
        Decision::Continue
    }

    /// `offer` with every hook's challenge extension, or `None` when no hook adds one.
    fn decorate(&self, request: &ProtectedRequest<'_>) -> Option<Arc<Offer>> {
        let mut decorated: Option<Offer> = None;
        for (hook, owner) in self.list.iter().zip(&self.owners) {
            if decorated.is_none() {
                match spliced(hook, owner, request) {
                    Spliced::Offer(offer) => {
                        decorated = Some(offer);
                        continue;
                    }
                    Spliced::Nothing => continue,
                    Spliced::NoTemplate => {}
                }
            }
            if let Some((key, value)) = extension_whole(hook, request) {
                let base = decorated.as_ref().unwrap_or(request.offer());
                match base.with_extension(&key, value) {
                    Some(offer) => decorated = Some(offer),
                    None => {
                        tracing::warn!(%key, "a hook's challenge extension could not be encoded; left out")
                    }
                }
            }
        }
        let decorated = decorated?;
        header_budget::check(
            request.offer().resource_url(),
            decorated.challenge_header().len(),
            " with its per-request extensions",
        );
        Some(Arc::new(decorated))
    }

    pub(super) async fn before_verify(
        &self,
        payment: &PaymentContext<'_>,
    ) -> Decision<VerifyResponse> {
        for hook in self.at(HookStages::BEFORE_VERIFY) {
            match hook.before_verify(payment).await {
                Decision::Continue => {}
                decided => return decided,
            }
        }
        Decision::Continue
    }

    pub(super) async fn on_verify_failure(
        &self,
        payment: &PaymentContext<'_>,
        failure: Result<&VerifyResponse, &FacilitatorError>,
    ) -> Option<VerifyResponse> {
        for hook in self.at(HookStages::VERIFY_FAILURE) {
            if let Some(verified) = hook.on_verify_failure(payment, failure).await
                && verified.is_valid
            {
                return Some(verified);
            }
        }
        None
    }

    pub(super) async fn after_verify(&self, payment: &VerifiedPayment) -> Result<(), Refusal> {
        for hook in self.at(HookStages::AFTER_VERIFY) {
            hook.after_verify(payment).await?;
        }
        Ok(())
    }

    pub(super) async fn before_settle(
        &self,
        payment: &PaymentContext<'_>,
    ) -> Decision<SettleResponse> {
        for hook in self.at(HookStages::BEFORE_SETTLE) {
            match hook.before_settle(payment).await {
                Decision::Continue => {}
                decided => return decided,
            }
        }
        Decision::Continue
    }

    /// The hooks' `extensions` added to `settlement`.
    pub(super) fn enrich(&self, payment: &PaymentContext<'_>, settlement: &mut SettleResponse) {
        for hook in &self.list {
            if let Some(extensions) = hook.settlement_extensions(payment, settlement) {
                settlement
                    .extensions
                    .get_or_insert_with(Map::new)
                    .extend(extensions);
            }
        }
    }

    pub(super) async fn after_settle(
        &self,
        payment: &PaymentContext<'_>,
        settlement: &SettleResponse,
    ) {
        for hook in self.at(HookStages::AFTER_SETTLE) {
            hook.after_settle(payment, settlement).await;
        }
    }

    /// Tells every hook of `event` ([`PaymentHooks::observe`]).
    pub(super) fn observe(&self, event: &PaymentEvent<'_>) {
        for hook in &self.list {
            hook.observe(event);
        }
    }
}

impl std::fmt::Debug for Hooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hooks")
            .field("count", &self.list.len())
            .finish()
    }
}
