//! The body of a request that carries a payment: read and hashed before the payment is used,
//! so that the payment buys this body and no other
//! ([`RequestDigest`](crate::payment::RequestDigest)).
//!
//! Only a priced request with a `PAYMENT-SIGNATURE` and a body is read; every other request
//! (bodiless `GET`s, challenges, free routes) reaches the handler untouched, its body never
//! polled by the layer. The read is bounded by [`X402Layer::max_paid_body`](super::X402Layer::max_paid_body).

use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::{Buf, Bytes, BytesMut};
use http::{Method, StatusCode};
use http_body::Body;
use sha2::{Digest as _, Sha256};
use x402_wire::PAYMENT_SIGNATURE;

use crate::payment::RequestDigest;

/// What the layer knows of a paid request's body, for its digest.
#[derive(Debug)]
pub(super) enum BodySeen {
    /// Read whole: the SHA-256 of its bytes.
    Hashed([u8; 32]),
    /// Declared larger than the bound, and not read.
    Unread,
}

impl BodySeen {
    /// What was seen of `bytes`, read whole: nothing for an empty body (the same request as
    /// one without a body).
    pub(super) fn of(bytes: &[u8]) -> Option<Self> {
        (!bytes.is_empty()).then(|| Self::Hashed(Sha256::digest(bytes).into()))
    }

    /// The digest of the request `method` `uri` with this body.
    pub(super) fn digest(&self, method: &Method, uri: &http::Uri) -> RequestDigest {
        match self {
            Self::Hashed(sha256) => RequestDigest::http_with_body_hash(method, uri, sha256),
            Self::Unread => RequestDigest::http_unread_body(method, uri),
        }
    }
}

/// What the layer does with a priced request's body before the payment is used.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Plan {
    /// Nothing: no payment, no body, or a `HEAD` (never paid).
    Untouched,
    /// Declared larger than the bound: handed on unread, its payment delivered once.
    Unread,
    /// Read and hashed before the payment is used.
    Read,
}

/// The plan for `body`, of a priced request with `parts`, under the bound `limit`.
#[inline]
pub(super) fn plan<B: Body>(parts: &http::request::Parts, body: &B, limit: usize) -> Plan {
    // Checked first, as the cheapest: a bodiless request is never looked at further.
    if body.is_end_stream() || body.size_hint().exact() == Some(0) {
        return Plan::Untouched;
    }
    if parts.method == Method::HEAD || !parts.headers.contains_key(PAYMENT_SIGNATURE) {
        return Plan::Untouched;
    }
    let limit = u64::try_from(limit).unwrap_or(u64::MAX);
    if body.size_hint().lower() > limit {
        Plan::Unread
    } else {
        Plan::Read
    }
}

/// Why a paid request's body was refused before anything was verified.
#[derive(Debug)]
pub(super) enum Unreadable {
    /// It grew past the bound without declaring its length.
    TooLarge(usize),
    /// The client's body failed (a connection reset, a malformed chunk).
    Failed,
}

impl Unreadable {
    /// The status the refusal is answered with.
    pub(super) fn status(&self) -> StatusCode {
        match self {
            Self::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            Self::Failed => StatusCode::BAD_REQUEST,
        }
    }

    /// The refusal's JSON `error`.
    pub(super) fn message(&self) -> String {
        match self {
            Self::TooLarge(limit) => format!(
                "the body of a paid request is read before the payment is used, and this one \
                 grew past {limit} bytes without declaring its length: send it with a \
                 Content-Length; nothing was verified or charged"
            ),
            Self::Failed => {
                "the request body could not be read; nothing was verified or charged".to_owned()
            }
        }
    }
}

/// Reads `body` into `bytes` until it ends (`Ok`), fails, or grows past `limit`. Trailers are
/// dropped.
pub(super) fn poll_read<B: Body>(
    mut body: Pin<&mut B>,
    bytes: &mut BytesMut,
    limit: usize,
    cx: &mut Context<'_>,
) -> Poll<Result<(), Unreadable>> {
    loop {
        match ready!(body.as_mut().poll_frame(cx)) {
            None => return Poll::Ready(Ok(())),
            Some(Err(_)) => return Poll::Ready(Err(Unreadable::Failed)),
            Some(Ok(frame)) => {
                let Ok(mut data) = frame.into_data() else {
                    continue;
                };
                if bytes.len().saturating_add(data.remaining()) > limit {
                    return Poll::Ready(Err(Unreadable::TooLarge(limit)));
                }
                while data.has_remaining() {
                    let chunk = data.chunk();
                    bytes.extend_from_slice(chunk);
                    let read = chunk.len();
                    data.advance(read);
                }
            }
        }
    }
}

/// The bytes read, frozen for the handler.
pub(super) fn freeze(bytes: BytesMut) -> Bytes {
    bytes.freeze()
}

#[cfg(test)]
mod tests {
    use http_body::Frame;
    use http_body_util::Full;

    use super::*;

    /// One chunk of unknown length, as a chunked upload sends it.
    struct Chunked(Option<Bytes>);

    impl Body for Chunked {
        type Data = Bytes;
        type Error = std::convert::Infallible;
        fn poll_frame(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
            Poll::Ready(self.0.take().map(|bytes| Ok(Frame::data(bytes))))
        }
    }

    fn chunked() -> Chunked {
        Chunked(Some(Bytes::from_static(b"abcdef")))
    }

    fn parts(method: Method, paying: bool) -> http::request::Parts {
        let mut request = http::Request::builder().method(method).uri("/gen");
        if paying {
            request = request.header(PAYMENT_SIGNATURE, "x");
        }
        request.body(()).unwrap().into_parts().0
    }

    #[test]
    fn only_a_paid_request_with_a_body_is_read() {
        let some = Full::new(Bytes::from_static(b"{\"prompt\":\"a\"}"));
        let none = Full::new(Bytes::new());
        assert_eq!(plan(&parts(Method::POST, true), &some, 1024), Plan::Read);
        assert_eq!(
            plan(&parts(Method::POST, false), &some, 1024),
            Plan::Untouched
        );
        assert_eq!(
            plan(&parts(Method::POST, true), &none, 1024),
            Plan::Untouched
        );
        assert_eq!(
            plan(&parts(Method::HEAD, true), &some, 1024),
            Plan::Untouched
        );
        assert_eq!(plan(&parts(Method::POST, true), &some, 4), Plan::Unread);
        // A body of unknown length is read, up to the bound.
        assert_eq!(plan(&parts(Method::PUT, true), &chunked(), 4), Plan::Read);
    }

    #[test]
    fn a_body_of_unknown_length_past_the_bound_is_refused() {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let mut body = chunked();
        let mut bytes = BytesMut::new();
        let read = poll_read(Pin::new(&mut body), &mut bytes, 4, &mut cx);
        assert!(matches!(read, Poll::Ready(Err(Unreadable::TooLarge(4)))));

        let mut body = chunked();
        let mut bytes = BytesMut::new();
        let read = poll_read(Pin::new(&mut body), &mut bytes, 6, &mut cx);
        assert!(matches!(read, Poll::Ready(Ok(()))));
        assert_eq!(&bytes[..], b"abcdef");
        assert!(BodySeen::of(b"").is_none());
    }
}
