//! Time as the sandbox sees it: unix seconds from a replaceable source.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// A source of the current time in unix seconds.
pub(crate) type Clock = Arc<dyn Fn() -> u64 + Send + Sync>;

/// The system clock; a clock set before 1970 reads as 0.
pub(crate) fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_secs())
}

/// [`unix_now`] as a [`Clock`].
pub(crate) fn system_clock() -> Clock {
    Arc::new(unix_now)
}
