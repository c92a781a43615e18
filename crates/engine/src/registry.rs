//! The engine registry: owner-scoped registration (contract §3.1), the process quarantine
//! (§4.2) and the log sink the guard writes to.
//!
//! With a [`HealthMirror`] attached ([`ContextEngineRegistry::attach_health_mirror`]), every
//! quarantine this registry records is also written to the persisted mirror (§4.4), and
//! removed from it when it clears here, so other processes (`clawctx doctor`) can see it. The
//! in-memory record stays the only one that decides anything: the mirror is for visibility.
//!
//! OpenClaw keeps one process-global registry so that every copy of the module sees the same
//! engines; here that is [`global_registry`]. Tests and embedders that want isolation create
//! their own [`ContextEngineRegistry`]. Registration never throws for conflicts: it returns a
//! [`RegisterOutcome`] naming the existing owner.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, LazyLock, Mutex, RwLock};
use std::time::SystemTime;

use clawctx_summarize::Summarizer;
use futures::future::BoxFuture;
use serde_json::Value;

use crate::engine::ContextEngine;
use crate::error::EngineError;
use crate::health_mirror::HealthMirror;

/// The default engine id, reserved for the core owner.
pub const DEFAULT_ENGINE_ID: &str = "legacy";
/// The owner of core engines.
pub const CORE_OWNER: &str = "core";

/// What a factory receives (§3.2). `config` is the same `Arc` that was passed to resolve.
#[derive(Clone, Default)]
pub struct FactoryContext {
    /// The whole config, when resolve got one.
    pub config: Option<Arc<Value>>,
    /// The agent's directory.
    pub agent_dir: Option<PathBuf>,
    /// The agent's bootstrap workspace.
    pub workspace_dir: Option<PathBuf>,
    /// The host's summarizer (see [`ContextEngineRegistry::set_host_summarizer`]), for engines
    /// that summarize on their own; `None` means the host has no model to offer. It may fail:
    /// an engine keeps its own last resort (e.g. `clawctx_summarize::FallbackSummarizer`).
    pub host_summarizer: Option<Arc<dyn Summarizer>>,
}

impl std::fmt::Debug for FactoryContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FactoryContext")
            .field("config", &self.config)
            .field("agent_dir", &self.agent_dir)
            .field("workspace_dir", &self.workspace_dir)
            .field(
                "host_summarizer",
                &self.host_summarizer.as_ref().map(|s| s.name().to_owned()),
            )
            .finish()
    }
}

/// A factory: builds a fresh engine per resolution.
pub type Factory = Arc<
    dyn Fn(FactoryContext) -> BoxFuture<'static, Result<Arc<dyn ContextEngine>, EngineError>>
        + Send
        + Sync,
>;

/// Makes a [`Factory`] from an async closure.
pub fn factory<F, Fut>(f: F) -> Factory
where
    F: Fn(FactoryContext) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<Arc<dyn ContextEngine>, EngineError>> + Send + 'static,
{
    Arc::new(move |ctx| Box::pin(f(ctx)))
}

/// Whether a registration may serve runs or only discovery.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Lifecycle {
    /// A live factory.
    #[default]
    Runtime,
    /// Discovery only: resolution warns and uses the default, never calls the factory.
    ReadOnlyDiscovery,
}

/// Options of [`ContextEngineRegistry::register_for_owner`].
#[derive(Clone, Copy, Debug, Default)]
pub struct RegisterOptions {
    /// Lets the same owner replace its own factory.
    pub allow_same_owner_refresh: bool,
    /// Lifecycle of the new entry.
    pub lifecycle: Lifecycle,
}

/// Result of a registration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RegisterOutcome {
    /// `{ok: true}`.
    Ok,
    /// `{ok: false, existingOwner}`: nothing was stored.
    Conflict {
        /// Who holds the id.
        existing_owner: String,
    },
}

/// A stored registration.
#[derive(Clone)]
pub struct Registration {
    /// The factory.
    pub factory: Factory,
    /// `core`, `plugin:<id>`, `test:<id>`, ...
    pub owner: String,
    /// Lifecycle.
    pub lifecycle: Lifecycle,
}

impl std::fmt::Debug for Registration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registration")
            .field("owner", &self.owner)
            .field("lifecycle", &self.lifecycle)
            .finish()
    }
}

/// The plugin id in an owner of the form `plugin:<id>`.
pub fn owner_plugin_id(owner: &str) -> Option<&str> {
    owner.strip_prefix("plugin:").filter(|s| !s.is_empty())
}

