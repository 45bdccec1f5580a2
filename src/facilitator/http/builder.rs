//! [`HttpFacilitatorBuilder`]: timeouts, retries, caching and authentication of the client.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use http::{HeaderMap, HeaderName, HeaderValue};
use reqwest::Url;

use super::auth::Auth;
use super::retry::RetryPolicy;
use super::supported_cache::SupportedCache;
use super::{EndpointUrls, HttpFacilitator, Inner};
use crate::boxed::BoxError;
use crate::facilitator::Endpoint;

/// Why an [`HttpFacilitator`] could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FacilitatorConfigError {
    /// The base URL does not parse.
    #[error("facilitator URL `{url}` is not a valid URL: {reason}")]
    InvalidUrl {
        /// The URL as given.
        url: String,
        /// What the parser said.
        reason: String,
    },
    /// The base URL parses but cannot serve as a facilitator base: not absolute `http(s)`, or it
    /// carries credentials, a query or a fragment (send credentials as headers instead).
    #[error(
        "facilitator URL must be an absolute http(s) URL without credentials, query or fragment: {reason}"
    )]
    UnsupportedUrl {
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A header name or value given to the builder is not valid HTTP.
    #[error("invalid facilitator header: {0}")]
    InvalidHeader(#[source] http::Error),
    /// The HTTP client could not be created (e.g. the TLS backend failed to initialise).
    #[error("could not create the facilitator HTTP client: {0}")]
    Client(#[source] reqwest::Error),
}

/// How long each endpoint may take, retries included.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Timeouts {
    pub(super) connect: Duration,
    pub(super) verify: Duration,
    pub(super) settle: Duration,
    pub(super) supported: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Self {
            connect: Duration::from_secs(5),
            verify: Duration::from_secs(10),
            // Settlement waits for the transaction to be included in a block.
            settle: Duration::from_secs(60),
            supported: Duration::from_secs(10),
        }
    }
}

impl Timeouts {
    pub(super) fn for_endpoint(&self, endpoint: Endpoint) -> Duration {
        match endpoint {
            Endpoint::Verify => self.verify,
            Endpoint::Settle => self.settle,
            Endpoint::Supported => self.supported,
        }
    }
}

/// How long `/supported` answers are kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct CachePolicy {
    pub(super) ttl: Duration,
    pub(super) failure_backoff: Duration,
}

impl Default for CachePolicy {
    fn default() -> Self {
        Self {
            ttl: Duration::from_secs(600),
            failure_backoff: Duration::from_secs(5),
        }
    }
}

/// Configures an [`HttpFacilitator`]; created by [`HttpFacilitator::builder`].
///
/// ```
/// use std::time::Duration;
/// use tower_x402::HttpFacilitator;
///
/// let facilitator = HttpFacilitator::builder("https://x402.org/facilitator")
///     .verify_timeout(Duration::from_secs(5))
///     .supported_ttl(Duration::from_secs(60))
///     .bearer("my-token")
///     .build()?;
/// assert!(!format!("{facilitator:?}").contains("my-token"));
/// # Ok::<_, tower_x402::facilitator::FacilitatorConfigError>(())
/// ```
#[must_use]
pub struct HttpFacilitatorBuilder {
    base_url: String,
    timeouts: Timeouts,
    retry: RetryPolicy,
    cache: CachePolicy,
    auth: Auth,
    client: Option<reqwest::Client>,
    /// `Some(true)`: HTTP/2 only; `Some(false)`: HTTP/1.1 only; `None`: reqwest's default.
    http2: Option<bool>,
    /// The first invalid header given, reported by `build`.
    header_error: Option<http::Error>,
}

impl HttpFacilitatorBuilder {
    pub(super) fn new(base_url: String) -> Self {
        Self {
            base_url,
            timeouts: Timeouts::default(),
            retry: RetryPolicy::default(),
            cache: CachePolicy::default(),
            auth: Auth::default(),
            client: None,
            http2: None,
            header_error: None,
        }
    }

