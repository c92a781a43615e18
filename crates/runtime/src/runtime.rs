//! The agent runtime: sessions, engine calls and the pieces every turn shares.
//!
//! [`AgentRuntime`] owns one selected engine, one backend (a model provider or a CLI backend),
//! the session store and the open transcripts. The turn loop itself lives in [`crate::turn`];
//! this module holds what the loop, `/compact`, subagents and replay all need: session
//! resolution with successor following, the token budget, `runtimeSettings` and
//! `runtimeContext` builders, the runtime services handed to engines (`rewriteTranscriptEntries`,
//! `llm.complete`, and the built-in compaction `legacy` delegates to), bootstrap bookkeeping and
//! maintenance dispatch.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use clawctx_engine::compaction::{compact_path, effective_reserve_tokens, CompactionSettings};
use clawctx_engine::host::{assert_host_requirements, embedded_host};
use clawctx_engine::runtime_settings::{build_runtime_settings, RuntimeSettingsInput};
use clawctx_engine::*;
use clawctx_model::{CompletionRequest, ModelProvider};
use clawctx_protocol::transcript::{
    EntryKind, TranscriptDelta, TranscriptDeltaRequest, TranscriptEntry,
};
use clawctx_protocol::*;
use clawctx_summarize::{ExtractiveSummarizer, Summarizer};
use clawctx_transcript::{ResolvedSession, SessionFile, SessionStore};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::error::{Result, RuntimeError};
use crate::history::History;
use crate::maintain::{
    maintain_failure_line, MaintainJob, MaintenanceReason, MaintenanceScheduler, Scheduled,
};
use crate::model::{Backend, DEFAULT_CONTEXT_WINDOW, DEFAULT_MAX_OUTPUT_TOKENS};
use crate::warm::Warm;

/// The default system prompt (prompts/system.md).
pub const DEFAULT_SYSTEM_PROMPT: &str = include_str!("../prompts/system.md");

/// Smallest prompt budget the runtime will work with, whatever the window arithmetic says.
pub const MIN_PROMPT_BUDGET: u64 = 256;

/// An engine that owns compaction keeps at most `window / this` as the compaction reserve
/// (see [`Limits::reserve_tokens`] and docs/budget.md).
pub const OWNING_ENGINE_RESERVE_DIVISOR: u64 = 4;

/// Default bound on model calls of one turn's tool loop.
pub const DEFAULT_MAX_TOOL_ITERATIONS: usize = 8;

/// How long [`AgentRuntime::shutdown`] waits for background maintenance runs to notice their
/// abort signal before disposing the engine anyway.
pub const MAINTENANCE_SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// Default bound on one engine `compact` call (the runtime's safety timeout).
pub const DEFAULT_COMPACT_TIMEOUT: Duration = Duration::from_secs(300);

/// The `runtimeContext` key through which the runtime tells its own compaction why it runs
/// (`manual`, `overflow`, `preflight`, `threshold`), as OpenClaw passes its parameter bag.
pub const COMPACTION_TRIGGER_KEY: &str = "compactionTrigger";

/// The token arithmetic of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Limits {
    /// Model context window.
    pub context_window: u64,
    /// Output limit.
    pub max_output_tokens: u64,
    /// Reserve in effect (§7.4, floor and window cap applied; at most a quarter of the window
    /// when the engine owns compaction).
    pub reserve_tokens: u64,
    /// What the prompt may use: window − max output − reserve (at least [`MIN_PROMPT_BUDGET`]).
    pub prompt_budget: u64,
}

/// Builds an [`AgentRuntime`].
pub struct RuntimeBuilder {
    state_dir: PathBuf,
    engine: Arc<dyn ContextEngine>,
    selected_id: String,
    source: SelectionSource,
    backend: Backend,
    compaction: CompactionSettings,
    system_prompt: String,
    tools: Vec<Arc<dyn AgentTool>>,
    max_tool_iterations: usize,
    summarizer: Arc<dyn Summarizer>,
    history_turn_limit: Option<usize>,
    durable: bool,
    prompt_budget: Option<u64>,
    workspace_dir: Option<String>,
    compact_timeout: Duration,
    hooks: crate::hooks::Hooks,
    fallback_reason: Option<String>,
    services_backend: Option<Backend>,
}

impl RuntimeBuilder {
    /// The model that serves engines' and plugins' `llm.complete` (runtime services) when it
    /// is not the turn's model: `replay` answers turns from the recording, and a plugin's own
    /// completions must not consume the recording's replies (issue #28 item 9).
    pub fn services_backend(mut self, backend: Backend) -> Self {
        self.services_backend = Some(backend);
        self
    }

    /// The selected engine's id and how it was selected (for `runtimeSettings`).
    pub fn selection(mut self, selected_id: impl Into<String>, source: SelectionSource) -> Self {
        self.selected_id = selected_id.into();
        self.source = source;
        self
    }

    /// Why the configured engine is not the one serving (it failed at resolution): the runs
    /// report `runtime.mode: "fallback"` with this reason (§6).
    pub fn fallback_reason(mut self, reason: Option<String>) -> Self {
        self.fallback_reason = reason;
        self
    }

    /// Compaction settings (reserve, keep-recent, floor).
    pub fn compaction(mut self, settings: CompactionSettings) -> Self {
        self.compaction = settings;
        self
    }

    /// The base system prompt (the engine's `systemPromptAddition` is prepended to it).
    pub fn system_prompt(mut self, prompt: impl Into<String>) -> Self {
        self.system_prompt = prompt.into();
        self
    }

    /// Registers a runtime tool (offered next to the engine's own tools).
    pub fn tool(mut self, tool: Arc<dyn AgentTool>) -> Self {
        self.tools.push(tool);
        self
    }

    /// Bounds the model calls of one turn's tool loop.
    pub fn max_tool_iterations(mut self, n: usize) -> Self {
        self.max_tool_iterations = n.max(1);
        self
    }

    /// The summarizer of the built-in compaction (default: extractive, offline).
    pub fn summarizer(mut self, summarizer: Arc<dyn Summarizer>) -> Self {
        self.summarizer = summarizer;
        self
    }

    /// Keep only the last N user turns of history (`dmHistoryLimit`).
    pub fn history_turn_limit(mut self, limit: Option<usize>) -> Self {
        self.history_turn_limit = limit;
        self
    }

    /// Whether transcript appends and durable-turn commits are synced to disk (default true;
    /// replay turns it off for speed: a replay is reproducible, not precious).
    pub fn durable(mut self, durable: bool) -> Self {
        self.durable = durable;
        self
    }

