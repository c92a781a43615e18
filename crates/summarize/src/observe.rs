//! Watching summaries as they are made: every summarizer call (the extractive summarizer's
//! and the LLM summarizer's in `clawctx-model`) is reported to the observers added here, with
//! the summarizer's kind, its duration and whether it produced a summary. A long-running host
//! (the gateway's `/metrics`) counts them; nobody pays anything when there is no observer.
//!
//! Observers are process-wide: compaction runs deep inside engines (the lossless engine's own
//! passes, the runtime's built-in compaction), which get their summarizer from the host without
//! knowing who watches.
//!
//! Whole compaction passes are reported the same way ([`report_compaction`]): an engine that
//! compacts on its own (the lossless engine after a turn crosses its threshold) does so inside
//! a call the host only sees as `afterTurn`/`commitTurn`, so the host could not time it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, RwLock};
use std::time::Duration;

/// One finished summarizer call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SummaryCall {
    /// `extractive` or `llm`.
    pub summarizer: &'static str,
    /// How long it took.
    pub took: Duration,
    /// Whether it produced a summary (an abort counts as a failure).
    pub ok: bool,
}

type Observer = Arc<dyn Fn(&SummaryCall) + Send + Sync>;

static OBSERVERS: LazyLock<RwLock<Vec<(u64, Observer)>>> = LazyLock::new(Default::default);
static ANY: AtomicBool = AtomicBool::new(false);
static NEXT: AtomicU64 = AtomicU64::new(0);

/// Removes its observer when dropped.
#[must_use = "the observer is removed when the guard is dropped"]
pub struct ObserverGuard(u64);

impl Drop for ObserverGuard {
    fn drop(&mut self) {
        let mut all = OBSERVERS.write().unwrap_or_else(|p| p.into_inner());
        all.retain(|(id, _)| *id != self.0);
        ANY.store(!all.is_empty(), Ordering::Release);
    }
}

impl std::fmt::Debug for ObserverGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ObserverGuard({})", self.0)
    }
}

/// Calls `observer` for every summarizer call in this process until the guard is dropped.
pub fn add_observer(observer: impl Fn(&SummaryCall) + Send + Sync + 'static) -> ObserverGuard {
    let id = NEXT.fetch_add(1, Ordering::Relaxed);
    let mut all = OBSERVERS.write().unwrap_or_else(|p| p.into_inner());
    all.push((id, Arc::new(observer)));
    ANY.store(true, Ordering::Release);
    ObserverGuard(id)
}

/// Reports a finished call to every observer (summarizer implementations call this).
pub fn report(call: SummaryCall) {
    if !ANY.load(Ordering::Acquire) {
        return;
    }
    let observers: Vec<Observer> = OBSERVERS
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .map(|(_, o)| o.clone())
        .collect();
    for o in observers {
        o(&call);
    }
}

/// One finished compaction pass of an engine (one or more summary rounds over a conversation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CompactionCall {
    /// The engine that compacted (`lossless`).
    pub engine: &'static str,
    /// How long the pass took, summaries included.
    pub took: Duration,
    /// Summaries it created.
    pub summaries: u32,
    /// Whether it finished (a store or summarizer error that ended it counts as a failure).
    pub ok: bool,
}

type CompactionObserver = Arc<dyn Fn(&CompactionCall) + Send + Sync>;

static COMPACTION_OBSERVERS: LazyLock<RwLock<Vec<(u64, CompactionObserver)>>> =
    LazyLock::new(Default::default);
static ANY_COMPACTION: AtomicBool = AtomicBool::new(false);

/// Removes its compaction observer when dropped.
#[must_use = "the observer is removed when the guard is dropped"]
pub struct CompactionObserverGuard(u64);

impl Drop for CompactionObserverGuard {
    fn drop(&mut self) {
        let mut all = COMPACTION_OBSERVERS
            .write()
            .unwrap_or_else(|p| p.into_inner());
        all.retain(|(id, _)| *id != self.0);
        ANY_COMPACTION.store(!all.is_empty(), Ordering::Release);
    }
}

impl std::fmt::Debug for CompactionObserverGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CompactionObserverGuard({})", self.0)
    }
}

/// Calls `observer` for every engine compaction pass in this process until the guard is
/// dropped.
pub fn add_compaction_observer(
    observer: impl Fn(&CompactionCall) + Send + Sync + 'static,
) -> CompactionObserverGuard {
    let id = NEXT.fetch_add(1, Ordering::Relaxed);
    let mut all = COMPACTION_OBSERVERS
        .write()
        .unwrap_or_else(|p| p.into_inner());
    all.push((id, Arc::new(observer)));
    ANY_COMPACTION.store(true, Ordering::Release);
    CompactionObserverGuard(id)
}

/// Reports a finished compaction pass to every compaction observer (engines call this).
pub fn report_compaction(call: CompactionCall) {
    if !ANY_COMPACTION.load(Ordering::Acquire) {
        return;
    }
    let observers: Vec<CompactionObserver> = COMPACTION_OBSERVERS
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .map(|(_, o)| o.clone())
        .collect();
    for o in observers {
        o(&call);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::sync::Mutex;

    #[test]
    fn observers_see_calls_until_their_guard_is_dropped() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        let guard = add_observer(move |c| s.lock().unwrap().push(c.summarizer));
        // Names no other test reports: the observers are process-wide and the crate's other
        // tests summarize concurrently.
        report(SummaryCall {
            summarizer: "observe-test-before",
            took: Duration::ZERO,
            ok: false,
        });
        drop(guard);
        report(SummaryCall {
            summarizer: "observe-test-after",
            took: Duration::ZERO,
            ok: true,
        });
        let seen = seen.lock().unwrap();
        assert_eq!(
            seen.iter().filter(|s| **s == "observe-test-before").count(),
            1
        );
        assert!(!seen.contains(&"observe-test-after"));
    }

    #[test]
    fn compaction_observers_see_passes_until_their_guard_is_dropped() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        let guard = add_compaction_observer(move |c| s.lock().unwrap().push(c.summaries));
        let pass = |summaries| CompactionCall {
            engine: "test-engine",
            took: Duration::ZERO,
            summaries,
            ok: true,
        };
        report_compaction(pass(3));
        drop(guard);
        report_compaction(pass(4));
        let seen = seen.lock().unwrap();
        assert!(seen.contains(&3) && !seen.contains(&4), "{seen:?}");
    }
}