    /// Longest time to establish a connection (default 5 s). Not applied to a client given with
    /// [`reqwest_client`](Self::reqwest_client).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.timeouts.connect = timeout;
        self
    }

    /// Longest time a `/verify` call may take, retries included (default 10 s).
    /// `Duration::MAX` sets no deadline: the call waits as long as the facilitator takes.
    pub fn verify_timeout(mut self, timeout: Duration) -> Self {
        self.timeouts.verify = timeout;
        self
    }

    /// Longest time a `/settle` call may take (default 60 s: settlement waits for a block).
    /// `Duration::MAX` sets no deadline: the call waits as long as the facilitator takes.
    pub fn settle_timeout(mut self, timeout: Duration) -> Self {
        self.timeouts.settle = timeout;
        self
    }

    /// Longest time a `/supported` fetch may take, retries included (default 10 s).
    /// `Duration::MAX` sets no deadline: the call waits as long as the facilitator takes.
    pub fn supported_timeout(mut self, timeout: Duration) -> Self {
        self.timeouts.supported = timeout;
        self
    }

    /// How long a `/supported` answer is served from the cache before it is refreshed (default
    /// 10 min). Once expired it is still served while one background request refreshes it.
    pub fn supported_ttl(mut self, ttl: Duration) -> Self {
        self.cache.ttl = ttl;
        self
    }

    /// After a failed `/supported` fetch, how long the failure is remembered (default 5 s): with
    /// no good copy, callers get the same error for that long instead of each asking again;
    /// with a stale copy, it is served and no refresh is attempted for that long.
    pub fn supported_failure_backoff(mut self, backoff: Duration) -> Self {
        self.cache.failure_backoff = backoff;
        self
    }

    /// Attempts in total for `/verify` and `/supported` (default 3; `1` turns retries off). Only
    /// connection failures, 429 and 5xx answers are retried. `/settle` is never retried: a
    /// second attempt could charge twice.
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.retry.max_attempts = attempts.max(1);
        self
    }

    /// Wait before the first retry, doubled for each further one (default 200 ms), with jitter.
    pub fn retry_base_delay(mut self, delay: Duration) -> Self {
        self.retry.base_delay = delay;
        self
    }

    /// Longest wait between attempts (default 2 s). A `Retry-After` longer than this is not
    /// waited for: the call fails at once and reports it.
    pub fn max_retry_delay(mut self, delay: Duration) -> Self {
        self.retry.max_delay = delay;
        self
    }

    /// Sends `name: value` on every call. An invalid name or value makes
    /// [`build`](Self::build) fail.
    pub fn header<K, V>(self, name: K, value: V) -> Self
    where
        HeaderName: TryFrom<K>,
        <HeaderName as TryFrom<K>>::Error: Into<http::Error>,
        HeaderValue: TryFrom<V>,
        <HeaderValue as TryFrom<V>>::Error: Into<http::Error>,
    {
        self.add_header(None, name, value)
    }

    /// Sends `name: value` on calls to `endpoint` only.
    pub fn endpoint_header<K, V>(self, endpoint: Endpoint, name: K, value: V) -> Self
    where
        HeaderName: TryFrom<K>,
        <HeaderName as TryFrom<K>>::Error: Into<http::Error>,
        HeaderValue: TryFrom<V>,
        <HeaderValue as TryFrom<V>>::Error: Into<http::Error>,
    {
        self.add_header(Some(endpoint), name, value)
    }

    /// Sends `Authorization: Bearer <token>` on every call.
    pub fn bearer(self, token: impl fmt::Display) -> Self {
        self.header(http::header::AUTHORIZATION, format!("Bearer {token}"))
    }

    /// Produces headers for every call with `provider`, e.g. a JWT minted per request as the
    /// Coinbase CDP facilitator requires: a closure given the [`Endpoint`] called, answering
    /// the headers (or an error). It is called once per attempt, so a retried `/verify` gets
    /// fresh credentials. Its headers are added to the fixed ones and win on a name clash. If
    /// it fails, the call fails with [`FacilitatorError::Auth`](crate::FacilitatorError::Auth)
    /// and nothing is sent.
    ///
    /// ```
    /// use http::HeaderMap;
    /// use tower_x402::HttpFacilitator;
    /// use tower_x402::BoxError;
    /// use tower_x402::facilitator::Endpoint;
    ///
    /// fn mint_jwt(path: &str) -> Result<String, BoxError> {
    ///     Ok(format!("token-for-{path}"))
    /// }
    ///
    /// let facilitator = HttpFacilitator::builder("https://api.cdp.coinbase.com/platform/v2/x402")
    ///     .auth(|endpoint: Endpoint| async move {
    ///         let jwt = mint_jwt(&format!("/platform/v2/x402/{}", endpoint.path()))?;
    ///         let mut headers = HeaderMap::new();
    ///         headers.insert(http::header::AUTHORIZATION, format!("Bearer {jwt}").parse()?);
    ///         Ok::<_, BoxError>(headers)
    ///     })
    ///     .build()?;
    /// # Ok::<_, tower_x402::facilitator::FacilitatorConfigError>(())
    /// ```
    pub fn auth<F, Fut, E>(mut self, provider: F) -> Self
    where
        F: Fn(Endpoint) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<HeaderMap, E>> + Send + 'static,
        E: Into<BoxError>,
    {
        self.auth.provider = Some(Arc::new(provider));
        self
    }

    /// Sends the calls through `client` instead of one built here, e.g. to use a proxy or extra
    /// root certificates. Its own settings apply, redirect policy included;
    /// [`connect_timeout`](Self::connect_timeout) does not. The per-endpoint timeouts still do.
    pub fn reqwest_client(mut self, client: reqwest::Client) -> Self {
        self.client = Some(client);
        self
    }

    /// Speaks HTTP/2 to the facilitator (`true`) or HTTP/1.1 only (`false`). Not applied to a
    /// client given with [`reqwest_client`](Self::reqwest_client).
    ///
    /// By default an `https://` facilitator is offered both through ALPN and picks one, and an
    /// `http://` one is spoken to in HTTP/1.1. With `http2(true)`, an `http://` facilitator is
    /// spoken to in HTTP/2 from the first byte (prior knowledge, h2c: the facilitator must
    /// support it) and an `https://` one is still asked through ALPN, which falls back to
    /// HTTP/1.1 when the facilitator does not offer h2. Over HTTP/2 every call shares one
    /// multiplexed connection, so bursts of calls open no further connections.
    pub fn http2(mut self, enabled: bool) -> Self {
        self.http2 = Some(enabled);
        self
    }

    /// Builds the client.
    ///
    /// # Errors
    ///
    /// When the base URL is not an absolute `http(s)` URL (or carries credentials, a query or a
    /// fragment), when a header given to the builder is invalid, or when the HTTP client cannot
    /// be created.
    pub fn build(self) -> Result<HttpFacilitator, FacilitatorConfigError> {
        if let Some(error) = self.header_error {
            return Err(FacilitatorConfigError::InvalidHeader(error));
        }
        let base = parse_base_url(&self.base_url)?;
        let client = match self.client {
            Some(client) => client,
            None => client_builder(&self.timeouts, self.http2, base.scheme() == "http")
                .build()
                .map_err(FacilitatorConfigError::Client)?,
        };
        Ok(HttpFacilitator {
            inner: Arc::new(Inner {
                urls: EndpointUrls::new(&base),
                base,
                client,
                timeouts: self.timeouts,
                retry: self.retry,
                auth: self.auth,
                supported: Arc::new(SupportedCache::new(
                    self.cache.ttl,
                    self.cache.failure_backoff,
                )),
            }),
        })
    }

    fn add_header<K, V>(mut self, endpoint: Option<Endpoint>, name: K, value: V) -> Self
    where
        HeaderName: TryFrom<K>,
        <HeaderName as TryFrom<K>>::Error: Into<http::Error>,
        HeaderValue: TryFrom<V>,
        <HeaderValue as TryFrom<V>>::Error: Into<http::Error>,
    {
        let parsed = HeaderName::try_from(name)
            .map_err(Into::into)
            .and_then(|name| Ok((name, HeaderValue::try_from(value).map_err(Into::into)?)));
        match parsed {
            Ok((name, value)) => match endpoint {
                None => self.auth.fixed.insert(name, value),
                Some(endpoint) => self.auth.fixed.insert_for(endpoint, name, value),
            },
            Err(error) => {
                self.header_error.get_or_insert(error);
                return self;
            }
        };
        self
    }
}

