//! The store's own tests, compiled into the example under `cargo test --example store`.
//!
//! One file per surface; `support` builds the whole app over a temporary SQLite database.

mod browser_bazaar;
mod catalog_documents;
mod catalog_prices;
mod discovery_channels;
mod mcp_protocol;
mod passport_errors;
mod paywall_doors;
mod paywall_paths;
mod purchase_flow;
mod purchase_support;
mod referral_rules;
mod restart_store;
mod standing_funnel;
mod storage_atomic;
mod support;
