//! Work its caller cannot cancel, without a task per call: the caller polls it in place, and
//! if the caller is dropped before it finished, what is left is spawned and finishes alone.

use std::any::Any;
use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::runtime::Handle;

/// A future polled by whoever awaits this; dropped unfinished (the request it serves went
/// away), it is spawned on its runtime and runs to its end there, its output dropped.
///
/// A panic while polling is caught and answered as [`Panicked`], as a task's would be.
pub(super) struct Uncancellable<F>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    future: Option<Pin<Box<F>>>,
    runtime: Handle,
}

/// The future panicked; the message, when it had one.
#[derive(Debug)]
pub(super) struct Panicked(pub(super) String);

impl<F> Uncancellable<F>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    /// The work `future`, boxed by its caller where it is made (so that it is never moved
    /// whole), to be spawned on `runtime` if it is dropped unfinished.
    pub(super) fn new(future: Pin<Box<F>>, runtime: Handle) -> Self {
        Self {
            future: Some(future),
            runtime,
        }
    }
}

impl<F> Future for Uncancellable<F>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    type Output = Result<F::Output, Panicked>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let Some(future) = self.future.as_mut() else {
            return Poll::Ready(Err(Panicked("polled after it finished".to_owned())));
        };
        let polled = catch_unwind(AssertUnwindSafe(|| future.as_mut().poll(cx)));
        match polled {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(output)) => {
                self.future = None;
                Poll::Ready(Ok(output))
            }
            Err(payload) => {
                self.future = None;
                Poll::Ready(Err(Panicked(message(payload.as_ref()))))
            }
        }
    }
}

impl<F> Drop for Uncancellable<F>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    fn drop(&mut self) {
        if let Some(future) = self.future.take() {
            // Not awaited: the task owns the rest of the work and drops its output.
            drop(self.runtime.spawn(future));
        }
    }
}

fn message(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|text| (*text).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_owned())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn awaited_it_runs_in_place_and_answers() {
        let work = Uncancellable::new(Box::pin(async { 7 }), Handle::current());
        assert_eq!(work.await.unwrap(), 7);
    }

    #[tokio::test]
    async fn dropped_unfinished_it_finishes_on_its_own() {
        let finished = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&finished);
        let (started_tx, started_rx) = tokio::sync::oneshot::channel();
        let work = Uncancellable::new(
            Box::pin(async move {
                let _ = started_tx.send(());
                tokio::time::sleep(Duration::from_millis(50)).await;
                flag.store(true, Ordering::SeqCst);
            }),
            Handle::current(),
        );
        // The caller gives up once the work is under way, as a client that hangs up.
        let caller = tokio::spawn(work);
        started_rx.await.unwrap();
        caller.abort();
        assert!(caller.await.unwrap_err().is_cancelled());
        assert!(!finished.load(Ordering::SeqCst));
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(
            finished.load(Ordering::SeqCst),
            "the work was cancelled with its caller"
        );
    }

    #[tokio::test]
    async fn a_panic_is_answered_not_propagated() {
        let work = Uncancellable::new(
            Box::pin(async {
                tokio::task::yield_now().await;
                panic!("the facilitator client broke");
            }),
            Handle::current(),
        );
        let panicked = work.await.unwrap_err();
        assert_eq!(panicked.0, "the facilitator client broke");
    }
}
