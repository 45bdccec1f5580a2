//! Entitlements: the key a purchase is kept under, the lookup of a buyer's, and the
//! recording of a settled payment's.

use std::sync::Arc;
use std::time::Duration;

use x402_wire::{AtomicAmount, FacilitatorRequest, SettleResponse};

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

/// The only scheme whose settlement entitles its payer to sign in: a fixed price, paid whole.
const FIXED_PRICE: &str = "exact";

/// Whether sign-in may open `offer`: it sells at a fixed price only (every accept `exact`). A
/// metered (`upto`) or channel (`batch-settlement`) offer charges for the work each request
/// does, so a signed-in request there is not served: it goes on to payment as if unsigned.
pub(crate) fn fixed_price(offer: &Offer) -> bool {
    let accepts = offer.accepts();
    !accepts.is_empty() && accepts.iter().all(|accept| accept.scheme == FIXED_PRICE)
}

/// Whether the payment `request`, settled as `settlement` for `offer`, entitles its payer: a
/// fixed-price (`exact`) payment of a fixed-price offer, settled for the full amount it signed.
/// A metered or channel payment never does, whatever it was charged.
pub(crate) fn entitles(
    offer: &Offer,
    request: &FacilitatorRequest,
    settlement: &SettleResponse,
) -> bool {
    let accepted = &request.payment_payload().accepted;
    settlement.success
        && accepted.scheme == FIXED_PRICE
        && fixed_price(offer)
        && settlement
            .amount
            .as_ref()
            .is_none_or(|amount| *amount == accepted.amount)
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

#[cfg(test)]
mod tests {
    use serde_json::json;
    use tower_x402::pricing::Offer;
    use x402_wire::{FacilitatorRequest, PaymentPayload, SettleResponse};

    use super::{entitles, fixed_price};

    fn offer(scheme: &str) -> Offer {
        let accept = json!({
            "scheme": scheme, "network": "eip155:8453", "amount": "10000",
            "asset": "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913",
            "payTo": "0x209693Bc6afc0C5328bA36FaF03C514EF312287C", "maxTimeoutSeconds": 60,
            "extra": {"name": "USD Coin", "version": "2",
                      "facilitatorAddress": "0x4e59b44847b379578588920cA78FbF26c0B4956C"}
        });
        Offer::builder(x402_wire::ResourceInfo::new("https://shop.example/report"))
            .accept(serde_json::from_value(accept).unwrap())
            .build()
            .unwrap()
    }

    fn paid(offer: &Offer, settled: Option<&str>) -> (FacilitatorRequest, SettleResponse) {
        let accepted = offer.accepts()[0].clone();
        let payload: PaymentPayload = serde_json::from_value(json!({
            "x402Version": 2, "accepted": accepted, "payload": {}
        }))
        .unwrap();
        let request = FacilitatorRequest::new(payload, accepted);
        let mut settlement: SettleResponse = serde_json::from_value(json!({
            "success": true, "transaction": "0x01", "network": "eip155:8453",
            "payer": "0x218a004E3BF3267e875A3efE4008213A04fE31B0"
        }))
        .unwrap();
        settlement.amount = settled.map(|amount| amount.parse().unwrap());
        (request, settlement)
    }

    #[test]
    fn only_a_fixed_price_payment_settled_whole_entitles() {
        let exact = offer("exact");
        assert!(fixed_price(&exact));
        for settled in [None, Some("10000")] {
            let (request, settlement) = paid(&exact, settled);
            assert!(entitles(&exact, &request, &settlement), "{settled:?}");
        }
        let (request, settlement) = paid(&exact, Some("100"));
        assert!(
            !entitles(&exact, &request, &settlement),
            "a part of the price"
        );

        for scheme in ["upto", "batch-settlement"] {
            let metered = offer(scheme);
            assert!(!fixed_price(&metered), "{scheme}");
            for settled in [None, Some("10000"), Some("100")] {
                let (request, settlement) = paid(&metered, settled);
                assert!(
                    !entitles(&metered, &request, &settlement),
                    "{scheme} {settled:?}"
                );
            }
        }
    }
}