    /// Overrides the prompt budget (replay's `--budget`); the window stays as configured.
    pub fn prompt_budget(mut self, budget: Option<u64>) -> Self {
        self.prompt_budget = budget;
        self
    }

    /// The agent workspace directory passed as `runtimeContext.workspaceDir`.
    pub fn workspace_dir(mut self, dir: impl Into<String>) -> Self {
        self.workspace_dir = Some(dir.into());
        self
    }

    /// Bounds every engine `compact` call, in-process engines included (contract §1.2: the
    /// host always bounds compact with a finite safety timeout). Default
    /// [`DEFAULT_COMPACT_TIMEOUT`].
    pub fn compact_timeout(mut self, timeout: Duration) -> Self {
        self.compact_timeout = timeout;
        self
    }

    /// Plugin hooks (`api.on` handlers) fired at the points of each turn, `/compact` and
    /// `/new` (see [`crate::hooks`]). Without it no hook fires.
    pub fn hooks(mut self, hooks: Arc<dyn HookDispatcher>) -> Self {
        self.hooks = Some(hooks);
        self
    }

    /// Builds the runtime.
    pub fn build(self) -> AgentRuntime {
        let host = match &self.backend {
            Backend::Model(_) => embedded_host(),
            Backend::Cli(spec) => spec.host(),
        };
        let cwd = std::env::current_dir()
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default();
        // Session files are recorded in sessions.json by path: keep them absolute.
        let state_dir = std::path::absolute(&self.state_dir).unwrap_or(self.state_dir);
        // What processes killed mid-write left in the outbox (never an acknowledged commit).
        crate::outbox::sweep_orphans(&state_dir);
        let selected_info_id = self.engine.info().id;
        let store = SessionStore::new(&state_dir);
        let scheduler = MaintenanceScheduler::new();
        // An engine's own compactions on the maintenance lane count in the session's
        // compactionCount, as those of a turn are (`crate::engine_passes::collect`).
        let counting = store.clone();
        scheduler.on_compactions(move |key, passes| {
            for _ in crate::engine_passes::compactions(passes) {
                crate::engine_passes::count(&counting, key);
            }
        });
        AgentRuntime {
            inner: Arc::new(Inner {
                store,
                state_dir,
                engine: self.engine,
                selected_info_id,
                selected_id: self.selected_id,
                source: self.source,
                services_backend: self.services_backend,
                backend: self.backend,
                host,
                compaction: self.compaction,
                system_prompt: self.system_prompt,
                runtime_tools: self.tools,
                max_tool_iterations: self.max_tool_iterations,
                summarizer: self.summarizer,
                history_turn_limit: self.history_turn_limit,
                durable: self.durable,
                prompt_budget_override: self.prompt_budget,
                workspace_dir: self.workspace_dir.unwrap_or_else(|| cwd.clone()),
                cwd,
                compact_timeout: self.compact_timeout,
                fallback_reason: self.fallback_reason,
                hooks: self.hooks,
                files: Mutex::new(Warm::new(crate::warm::WARM_SESSIONS)),
                histories: Mutex::new(Warm::new(crate::warm::WARM_SESSIONS)),
                sessions: Mutex::new(HashMap::new()),
                bootstrapped: Mutex::new(HashSet::new()),
                scheduler,
                subagents: Mutex::new(HashMap::new()),
                projection_epochs: Mutex::new(HashMap::new()),
                maintain_failures: Mutex::new(Vec::new()),
                outbox_gates: Mutex::new(HashMap::new()),
                retry: Mutex::new(Default::default()),
                turn_fences: Mutex::new(HashMap::new()),
                cache_model: Mutex::new(clawctx_model::prefix_cache::RequestCaches::new().ok()),
            }),
        }
    }
}

/// The agent runtime. Cheap to clone (shared state).
#[derive(Clone)]
pub struct AgentRuntime {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) store: SessionStore,
    pub(crate) state_dir: PathBuf,
    pub(crate) engine: Arc<dyn ContextEngine>,
    /// The engine's `info().id` when the runtime was built: a different id later means a
    /// quarantine put its fallback in charge.
    selected_info_id: String,
    pub(crate) selected_id: String,
    pub(crate) source: SelectionSource,
    pub(crate) backend: Backend,
    /// See [`RuntimeBuilder::services_backend`].
    pub(crate) services_backend: Option<Backend>,
    pub(crate) host: HostDescriptor,
    pub(crate) compaction: CompactionSettings,
    pub(crate) system_prompt: String,
    pub(crate) runtime_tools: Vec<Arc<dyn AgentTool>>,
    pub(crate) max_tool_iterations: usize,
    pub(crate) summarizer: Arc<dyn Summarizer>,
    pub(crate) history_turn_limit: Option<usize>,
    pub(crate) durable: bool,
    pub(crate) prompt_budget_override: Option<u64>,
    pub(crate) workspace_dir: String,
    pub(crate) cwd: String,
    pub(crate) compact_timeout: Duration,
    fallback_reason: Option<String>,
    /// Plugin hook handlers ([`crate::hooks`]).
    pub(crate) hooks: crate::hooks::Hooks,
    /// Open transcripts by path, the most recently used [`crate::warm::WARM_SESSIONS`].
    files: Mutex<Warm<Arc<Mutex<SessionFile>>>>,
    /// Prepared histories kept between turns, by transcript path (see [`crate::history`]),
    /// bounded the same way.
    histories: Mutex<Warm<History>>,
    sessions: Mutex<HashMap<String, ResolvedSession>>,
    bootstrapped: Mutex<HashSet<String>>,
    pub(crate) scheduler: MaintenanceScheduler,
    pub(crate) subagents: Mutex<HashMap<String, crate::subagent::SubagentRecord>>,
    pub(crate) projection_epochs: Mutex<HashMap<String, String>>,
    maintain_failures: Mutex<Vec<String>>,
    /// One delivery at a time of a session's outbox commits, by session id
    /// ([`crate::outbox`]).
    pub(crate) outbox_gates: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Sessions whose commits failed and wait for the retry task ([`crate::outbox`]).
    pub(crate) retry: Mutex<crate::outbox::RetryState>,
    /// The first entry of each session's turn in progress, by session id: a plugin's
    /// transcript delta read ends before it (the turn reaches the engine through
    /// `afterTurn`/`commitTurn`), see [`crate::turn`].
    pub(crate) turn_fences: Mutex<HashMap<String, String>>,
    /// The model calls of every session under OpenAI's and Anthropic's prompt-cache rules
    /// ([`crate::turn::ModelledCache`]); `None` if its converting clients could not be built.
    pub(crate) cache_model: Mutex<Option<clawctx_model::prefix_cache::RequestCaches>>,
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> Result<MutexGuard<'_, T>> {
    m.lock().map_err(|_| {
        RuntimeError::Internal("a runtime lock was poisoned by an earlier panic".into())
    })
}

pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// The compaction-aware context of an active path with the id of the entry each message came
/// from (a compaction's summary carries the compaction entry's id). Mirrors
/// `clawctx_protocol::transcript::context_messages`.
pub fn context_entries(path: &[&TranscriptEntry]) -> Vec<(String, AgentMessage)> {
    let last = path
        .iter()
        .rposition(|e| matches!(e.kind, EntryKind::Compaction(_)));
    let Some(ci) = last else {
        return path
            .iter()
            .filter_map(|e| e.context_message().map(|m| (e.id.clone(), m)))
            .collect();
    };
    let EntryKind::Compaction(c) = &path[ci].kind else {
        return Vec::new();
    };
    let mut out: Vec<(String, AgentMessage)> = path[ci]
        .context_message()
        .map(|m| (path[ci].id.clone(), m))
        .into_iter()
        .collect();
    let start = path
        .iter()
        .position(|e| e.id == c.first_kept_entry_id)
        .unwrap_or(ci + 1);
    for (i, e) in path.iter().enumerate().skip(start) {
        if i == ci || matches!(e.kind, EntryKind::Compaction(_)) {
            continue;
        }
        if let Some(m) = e.context_message() {
            out.push((e.id.clone(), m));
        }
    }
    out
}

/// Estimated tokens of messages (the one estimator).
pub fn tokens_of(messages: &[AgentMessage]) -> u64 {
    clawctx_tokens::messages_tokens(messages)
}

impl AgentRuntime {
    /// Starts building a runtime over `state_dir` with `engine` on `backend`.
    pub fn builder(
        state_dir: impl Into<PathBuf>,
        engine: Arc<dyn ContextEngine>,
        backend: Backend,
    ) -> RuntimeBuilder {
        let selected_id = engine.info().id;
        RuntimeBuilder {
            state_dir: state_dir.into(),
            engine,
            selected_id,
            source: SelectionSource::Configured,
            backend,
            compaction: CompactionSettings::default(),
            system_prompt: DEFAULT_SYSTEM_PROMPT.trim().to_owned(),
            tools: Vec::new(),
            max_tool_iterations: DEFAULT_MAX_TOOL_ITERATIONS,
            summarizer: Arc::new(ExtractiveSummarizer),
            history_turn_limit: None,
            durable: true,
            prompt_budget: None,
            workspace_dir: None,
            compact_timeout: DEFAULT_COMPACT_TIMEOUT,
            fallback_reason: None,
            services_backend: None,
            hooks: None,
        }
    }

    /// The engine in charge (its current `info().id`: a quarantined engine reports its
    /// fallback's).
    pub fn engine_id(&self) -> String {
        self.inner.engine.info().id
    }

    /// The engine.
    pub fn engine(&self) -> &Arc<dyn ContextEngine> {
        &self.inner.engine
    }

    /// Runtime services bound to the session this runtime stores under `key` (what the engine
    /// gets inside a turn: the runtime's compaction, transcript rewrites, LLM completion), with
    /// that session's id; `None` when it stores no such session. For a host that calls the
    /// engine on a stored session's behalf outside a turn (the gateway's engine API).
    pub fn session_services(
        &self,
        key: &str,
    ) -> Result<Option<(String, Arc<dyn RuntimeServices>)>> {
        if self.inner.store.get(key)?.is_none() {
            return Ok(None);
        }
        let s = self.inner.session(key)?;
        Ok(Some((s.entry.session_id.clone(), self.inner.services(&s))))
    }

    /// Names of the tools a turn offers the model and runs itself (the engine's, then the
    /// runtime's); a caller's own tools must not reuse them.
    pub fn tool_names(&self) -> Vec<String> {
        self.inner
            .tools()
            .iter()
            .map(|t| t.name().to_owned())
            .collect()
    }

    /// The execution host descriptor.
    pub fn host(&self) -> &HostDescriptor {
        &self.inner.host
    }

    /// The session store.
    pub fn store(&self) -> &SessionStore {
        &self.inner.store
    }

    /// The state directory.
    pub fn state_dir(&self) -> &Path {
        &self.inner.state_dir
    }

    /// The token arithmetic in effect.
    pub fn limits(&self) -> Limits {
        self.inner.limits()
    }

    /// Delivers every session's durable-turn commits waiting in the outbox, in each session's
    /// order (a server calls this when it starts: turns accepted while the engine was down
    /// before a restart reach it without waiting for their session's next turn). What cannot
    /// be delivered now is retried in the background. Answers the commits acknowledged.
    pub async fn deliver_pending_commits(&self) -> usize {
        self.inner.deliver_all().await
    }

    /// Sessions whose accepted turns wait in the outbox for their engine, and why the last
    /// delivery failed (see [`crate::outbox`]).
    pub fn commit_retry_status(&self) -> crate::outbox::RetryStatus {
        self.inner.retry_status()
    }

    /// Why the engine is not serving now, `None` when it is: its store cannot be reached
    /// ([`ContextEngine::probe`], bounded to 3 s), or accepted turns still wait in the outbox
    /// for it (a readiness probe: a load balancer should send new turns elsewhere meanwhile).
    /// When the store answers and turns wait, they are delivered first (up to 3 s more), so the
    /// engine reads as serving as soon as its store is back.
    pub async fn engine_not_serving(&self) -> Option<String> {
        let probe = tokio::time::timeout(Duration::from_secs(3), self.inner.engine.probe()).await;
        match probe {
            Err(_) => {
                return Some(format!(
                    "context engine \"{}\" did not answer its readiness probe within 3 s",
                    self.inner.selected_id
                ))
            }
            Ok(Err(e)) if e.is_unavailable() => return Some(e.to_string()),
            Ok(_) => {}
        }
        if self.commit_retry_status().sessions > 0 {
            // The store answers: deliver the waiting commits now rather than at the retry
            // task's next attempt (up to 30 s away on an idle gateway). On a task of its own,
            // so a probe that stops waiting never drops a commit mid-call.
            let inner = self.inner.clone();
            let delivery = tokio::spawn(async move { inner.deliver_waiting_now().await });
            let _ = tokio::time::timeout(Duration::from_secs(3), delivery).await;
        }
        let waiting = self.commit_retry_status();
        if waiting.sessions > 0 {
            return Some(format!(
                "accepted turns of {} session(s) wait in the outbox for the context engine: {}",
                waiting.sessions,
                waiting.last_failure.unwrap_or_default()
            ));
        }
        None
    }

