//! Authentication headers for facilitator calls: fixed ones, and ones produced per request.

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use http::{HeaderMap, HeaderName, HeaderValue};

use crate::boxed::{BoxError, BoxFuture};
use crate::facilitator::Endpoint;

/// Fixed headers sent to a facilitator: some on every call, some on one endpoint only (set with
/// [`HttpFacilitatorBuilder::header`](super::HttpFacilitatorBuilder::header) and
/// [`endpoint_header`](super::HttpFacilitatorBuilder::endpoint_header)).
///
/// Every value is marked [sensitive](HeaderValue::set_sensitive), and `Debug` shows header names
/// only, never values.
#[derive(Clone, Default)]
pub(crate) struct AuthHeaders {
    all: HeaderMap,
    verify: HeaderMap,
    settle: HeaderMap,
    supported: HeaderMap,
}

impl AuthHeaders {
    /// Sends `name: value` on every call, replacing an earlier value for `name`.
    pub(crate) fn insert(&mut self, name: HeaderName, value: HeaderValue) -> &mut Self {
        self.all.insert(name, sensitive(value));
        self
    }

    /// Sends `name: value` on calls to `endpoint` only; it wins over an [`insert`](Self::insert)ed
    /// value of the same name.
    pub(crate) fn insert_for(
        &mut self,
        endpoint: Endpoint,
        name: HeaderName,
        value: HeaderValue,
    ) -> &mut Self {
        self.endpoint_mut(endpoint).insert(name, sensitive(value));
        self
    }

    /// The headers a call to `endpoint` carries.
    pub(crate) fn for_endpoint(&self, endpoint: Endpoint) -> HeaderMap {
        let mut headers = self.all.clone();
        merge(&mut headers, self.endpoint(endpoint).clone());
        headers
    }

    /// Whether no header is set for any endpoint.
    pub(crate) fn is_empty(&self) -> bool {
        self.all.is_empty()
            && self.verify.is_empty()
            && self.settle.is_empty()
            && self.supported.is_empty()
    }

    fn endpoint(&self, endpoint: Endpoint) -> &HeaderMap {
        match endpoint {
            Endpoint::Verify => &self.verify,
            Endpoint::Settle => &self.settle,
            Endpoint::Supported => &self.supported,
        }
    }

    fn endpoint_mut(&mut self, endpoint: Endpoint) -> &mut HeaderMap {
        match endpoint {
            Endpoint::Verify => &mut self.verify,
            Endpoint::Settle => &mut self.settle,
            Endpoint::Supported => &mut self.supported,
        }
    }
}

impl fmt::Debug for AuthHeaders {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AuthHeaders")
            .field("all", &Names(&self.all))
            .field("verify", &Names(&self.verify))
            .field("settle", &Names(&self.settle))
            .field("supported", &Names(&self.supported))
            .finish()
    }
}

/// Header names of a map, for `Debug` output without the values.
struct Names<'a>(&'a HeaderMap);

impl fmt::Debug for Names<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.0.keys()).finish()
    }
}

/// Produces auth headers for each facilitator call: the closure given to
/// [`HttpFacilitatorBuilder::auth`](super::HttpFacilitatorBuilder::auth), behind a trait object.
pub(super) trait AuthProvider: Send + Sync + 'static {
    /// The headers for one call to `endpoint`.
    fn headers(&self, endpoint: Endpoint) -> BoxFuture<'_, Result<HeaderMap, BoxError>>;
}

impl<F, Fut, E> AuthProvider for F
where
    F: Fn(Endpoint) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<HeaderMap, E>> + Send + 'static,
    E: Into<BoxError>,
{
    fn headers(&self, endpoint: Endpoint) -> BoxFuture<'_, Result<HeaderMap, BoxError>> {
        let headers = self(endpoint);
        Box::pin(async move { headers.await.map_err(Into::into) })
    }
}

/// Everything a call authenticates with: the fixed headers and the optional provider.
#[derive(Clone, Default)]
pub(super) struct Auth {
    pub(super) fixed: AuthHeaders,
    pub(super) provider: Option<Arc<dyn AuthProvider>>,
}