/// A quarantine record (§4.2).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct QuarantineRecord {
    /// The registered id.
    pub engine_id: String,
    /// Its owner, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// `resolve`, `factory`, `contract-validation`, or a guarded method name.
    pub operation: String,
    /// `error.message`.
    pub reason: String,
    /// When it failed (epoch ms on the wire).
    #[serde(serialize_with = "ser_epoch_ms")]
    pub failed_at: SystemTime,
}

fn ser_epoch_ms<S: serde::Serializer>(t: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
    let ms = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    s.serialize_u64(ms)
}

/// Log levels the registry emits at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogLevel {
    /// Warnings (read-only discovery fallback, degraded turns).
    Warn,
    /// Errors (quarantine).
    Error,
}

/// Where registry and guard log lines go. The default forwards to `tracing`; tests install a
/// collecting sink to assert the exact text.
pub trait EngineLogger: Send + Sync {
    /// Emits one line.
    fn log(&self, level: LogLevel, line: &str);
}

/// Forwards to `tracing`.
#[derive(Debug, Default)]
pub struct TracingLogger;

impl EngineLogger for TracingLogger {
    fn log(&self, level: LogLevel, line: &str) {
        match level {
            LogLevel::Warn => tracing::warn!("{line}"),
            LogLevel::Error => tracing::error!("{line}"),
        }
    }
}

/// Removes terminal control characters from a log fragment (the quarantine line is built
/// from plugin-controlled text).
pub fn sanitize_for_terminal(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c == '\n' || c == '\r' || c == '\t' {
                ' '
            } else {
                c
            }
        })
        .filter(|c| !c.is_control())
        .collect()
}

/// The registry of engines plus the process quarantine.
pub struct ContextEngineRegistry {
    entries: RwLock<BTreeMap<String, Registration>>,
    quarantine: Mutex<BTreeMap<String, QuarantineRecord>>,
    logger: RwLock<Arc<dyn EngineLogger>>,
    host_summarizer: RwLock<Option<Arc<dyn Summarizer>>>,
    health_mirror: RwLock<Option<Arc<HealthMirror>>>,
    active: bool,
    default_id: String,
}

impl Default for ContextEngineRegistry {
    fn default() -> Self {
        Self::new()
    }
}

impl ContextEngineRegistry {
    /// An empty, active registry (quarantine clears happen on registration).
    pub fn new() -> Self {
        Self {
            entries: RwLock::new(BTreeMap::new()),
            quarantine: Mutex::new(BTreeMap::new()),
            logger: RwLock::new(Arc::new(TracingLogger)),
            host_summarizer: RwLock::new(None),
            health_mirror: RwLock::new(None),
            active: true,
            default_id: DEFAULT_ENGINE_ID.to_owned(),
        }
    }

    /// A builder (non-active) registry: runtime registrations defer their quarantine clears
    /// until [`Self::activate`].
    pub fn new_builder() -> Self {
        Self {
            active: false,
            ..Self::new()
        }
    }

    /// An active registry with `legacy` registered by `core`.
    pub fn with_legacy() -> Self {
        let r = Self::new();
        r.ensure_initialized();
        r
    }

    /// The default engine id (`legacy`).
    pub fn default_id(&self) -> &str {
        &self.default_id
    }

    /// Replaces the log sink.
    pub fn set_logger(&self, logger: Arc<dyn EngineLogger>) {
        if let Ok(mut l) = self.logger.write() {
            *l = logger;
        }
    }

    /// Offers `summarizer` (the host's model, e.g. an LLM summarizer) to every engine built from
    /// now on, through [`FactoryContext::host_summarizer`]; `None` withdraws it. Engines that
    /// summarize on their own may use it; the runtime's built-in compaction has its own.
    pub fn set_host_summarizer(&self, summarizer: Option<Arc<dyn Summarizer>>) {
        let mut slot = self
            .host_summarizer
            .write()
            .unwrap_or_else(|p| p.into_inner());
        *slot = summarizer;
    }

    /// Mirrors this registry's quarantines to `mirror` from now on (contract §4.4). This is the
    /// mirror's activation step for the process: rows of earlier incarnations of this PID and of
    /// processes that are no longer running are dropped ([`HealthMirror::begin`]), then the
    /// records this registry already holds are written. Attach it in processes that run engines
    /// (a read-only inspection like `doctor` reads the mirror instead). The error, if any, is
    /// the mirror's: the registry works the same without it, and the mirror stays attached.
    pub fn attach_health_mirror(&self, mirror: Arc<HealthMirror>) -> Result<(), EngineError> {
        {
            let mut slot = self
                .health_mirror
                .write()
                .unwrap_or_else(|p| p.into_inner());
            *slot = Some(mirror.clone());
        }
        mirror.begin()?;
        for record in self.quarantines() {
            mirror.record(&record)?;
        }
        Ok(())
    }