    /// The `runtimeSettings` every engine call receives.
    pub fn runtime_settings(&self) -> RuntimeSettings {
        self.inner.runtime_settings()
    }

    /// The background maintenance scheduler.
    pub fn scheduler(&self) -> &MaintenanceScheduler {
        &self.inner.scheduler
    }

    /// Failed maintain calls so far (inline and background), as logged.
    pub fn maintain_failures(&self) -> Vec<String> {
        let mut out = self
            .inner
            .maintain_failures
            .lock()
            .map(|f| f.clone())
            .unwrap_or_default();
        out.extend(self.inner.scheduler.failures());
        out
    }

    /// Waits for background maintenance to settle.
    pub async fn wait_for_maintenance(&self) {
        self.inner.scheduler.wait_idle().await
    }

    /// Waits for the background maintenance of one session to settle (a turn schedules it
    /// before the turn ends).
    pub async fn wait_for_session_maintenance(&self, session_key: &str) {
        self.inner.scheduler.wait_lane_idle(session_key).await
    }

    /// Stops background maintenance (its runs see their abort signal fire; those still
    /// running after [`MAINTENANCE_SHUTDOWN_GRACE`] are left behind, logged) and disposes the
    /// engine.
    pub async fn shutdown(&self) {
        self.inner.scheduler.shutdown();
        if tokio::time::timeout(MAINTENANCE_SHUTDOWN_GRACE, self.inner.scheduler.wait_idle())
            .await
            .is_err()
        {
            tracing::warn!(
                "background context-engine maintenance did not stop within {} s of shutdown; not waiting for it",
                MAINTENANCE_SHUTDOWN_GRACE.as_secs()
            );
        }
        if let Err(e) = self.inner.engine.dispose().await {
            tracing::warn!("context engine dispose failed: {e}");
        }
    }

    /// Resolves `key` to its current session (creating it when new).
    pub fn session(&self, key: &str) -> Result<ResolvedSession> {
        self.inner.session(key)
    }

    /// `/new`: points `key` at a brand-new session. The old transcript stays on disk. Plugin
    /// hooks see the old session end (`before_reset`, `session_end` with reason `new`); the
    /// new one's `session_start` comes with its first turn.
    pub async fn new_session(&self, key: &str) -> Result<ResolvedSession> {
        let hooked = self
            .inner
            .hooks
            .as_ref()
            .is_some_and(|d| d.has("before_reset") || d.has("session_end"));
        // The session being replaced, when there is one and a plugin wants to see it end.
        let old = if hooked && self.inner.store.get(key)?.is_some() {
            Some(self.inner.session(key)?)
        } else {
            None
        };
        let messages: Vec<AgentMessage> = match old.as_ref().map(|o| self.inner.history(o)) {
            Some(Ok(h)) => h.into_iter().map(|(_, m)| m).collect(),
            Some(Err(e)) => {
                tracing::warn!(
                    "[hooks] session_end: cannot read the ending session's context: {e}"
                );
                Vec::new()
            }
            None => Vec::new(),
        };
        let s = self.inner.store.new_session(key)?;
        lock(&self.inner.sessions)?.insert(key.to_owned(), s.clone());
        if let Some(old) = &old {
            crate::hooks::HookSite::session(&self.inner, old)
                .session_reset(&messages, &s)
                .await;
        }
        Ok(s)
    }

    /// Whether `key` names a session the store knows (reading never creates one: views
    /// that only look, such as the dashboard's, ask this before [`Self::context`] and
    /// [`Self::status`], which create a session for a new key).
    pub fn knows(&self, key: &str) -> Result<bool> {
        Ok(self.inner.store.get(key)?.is_some())
    }

    /// The compaction-aware context of `key`'s transcript (what the next turn starts from).
    pub fn context(&self, key: &str) -> Result<Vec<AgentMessage>> {
        let s = self.inner.session(key)?;
        Ok(self
            .inner
            .history(&s)?
            .into_iter()
            .map(|(_, m)| m)
            .collect())
    }

    /// `/status`: tokens used against the budget, the engine in charge.
    pub fn status(&self, key: &str) -> Result<SessionStatus> {
        let s = self.inner.session(key)?;
        let history = self.inner.history(&s)?;
        let messages: Vec<AgentMessage> = history.into_iter().map(|(_, m)| m).collect();
        let info = self.inner.engine.info();
        let file = self.inner.file(&s.transcript_path)?;
        let compactions = lock(&file)?
            .active_path()
            .iter()
            .filter(|e| matches!(e.kind, EntryKind::Compaction(_)))
            .count();
        Ok(SessionStatus {
            session_key: s.key.clone(),
            session_id: s.entry.session_id.clone(),
            transcript: s.transcript_path.clone(),
            engine_id: info.id,
            engine_name: info.name,
            owns_compaction: info.owns_compaction.unwrap_or(false),
            host: self.inner.host.label.clone(),
            model: self.inner.model_ref(),
            context_messages: messages.len(),
            context_tokens: tokens_of(&messages),
            limits: self.inner.limits(),
            compactions,
        })
    }
}

/// What `/status` shows.
#[derive(Clone, Debug, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionStatus {
    /// Session key.
    pub session_key: String,
    /// Current session id.
    pub session_id: String,
    /// Transcript file.
    pub transcript: PathBuf,
    /// Engine in charge.
    pub engine_id: String,
    /// Its display name.
    pub engine_name: String,
    /// Whether it owns compaction.
    pub owns_compaction: bool,
    /// Execution host label.
    pub host: String,
    /// `provider/model` (or the CLI backend id).
    pub model: String,
    /// Messages in the context.
    pub context_messages: usize,
    /// Their estimated tokens.
    pub context_tokens: u64,
    /// The budget.
    pub limits: Limits,
    /// Compaction entries on the active branch.
    pub compactions: usize,
}

impl Inner {
    /// The compactions an engine ran on its own during a turn (`passes`, from
    /// [`crate::engine_passes::collect`], which counted them in `compactionCount` as they
    /// were reported) as the turn's records.
    pub(crate) fn engine_pass_records(
        &self,
        passes: &[clawctx_summarize::observe::CompactionCall],
    ) -> Vec<crate::turn::CompactionRecord> {
        crate::engine_passes::compactions(passes)
            .map(|p| crate::turn::CompactionRecord {
                trigger: "engine".into(),
                by: p.engine.to_owned(),
                tokens_before: 0,
                tokens_after: None,
                micros: p.took.as_micros() as u64,
            })
            .collect()
    }

