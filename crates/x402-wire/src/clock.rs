//! [`unix_time`]: the one wall clock of the project's crates.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The time since the Unix epoch, as the wire's timestamps count it (an authorization's
/// `validBefore`, a permit's `deadline`, a sign-in's `issuedAt`); zero for a clock set before
/// the epoch. Every crate of the project reads the wall clock here, and takes the unit it needs
/// from the [`Duration`].
///
/// ```
/// let now = x402_wire::unix_time();
/// // After 2020-01-01, in seconds and in milliseconds.
/// assert!(now.as_secs() > 1_577_836_800);
/// assert!(now.as_millis() > 1_577_836_800_000);
/// ```
#[must_use]
pub fn unix_time() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
}