impl Auth {
    /// Whether no call carries any auth header (no fixed header, no provider).
    pub(super) fn is_empty(&self) -> bool {
        self.fixed.is_empty() && self.provider.is_none()
    }

    /// The headers for one attempt at `endpoint`.
    pub(super) async fn headers(&self, endpoint: Endpoint) -> Result<HeaderMap, BoxError> {
        let mut headers = self.fixed.for_endpoint(endpoint);
        if let Some(provider) = &self.provider {
            let mut produced = provider.headers(endpoint).await?;
            for value in produced.values_mut() {
                value.set_sensitive(true);
            }
            merge(&mut headers, produced);
        }
        Ok(headers)
    }
}

impl fmt::Debug for Auth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Auth")
            .field("fixed", &self.fixed)
            .field("provider", &self.provider.as_ref().map(|_| "<per-request>"))
            .finish()
    }
}

/// Adds `extra` to `headers`; a name present in both keeps only `extra`'s values.
fn merge(headers: &mut HeaderMap, extra: HeaderMap) {
    // `Extend<(Option<HeaderName>, _)>` replaces every earlier value of a name it meets.
    headers.extend(extra);
}

fn sensitive(mut value: HeaderValue) -> HeaderValue {
    value.set_sensitive(true);
    value
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(s: &'static str) -> HeaderName {
        HeaderName::from_static(s)
    }

    #[test]
    fn common_headers_go_everywhere_and_endpoint_ones_to_their_endpoint() {
        let mut headers = AuthHeaders::default();
        headers.insert(name("x-api-key"), HeaderValue::from_static("secret"));
        headers.insert_for(
            Endpoint::Settle,
            name("x-settle-key"),
            HeaderValue::from_static("other"),
        );

        assert_eq!(headers.for_endpoint(Endpoint::Verify).len(), 1);
        assert_eq!(headers.for_endpoint(Endpoint::Settle).len(), 2);
        assert!(!format!("{headers:?}").contains("secret"));
    }

    #[test]
    fn endpoint_headers_override_common_ones() {
        let mut headers = AuthHeaders::default();
        headers
            .insert(name("x-key"), HeaderValue::from_static("common"))
            .insert_for(
                Endpoint::Settle,
                name("x-key"),
                HeaderValue::from_static("settle"),
            );
        assert_eq!(headers.for_endpoint(Endpoint::Verify)["x-key"], "common");
        let settle = headers.for_endpoint(Endpoint::Settle);
        assert_eq!(
            settle.get_all("x-key").iter().collect::<Vec<_>>(),
            ["settle"]
        );
        assert!(settle["x-key"].is_sensitive());
    }

    #[tokio::test]
    async fn provider_headers_win_and_are_marked_sensitive() {
        let mut fixed = AuthHeaders::default();
        fixed.insert(
            http::header::AUTHORIZATION,
            HeaderValue::from_static("Bearer fixed"),
        );
        let auth = Auth {
            fixed,
            provider: Some(Arc::new(|endpoint: Endpoint| async move {
                let mut headers = HeaderMap::new();
                let token = format!("Bearer minted-for-{}", endpoint.path());
                headers.insert(http::header::AUTHORIZATION, token.parse()?);
                Ok::<_, BoxError>(headers)
            })),
        };
        let headers = auth.headers(Endpoint::Verify).await.unwrap();
        assert_eq!(
            headers.get_all(http::header::AUTHORIZATION).iter().count(),
            1
        );
        assert_eq!(
            headers[http::header::AUTHORIZATION],
            "Bearer minted-for-verify"
        );
        assert!(headers[http::header::AUTHORIZATION].is_sensitive());
    }

    #[test]
    fn debug_shows_names_but_never_values() {
        let mut fixed = AuthHeaders::default();
        fixed.insert_for(
            Endpoint::Verify,
            name("x-api-key"),
            HeaderValue::from_static("hunter2"),
        );
        let auth = Auth {
            fixed,
            provider: Some(Arc::new(|_: Endpoint| async {
                Ok::<_, BoxError>(HeaderMap::new())
            })),
        };
        let shown = format!("{auth:?}");
        assert!(
            shown.contains("x-api-key") && shown.contains("per-request"),
            "{shown}"
        );
        assert!(!shown.contains("hunter2"), "{shown}");
    }
}
