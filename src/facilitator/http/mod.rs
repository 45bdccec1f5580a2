//! [`HttpFacilitator`]: the facilitator client over HTTP (reqwest, rustls).

mod auth;
mod builder;
mod redirect;
mod retry;
mod supported_cache;
mod transport;

use std::fmt;
use std::sync::Arc;

use reqwest::Url;
use x402_wire::{FacilitatorRequest, SettleResponse, SupportedResponse, VerifyResponse};

use self::builder::Timeouts;
pub use self::builder::{FacilitatorConfigError, HttpFacilitatorBuilder};
use self::retry::RetryPolicy;
use self::supported_cache::SupportedCache;
use super::{Endpoint, Facilitator, FacilitatorError};
use crate::boxed::BoxFuture;

/// A facilitator reached over HTTP.
///
/// Cheap to clone: every clone shares one pooled `reqwest` client (rustls) and the `/supported`
/// cache (see [`HttpFacilitatorBuilder::supported_ttl`]). Each endpoint has its own deadline
/// covering the whole call, retries included (connect 5 s, `/verify` 10 s, `/settle` 60 s,
/// `/supported` 10 s); `/verify` and `/supported` are retried with bounded, jittered exponential
/// backoff on connection failures, 429 and 5xx, and `/settle` is never retried. Redirects are
/// followed within the facilitator's own site only (`x402.org` → `www.x402.org`), so that auth
/// headers never reach another site. Calls log `tracing` debug events with endpoint, status and
/// latency, never headers.
///
/// # Errors
///
/// A negative answer (`isValid: false`, `success: false`) is `Ok`, also when it arrives with an
/// error status such as 400. Everything else is a [`FacilitatorError`]:
///
/// | What happened | Error | Layer answers |
/// |---|---|---|
/// | no connection (refused, DNS, TLS, reset) | [`Unreachable`](FacilitatorError::Unreachable) | 503 |
/// | no answer before the deadline | [`TimedOut`](FacilitatorError::TimedOut) | 503 |
/// | 429, 502, 503, 504 without an answer body | [`Status`](FacilitatorError::Status) | 503 |
/// | any other non-2xx without an answer body | [`Status`](FacilitatorError::Status) | 502 |
/// | 2xx whose body is not the expected object | [`Malformed`](FacilitatorError::Malformed) | 502 |
/// | the auth provider failed (nothing was sent) | [`Auth`](FacilitatorError::Auth) | 502 |
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use tower_x402::HttpFacilitator;
///
/// // Both spellings reach `https://x402.org/facilitator/verify` and so on.
/// let facilitator = HttpFacilitator::new("https://x402.org/facilitator/")?;
/// assert_eq!(facilitator.base_url(), "https://x402.org/facilitator/");
///
/// let cdp = HttpFacilitator::builder("https://api.cdp.coinbase.com/platform/v2/x402")
///     .settle_timeout(Duration::from_secs(90))
///     .bearer("token")
///     .build()?;
/// # let _ = cdp;
/// # Ok::<_, tower_x402::facilitator::FacilitatorConfigError>(())
/// ```
#[derive(Clone)]
pub struct HttpFacilitator {
    inner: Arc<Inner>,
}

struct Inner {
    base: Url,
    urls: EndpointUrls,
    client: reqwest::Client,
    timeouts: Timeouts,
    retry: RetryPolicy,
    auth: auth::Auth,
    supported: Arc<SupportedCache<SupportedResponse>>,
}

/// The full URL of each endpoint, worked out once.
struct EndpointUrls {
    verify: Url,
    settle: Url,
    supported: Url,
}

impl EndpointUrls {
    /// Appends each endpoint's path to `base`, whether or not it ends with a slash.
    fn new(base: &Url) -> Self {
        let join = |endpoint: Endpoint| {
            let mut url = base.clone();
            let path = format!("{}/{}", base.path().trim_end_matches('/'), endpoint.path());
            url.set_path(&path);
            url
        };
        Self {
            verify: join(Endpoint::Verify),
            settle: join(Endpoint::Settle),
            supported: join(Endpoint::Supported),
        }
    }

