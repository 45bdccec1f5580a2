//! The paid route's service, built once and shared by every request.
//!
//! The router calls a route through every layer mounted around it (the request log,
//! compression, the JSON errors), and each of those calls clones the service below it for the
//! request: a service deep inside is cloned once per layer above it, and dropped as often.
//! [`Shared`] makes each of those clones a reference count; the request clones the service
//! inside exactly once, to call it.

use std::sync::Arc;
use std::task::{Context, Poll};

use tower::Service;
use tower::util::{Oneshot, ServiceExt as _};

/// A service whose clones share one copy; each call clones that copy once and calls it.
#[derive(Debug)]
pub(crate) struct Shared<S>(Arc<S>);

impl<S> Shared<S> {
    pub(crate) fn new(service: S) -> Self {
        Self(Arc::new(service))
    }
}

impl<S> Clone for Shared<S> {
    fn clone(&self) -> Self {
        Self(Arc::clone(&self.0))
    }
}

impl<S, R> Service<R> for Shared<S>
where
    S: Service<R> + Clone,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Oneshot<S, R>;

    /// Always ready: readiness is the copy's, awaited by the call's future.
    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: R) -> Self::Future {
        S::clone(&self.0).oneshot(request)
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// Counts its clones.
    struct Counted(Arc<AtomicUsize>);

    impl Clone for Counted {
        fn clone(&self) -> Self {
            self.0.fetch_add(1, Ordering::Relaxed);
            Self(Arc::clone(&self.0))
        }
    }

    impl Service<u32> for Counted {
        type Response = u32;
        type Error = Infallible;
        type Future = std::future::Ready<Result<u32, Infallible>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, request: u32) -> Self::Future {
            std::future::ready(Ok(request + 1))
        }
    }

    #[tokio::test]
    async fn clones_share_the_service_and_each_call_copies_it_once() {
        let clones = Arc::new(AtomicUsize::new(0));
        let shared = Shared::new(Counted(Arc::clone(&clones)));
        // What the layers around a route hold, one copy each.
        let copies = [shared.clone(), shared.clone(), shared];
        assert_eq!(clones.load(Ordering::Relaxed), 0);
        for (calls, copy) in copies.into_iter().enumerate() {
            assert_eq!(copy.oneshot(41).await, Ok(42));
            assert_eq!(clones.load(Ordering::Relaxed), calls + 1);
        }
    }
}
