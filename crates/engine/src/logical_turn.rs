//! Logical-turn resolution and the turn lease (contract §3.5B, G3).
//!
//! Where standalone resolution quarantines for the process, a *logical turn* (one user turn and
//! its retries) pins one engine for its whole duration and never touches the quarantine: a
//! configured engine that is missing, discovery-only, or whose factory or contract fails makes
//! the turn run on `legacy` (degraded, with one warning), and the next turn tries the configured
//! engine again. A failure of a started operation propagates: it is not replayed on `legacy`.
//!
//! The lease also decides, per turn, whether the engine may run against the host's transcript:
//! an engine without the full durable-turn declaration (§1.7) runs the turn on `legacy`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use clawctx_protocol::{ContextEngineOperation, HostDescriptor};
use serde_json::Value;

use crate::engine::{ContextEngine, Method};
use crate::error::EngineError;
use crate::host::evaluate;
use crate::registry::{owner_plugin_id, ContextEngineRegistry, Lifecycle, LogLevel};
use crate::resolve::{configured_slot, contract_error, selection_block};

/// One engine of a logical turn.
#[derive(Clone)]
pub struct EngineRef {
    /// The engine (not wrapped in the quarantine guard: failures propagate).
    pub engine: Arc<dyn ContextEngine>,
    /// The registered id.
    pub registered_id: String,
    /// The owner plugin, when the owner is `plugin:<id>`.
    pub owner_plugin_id: Option<String>,
}

/// `resolveLogicalTurnContextEngines`.
#[derive(Clone)]
pub struct LogicalTurnEngines {
    /// The configured engine, or the fallback when it could not be used.
    pub configured: EngineRef,
    /// The slot value (the default id when unset).
    pub configured_id: String,
    /// Why the configured engine is not usable, when it is not.
    pub configured_failure: Option<String>,
    /// The default engine.
    pub fallback: EngineRef,
}

impl ContextEngineRegistry {
    /// Resolves the engines of one logical turn: the fallback first, then the configured
    /// engine. Reads and writes no quarantine.
    pub async fn resolve_logical_turn(
        self: &Arc<Self>,
        config: Option<Arc<Value>>,
        agent_dir: Option<std::path::PathBuf>,
        workspace_dir: Option<std::path::PathBuf>,
    ) -> Result<LogicalTurnEngines, EngineError> {
        let ctx = self.factory_context(config.clone(), agent_dir, workspace_dir);
        let default_id = self.default_id().to_owned();
        let fallback = EngineRef {
            engine: self.resolve_default(ctx.clone()).await?,
            registered_id: default_id.clone(),
            owner_plugin_id: None,
        };
        let cfg = config.as_deref();
        let configured_id = configured_slot(cfg).unwrap_or_else(|| default_id.clone());
        let degrade = |failure: Option<String>| LogicalTurnEngines {
            configured: fallback.clone(),
            configured_id: configured_id.clone(),
            configured_failure: failure,
            fallback: fallback.clone(),
        };
        if configured_id == default_id {
            return Ok(degrade(None));
        }
        let registration = self.get(&configured_id);
        if selection_block(cfg, &configured_id, registration.as_ref()).is_some() {
            return Ok(degrade(None));
        }
        let Some(reg) = registration else {
            return Ok(degrade(Some(format!(
                "context engine \"{configured_id}\" is not registered"
            ))));
        };
        if reg.lifecycle == Lifecycle::ReadOnlyDiscovery {
            return Ok(degrade(Some(format!(
                "context engine \"{configured_id}\" is available for discovery only"
            ))));
        }
        let engine = match (reg.factory)(ctx).await {
            Ok(e) => e,
            Err(e @ EngineError::Aborted { .. }) => return Err(e),
            Err(e) => return Ok(degrade(Some(e.to_string()))),
        };
        if let Some(msg) = contract_error(&configured_id, engine.as_ref()) {
            let _ = engine.dispose().await;
            return Ok(degrade(Some(msg)));
        }
        Ok(LogicalTurnEngines {
            configured: EngineRef {
                engine,
                registered_id: configured_id.clone(),
                owner_plugin_id: owner_plugin_id(&reg.owner).map(str::to_owned),
            },
            configured_id,
            configured_failure: None,
            fallback,
        })
    }
}