    pub(crate) fn limits(&self) -> Limits {
        let (window, max_out) = match &self.backend {
            Backend::Model(b) => (b.context_window, b.max_output_tokens),
            Backend::Cli(_) => (DEFAULT_CONTEXT_WINDOW, DEFAULT_MAX_OUTPUT_TOKENS),
        };
        let mut reserve = effective_reserve_tokens(&self.compaction, Some(window));
        if self.engine.info().owns_compaction() {
            // The reserve is headroom for the runtime's own compaction (the turn's growth
            // before its trigger fires, the summary call); an engine that owns compaction
            // compacts at its own threshold below its budget, so it keeps only a margin for
            // estimation error and what a turn adds between assembles: at most a quarter of
            // the window (docs/budget.md). Half the window, the legacy cap, left an engine
            // 2,900 tokens of an 8,000-token window.
            reserve = reserve.min(window / OWNING_ENGINE_RESERVE_DIVISOR);
        }
        let budget = self
            .prompt_budget_override
            .unwrap_or_else(|| window.saturating_sub(max_out).saturating_sub(reserve))
            .max(MIN_PROMPT_BUDGET);
        Limits {
            context_window: window,
            max_output_tokens: max_out,
            reserve_tokens: reserve,
            prompt_budget: budget,
        }
    }

    pub(crate) fn model_ref(&self) -> String {
        match &self.backend {
            Backend::Model(b) => b.resolved_ref(),
            Backend::Cli(spec) => format!("cli:{}", spec.id),
        }
    }

    pub(crate) fn runtime_settings(&self) -> RuntimeSettings {
        let limits = self.limits();
        let (requested, resolved, provider) = match &self.backend {
            Backend::Model(b) => (
                b.requested.clone(),
                Some(b.resolved_ref()),
                Some(b.provider_id.clone()),
            ),
            Backend::Cli(spec) => (
                Some(spec.id.clone()),
                Some(spec.id.clone()),
                Some(format!("cli:{}", spec.id)),
            ),
        };
        // A bare model id that resolved to `provider/model` is the same model, not a fallback.
        let requested = match (&requested, &resolved) {
            (Some(r), Some(full)) if full.ends_with(&format!("/{r}")) => Some(full.clone()),
            _ => requested,
        };
        build_runtime_settings(&RuntimeSettingsInput {
            requested_model: requested,
            resolved_model: resolved,
            provider,
            selected_id: Some(self.selected_id.clone()),
            source: Some(self.source),
            host: Some(self.host.clone()),
            prompt_token_budget: Some(limits.prompt_budget as f64),
            max_output_tokens: Some(limits.max_output_tokens as f64),
            harness_id: Some(self.host.id.clone()),
            // A quarantined engine's guard reports its fallback's info: the run is degraded.
            degraded_reason: (self.engine.info().id != self.selected_info_id)
                .then(|| "runtime_unavailable".to_owned()),
            fallback_reason: self.fallback_reason.clone(),
            ..Default::default()
        })
    }

    pub(crate) fn session_target(&self, s: &ResolvedSession) -> ContextEngineSessionTarget {
        ContextEngineSessionTarget {
            agent_id: Some(s.agent_id.clone()),
            session_id: Some(s.entry.session_id.clone()),
            session_key: Some(s.key.clone()),
            store_path: None,
            thread_id: None,
        }
    }

    /// `runtimeContext` for a call on session `s`. `trigger` goes under
    /// [`COMPACTION_TRIGGER_KEY`]; `background` grants deferred compaction execution.
    pub(crate) fn runtime_context(
        &self,
        s: &ResolvedSession,
        current_tokens: Option<u64>,
        trigger: Option<&str>,
        background: bool,
    ) -> ContextEngineRuntimeContext {
        let mut extra = JsonMap::new();
        if let Some(t) = trigger {
            extra.insert(COMPACTION_TRIGGER_KEY.into(), Value::String(t.to_owned()));
        }
        extra.insert("provider".into(), Value::String(self.model_ref()));
        ContextEngineRuntimeContext {
            cwd: Some(self.cwd.clone()),
            workspace_dir: Some(self.workspace_dir.clone()),
            allow_deferred_compaction_execution: background.then_some(true),
            token_budget: Some(self.limits().prompt_budget),
            agent_harness_id: Some(self.host.id.clone()),
            current_token_count: current_tokens.map(|t| t as f64),
            agent_id: Some(s.agent_id.clone()),
            session_key: Some(s.key.clone()),
            session_target: Some(self.session_target(s)),
            session_file: Some(s.transcript_path.to_string_lossy().into_owned()),
            prompt_cache: None,
            transcript_storage: None,
            extra,
        }
    }

    /// The call context (abort + services bound to session `s`).
    pub(crate) fn call_context(
        self: &Arc<Self>,
        s: &ResolvedSession,
        abort: Option<&AbortSignal>,
    ) -> CallContext {
        let mut cx = CallContext::none().with_services(self.services(s));
        if let Some(a) = abort {
            cx = cx.with_abort(a.clone());
        }
        cx
    }

    pub(crate) fn services(self: &Arc<Self>, s: &ResolvedSession) -> Arc<dyn RuntimeServices> {
        Arc::new(SessionServices {
            inner: self.clone(),
            session: s.clone(),
        })
    }

    pub(crate) fn session(&self, key: &str) -> Result<ResolvedSession> {
        if let Some(s) = lock(&self.sessions)?.get(key) {
            if s.transcript_path.exists() {
                return Ok(s.clone());
            }
        }
        let s = self.store.resolve(key)?;
        lock(&self.sessions)?.insert(key.to_owned(), s.clone());
        Ok(s)
    }

    pub(crate) fn forget_session(&self, key: &str) {
        if let Ok(mut m) = self.sessions.lock() {
            m.remove(key);
        }
    }

    /// The open transcript at `path` (shared by the turn loop and the runtime services).
    pub(crate) fn file(&self, path: &Path) -> Result<Arc<Mutex<SessionFile>>> {
        let mut files = lock(&self.files)?;
        if let Some(f) = files.get(path) {
            return Ok(f.clone());
        }
        let mut f = SessionFile::open(path)?;
        for w in f.warnings() {
            tracing::warn!("{w}");
        }
        f.set_sync_writes(self.durable);
        let f = Arc::new(Mutex::new(f));
        // A transcript someone still holds (a turn, a runtime service) stays open.
        files.insert(path.to_owned(), f.clone(), |held| {
            Arc::strong_count(held) > 1
        });
        Ok(f)
    }

