//! The store's tests, one binary: `cargo test -p x402-store` (or `cargo test --workspace --all-features`).
//!
//! One file per surface; `support` builds the whole app over a fresh database. The tests listed in
//! each file's `on_both_backends!` run twice: on SQLite and on a throwaway PostgreSQL server
//! (`postgres_server`).

mod browser_bazaar;
mod browser_payments;
mod browser_storefront;
mod catalog_documents;
mod catalog_prices;
mod crash_recovery;
mod database_outage;
mod discovery_channels;
mod facilitators;
mod ledger_outage;
mod live_store;
mod mcp_protocol;
mod multi_instance;
mod operations;
mod orders_outage;
mod passport_errors;
mod paywall_browsers;
mod paywall_doors;
mod paywall_paths;
mod postgres_server;
mod purchase_flow;
mod referral_rules;
#[path = "../../../../tests/reliability/mod.rs"]
mod reliability_table;
mod sign_in;
mod sign_in_http;

mod reliability {
    //! RELIABILITY.md's store sections, checked (or rewritten) one test at a time: with
    //! `UPDATE_RELIABILITY` each rewrite reads and writes the whole file.

    use super::reliability_table as table;

    pub(crate) use table::Row;

    /// Checks the section `name` of `tests/RELIABILITY.md` against `rows`.
    pub(crate) fn check(name: &str, rows: &[Row]) {
        static FILE: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let _one_at_a_time = FILE
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        table::check_section(&root, name, rows);
    }
}
mod request_log;
mod restart_store;
mod reverse_proxy;
mod server_limits;
mod settlement_in_doubt;
mod shared_database;
mod soak;
mod sqlite_owner;
mod standing_funnel;
mod storage_atomic;
mod support;
