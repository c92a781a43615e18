//! `maintain()` scheduling (contract §9).
//!
//! Foreground engines are maintained inline: the reply waits. Background engines
//! (`turnMaintenanceMode: "background"`, trigger `turn`) are maintained on a per-sessionKey
//! lane that the reply does not wait for. Lanes coalesce: while a run is in progress for a key,
//! a new request only records "rerun requested" with the latest params, and exactly one more run
//! follows when the current one settles (unless shutdown aborted the lane). Failures are logged
//! as `context engine maintain failed (<reason>)` and never fail a turn; a run that panics is
//! logged as a failure too, and its lane goes on (or ends) as after any other run, so a panic
//! never leaves a lane held and shutdown waiting for it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use clawctx_engine::{AbortController, CallContext, ContextEngine, RuntimeServices};
use clawctx_protocol::MaintainParams;
use tokio::sync::Notify;

/// Why maintenance runs (§9 triggers).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MaintenanceReason {
    /// After bootstrap.
    Bootstrap,
    /// After compaction.
    Compaction,
    /// After a successful turn.
    Turn,
}

impl MaintenanceReason {
    /// The contract string.
    pub fn as_str(self) -> &'static str {
        match self {
            MaintenanceReason::Bootstrap => "bootstrap",
            MaintenanceReason::Compaction => "compaction",
            MaintenanceReason::Turn => "turn",
        }
    }
}

/// The log line of a failed maintain call.
pub fn maintain_failure_line(reason: MaintenanceReason, error: &dyn std::fmt::Display) -> String {
    format!(
        "context engine maintain failed ({}): {error}",
        reason.as_str()
    )
}

/// One maintain call to run on a lane.
#[derive(Clone)]
pub struct MaintainJob {
    /// The engine of the turn (kept alive until the run settles).
    pub engine: Arc<dyn ContextEngine>,
    /// The params (latest wins when coalesced).
    pub params: MaintainParams,
    /// The runtime services bound to the session.
    pub services: Arc<dyn RuntimeServices>,
}

/// What [`MaintenanceScheduler::schedule`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scheduled {
    /// A new run started on the lane.
    Started,
    /// A run is in progress: a rerun with these params was requested.
    Coalesced,
    /// The scheduler is shut down; nothing runs.
    ShutDown,
}

#[derive(Default)]
struct Lane {
    rerun: Option<MaintainJob>,
}

/// Told of the compactions an engine ran on its own in a background run: `(session key,
/// passes)`.
type OnCompactions = Arc<dyn Fn(&str, &[clawctx_summarize::observe::CompactionCall]) + Send + Sync>;

#[derive(Default)]
struct State {
    on_compactions: std::sync::OnceLock<OnCompactions>,
    lanes: Mutex<HashMap<String, Lane>>,
    idle: Notify,
    shutdown: AbortController,
    failures: Mutex<Vec<String>>,
    runs: std::sync::atomic::AtomicUsize,
}

/// Per-sessionKey background maintenance lanes.
#[derive(Clone, Default)]
pub struct MaintenanceScheduler {
    state: Arc<State>,
}

impl MaintenanceScheduler {
    /// A scheduler with no lanes.
    pub fn new() -> Self {
        Self::default()
    }

    /// Calls `f` with the compaction passes engines reported during each background run (the
    /// runtime counts them in the session's `compactionCount`). Set once; later calls are
    /// ignored.
    pub fn on_compactions(
        &self,
        f: impl Fn(&str, &[clawctx_summarize::observe::CompactionCall]) + Send + Sync + 'static,
    ) {
        let _ = self.state.on_compactions.set(Arc::new(f));
    }