    /// The session's compaction-aware context with entry ids (re-read from disk first).
    pub(crate) fn history(&self, s: &ResolvedSession) -> Result<Vec<(String, AgentMessage)>> {
        let file = self.file(&s.transcript_path)?;
        let mut f = lock(&file)?;
        f.refresh()?;
        Ok(context_entries(&f.active_path()))
    }

    pub(crate) fn append(&self, s: &ResolvedSession, message: AgentMessage) -> Result<String> {
        let file = self.file(&s.transcript_path)?;
        let mut f = lock(&file)?;
        Ok(f.append_message(message)?)
    }

    /// The session's prepared history, up to date with its transcript. It leaves the runtime's
    /// keeping: a turn gives it back with [`Self::put_history`] when it is done (one that
    /// fails does not, and the next turn rebuilds it from the transcript).
    pub(crate) fn take_history(&self, s: &ResolvedSession) -> Result<History> {
        let mut h = lock(&self.histories)?
            .remove(&s.transcript_path)
            .unwrap_or_default();
        self.sync_history(s, &mut h)?;
        Ok(h)
    }

    /// Brings `h` up to date with `s`'s transcript (re-read from disk first).
    pub(crate) fn sync_history(&self, s: &ResolvedSession, h: &mut History) -> Result<()> {
        let file = self.file(&s.transcript_path)?;
        let mut f = lock(&file)?;
        f.refresh()?;
        h.sync(&f);
        Ok(())
    }

    /// Keeps `h` for the session's next turn.
    pub(crate) fn put_history(&self, s: &ResolvedSession, h: History) {
        if let Ok(mut m) = self.histories.lock() {
            m.insert(s.transcript_path.clone(), h, |_| false);
        }
    }

    /// Whether `s`'s transcript has no entry yet (a session file that did not exist before
    /// this turn, for the purpose of `bootstrap`).
    pub(crate) fn transcript_is_empty(&self, s: &ResolvedSession) -> Result<bool> {
        let file = self.file(&s.transcript_path)?;
        let mut f = lock(&file)?;
        f.refresh()?;
        Ok(f.entries().is_empty())
    }

    /// Records that the engine has seen session `s` without calling `bootstrap` (a session
    /// that starts empty has nothing to import).
    pub(crate) fn mark_bootstrapped(&self, s: &ResolvedSession) -> Result<()> {
        lock(&self.bootstrapped)?.insert(s.entry.session_id.clone());
        Ok(())
    }

    /// Calls `bootstrap` the first time the engine sees session `s` (then `maintain`, reason
    /// `bootstrap`). Failures are logged; the turn goes on.
    pub(crate) async fn ensure_bootstrapped(
        self: &Arc<Self>,
        s: &ResolvedSession,
        abort: &AbortSignal,
    ) -> Result<()> {
        if !lock(&self.bootstrapped)?.insert(s.entry.session_id.clone()) {
            return Ok(());
        }
        if !self.engine.methods().has(Method::Bootstrap)
            || !self.host.has(HostCapability::BOOTSTRAP)
        {
            return Ok(());
        }
        let params = BootstrapParams {
            session_id: s.entry.session_id.clone(),
            session_key: Some(s.key.clone()),
            session_target: Some(self.session_target(s)),
            session_file: s.transcript_path.to_string_lossy().into_owned(),
            runtime_settings: Some(self.runtime_settings()),
            runtime_context: Some(self.runtime_context(s, None, None, false)),
        };
        match self
            .engine
            .bootstrap(&params, &self.call_context(s, Some(abort)))
            .await
        {
            Ok(r) => {
                tracing::debug!(bootstrapped = r.bootstrapped, imported = ?r.imported_messages, "context engine bootstrap")
            }
            Err(EngineError::Aborted { reason }) => return Err(RuntimeError::Aborted(reason)),
            Err(e) => tracing::warn!("context engine bootstrap failed: {e}"),
        }
        self.maintain(s, MaintenanceReason::Bootstrap).await;
        Ok(())
    }

    /// Runs `maintain` per the engine's `turnMaintenanceMode`: background engines get a
    /// coalescing per-sessionKey lane for trigger `turn`, everything else runs inline. Never
    /// fails.
    pub(crate) async fn maintain(self: &Arc<Self>, s: &ResolvedSession, reason: MaintenanceReason) {
        if !self.engine.methods().has(Method::Maintain) || !self.host.has(HostCapability::MAINTAIN)
        {
            return;
        }
        let background = reason == MaintenanceReason::Turn
            && self.engine.info().maintenance_mode() == TurnMaintenanceMode::Background;
        let params = MaintainParams {
            session_id: s.entry.session_id.clone(),
            session_key: Some(s.key.clone()),
            session_target: Some(self.session_target(s)),
            session_file: s.transcript_path.to_string_lossy().into_owned(),
            runtime_settings: Some(self.runtime_settings()),
            runtime_context: Some(self.runtime_context(s, None, None, background)),
        };
        if background {
            let job = MaintainJob {
                engine: self.engine.clone(),
                params,
                services: self.services(s),
            };
            if self.scheduler.schedule(&s.key, job) == Scheduled::ShutDown {
                tracing::warn!("failed to schedule background context-engine maintenance");
            }
            return;
        }
        if let Err(e) = self
            .engine
            .maintain(&params, &self.call_context(s, None))
            .await
        {
            let line = maintain_failure_line(reason, &e);
            tracing::warn!("{line}");
            if let Ok(mut f) = self.maintain_failures.lock() {
                f.push(line);
            }
        }
    }