impl fmt::Debug for HttpFacilitatorBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpFacilitatorBuilder")
            .field("base_url", &self.base_url)
            .field("timeouts", &self.timeouts)
            .field("retry", &self.retry)
            .field("cache", &self.cache)
            .field("auth", &self.auth)
            .field("custom_client", &self.client.is_some())
            .field("http2", &self.http2)
            .finish()
    }
}

/// How long an idle pooled connection is kept: longer than the gaps between payments on a
/// quiet server, shorter than the idle timeouts of common load balancers (60–350 s).
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(55);
/// TCP keep-alive probes on facilitator connections, so that a connection dropped by a
/// middlebox is noticed before a payment is sent on it.
const TCP_KEEPALIVE: Duration = Duration::from_secs(30);

/// The client built when none is given: connect timeout, user agent, redirect policy, pooling,
/// and the HTTP version (see [`HttpFacilitatorBuilder::http2`]).
fn client_builder(
    timeouts: &Timeouts,
    http2: Option<bool>,
    cleartext: bool,
) -> reqwest::ClientBuilder {
    let builder = reqwest::Client::builder()
        .connect_timeout(timeouts.connect)
        .user_agent(concat!("tower-x402/", env!("CARGO_PKG_VERSION")))
        .redirect(super::redirect::policy())
        .tcp_nodelay(true)
        .tcp_keepalive(TCP_KEEPALIVE)
        .pool_idle_timeout(POOL_IDLE_TIMEOUT);
    match http2 {
        Some(true) if cleartext => builder.http2_prior_knowledge(),
        Some(true) | None => builder,
        Some(false) => builder.http1_only(),
    }
}

