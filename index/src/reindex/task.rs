//! Work moved onto a task of its own, owned by the future that waits for it.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// Run `work` on a task of its own (so it can use another worker thread), aborted if the
/// caller stops waiting; a panic in it is raised again in the caller. `Err` only when the
/// runtime cancelled the task (it is shutting down).
pub async fn run_owned<T: Send + 'static>(
    work: impl Future<Output = T> + Send + 'static,
) -> Result<T, tokio::task::JoinError> {
    run_owned_on(&tokio::runtime::Handle::current(), work).await
}

/// [`run_owned`] on the runtime of `handle` (the server runs its handlers on its main runtime
/// from connection threads of their own).
pub async fn run_owned_on<T: Send + 'static>(
    handle: &tokio::runtime::Handle,
    work: impl Future<Output = T> + Send + 'static,
) -> Result<T, tokio::task::JoinError> {
    match AbortOnDrop(handle.spawn(work)).await {
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        done => done,
    }
}

/// A spawned task that is aborted when its handle is dropped (its awaiting future went away).
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Future for AbortOnDrop<T> {
    type Output = Result<T, tokio::task::JoinError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.0).poll(cx)
    }
}

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_task_is_aborted_when_its_caller_stops_waiting_and_panics_reach_the_caller() {
        assert_eq!(run_owned(async { 7 }).await.unwrap(), 7);
        let finished = Arc::new(AtomicBool::new(false));
        let flag = finished.clone();
        let waiting = run_owned(async move {
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            flag.store(true, Ordering::SeqCst);
        });
        assert!(tokio::time::timeout(std::time::Duration::from_millis(20), waiting).await.is_err());
        tokio::time::sleep(std::time::Duration::from_millis(400)).await;
        assert!(!finished.load(Ordering::SeqCst), "the dropped task went on");
        let panicked = tokio::spawn(run_owned(async { panic!("inside") })).await.unwrap_err();
        assert!(panicked.is_panic());
    }
}