/// The degraded reason when the engine lacks the durable-turn declaration.
pub const FENCING_NOT_DECLARED: &str = "current-turn transcript fencing is not declared";
/// The degraded reason when the turn is persisted without an admission receipt.
pub const RECEIPT_UNAVAILABLE: &str = "current-turn transcript admission receipt is unavailable";
/// Error after `begin()` pinned the selection.
pub const ALREADY_PINNED: &str = "context-engine logical turn selection is already pinned";
/// Error after dispose.
pub const ALREADY_DISPOSED: &str = "context-engine logical turn lease is already disposed";

/// What the host's transcript recorder knows about the current turn.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TurnRecorderState {
    /// The user turn is already persisted.
    pub persisted: bool,
    /// An admission receipt exists for it.
    pub has_receipt: bool,
}

/// How disposal went.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CleanupOutcome {
    /// Every engine disposed in time without error.
    Clean,
    /// A disposal failed or did not finish within the deadline; the reply is not held up.
    Uncertain(String),
}

#[derive(Default)]
struct LeaseState {
    pinned: bool,
    disposed: bool,
    degraded_reason: Option<String>,
    host: Option<HostDescriptor>,
    outcome: Option<CleanupOutcome>,
}

/// The lease of one logical turn (`createContextEngineLogicalTurnLease`).
pub struct LogicalTurnLease {
    engines: LogicalTurnEngines,
    default_id: String,
    registry: Arc<ContextEngineRegistry>,
    state: Mutex<LeaseState>,
    cleanup_deadline: Duration,
}

/// The default cleanup deadline.
pub const DEFAULT_CLEANUP_DEADLINE: Duration = Duration::from_secs(10);

impl LogicalTurnLease {
    /// Resolves the turn's engines and warns once when the configured engine is degraded.
    pub async fn create(
        registry: Arc<ContextEngineRegistry>,
        config: Option<Arc<Value>>,
        agent_dir: Option<std::path::PathBuf>,
        workspace_dir: Option<std::path::PathBuf>,
    ) -> Result<Self, EngineError> {
        let engines = registry
            .resolve_logical_turn(config, agent_dir, workspace_dir)
            .await?;
        let default_id = registry.default_id().to_owned();
        let lease = Self {
            engines,
            default_id,
            registry,
            state: Mutex::new(LeaseState::default()),
            cleanup_deadline: DEFAULT_CLEANUP_DEADLINE,
        };
        if let Some(failure) = lease.engines.configured_failure.clone() {
            lease.degrade(failure);
        }
        Ok(lease)
    }

