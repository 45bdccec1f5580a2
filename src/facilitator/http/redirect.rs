//! Which redirects a facilitator call follows.
//!
//! Redirects within one site are followed, since the default facilitator itself redirects
//! (`x402.org` → `www.x402.org`). Redirects elsewhere are not: the HTTP client drops only
//! `Authorization` when the host changes, and custom auth headers (an API key) must not reach
//! another site. An unfollowed redirect comes back as its 3xx status.

use reqwest::Url;
use reqwest::redirect::{Attempt, Policy};

/// Most redirects followed in one call.
const MAX_REDIRECTS: usize = 5;

/// The client's redirect policy.
pub(super) fn policy() -> Policy {
    Policy::custom(|attempt: Attempt<'_>| {
        let allowed = attempt.previous().len() <= MAX_REDIRECTS
            && attempt
                .previous()
                .last()
                .is_some_and(|from| same_site(from, attempt.url()));
        if allowed {
            attempt.follow()
        } else {
            attempt.stop()
        }
    })
}

/// Whether `to` is on the site of `from`: no downgrade from https, and the same host or one
/// domain inside the other (`x402.org` and `www.x402.org`).
fn same_site(from: &Url, to: &Url) -> bool {
    if from.scheme() == "https" && to.scheme() != "https" {
        return false;
    }
    let same_port = from.port_or_known_default() == to.port_or_known_default();
    let upgrade = from.scheme() == "http" && to.scheme() == "https";
    let default_ports = from.port().is_none() && to.port().is_none();
    if from.host_str() == to.host_str() && (same_port || (upgrade && default_ports)) {
        return true;
    }
    // Only names nest; IP addresses must be equal.
    match (from.domain(), to.domain()) {
        (Some(a), Some(b)) => {
            let inside = |inner: &str, outer: &str| {
                inner
                    .strip_suffix(outer)
                    .is_some_and(|rest| rest.ends_with('.'))
            };
            inside(a, b) || inside(b, a)
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(from: &str, to: &str) -> bool {
        same_site(&from.parse().unwrap(), &to.parse().unwrap())
    }

    #[test]
    fn follows_within_a_site_only() {
        assert!(check(
            "https://x402.org/facilitator/verify",
            "https://www.x402.org/facilitator/verify"
        ));
        assert!(check("https://www.x402.org/a", "https://x402.org/b"));
        assert!(check("http://127.0.0.1:4021/a", "http://127.0.0.1:4021/b"));
        assert!(
            check("http://x402.org/a", "https://x402.org/a"),
            "an upgrade is fine"
        );

        assert!(
            !check("https://x402.org/a", "http://x402.org/a"),
            "no downgrade"
        );
        assert!(!check("https://x402.org/a", "https://evil.example/a"));
        assert!(!check("https://x402.org/a", "https://notx402.org/a"));
        assert!(!check("http://127.0.0.1:4021/a", "http://127.0.0.1:4022/a"));
        assert!(!check("http://127.0.0.1/a", "http://localhost/a"));
        assert!(!check("http://10.0.0.1/a", "http://0.1/a"));
    }
}
