//! The store's tests, one binary: `cargo test -p x402-store` (or `cargo test --workspace --all-features`).
//!
//! One file per surface; `support` builds the whole app over a temporary SQLite database.

mod browser_bazaar;
mod browser_payments;
mod browser_storefront;
mod catalog_documents;
mod catalog_prices;
mod crash_recovery;
mod discovery_channels;
mod mcp_protocol;
mod passport_errors;
mod paywall_browsers;
mod paywall_doors;
mod paywall_paths;
mod purchase_flow;
mod referral_rules;
mod request_log;
mod restart_store;
mod server_limits;
mod settlement_in_doubt;
mod soak;
mod standing_funnel;
mod storage_atomic;
mod support;