    /// The attached mirror, if any.
    pub fn health_mirror(&self) -> Option<Arc<HealthMirror>> {
        self.health_mirror
            .read()
            .map(|m| m.clone())
            .unwrap_or_else(|p| p.into_inner().clone())
    }

    /// Runs `f` on the attached mirror; its error is logged, never returned (§4.4: best effort).
    fn with_mirror(&self, f: impl FnOnce(&HealthMirror) -> Result<(), EngineError>) {
        if let Some(mirror) = self.health_mirror() {
            if let Err(e) = f(&mirror) {
                tracing::warn!("{e}");
            }
        }
    }

    /// The summarizer offered to factories, if any.
    pub fn host_summarizer(&self) -> Option<Arc<dyn Summarizer>> {
        self.host_summarizer
            .read()
            .map(|s| s.clone())
            .unwrap_or_else(|p| p.into_inner().clone())
    }

    /// The context handed to factories: the resolution's paths and config plus what this
    /// registry offers (the host summarizer).
    pub(crate) fn factory_context(
        &self,
        config: Option<Arc<Value>>,
        agent_dir: Option<PathBuf>,
        workspace_dir: Option<PathBuf>,
    ) -> FactoryContext {
        FactoryContext {
            config,
            agent_dir,
            workspace_dir,
            host_summarizer: self.host_summarizer(),
        }
    }

    pub(crate) fn log(&self, level: LogLevel, line: &str) {
        let logger = self
            .logger
            .read()
            .map(|l| l.clone())
            .unwrap_or_else(|p| p.into_inner().clone());
        logger.log(level, line);
    }

    /// Registers `legacy` (owner `core`) once; idempotent (`ensureContextEnginesInitialized`).
    pub fn ensure_initialized(&self) {
        if self.get(&self.default_id).is_none() {
            let _ = self.register_for_owner(
                DEFAULT_ENGINE_ID,
                crate::legacy::legacy_factory(),
                CORE_OWNER,
                RegisterOptions::default(),
            );
        }
    }

    /// `api.registerContextEngine(id, factory)` for plugin `plugin_id` (owner `plugin:<id>`).
    pub fn register_plugin_engine(
        &self,
        plugin_id: &str,
        id: &str,
        factory: Factory,
    ) -> Result<RegisterOutcome, EngineError> {
        self.register_for_owner(
            id,
            factory,
            &format!("plugin:{plugin_id}"),
            RegisterOptions::default(),
        )
    }

    /// `registerContextEngineForOwner` (§3.1), checks in the contract's order.
    pub fn register_for_owner(
        &self,
        id: &str,
        factory: Factory,
        owner: &str,
        opts: RegisterOptions,
    ) -> Result<RegisterOutcome, EngineError> {
        let owner = owner.trim();
        if owner.is_empty() {
            return Err(EngineError::failed(format!(
                "registerContextEngineForOwner: owner must be a non-empty string, got {}",
                Value::String(owner.to_owned())
            )));
        }
        if id == self.default_id && owner != CORE_OWNER {
            return Ok(RegisterOutcome::Conflict {
                existing_owner: CORE_OWNER.to_owned(),
            });
        }
        let mut entries = self
            .entries
            .write()
            .map_err(|_| EngineError::failed("registry lock poisoned"))?;
        if let Some(existing) = entries.get(id) {
            if existing.owner != owner {
                return Ok(RegisterOutcome::Conflict {
                    existing_owner: existing.owner.clone(),
                });
            }
            if existing.lifecycle == Lifecycle::Runtime
                && opts.lifecycle == Lifecycle::ReadOnlyDiscovery
            {
                // Discovery must never downgrade a live factory.
                return Ok(RegisterOutcome::Ok);
            }
            if !opts.allow_same_owner_refresh {
                return Ok(RegisterOutcome::Conflict {
                    existing_owner: existing.owner.clone(),
                });
            }
        }
        entries.insert(
            id.to_owned(),
            Registration {
                factory,
                owner: owner.to_owned(),
                lifecycle: opts.lifecycle,
            },
        );
        drop(entries);
        if opts.lifecycle == Lifecycle::Runtime && self.active {
            self.clear_quarantine(id);
        }
        Ok(RegisterOutcome::Ok)
    }