/// Parses and checks a facilitator base URL.
fn parse_base_url(text: &str) -> Result<Url, FacilitatorConfigError> {
    let unsupported = |reason| Err(FacilitatorConfigError::UnsupportedUrl { reason });
    let url = match Url::parse(text) {
        Ok(url) => url,
        // Relative URLs and the like; the text is echoed so the mistake can be found.
        Err(error) => {
            return Err(FacilitatorConfigError::InvalidUrl {
                url: text.to_owned(),
                reason: error.to_string(),
            });
        }
    };
    if !matches!(url.scheme(), "http" | "https") {
        return unsupported("the scheme is not http or https");
    }
    if url.host_str().is_none_or(str::is_empty) {
        return unsupported("it has no host");
    }
    if !url.username().is_empty() || url.password().is_some() {
        return unsupported("it carries credentials");
    }
    if url.query().is_some() || url.fragment().is_some() {
        return unsupported("it has a query or fragment");
    }
    Ok(url)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_http_and_https_bases_only() {
        for ok in [
            "https://x402.org/facilitator",
            "https://x402.org/facilitator/",
            "http://127.0.0.1:8080",
            "https://api.cdp.coinbase.com/platform/v2/x402",
        ] {
            assert!(parse_base_url(ok).is_ok(), "{ok}");
        }
        for bad in [
            "x402.org/facilitator",
            "/facilitator",
            "",
            "ftp://x402.org",
            "file:///tmp/x",
            "https://user:pw@x402.org",
            "https://x402.org/f?key=1",
            "https://x402.org/f#frag",
            "mailto:a@b.c",
        ] {
            assert!(parse_base_url(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn credentials_in_the_url_are_not_echoed() {
        let error = parse_base_url("https://user:hunter2@x402.org").unwrap_err();
        assert!(!error.to_string().contains("hunter2"), "{error}");
    }

    #[test]
    fn an_invalid_header_fails_the_build() {
        let error = HttpFacilitatorBuilder::new("https://x402.org/facilitator".into())
            .header("bad header", "value")
            .build()
            .unwrap_err();
        assert!(
            matches!(error, FacilitatorConfigError::InvalidHeader(_)),
            "{error}"
        );
        let error = HttpFacilitatorBuilder::new("https://x402.org/facilitator".into())
            .bearer("line\nbreak")
            .build()
            .unwrap_err();
        assert!(
            matches!(error, FacilitatorConfigError::InvalidHeader(_)),
            "{error}"
        );
    }

    #[test]
    fn config_error_is_a_sendable_std_error() {
        fn assert_error<E: std::error::Error + Send + Sync + 'static>() {}
        assert_error::<FacilitatorConfigError>();
    }
}
