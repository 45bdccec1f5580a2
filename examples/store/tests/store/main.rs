//! The store's tests, one binary: `cargo test -p x402-store` (or `cargo test --workspace --all-features`).
//!
//! One file per surface; `support` builds the whole app over a fresh database, and every test
//! runs twice: on SQLite and on a throwaway PostgreSQL server (`postgres_server`).

mod browser_bazaar;
mod catalog_documents;
mod catalog_prices;
mod discovery_channels;
mod mcp_protocol;
mod passport_errors;
mod paywall_doors;
mod paywall_paths;
mod postgres_server;
mod purchase_flow;
mod referral_rules;
mod restart_store;
mod shared_database;
mod standing_funnel;
mod storage_atomic;
mod support;
