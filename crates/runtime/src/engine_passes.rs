//! The engine's own compaction passes, attributed to the session whose engine call made them.
//!
//! Why: an engine that owns compaction (lossless) summarizes inside `afterTurn`, `commitTurn`
//! and `maintain`, where the host never asked for a compaction, so a turn's outcome listed no
//! compaction and `sessions.json`'s `compactionCount` stayed 0 while the engine's store held
//! ten passes (issue #39). Engines report each pass to `clawctx_summarize::observe`, which is
//! process-wide; this module gives the report its session: the runtime runs a turn (and a
//! background maintenance run) inside [`collect`], a task-local scope the one process-wide
//! observer appends to. A compaction the host itself asked for (`engine_compact`) runs inside
//! [`ignore`], since the host records it already.

use std::cell::RefCell;
use std::future::Future;
use std::sync::OnceLock;

use clawctx_summarize::observe::{self, CompactionCall, CompactionObserverGuard};
use clawctx_transcript::SessionStore;

/// A scope's record: the passes seen, and where to count them as they happen.
struct Scope {
    passes: RefCell<Vec<CompactionCall>>,
    /// The session's entry to count each compaction in, at once: a turn's caller may be
    /// answered (and read the count) before the turn's task has finished.
    count_in: Option<(SessionStore, String)>,
}

tokio::task_local! {
    static SCOPE: Scope;
}

/// The observer, added once per process and kept for its lifetime.
static OBSERVER: OnceLock<CompactionObserverGuard> = OnceLock::new();

fn observe_once() {
    OBSERVER.get_or_init(|| {
        observe::add_compaction_observer(|call| {
            // Outside a scope (an engine called by no runtime turn): nobody to tell.
            let _ = SCOPE.try_with(|s| {
                s.passes.borrow_mut().push(*call);
                if let (Some((store, key)), true) = (&s.count_in, is_compaction(call)) {
                    count(store, key);
                }
            });
        })
    });
}

/// Counts one compaction in `key`'s `compactionCount`.
pub(crate) fn count(store: &SessionStore, key: &str) {
    match store.record_compaction(key) {
        // A session no turn of this runtime made has no entry to count in.
        Ok(_) | Err(clawctx_transcript::TranscriptError::UnknownSessionKey { .. }) => {}
        Err(e) => tracing::warn!("cannot record the compaction in sessions.json: {e}"),
    }
}

/// Runs `fut` (boxed by the callers whose future is large: a turn's is, and a scope holding
/// it inline overflowed a test thread's stack), returning with its output the compaction passes engines reported while it ran
/// (in its task; a pass an engine runs on a task of its own is not seen). With `count_in`,
/// each compaction is counted in that session's entry as it is reported.
pub(crate) async fn collect<F: Future>(
    count_in: Option<(SessionStore, String)>,
    fut: F,
) -> (F::Output, Vec<CompactionCall>) {
    observe_once();
    let scope = Scope {
        passes: RefCell::new(Vec::new()),
        count_in,
    };
    SCOPE
        .scope(scope, async move {
            let out = fut.await;
            let passes = SCOPE.with(|s| s.passes.take());
            (out, passes)
        })
        .await
}

/// Runs `fut` with the passes it makes kept out of the enclosing [`collect`].
pub(crate) async fn ignore<F: Future>(fut: F) -> F::Output {
    collect(None, fut).await.0
}

fn is_compaction(p: &CompactionCall) -> bool {
    p.ok && p.summaries > 0
}

/// The passes that changed the store (a failed one or one that wrote nothing is no compaction).
pub(crate) fn compactions(passes: &[CompactionCall]) -> impl Iterator<Item = &CompactionCall> {
    passes.iter().filter(|p| is_compaction(p))
}
