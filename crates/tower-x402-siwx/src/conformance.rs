//! The [`EntitlementStore`] contract as a test any implementation can run.
//!
//! ```
//! use std::sync::Arc;
//! use tower_x402_siwx::{MemoryEntitlementStore, check_conformance};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! check_conformance(Arc::new(MemoryEntitlementStore::default())).await;
//! # }
//! ```

use std::sync::Arc;

use super::store::EntitlementStore;
use super::support::unix_now;

/// How many tasks race for one nonce.
const RACERS: usize = 16;

/// Runs every check of the [`EntitlementStore`] contract against `store`, panicking with the
/// broken rule on the first violation. Uses fresh resources, addresses and nonces on every
/// call, so it can run against a database that already holds data.
///
/// Checks: an unknown (resource, address) has no purchase; a recorded purchase is answered for
/// exactly that resource and address (another resource, another address, or the address in
/// another case find nothing); a later purchase moves the time forward and an earlier one never
/// moves it back; a nonce is consumed once, and of concurrent consumptions of one nonce exactly
/// one succeeds; different nonces do not interfere.
pub async fn check(store: Arc<dyn EntitlementStore>) {
    let run = format!("{:x}{:08x}", unix_now(), rand::random::<u32>());
    let resource = format!("https://conformance.example/{run}/a");
    let other_resource = format!("https://conformance.example/{run}/b");
    let address = format!("0x{run:0>40}");
    let other_address = format!("0x{:0>40}", format!("{run}f"));

    let last = |resource: &str, address: &str| {
        let (store, resource, address) =
            (Arc::clone(&store), resource.to_owned(), address.to_owned());
        async move {
            store
                .last_purchase(&resource, &address)
                .await
                .expect("last_purchase failed")
        }
    };

    assert_eq!(
        last(&resource, &address).await,
        None,
        "an unknown purchase must be absent"
    );
    store
        .record_purchase(&resource, &address, 1_000)
        .await
        .expect("record_purchase failed");
    assert_eq!(
        last(&resource, &address).await,
        Some(1_000),
        "a recorded purchase must be found"
    );
    assert_eq!(
        last(&other_resource, &address).await,
        None,
        "a purchase of one resource must not entitle to another"
    );
    assert_eq!(
        last(&resource, &other_address).await,
        None,
        "a purchase by one address must not entitle another"
    );
    let shouted = address.replace("0x", "0X").to_uppercase();
    assert_eq!(
        last(&resource, &shouted).await,
        None,
        "addresses are compared exactly (the layer normalises them)"
    );
    store
        .record_purchase(&resource, &address, 2_000)
        .await
        .expect("record_purchase failed");
    assert_eq!(
        last(&resource, &address).await,
        Some(2_000),
        "a later purchase must move the time forward"
    );
    store
        .record_purchase(&resource, &address, 1_500)
        .await
        .expect("record_purchase failed");
    assert_eq!(
        last(&resource, &address).await,
        Some(2_000),
        "an earlier purchase must not move the time back"
    );

    let expires = unix_now() + 600;
    let nonce = format!("conformance{run}n1");
    assert!(
        store
            .consume_nonce(&nonce, expires)
            .await
            .expect("consume_nonce failed"),
        "a fresh nonce must be consumable"
    );
    assert!(
        !store
            .consume_nonce(&nonce, expires)
            .await
            .expect("consume_nonce failed"),
        "a consumed nonce must not be consumable again"
    );
    let other = format!("conformance{run}n2");
    assert!(
        store
            .consume_nonce(&other, expires)
            .await
            .expect("consume_nonce failed"),
        "another nonce must not be affected"
    );

    let raced = format!("conformance{run}n3");
    let racers: Vec<_> = (0..RACERS)
        .map(|_| {
            let (store, raced) = (Arc::clone(&store), raced.clone());
            tokio::spawn(async move { store.consume_nonce(&raced, expires).await })
        })
        .collect();
    let mut winners = 0;
    for racer in racers {
        if racer
            .await
            .expect("racer panicked")
            .expect("consume_nonce failed")
        {
            winners += 1;
        }
    }
    assert_eq!(
        winners, 1,
        "of concurrent consumptions of one nonce, exactly one must succeed"
    );
}
