use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::Full;
use pin_project_lite::pin_project;

use super::metered::Meter;

pin_project! {
    /// Response body of [`X402`](super::X402): the inner service's body, or one the layer wrote
    /// (a challenge or an error).
    #[derive(Debug)]
    pub struct ResponseBody<B> {
        #[pin]
        kind: Kind<B>,
    }
}

pin_project! {
    #[project = KindProj]
    #[derive(Debug)]
    enum Kind<B> {
        Inner { #[pin] body: B },
        Layer { #[pin] body: Full<Bytes> },
        Metered { #[pin] body: B, meter: Meter },
    }
}

impl<B> ResponseBody<B> {
    pub(super) fn inner(body: B) -> Self {
        Self {
            kind: Kind::Inner { body },
        }
    }

    pub(super) fn metered(body: B, meter: Meter) -> Self {
        Self {
            kind: Kind::Metered { body, meter },
        }
    }

    pub(super) fn layer(bytes: Bytes) -> Self {
        Self {
            kind: Kind::Layer {
                body: Full::new(bytes),
            },
        }
    }
}

impl<B> Body for ResponseBody<B>
where
    B: Body<Data = Bytes>,
{
    type Data = Bytes;
    type Error = B::Error;

    #[inline]
    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        match self.project().kind.project() {
            KindProj::Inner { body } => body.poll_frame(cx),
            KindProj::Layer { body } => body
                .poll_frame(cx)
                .map(|frame| frame.map(|result| result.map_err(|never| match never {}))),
            KindProj::Metered { mut body, meter } => {
                while meter.is_streaming() {
                    match ready!(body.as_mut().poll_frame(cx)) {
                        // The handler's own trailers give way to the settlement's.
                        Some(Ok(frame)) if frame.is_trailers() => {}
                        Some(Ok(frame)) => return Poll::Ready(Some(Ok(frame))),
                        Some(Err(error)) => {
                            // Charged for what was sent, as when the client hangs up.
                            meter.finish();
                            return Poll::Ready(Some(Err(error)));
                        }
                        None => meter.finish(),
                    }
                }
                let trailers = ready!(meter.poll_trailers(cx));
                Poll::Ready(trailers.map(|trailers| Ok(Frame::trailers(trailers))))
            }
        }
    }

    #[inline]
    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Inner { body } => body.is_end_stream(),
            Kind::Layer { body } => body.is_end_stream(),
            Kind::Metered { meter, .. } => meter.is_done(),
        }
    }

    #[inline]
    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Inner { body } => body.size_hint(),
            Kind::Layer { body } => body.size_hint(),
            // Never exact: the trailers follow, so HTTP/1.1 sends the body chunked.
            Kind::Metered { body, .. } => {
                let mut hint = SizeHint::new();
                hint.set_lower(body.size_hint().lower());
                hint
            }
        }
    }
}