    /// The runtime's built-in summarization compaction over `s`'s real transcript (§7.4):
    /// prepare + summarize + append the `compaction` entry. `keep` = tokens kept raw.
    pub(crate) async fn builtin_compact(
        &self,
        s: &ResolvedSession,
        keep: u64,
        custom_instructions: Option<&str>,
        abort: Option<&AbortSignal>,
    ) -> std::result::Result<RuntimeCompactionOutcome, EngineError> {
        let aborted = || RuntimeCompactionOutcome {
            ok: false,
            compacted: false,
            reason: Some("compaction aborted".into()),
            result: None,
        };
        let io = |e: RuntimeError| EngineError::failed(e.to_string());
        let file = self.file(&s.transcript_path).map_err(io)?;
        let path: Vec<TranscriptEntry> = {
            let mut f = lock(&file).map_err(io)?;
            f.refresh()
                .map_err(|e| EngineError::failed(e.to_string()))?;
            // Only the part since the previous compaction's first kept entry matters (§7.4
            // window); cloning the whole branch of a long session would dominate the cost.
            let active = f.active_path();
            let start = active
                .iter()
                .rposition(|e| matches!(e.kind, EntryKind::Compaction(_)))
                .map(|ci| match &active[ci].kind {
                    EntryKind::Compaction(c) => active[..ci]
                        .iter()
                        .position(|e| e.id == c.first_kept_entry_id)
                        .unwrap_or(ci),
                    _ => ci,
                })
                .unwrap_or(0);
            active[start..].iter().map(|e| (*e).clone()).collect()
        };
        if abort.is_some_and(AbortSignal::is_aborted) {
            return Ok(aborted());
        }
        let reserve = self.limits().reserve_tokens;
        let outcome = compact_path(
            &path,
            keep,
            self.summarizer.as_ref(),
            reserve,
            custom_instructions,
        )
        .await?;
        let Some(outcome) = outcome else {
            return Ok(RuntimeCompactionOutcome {
                ok: true,
                compacted: false,
                reason: Some("nothing to compact".into()),
                result: None,
            });
        };
        if abort.is_some_and(AbortSignal::is_aborted) {
            return Ok(aborted());
        }
        lock(&file)
            .map_err(io)?
            .append_compaction(outcome.entry.clone())
            .map_err(|e| EngineError::failed(e.to_string()))?;
        tracing::info!(
            session = %s.key,
            tokens_before = outcome.entry.tokens_before,
            tokens_after = outcome.tokens_after,
            summarized = outcome.summarized_messages,
            "built-in compaction"
        );
        Ok(outcome.into())
    }

    /// How many tokens the built-in compaction keeps raw for a trigger: nothing for a manual
    /// `/compact` (a hard checkpoint), otherwise the configured keep-recent capped so the kept
    /// part fits the prompt budget with room to spare.
    pub(crate) fn keep_for(&self, trigger: Option<&str>, force: bool) -> u64 {
        let budget = self.limits().prompt_budget;
        match trigger {
            Some("manual") => 0,
            Some("overflow") | Some("preflight") => {
                self.compaction.keep_recent_tokens.min(budget / 4)
            }
            None if force => 0,
            _ => self.compaction.keep_recent_tokens.min(budget / 2),
        }
    }

    /// Follows a compaction successor (§1.3): when the result names another session id, the
    /// session key is re-pointed at it and the successor session is returned.
    pub(crate) fn follow_successor(
        &self,
        s: &ResolvedSession,
        result: &CompactResult,
    ) -> Result<Option<ResolvedSession>> {
        let Some(detail) = &result.result else {
            return Ok(None);
        };
        let Some(successor) = detail
            .successor_session_id()
            .map(str::trim)
            .filter(|id| !id.is_empty())
        else {
            return Ok(None);
        };
        if successor == s.entry.session_id {
            return Ok(None);
        }
        let successor = successor.to_owned();
        let session_file = detail.session_file.clone().filter(|f| !f.trim().is_empty());
        self.store.update(&s.key, |e| {
            e.session_id = successor.clone();
            e.session_file = session_file.clone();
        })?;
        self.forget_session(&s.key);
        let next = self.store.resolve(&s.key)?;
        lock(&self.sessions)?.insert(s.key.clone(), next.clone());
        tracing::info!(session = %s.key, from = %s.entry.session_id, to = %next.entry.session_id, "following compaction successor");
        Ok(Some(next))
    }

    /// Calls the engine's `compact` for session `s`, follows a successor, records the
    /// compaction and runs maintenance (reason `compaction`).
    pub(crate) async fn engine_compact(
        self: &Arc<Self>,
        s: &ResolvedSession,
        params: CompactParams,
        trigger: &str,
        abort: Option<&AbortSignal>,
    ) -> Result<(CompactResult, Option<ResolvedSession>)> {
        let mut params = params;
        params.session_id = s.entry.session_id.clone();
        params.session_key = Some(s.key.clone());
        params.agent_id = Some(s.agent_id.clone());
        params.session_target = Some(self.session_target(s));
        params.token_budget = Some(self.limits().prompt_budget);
        params.runtime_settings = Some(self.runtime_settings());
        params.runtime_context =
            Some(self.runtime_context(s, params.current_token_count, Some(trigger), false));
        let engine_id = self.engine.info().id;
        let timeout = self.compact_timeout;
        let hooked = self.compaction_hooks_before(s).await;
        // The pass the engine reports for it is this compaction, recorded below: not also an
        // engine's own compaction of the enclosing turn.
        let result = match crate::engine_passes::ignore(tokio::time::timeout(
            timeout,
            self.engine.compact(&params, &self.call_context(s, abort)),
        ))
        .await
        {
            Ok(r) => r,
            Err(_) => Err(EngineError::failed(format!(
                "compact timed out after {} s",
                timeout.as_secs_f64()
            ))),
        }
        .map_err(|e| RuntimeError::engine(&engine_id, "compact", e))?;
        let successor = self.follow_successor(s, &result)?;
        if let (Some(before), true) = (hooked, result.ok) {
            self.compaction_hooks_after(successor.as_ref().unwrap_or(s), before)
                .await;
        }
        if result.compacted {
            let target = successor.as_ref().unwrap_or(s);
            if let Err(e) = self.store.record_compaction(&target.key) {
                tracing::warn!("cannot record the compaction in sessions.json: {e}");
            }
            self.maintain(target, MaintenanceReason::Compaction).await;
        }
        Ok((result, successor))
    }

    /// `before_compaction` with the context about to be compacted. Answers the context's
    /// length when a plugin has either compaction hook (what `after_compaction` reports the
    /// compaction against), `None` when none has.
    pub(crate) async fn compaction_hooks_before(
        self: &Arc<Self>,
        s: &ResolvedSession,
    ) -> Option<usize> {
        let site = crate::hooks::HookSite::session(self, s);
        if !site.wants("before_compaction") && !site.wants("after_compaction") {
            return None;
        }
        let messages: Vec<AgentMessage> = match self.history(s) {
            Ok(h) => h.into_iter().map(|(_, m)| m).collect(),
            Err(e) => {
                tracing::warn!("[hooks] before_compaction: cannot read the context: {e}");
                Vec::new()
            }
        };
        site.before_compaction(&messages, tokens_of(&messages))
            .await;
        Some(messages.len())
    }