    fn get(&self, endpoint: Endpoint) -> &Url {
        match endpoint {
            Endpoint::Verify => &self.verify,
            Endpoint::Settle => &self.settle,
            Endpoint::Supported => &self.supported,
        }
    }
}

impl HttpFacilitator {
    /// A client for the facilitator at `base_url` with the default settings.
    ///
    /// # Errors
    ///
    /// When the URL is not an absolute `http(s)` URL; see [`HttpFacilitatorBuilder::build`].
    pub fn new(base_url: impl Into<String>) -> Result<Self, FacilitatorConfigError> {
        Self::builder(base_url).build()
    }

    /// Starts configuring a client for the facilitator at `base_url`.
    pub fn builder(base_url: impl Into<String>) -> HttpFacilitatorBuilder {
        HttpFacilitatorBuilder::new(base_url.into())
    }

    /// The base URL, as parsed.
    pub fn base_url(&self) -> &str {
        self.inner.base.as_str()
    }

    /// The URL a call to `endpoint` goes to.
    pub fn endpoint_url(&self, endpoint: Endpoint) -> &str {
        self.inner.urls.get(endpoint).as_str()
    }
}

impl Inner {
    /// Sends `request` to `endpoint`: its JSON, encoded once for every call that sends it.
    async fn post<T: serde::de::DeserializeOwned>(
        &self,
        endpoint: Endpoint,
        request: &FacilitatorRequest,
    ) -> Result<T, FacilitatorError> {
        let body = request
            .json()
            .map_err(|error| FacilitatorError::Malformed {
                endpoint,
                // Unreachable in practice: the request types always serialize.
                message: format!("the request could not be encoded: {error}"),
            })?;
        self.call(endpoint, Some(body)).await
    }
}

impl Facilitator for HttpFacilitator {
    fn verify<'a>(
        &'a self,
        request: &'a FacilitatorRequest,
    ) -> BoxFuture<'a, Result<VerifyResponse, FacilitatorError>> {
        Box::pin(self.inner.post(Endpoint::Verify, request))
    }

    fn settle<'a>(
        &'a self,
        request: &'a FacilitatorRequest,
    ) -> BoxFuture<'a, Result<SettleResponse, FacilitatorError>> {
        Box::pin(self.inner.post(Endpoint::Settle, request))
    }

    fn supported(&self) -> BoxFuture<'_, Result<Arc<SupportedResponse>, FacilitatorError>> {
        let inner = Arc::clone(&self.inner);
        Box::pin(async move {
            let fetcher = Arc::clone(&inner);
            let fetch = move || async move { fetcher.call(Endpoint::Supported, None).await };
            inner.supported.get(fetch).await
        })
    }
}

impl fmt::Debug for HttpFacilitator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let inner = &self.inner;
        f.debug_struct("HttpFacilitator")
            .field("base_url", &inner.base.as_str())
            .field("timeouts", &inner.timeouts)
            .field("retry", &inner.retry)
            .field("auth", &inner.auth)
            .field("supported", &inner.supported)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_urls_keep_the_base_path() {
        for (base, verify) in [
            (
                "https://x402.org/facilitator",
                "https://x402.org/facilitator/verify",
            ),
            (
                "https://x402.org/facilitator/",
                "https://x402.org/facilitator/verify",
            ),
            ("https://x402.org", "https://x402.org/verify"),
            ("https://x402.org/", "https://x402.org/verify"),
            (
                "https://api.cdp.coinbase.com/platform/v2/x402",
                "https://api.cdp.coinbase.com/platform/v2/x402/verify",
            ),
        ] {
            let facilitator = HttpFacilitator::new(base).unwrap();
            assert_eq!(facilitator.endpoint_url(Endpoint::Verify), verify, "{base}");
        }
        let facilitator = HttpFacilitator::new("http://127.0.0.1:4021/x402//").unwrap();
        assert_eq!(
            facilitator.endpoint_url(Endpoint::Supported),
            "http://127.0.0.1:4021/x402/supported"
        );
        assert_eq!(
            facilitator.endpoint_url(Endpoint::Settle),
            "http://127.0.0.1:4021/x402/settle"
        );
    }
}
