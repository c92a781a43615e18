//! The state every handler shares: the runtime and its registry, the settings, and what the
//! gateway keeps between requests, built once per process from [`GatewayParts`].
//!
//! This module imports no handler. What a handler keeps between requests lives in a module of
//! its own that the state holds ([`crate::resend`], [`crate::rollbacks`], the trace's records
//! and bus in [`crate::trace`]), the router ([`crate::router`]) is the one module that names the
//! handlers, and each handler imports this state, never another handler. ARCHITECTURE.md ("In-process
//! state of the gateway") lists every field with who writes it, what serializes it and what a
//! restart or a panic does to it.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Instant;

use clawctx_engine::ContextEngineRegistry;
use clawctx_runtime::AgentRuntime;
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::GatewayConfig;
use crate::lanes::Lanes;
use crate::metrics::Metrics;
use crate::resend::RecentAnswers;
use crate::rollbacks::Rollbacks;
use crate::trace::assembled::Recorder;
use crate::trace::bus::Live;
use crate::trace::Tracer;

/// What the gateway serves from: a runtime built from config and the registry behind it.
pub struct GatewayParts {
    /// The agent runtime (engine, stores, model) every turn and engine call goes through.
    pub runtime: AgentRuntime,
    /// The registry the runtime's engine came from (quarantines for `/metrics` and `/readyz`).
    pub registry: Option<Arc<ContextEngineRegistry>>,
    /// The whole OpenClaw-shaped config (the lossless store's path for recall).
    pub host_config: Arc<Value>,
    /// The model turns run on (`provider/model`), listed by `/v1/models`.
    pub model: String,
    /// Resolved gateway settings.
    pub config: GatewayConfig,
}

/// State every handler shares.
pub(crate) struct Shared {
    pub(crate) runtime: AgentRuntime,
    pub(crate) registry: Option<Arc<ContextEngineRegistry>>,
    pub(crate) host_config: Arc<Value>,
    pub(crate) model: String,
    pub(crate) config: GatewayConfig,
    pub(crate) metrics: Metrics,
    pub(crate) lanes: Arc<Lanes>,
    /// Set when shutdown begins: readiness fails and new turns are refused.
    pub(crate) stopping: AtomicBool,
    /// Cancelled at the shutdown deadline: turns still running abort.
    pub(crate) abort_all: CancellationToken,
    /// Turn tasks, waited for before the runtime shuts down.
    pub(crate) tasks: TaskTracker,
    /// Rollbacks of subagent spawns prepared through the engine API.
    pub(crate) spawns: Rollbacks,
    pub(crate) started: Instant,
    /// Each session's last assembly (the turn trace's record; the dashboard reads it).
    pub(crate) recorder: Recorder,
    /// The live bus the turn watcher publishes to and `/v1/dashboard/events` streams.
    pub(crate) live: Live,
    /// Each session's last plain chat answer, for re-sent requests.
    pub(crate) recent: RecentAnswers,
    /// The per-turn trace's writer (and reader) in the state dir.
    pub(crate) tracer: Tracer,
}

pub(crate) type AppState = Arc<Shared>;

impl Shared {
    /// The state over `parts`: the metrics registry (with the stores it measures), the trace
    /// writer on the state dir, the lanes, and empty memories. Used by the gateway and, without
    /// serving it, by [`crate::trace::LocalTrace`].
    pub(crate) fn new(parts: GatewayParts) -> Shared {
        let mut metrics = Metrics::new(parts.registry.clone());
        // The lossless engine's own store file (none on PostgreSQL).
        if let Some(path) = clawctx_lossless::Recall::of(parts.runtime.engine().as_ref())
            .and_then(|r| r.store().as_sqlite().map(|s| s.path().to_path_buf()))
        {
            metrics.watch_store("lossless_db", path);
        }
        if let Ok(dir) = parts.runtime.store().sessions_dir("main") {
            metrics.watch_store("transcripts", dir);
        }
        let tracer = Tracer::start(
            crate::trace::trace_path(parts.runtime.state_dir()),
            parts.config.trace.clone(),
        );
        metrics.watch_trace(&tracer);
        let lanes = Lanes::new(
            parts.config.max_queued_per_session,
            metrics.requests_waiting.clone(),
        );
        Shared {
            runtime: parts.runtime,
            registry: parts.registry,
            host_config: parts.host_config,
            model: parts.model,
            config: parts.config,
            metrics,
            lanes,
            stopping: AtomicBool::new(false),
            abort_all: CancellationToken::new(),
            tasks: TaskTracker::new(),
            spawns: Default::default(),
            started: Instant::now(),
            recorder: Default::default(),
            live: Default::default(),
            recent: Default::default(),
            tracer,
        }
    }
}
