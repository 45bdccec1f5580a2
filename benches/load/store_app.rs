//! The store's own routes for the load benchmark: the example store in demo mode (the sandbox
//! facilitator, a fresh SQLite file), served in this process by the store's own server.

use std::path::Path;

use x402_store::app::app;
use x402_store::config::Config;
use x402_store::serve::serve;
use x402_store::state::build_state;

/// The store's routes the benchmark asks for.
pub(crate) struct StoreRoutes {
    /// The store's bare route: a free static asset (its stylesheet, 2.6 KB) whose handler only
    /// returns its bytes, through every layer of the store's stack and its own server.
    pub(crate) bare: &'static str,
    /// One SKU's paid route: asked unpaid, the store's 402 path.
    pub(crate) sku: String,
    /// The x402 discovery document.
    pub(crate) well_known: &'static str,
}

/// Starts the store on `listener` with its database in `dir`.
pub(crate) async fn start(
    listener: tokio::net::TcpListener,
    dir: &Path,
) -> Result<StoreRoutes, String> {
    let address = listener.local_addr().map_err(|error| error.to_string())?;
    let mut config = Config::for_tests(format!("sqlite://{}", dir.join("store.db").display()));
    config.listen = address;
    config.base_url = format!("http://{address}");
    let limits = config.limits;
    let state = build_state(config)
        .await
        .map_err(|error| format!("store: {error}"))?;
    let sku = state
        .catalog
        .iter()
        .next()
        .map(|sku| format!("/api/x402/{}", sku.slug))
        .ok_or("the store sells nothing")?;
    tokio::spawn(serve(listener, app(state), limits, std::future::pending()));
    Ok(StoreRoutes {
        bare: "/bazaar/style.css",
        sku,
        well_known: "/.well-known/x402.json",
    })
}
