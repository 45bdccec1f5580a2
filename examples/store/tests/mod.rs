//! The store's own tests, compiled into the example under `cargo test --example store`.
//!
//! One file per surface; `support` builds the whole app over a temporary SQLite database.

mod passport_errors;
mod purchase_flow;
mod purchase_support;
mod referral_rules;
mod restart_store;
mod standing_funnel;
mod storage_atomic;
