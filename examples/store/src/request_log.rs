//! The request log: one span per request with its method, its URI with every secret query value
//! redacted (a fulfillment URL's `key` is a download credential), and its version; the status and
//! latency are logged when the response is ready (tower-http's `TraceLayer`).

use std::borrow::Cow;

use axum::http::{Request, Uri};
use tower_http::classify::{ServerErrorsAsFailures, SharedClassifier};
use tower_http::trace::{MakeSpan, TraceLayer};

/// Query parameters whose values never reach the log.
const SECRET_PARAMETERS: [&str; 4] = ["key", "token", "secret", "signature"];

/// What replaces a secret value.
const REDACTED: &str = "REDACTED";

/// The request log layer, with URIs redacted.
pub fn layer() -> TraceLayer<SharedClassifier<ServerErrorsAsFailures>, RedactedSpan> {
    TraceLayer::new_for_http().make_span_with(RedactedSpan)
}

/// Makes each request's span with its URI [`redacted`].
#[derive(Clone, Copy, Debug)]
pub struct RedactedSpan;

impl<B> MakeSpan<B> for RedactedSpan {
    fn make_span(&mut self, request: &Request<B>) -> tracing::Span {
        // tower-http's own target, so `RUST_LOG=tower_http=debug` shows it as before.
        tracing::debug_span!(
            target: "tower_http::trace::make_span",
            "request",
            method = %request.method(),
            uri = %redacted(request.uri()),
            version = ?request.version(),
        )
    }
}

/// `uri` with the value of every secret query parameter (`key`, `token`, `secret`,
/// `signature`, in any case) replaced by `REDACTED`.
///
/// ```
/// use axum::http::Uri;
/// use x402_store::request_log::redacted;
///
/// let uri: Uri = "/api/fulfillment/pp_1/a.txt?key=s3cret&x=1".parse().unwrap();
/// assert_eq!(redacted(&uri), "/api/fulfillment/pp_1/a.txt?key=REDACTED&x=1");
/// ```
pub fn redacted(uri: &Uri) -> Cow<'_, str> {
    let Some(query) = uri.query() else {
        return Cow::Borrowed(uri.path());
    };
    let parameters: Vec<String> = query
        .split('&')
        .map(|parameter| {
            let name = parameter.split('=').next().unwrap_or_default();
            if SECRET_PARAMETERS
                .iter()
                .any(|secret| name.eq_ignore_ascii_case(secret))
            {
                format!("{name}={REDACTED}")
            } else {
                parameter.to_owned()
            }
        })
        .collect();
    Cow::Owned(format!("{}?{}", uri.path(), parameters.join("&")))
}