    /// `after_compaction` with the context the compaction left (`before` messages before it).
    pub(crate) async fn compaction_hooks_after(
        self: &Arc<Self>,
        s: &ResolvedSession,
        before: usize,
    ) {
        let site = crate::hooks::HookSite::session(self, s);
        if !site.wants("after_compaction") {
            return;
        }
        let messages: Vec<AgentMessage> = match self.history(s) {
            Ok(h) => h.into_iter().map(|(_, m)| m).collect(),
            Err(e) => {
                tracing::warn!("[hooks] after_compaction: cannot read the context: {e}");
                return;
            }
        };
        site.after_compaction(before, &messages, tokens_of(&messages))
            .await;
    }

    /// The tools offered to the model: the engine's, then the runtime's (first name wins).
    pub(crate) fn tools(&self) -> Vec<Arc<dyn AgentTool>> {
        let mut seen = HashSet::new();
        self.engine
            .tools()
            .into_iter()
            .chain(self.runtime_tools.iter().cloned())
            .filter(|t| seen.insert(t.name().to_owned()))
            .collect()
    }
}

/// The runtime services bound to one session: what `runtimeContext` offers engines.
struct SessionServices {
    inner: Arc<Inner>,
    session: ResolvedSession,
}

#[async_trait]
impl RuntimeServices for SessionServices {
    async fn rewrite_transcript_entries(
        &self,
        request: TranscriptRewriteRequest,
    ) -> TranscriptRewriteResult {
        let file = match self.inner.file(&self.session.transcript_path) {
            Ok(f) => f,
            Err(e) => {
                return TranscriptRewriteResult {
                    reason: Some(e.to_string()),
                    ..Default::default()
                }
            }
        };
        let result = match file.lock() {
            Ok(mut f) => f.rewrite_transcript_entries(&request),
            Err(_) => TranscriptRewriteResult {
                reason: Some("transcript lock poisoned".into()),
                ..Default::default()
            },
        };
        if result.changed {
            let n = result.rewritten_entries;
            tracing::info!(
                "[transcript-rewrite] rewrote {n} {} bytesFreed={} sessionKey={}",
                if n == 1 { "entry" } else { "entries" },
                result.bytes_freed,
                self.session.key
            );
        }
        result
    }

    async fn llm_complete(
        &self,
        request: LlmCompleteRequest,
    ) -> std::result::Result<LlmCompleteResult, EngineError> {
        let backend = self
            .inner
            .services_backend
            .as_ref()
            .unwrap_or(&self.inner.backend);
        let Backend::Model(binding) = backend else {
            return Err(EngineError::failed(
                "runtime LLM completion is not available on a CLI backend host",
            ));
        };
        let mut messages = request.messages.clone();
        if !request.prompt.trim().is_empty() {
            messages.push(AgentMessage::user(request.prompt.clone()));
        }
        let model = request
            .model
            .as_deref()
            .map(|m| m.rsplit_once('/').map_or(m, |(_, id)| id).to_owned())
            .unwrap_or_else(|| binding.model_id.clone());
        let completion = binding
            .provider
            .complete(
                CompletionRequest {
                    model,
                    system_prompt: request.system.clone(),
                    messages,
                    tools: Vec::new(),
                    max_output_tokens: request.max_tokens.or(Some(binding.max_output_tokens)),
                    temperature: None,
                    sampling: Default::default(),
                    cache_key: None,
                },
                None,
                &CancellationToken::new(),
            )
            .await
            .map_err(|e| EngineError::failed(e.to_string()))?;
        Ok(LlmCompleteResult {
            usage: completion.message.usage.clone(),
            text: completion.text(),
        })
    }

    async fn read_transcript_delta(
        &self,
        request: TranscriptDeltaRequest,
    ) -> std::result::Result<TranscriptDelta, EngineError> {
        let own = &self.session.entry.session_id;
        let asked = (
            request.session_id.as_deref(),
            request.session_key.as_deref(),
        );
        if asked.0.is_some_and(|id| id != own) || asked.1.is_some_and(|k| k != self.session.key) {
            return Err(EngineError::failed(format!(
                "the transcript of session {:?} (key {:?}) was asked for, but this call is bound to session {own:?} (key {:?})",
                asked.0.unwrap_or(""),
                asked.1.unwrap_or(""),
                self.session.key
            )));
        }
        if !self.session.transcript_path.exists() {
            return Ok(TranscriptDelta::Missing);
        }
        let fence = lock(&self.inner.turn_fences)
            .map_err(|e| EngineError::failed(e.to_string()))?
            .get(own)
            .cloned();
        let file = self
            .inner
            .file(&self.session.transcript_path)
            .map_err(|e| EngineError::failed(e.to_string()))?;
        let mut f = lock(&file).map_err(|e| EngineError::failed(e.to_string()))?;
        f.refresh()
            .map_err(|e| EngineError::failed(e.to_string()))?;
        f.visible_message_delta(&request, &self.session.agent_id, fence.as_deref())
            .map_err(|e| EngineError::failed(e.to_string()))
    }

    async fn compact_session(
        &self,
        request: RuntimeCompactionRequest,
    ) -> std::result::Result<RuntimeCompactionOutcome, EngineError> {
        if request.session_id.trim() != self.session.entry.session_id {
            return Err(EngineError::failed(format!(
                "runtime compaction was asked for session {:?} but this runtime context is bound to session {:?}",
                request.session_id, self.session.entry.session_id
            )));
        }
        let trigger = request
            .runtime_fields
            .get(COMPACTION_TRIGGER_KEY)
            .and_then(Value::as_str);
        let keep = self.inner.keep_for(trigger, request.force == Some(true));
        self.inner
            .builtin_compact(
                &self.session,
                keep,
                request.custom_instructions.as_deref(),
                request.abort.as_ref(),
            )
            .await
    }
}

/// The provider of an embedded backend (for callers that need it directly).
pub fn provider_of(backend: &Backend) -> Option<Arc<dyn ModelProvider>> {
    match backend {
        Backend::Model(b) => Some(b.provider.clone()),
        Backend::Cli(_) => None,
    }
}

/// Checks the engine's requirements for `operation` on this runtime's host (fail closed with
/// the exact §5 text).
pub(crate) fn check_host(inner: &Inner, operation: ContextEngineOperation) -> Result<()> {
    assert_host_requirements(&inner.engine.info(), operation, &inner.host).map_err(|e| match e {
        EngineError::HostRequirement(text) => RuntimeError::HostRequirement(text),
        other => RuntimeError::HostRequirement(other.to_string()),
    })
}