    /// `activateContextEngineRegistrations`: clears quarantine for every runtime entry.
    pub fn activate(&self) {
        let ids: Vec<String> = self
            .entries
            .read()
            .map(|e| {
                e.iter()
                    .filter(|(_, r)| r.lifecycle == Lifecycle::Runtime)
                    .map(|(k, _)| k.clone())
                    .collect()
            })
            .unwrap_or_default();
        for id in ids {
            self.clear_quarantine(&id);
        }
    }

    /// `clearContextEnginesForOwner`: removes the owner's entries and their quarantines.
    pub fn clear_owner(&self, owner: &str) {
        let removed: Vec<String> = match self.entries.write() {
            Ok(mut e) => {
                let ids: Vec<String> = e
                    .iter()
                    .filter(|(_, r)| r.owner == owner)
                    .map(|(k, _)| k.clone())
                    .collect();
                for id in &ids {
                    e.remove(id);
                }
                ids
            }
            Err(_) => Vec::new(),
        };
        for id in removed {
            self.clear_quarantine(&id);
        }
    }

    /// `getContextEngineRegistration`.
    pub fn get(&self, id: &str) -> Option<Registration> {
        self.entries.read().ok().and_then(|e| e.get(id).cloned())
    }

    /// `listContextEngineIds`, sorted.
    pub fn ids(&self) -> Vec<String> {
        self.entries
            .read()
            .map(|e| e.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// Records a quarantine. First failure wins. Logs the exact line once per new record.
    /// With a mirror attached, the new record is also persisted (§4.4).
    pub fn quarantine(&self, engine_id: &str, owner: Option<&str>, operation: &str, reason: &str) {
        let inserted = match self.quarantine.lock() {
            Ok(mut q) => {
                if q.contains_key(engine_id) {
                    None
                } else {
                    let record = QuarantineRecord {
                        engine_id: engine_id.to_owned(),
                        owner: owner.map(str::to_owned),
                        operation: operation.to_owned(),
                        reason: reason.to_owned(),
                        failed_at: SystemTime::now(),
                    };
                    q.insert(engine_id.to_owned(), record.clone());
                    Some(record)
                }
            }
            Err(_) => None,
        };
        if let Some(record) = inserted {
            self.log(
                LogLevel::Error,
                &quarantine_log_line(engine_id, owner, operation, reason, &self.default_id),
            );
            self.with_mirror(|m| m.record(&record));
        }
    }

    /// Whether `engine_id` is quarantined in this process.
    pub fn is_quarantined(&self, engine_id: &str) -> bool {
        self.quarantine
            .lock()
            .map(|q| q.contains_key(engine_id))
            .unwrap_or(false)
    }

    /// Clears the quarantine of one id (and this process's mirror row of it, when it had one).
    pub fn clear_quarantine(&self, engine_id: &str) {
        let removed = match self.quarantine.lock() {
            Ok(mut q) => q.remove(engine_id).is_some(),
            Err(_) => false,
        };
        if removed {
            self.with_mirror(|m| m.clear(Some(engine_id)));
        }
    }

    /// `listContextEngineQuarantines`: this process's records, ordered by engine id.
    pub fn quarantines(&self) -> Vec<QuarantineRecord> {
        self.quarantine
            .lock()
            .map(|q| q.values().cloned().collect())
            .unwrap_or_default()
    }

    /// The health text line (§4.4), or `None` when nothing is quarantined.
    pub fn health_line(&self) -> Option<String> {
        let q = self.quarantines();
        if q.is_empty() {
            return None;
        }
        let ids: Vec<&str> = q.iter().map(|r| r.engine_id.as_str()).collect();
        Some(format!(
            "Context engine: warning ({} quarantined; downgraded to {}: {})",
            q.len(),
            self.default_id,
            ids.join(", ")
        ))
    }
}

/// The exact quarantine log line (§4.2).
pub fn quarantine_log_line(
    engine_id: &str,
    owner: Option<&str>,
    operation: &str,
    reason: &str,
    default_id: &str,
) -> String {
    let owner_part = owner
        .map(|o| format!(" owner={}", sanitize_for_terminal(o)))
        .unwrap_or_default();
    format!(
        "[context-engine] Context engine \"{}\"{} failed during {}: {}; quarantining it for this process and falling back to default engine \"{}\".",
        sanitize_for_terminal(engine_id),
        owner_part,
        sanitize_for_terminal(operation),
        sanitize_for_terminal(reason),
        default_id
    )
}

static GLOBAL: LazyLock<Arc<ContextEngineRegistry>> =
    LazyLock::new(|| Arc::new(ContextEngineRegistry::with_legacy()));

/// The process-global registry, with `legacy` registered.
pub fn global_registry() -> Arc<ContextEngineRegistry> {
    GLOBAL.clone()
}
