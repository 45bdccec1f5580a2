//! The memory store against the `ChannelStore` contract.

use std::sync::Arc;

use tower_x402_channels::{MemoryChannelStore, check_conformance};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_memory_store_conforms() {
    let store = Arc::new(MemoryChannelStore::default());
    check_conformance(store.clone()).await;
    // Again on the same store: fresh ids, the channels of the first run left alone.
    check_conformance(store).await;
}
