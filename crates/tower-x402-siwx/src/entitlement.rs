//! Entitlements: the key a purchase is kept under, the lookup of a buyer's, and the
//! recording of a settled payment's.

use std::sync::Arc;
use std::time::Duration;

use x402_wire::{AtomicAmount, FacilitatorRequest};

use crate::store::EntitlementStore;
use crate::support::{normalise_address, unix_now};
use tower_x402::pricing::Offer;
use tower_x402::settlement::StoreError;

/// The key under which an entitlement to `resource` bought at `amount` (the atomic amount of
/// the accept the buyer signed, the maximum for `upto`) is kept:
/// `https://shop.example/report#amount=100000`. Two prices under one resource URL are two
/// entitlements, so a buyer of the cheaper one cannot sign in to the dearer one.
///
/// ```
/// use tower_x402_siwx::entitlement_key;
///
/// let key = entitlement_key("https://shop.example/report", &"100000".parse()?);
/// assert_eq!(key, "https://shop.example/report#amount=100000");
/// # Ok::<_, Box<dyn std::error::Error>>(())
/// ```
pub fn entitlement_key(resource: &str, amount: &AtomicAmount) -> String {
    format!("{resource}#amount={amount}")
}

/// When `address` last paid for `offer` at one of its prices (each distinct amount of its
/// accepts), or, for a purchase recorded before entitlements were keyed by price, for its
/// resource URL alone.
pub(crate) async fn last_entitlement(
    store: &dyn EntitlementStore,
    offer: &Offer,
    address: &str,
) -> Result<Option<u64>, StoreError> {
    let resource = &offer.resource().url;
    let mut latest = None;
    let accepts = offer.accepts();
    for (i, accept) in accepts.iter().enumerate() {
        if accepts[..i].iter().any(|seen| seen.amount == accept.amount) {
            continue;
        }
        let key = entitlement_key(resource, &accept.amount);
        latest = latest.max(store.last_purchase(&key, address).await?);
    }
    if latest.is_none() {
        latest = store.last_purchase(resource, address).await?;
    }
    Ok(latest)
}

/// The first pause before writing an entitlement again, doubled up to [`ENTITLEMENT_RETRY_MAX`].
pub(crate) const ENTITLEMENT_RETRY_FIRST: Duration = Duration::from_millis(100);
/// The longest pause between two attempts to write an entitlement the store did not take.
pub(crate) const ENTITLEMENT_RETRY_MAX: Duration = Duration::from_secs(5);

/// Records that `payer` paid for `resource` now, at the price of the accept `request`'s payment
/// signed ([`entitlement_key`]). A store that cannot take it now (its database is away) is sent
/// the same entitlement, with the time of the purchase, again in the background until it takes
/// it, so a buyer whose payment settled during an outage can sign in once the outage is over.
/// Recording is idempotent, so a write that did land before its error is harmless to repeat.
pub(crate) async fn record_purchase(
    store: &Arc<dyn EntitlementStore>,
    resource: &str,
    request: &FacilitatorRequest,
    payer: &str,
) {
    let key = entitlement_key(resource, &request.payment_payload().accepted.amount);
    record_entitlement(store, &key, payer).await;
}

/// Records that `payer` bought what `resource` (an [`entitlement_key`]) names, now; see
/// [`record_purchase`].
pub(crate) async fn record_entitlement(
    store: &Arc<dyn EntitlementStore>,
    resource: &str,
    payer: &str,
) {
    let address = normalise_address(payer);
    let at = unix_now();
    let Err(error) = store.record_purchase(resource, &address, at).await else {
        return;
    };
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        tracing::error!(%error, %resource, payer = %address, "entitlement could not be recorded and there is no runtime to write it again on: this payer cannot sign in for this resource");
        return;
    };
    tracing::warn!(%error, %resource, payer = %address, "entitlement could not be recorded yet; writing it again in the background until the store takes it");
    let (store, resource) = (Arc::clone(store), resource.to_owned());
    runtime.spawn(async move {
        let mut pause = ENTITLEMENT_RETRY_FIRST;
        loop {
            tokio::time::sleep(pause).await;
            match store.record_purchase(&resource, &address, at).await {
                Ok(()) => {
                    tracing::info!(%resource, payer = %address, "entitlement recorded");
                    return;
                }
                Err(error) => {
                    tracing::debug!(%error, %resource, payer = %address, "entitlement still not recorded");
                    pause = (pause * 2).min(ENTITLEMENT_RETRY_MAX);
                }
            }
        }
    });
}
