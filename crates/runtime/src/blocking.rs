//! Blocking file I/O from inside an async turn.
//!
//! A turn appends to its transcript and writes its outbox file with `fsync`s: a millisecond or
//! more each on a virtual disk. Run straight on a tokio worker, such a call stalls every task
//! that worker was going to run next: in a gateway with two workers, other sessions' turns,
//! their HTTP and their streams wait for this session's disk. [`io`] runs the call under
//! [`tokio::task::block_in_place`] on a multi-thread runtime, which first hands the worker's
//! other tasks to another thread. On a current-thread runtime (which has no other thread to
//! hand them to, and where `block_in_place` panics) or outside a runtime it just runs the call.

use tokio::runtime::{Handle, RuntimeFlavor};

/// Runs `f`, a call that blocks on the disk, without holding up the runtime's other tasks.
pub(crate) fn io<R>(f: impl FnOnce() -> R) -> R {
    match Handle::try_current() {
        Ok(h) if h.runtime_flavor() == RuntimeFlavor::MultiThread => tokio::task::block_in_place(f),
        _ => f(),
    }
}

#[cfg(test)]
mod tests {
    use super::io;

    #[test]
    fn runs_outside_a_runtime() {
        assert_eq!(io(|| 7), 7);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn runs_on_a_current_thread_runtime_without_panicking() {
        assert_eq!(io(|| 8), 8);
    }

    /// On a multi-thread runtime with one worker, a task spawned by the blocking one still
    /// runs while the call blocks: the worker's tasks were handed on. (Run straight on the
    /// worker, the call would wait out its timeout: the other task is queued behind it.)
    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn other_tasks_run_while_the_call_blocks() {
        // The test body runs on the test's own thread; the blocking call must run on the worker.
        let on_worker = tokio::spawn(async {
            let (tx, rx) = std::sync::mpsc::channel::<()>();
            let other = tokio::spawn(async move {
                let _ = tx.send(());
            });
            let got = io(move || rx.recv_timeout(std::time::Duration::from_secs(5)));
            let _ = other.await;
            got.is_ok()
        });
        assert!(
            on_worker.await.expect("the blocking task"),
            "the spawned task did not run while io() blocked the only worker"
        );
    }
}
