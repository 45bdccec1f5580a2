//! When a failed facilitator call is tried again, and how long to wait first.

use std::hash::{BuildHasher, RandomState};
use std::time::{Duration, UNIX_EPOCH};

use http::HeaderMap;
use http::header::RETRY_AFTER;

/// Bounded exponential backoff for the calls that are safe to repeat (`/verify`, `/supported`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct RetryPolicy {
    /// Attempts in total, the first included; at least 1.
    pub(super) max_attempts: u32,
    /// Wait before the second attempt; doubled for each further one.
    pub(super) base_delay: Duration,
    /// Longest wait between attempts, and the longest `Retry-After` that is honoured by waiting.
    pub(super) max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 3,
            base_delay: Duration::from_millis(200),
            max_delay: Duration::from_secs(2),
        }
    }
}

impl RetryPolicy {
    /// How long to wait after `failed_attempts` attempts failed, or `None` when the facilitator
    /// asked for a longer pause (`retry_after`) than this policy is willing to wait.
    pub(super) fn delay(
        &self,
        failed_attempts: u32,
        retry_after: Option<Duration>,
    ) -> Option<Duration> {
        if let Some(asked) = retry_after {
            return (asked <= self.max_delay).then_some(asked);
        }
        let doublings = failed_attempts.saturating_sub(1).min(16);
        let backoff = self
            .base_delay
            .saturating_mul(1 << doublings)
            .min(self.max_delay);
        Some(jitter(backoff))
    }
}

/// A random duration between half of `delay` and `delay`, so that many clients backing off at
/// once do not come back in lockstep.
fn jitter(delay: Duration) -> Duration {
    let half = delay / 2;
    let span = u64::try_from(half.as_nanos()).unwrap_or(u64::MAX);
    if span == 0 {
        return delay;
    }
    // `RandomState` is seeded randomly, so hashing a constant gives a fresh random number.
    let random = RandomState::new().hash_one(0u8);
    half + Duration::from_nanos(random % span)
}

/// The `Retry-After` of a response, as a wait from now: delay-seconds or an HTTP date.
pub(super) fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let value = headers.get(RETRY_AFTER)?.to_str().ok()?.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    let at = at.duration_since(UNIX_EPOCH).unwrap_or_default();
    Some(at.saturating_sub(x402_wire::unix_time()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_cap_with_jitter() {
        let policy = RetryPolicy::default();
        for (failed, full) in [
            (1, 200),
            (2, 400),
            (3, 800),
            (4, 1600),
            (5, 2000),
            (30, 2000),
        ] {
            let full = Duration::from_millis(full);
            let wait = policy.delay(failed, None).unwrap();
            assert!(wait >= full / 2 && wait <= full, "{failed}: {wait:?}");
        }
    }

    #[test]
    fn short_retry_after_is_honoured_and_long_one_ends_the_retries() {
        let policy = RetryPolicy::default();
        assert_eq!(
            policy.delay(1, Some(Duration::from_secs(1))),
            Some(Duration::from_secs(1))
        );
        assert_eq!(policy.delay(1, Some(Duration::ZERO)), Some(Duration::ZERO));
        assert_eq!(policy.delay(1, Some(Duration::from_secs(30))), None);
    }

    #[test]
    fn reads_retry_after_in_both_forms() {
        let mut headers = HeaderMap::new();
        assert_eq!(retry_after(&headers), None);
        headers.insert(RETRY_AFTER, "7".parse().unwrap());
        assert_eq!(retry_after(&headers), Some(Duration::from_secs(7)));
        headers.insert(
            RETRY_AFTER,
            "Sun, 06 Nov 1994 08:49:37 GMT".parse().unwrap(),
        );
        assert_eq!(
            retry_after(&headers),
            Some(Duration::ZERO),
            "a date in the past means now"
        );
        headers.insert(RETRY_AFTER, "soon".parse().unwrap());
        assert_eq!(retry_after(&headers), None);
    }

    #[test]
    fn parses_http_dates_exactly() {
        let parse_imf_fixdate = |value: &str| httpdate::parse_http_date(value).ok();
        let parsed = parse_imf_fixdate("Sun, 06 Nov 1994 08:49:37 GMT").unwrap();
        assert_eq!(
            parsed.duration_since(UNIX_EPOCH).unwrap().as_secs(),
            784_111_777
        );
        let leap = parse_imf_fixdate("Thu, 29 Feb 2024 00:00:00 GMT").unwrap();
        assert_eq!(
            leap.duration_since(UNIX_EPOCH).unwrap().as_secs(),
            1_709_164_800
        );
        // The obsolete RFC 850 form, which recipients must accept (RFC 9110, section 5.6.7).
        let obsolete = parse_imf_fixdate("Sunday, 06-Nov-94 08:49:37 GMT").unwrap();
        assert_eq!(obsolete, parsed);
        for bad in [
            "Sun, 06 Nov 1994 08:49:37 UTC",
            "Sun, 06 Foo 1994 08:49:37 GMT",
            "Sun, 06 Nov 1994 25:00:00 GMT",
        ] {
            assert_eq!(parse_imf_fixdate(bad), None, "{bad}");
        }
    }
}
