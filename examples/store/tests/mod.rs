//! The store's own tests, compiled into the example under `cargo test --example store`.
//!
//! One file per surface; `support` builds the whole app over a temporary SQLite database.
