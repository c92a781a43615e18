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

tokio::task_local! {
    static PASSES: RefCell<Vec<CompactionCall>>;
}

/// The observer, added once per process and kept for its lifetime.
static OBSERVER: OnceLock<CompactionObserverGuard> = OnceLock::new();

fn observe_once() {
    OBSERVER.get_or_init(|| {
        observe::add_compaction_observer(|call| {
            // Outside a scope (an engine called by no runtime turn): nobody to tell.
            let _ = PASSES.try_with(|p| p.borrow_mut().push(*call));
        })
    });
}

/// Runs `fut`, returning with its output the compaction passes engines reported while it ran
/// (in its task; a pass an engine runs on a task of its own is not seen).
pub(crate) async fn collect<F: Future>(fut: F) -> (F::Output, Vec<CompactionCall>) {
    observe_once();
    PASSES
        .scope(RefCell::new(Vec::new()), async move {
            let out = fut.await;
            let passes = PASSES.with(|p| p.take());
            (out, passes)
        })
        .await
}

/// Runs `fut` with the passes it makes kept out of the enclosing [`collect`].
pub(crate) async fn ignore<F: Future>(fut: F) -> F::Output {
    collect(fut).await.0
}

/// The passes that changed the store (a failed one or one that wrote nothing is no compaction).
pub(crate) fn compactions(passes: &[CompactionCall]) -> impl Iterator<Item = &CompactionCall> {
    passes.iter().filter(|p| p.ok && p.summaries > 0)
}
