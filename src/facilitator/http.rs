//! [`HttpFacilitator`]: the facilitator client over HTTP.

use std::sync::Arc;
use std::time::Duration;

use crate::proto::{SettleRequest, SettleResponse, SupportedResponse, VerifyRequest, VerifyResponse};

use super::{BoxFuture, Endpoint, Facilitator, FacilitatorError};

/// Auth headers for one facilitator call (placeholder, completed below).
pub type AuthHeaders = http::HeaderMap;

/// A facilitator reached over HTTP.
#[derive(Clone, Debug)]
pub struct HttpFacilitator {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    base: String,
    client: reqwest::Client,
}

/// Builds an [`HttpFacilitator`].
#[derive(Debug)]
pub struct HttpFacilitatorBuilder {
    base: String,
}

impl HttpFacilitator {
    /// A client for the facilitator at `base_url`.
    ///
    /// # Errors
    ///
    /// When the URL is not absolute http(s).
    pub fn new(base_url: impl Into<String>) -> Result<Self, FacilitatorError> {
        Self::builder(base_url).build()
    }

    /// Starts configuring a client.
    pub fn builder(base_url: impl Into<String>) -> HttpFacilitatorBuilder {
        HttpFacilitatorBuilder { base: base_url.into() }
    }

    async fn post<T: serde::de::DeserializeOwned>(&self, endpoint: Endpoint, body: &VerifyRequest) -> Result<T, FacilitatorError> {
        let url = format!("{}/{}", self.inner.base, endpoint.path());
        let response = self.inner.client.post(url).json(body).timeout(Duration::from_secs(10)).send().await.map_err(|e| FacilitatorError::Unreachable { endpoint, source: Box::new(e) })?;
        response.json().await.map_err(|e| FacilitatorError::Malformed { endpoint, message: e.to_string() })
    }
}

impl HttpFacilitatorBuilder {
    /// Builds the client.
    ///
    /// # Errors
    ///
    /// When the URL is not absolute http(s).
    pub fn build(self) -> Result<HttpFacilitator, FacilitatorError> {
        Ok(HttpFacilitator {
            inner: Arc::new(Inner {
                base: self.base.trim_end_matches('/').to_owned(),
                client: reqwest::Client::new(),
            }),
        })
    }
}

impl Facilitator for HttpFacilitator {
    fn verify<'a>(&'a self, request: &'a VerifyRequest) -> BoxFuture<'a, Result<VerifyResponse, FacilitatorError>> {
        Box::pin(self.post(Endpoint::Verify, request))
    }

    fn settle<'a>(&'a self, request: &'a SettleRequest) -> BoxFuture<'a, Result<SettleResponse, FacilitatorError>> {
        Box::pin(self.post(Endpoint::Settle, request))
    }

    fn supported(&self) -> BoxFuture<'_, Result<Arc<SupportedResponse>, FacilitatorError>> {
        Box::pin(async move {
            let url = format!("{}/supported", self.inner.base);
            let endpoint = Endpoint::Supported;
            let response = self.inner.client.get(url).send().await.map_err(|e| FacilitatorError::Unreachable { endpoint, source: Box::new(e) })?;
            response.json().await.map(Arc::new).map_err(|e| FacilitatorError::Malformed { endpoint, message: e.to_string() })
        })
    }
}