    /// Changes the cleanup deadline (`OPENCLAW_AGENT_CLEANUP_TIMEOUT_MS`).
    pub fn with_cleanup_deadline(mut self, deadline: Duration) -> Self {
        self.cleanup_deadline = deadline;
        self
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LeaseState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn degrade(&self, reason: String) {
        let mut st = self.lock();
        if st.degraded_reason.is_none() {
            self.registry.log(
                LogLevel::Warn,
                &format!(
                    "[context-engine] Context engine \"{}\" degraded to \"{}\" for this turn: {reason}",
                    self.engines.configured_id, self.default_id
                ),
            );
            st.degraded_reason = Some(reason);
        }
    }

    fn is_configured_default(&self) -> bool {
        self.engines.configured.registered_id == self.default_id
    }

    /// The engine serving this turn.
    pub fn engine(&self) -> Arc<dyn ContextEngine> {
        if self.lock().degraded_reason.is_some() {
            self.engines.fallback.engine.clone()
        } else {
            self.engines.configured.engine.clone()
        }
    }

    /// The id of the engine serving this turn.
    pub fn effective_engine_id(&self) -> String {
        if self.lock().degraded_reason.is_some() {
            self.default_id.clone()
        } else {
            self.engines.configured.registered_id.clone()
        }
    }

    /// Whether the turn runs degraded on the fallback.
    pub fn degraded(&self) -> bool {
        self.lock().degraded_reason.is_some()
    }

    /// Why the turn is degraded.
    pub fn degraded_reason(&self) -> Option<String> {
        self.lock().degraded_reason.clone()
    }

    /// Degrades the turn before it starts. After `begin()` the selection is pinned.
    pub fn degrade_before_start(&self, reason: &str) -> Result<(), EngineError> {
        if self.lock().pinned {
            return Err(EngineError::failed(ALREADY_PINNED));
        }
        self.degrade(reason.to_owned());
        Ok(())
    }

    /// Pins the selection for the rest of the turn.
    pub fn begin(&self) -> Result<(), EngineError> {
        let mut st = self.lock();
        if st.disposed {
            return Err(EngineError::failed(ALREADY_DISPOSED));
        }
        st.pinned = true;
        Ok(())
    }

    /// Selects the execution host. Before `begin()` any host; after it, a change to a host
    /// missing a capability the engine requires for `agent-run` is an error with the exact
    /// text, and repeating the same host returns the same engine.
    pub fn select_host(
        &self,
        host: &HostDescriptor,
    ) -> Result<Arc<dyn ContextEngine>, EngineError> {
        let engine = self.engine();
        let mut st = self.lock();
        if st.disposed {
            return Err(EngineError::failed(ALREADY_PINNED));
        }
        if st.pinned && st.host.as_ref().is_some_and(|h| h.id != host.id) {
            let eval = evaluate(&engine.info(), ContextEngineOperation::AgentRun, host);
            if let Some(missing) = eval.missing_capabilities.first() {
                return Err(EngineError::HostRequirement(format!(
                    "context-engine logical turn cannot change to incompatible agent harness \"{}\": host \"{}\" is missing {missing}",
                    host.label, host.id
                )));
            }
        }
        st.host = Some(host.clone());
        Ok(engine)
    }

    /// `selectContextEngineForTranscriptHost`: whether the configured engine may run this turn
    /// against the host transcript, degrading to `legacy` (for this turn only) when it lacks the
    /// durable-turn declaration or the persisted turn has no admission receipt. A configured
    /// default engine is never degraded.
    pub fn select_for_transcript_host(
        &self,
        recorder: TurnRecorderState,
    ) -> Result<Arc<dyn ContextEngine>, EngineError> {
        {
            let st = self.lock();
            if st.disposed {
                return Err(EngineError::failed(ALREADY_PINNED));
            }
            if st.degraded_reason.is_some() || self.is_configured_default() {
                drop(st);
                return Ok(self.engine());
            }
        }
        let engine = &self.engines.configured.engine;
        let fenced = engine
            .info()
            .transcript_semantics
            .is_some_and(|t| t.is_full())
            && engine.methods().has(Method::CommitTurn);
        if recorder.persisted && !recorder.has_receipt {
            self.degrade(RECEIPT_UNAVAILABLE.to_owned());
        } else if !fenced {
            self.degrade(FENCING_NOT_DECLARED.to_owned());
        }
        Ok(self.engine())
    }

    /// Disposes the turn's engines once (idempotent): configured and fallback in parallel,
    /// bounded by the cleanup deadline. A stall or failure makes the outcome uncertain; the
    /// caller is never held past the deadline.
    pub async fn dispose(&self) -> CleanupOutcome {
        {
            let mut st = self.lock();
            if let Some(o) = &st.outcome {
                return o.clone();
            }
            if st.disposed {
                return CleanupOutcome::Clean;
            }
            st.disposed = true;
        }
        let configured = self.engines.configured.engine.clone();
        let fallback = self.engines.fallback.engine.clone();
        let same = Arc::ptr_eq(&configured, &fallback);
        let work = async move {
            let (a, b) = futures::join!(configured.dispose(), async {
                if same {
                    Ok(())
                } else {
                    fallback.dispose().await
                }
            });
            a.and(b)
        };
        // Spawned, so a stall past the deadline does not cancel the plugin's disposal.
        let task = tokio::spawn(work);
        let outcome = match tokio::time::timeout(self.cleanup_deadline, task).await {
            Ok(Ok(Ok(()))) => CleanupOutcome::Clean,
            Ok(Ok(Err(e))) => {
                CleanupOutcome::Uncertain(format!("context engine disposal failed: {e}"))
            }
            Ok(Err(e)) => {
                CleanupOutcome::Uncertain(format!("context engine disposal panicked: {e}"))
            }
            Err(_) => {
                self.registry.log(
                    LogLevel::Warn,
                    &format!("[context-engine] context engine disposal did not finish within {:?}; continuing", self.cleanup_deadline),
                );
                CleanupOutcome::Uncertain("context engine disposal timed out".into())
            }
        };
        self.lock().outcome = Some(outcome.clone());
        outcome
    }
}