    /// Schedules a background run for `session_key` (coalescing with a run in progress).
    /// Must be called inside a tokio runtime.
    pub fn schedule(&self, session_key: &str, job: MaintainJob) -> Scheduled {
        if self.state.shutdown.signal().is_aborted() {
            return Scheduled::ShutDown;
        }
        let Ok(mut lanes) = self.state.lanes.lock() else {
            return Scheduled::ShutDown;
        };
        if let Some(lane) = lanes.get_mut(session_key) {
            lane.rerun = Some(job);
            return Scheduled::Coalesced;
        }
        lanes.insert(session_key.to_owned(), Lane::default());
        drop(lanes);
        let state = self.state.clone();
        let key = session_key.to_owned();
        tokio::spawn(async move {
            // Should this task end otherwise than below (a panic outside the run), the lane is
            // dropped and the waiters told all the same.
            let mut end = LaneEnd {
                state: state.clone(),
                key: key.clone(),
                armed: true,
            };
            let mut job = job;
            loop {
                run_job(&state, &key, &job).await;
                let Ok(mut lanes) = state.lanes.lock() else {
                    break;
                };
                let next = if state.shutdown.signal().is_aborted() {
                    None
                } else {
                    lanes.get_mut(&key).and_then(|l| l.rerun.take())
                };
                match next {
                    Some(n) => job = n,
                    None => {
                        lanes.remove(&key);
                        end.armed = false;
                        break;
                    }
                }
            }
            state.idle.notify_waiters();
        });
        Scheduled::Started
    }

    /// Resolves when no lane is running.
    pub async fn wait_idle(&self) {
        self.wait_until(|lanes| lanes.is_empty()).await
    }

    /// Resolves when no run is in progress or requested for `session_key`.
    pub async fn wait_lane_idle(&self, session_key: &str) {
        self.wait_until(|lanes| !lanes.contains_key(session_key))
            .await
    }

    /// Resolves once `settled` holds for the lanes, checked whenever a lane ends.
    async fn wait_until(&self, settled: impl Fn(&HashMap<String, Lane>) -> bool) {
        loop {
            let notified = self.state.idle.notified();
            if self.state.lanes.lock().map(|l| settled(&l)).unwrap_or(true) {
                return;
            }
            notified.await;
        }
    }

    /// Aborts running lanes (their `abortSignal` fires) and refuses new work.
    pub fn shutdown(&self) {
        self.state.shutdown.abort("runtime shutting down");
    }

    /// Log lines of failed background runs so far.
    pub fn failures(&self) -> Vec<String> {
        self.state
            .failures
            .lock()
            .map(|f| f.clone())
            .unwrap_or_default()
    }

    /// Background runs completed so far.
    pub fn runs(&self) -> usize {
        self.state.runs.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// Drops a lane whose task ended without dropping it (a panic) and wakes the waiters.
struct LaneEnd {
    state: Arc<State>,
    key: String,
    armed: bool,
}

impl Drop for LaneEnd {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let mut lanes = self.state.lanes.lock().unwrap_or_else(|p| p.into_inner());
        lanes.remove(&self.key);
        drop(lanes);
        self.state.idle.notify_waiters();
    }
}

async fn run_job(state: &State, key: &str, job: &MaintainJob) {
    use futures::FutureExt;
    let cx = CallContext::none()
        .with_abort(state.shutdown.signal())
        .with_services(job.services.clone());
    // A panicking engine fails its run like an error: the lane goes on.
    let run = std::panic::AssertUnwindSafe(job.engine.maintain(&job.params, &cx)).catch_unwind();
    let (result, passes) = crate::engine_passes::collect(None, run).await;
    let result = result.unwrap_or_else(|panic| {
        let what = panic
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic".to_owned());
        Err(clawctx_engine::EngineError::failed(format!(
            "maintain panicked: {what}"
        )))
    });
    if let Some(f) = state.on_compactions.get() {
        f(key, &passes);
    }
    state.runs.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    if let Err(e) = result {
        let line = maintain_failure_line(MaintenanceReason::Turn, &e);
        tracing::warn!("{line}");
        if let Ok(mut f) = state.failures.lock() {
            f.push(line);
        }
    }
}
