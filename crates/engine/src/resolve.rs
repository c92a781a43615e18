//! Slot selection and standalone resolution (contract §3.3, §3.4, §3.5A).
//!
//! Selection reads `plugins.slots.contextEngine` (default `legacy`) and the enablement policy:
//! a disabled, denied or globally disabled plugin silently means `legacy` (no warning, no
//! quarantine, no factory call) and the slot value is left alone so re-enabling restores it.
//! An *enabled* selection that is missing, discovery-only, or whose factory or contract fails
//! follows failure isolation: quarantine plus `legacy`, never an error to the agent.
//!
//! Every resolution also says *why* it chose what it chose ([`SelectionReason`]); that is what
//! `clawctx doctor` prints.

use std::sync::Arc;

use serde::Serialize;
use serde_json::Value;

use crate::engine::{ContextEngine, Method};
use crate::error::EngineError;
use crate::guard::GuardedEngine;
use crate::registry::{
    owner_plugin_id, ContextEngineRegistry, FactoryContext, Lifecycle, LogLevel, QuarantineRecord,
    Registration,
};

/// Where to look things up in a config value.
fn at<'a>(config: Option<&'a Value>, path: &[&str]) -> Option<&'a Value> {
    let mut cur = config?;
    for key in path {
        cur = cur.get(*key)?;
    }
    Some(cur)
}

/// The configured slot: `plugins.slots.contextEngine` trimmed, or `None` when missing,
/// non-string or blank.
pub fn configured_slot(config: Option<&Value>) -> Option<String> {
    at(config, &["plugins", "slots", "contextEngine"])
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

/// Why a plugin is switched off by policy, if it is. JSON is camelCase in its fields too
/// (`{"kind": "pluginDisabled", "pluginId": …}`), as `doctor --json` documents.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(
    rename_all = "camelCase",
    rename_all_fields = "camelCase",
    tag = "kind"
)]
pub enum PolicyBlock {
    /// `plugins.enabled: false`.
    PluginsDisabled,
    /// `plugins.entries.<id>.enabled: false`.
    PluginDisabled {
        /// The plugin.
        plugin_id: String,
    },
    /// `plugins.deny` lists it.
    PluginDenied {
        /// The plugin.
        plugin_id: String,
    },
    /// `plugins.allow` is a non-empty list without it.
    PluginNotAllowed {
        /// The plugin.
        plugin_id: String,
    },
}

fn list_has(v: Option<&Value>, id: &str) -> Option<bool> {
    v.and_then(Value::as_array)
        .map(|a| a.iter().any(|x| x.as_str().map(str::trim) == Some(id)))
}

/// The enablement policy for plugin `plugin_id`.
pub fn policy_block(config: Option<&Value>, plugin_id: &str) -> Option<PolicyBlock> {
    if at(config, &["plugins", "enabled"]).and_then(Value::as_bool) == Some(false) {
        return Some(PolicyBlock::PluginsDisabled);
    }
    if at(config, &["plugins", "entries", plugin_id, "enabled"]).and_then(Value::as_bool)
        == Some(false)
    {
        return Some(PolicyBlock::PluginDisabled {
            plugin_id: plugin_id.to_owned(),
        });
    }
    if list_has(at(config, &["plugins", "deny"]), plugin_id) == Some(true) {
        return Some(PolicyBlock::PluginDenied {
            plugin_id: plugin_id.to_owned(),
        });
    }
    let allow = at(config, &["plugins", "allow"]);
    if allow
        .and_then(Value::as_array)
        .is_some_and(|a| !a.is_empty())
        && list_has(allow, plugin_id) == Some(false)
    {
        return Some(PolicyBlock::PluginNotAllowed {
            plugin_id: plugin_id.to_owned(),
        });
    }
    None
}

/// The enablement policy for selecting engine `id` (§3.3): plugins globally disabled, or the
/// owner plugin of its registration (with no registration, the equal-id rule: the engine id is
/// taken as the plugin id) disabled, denied or not allowed. Shared by standalone and
/// logical-turn resolution.
pub(crate) fn selection_block(
    config: Option<&Value>,
    id: &str,
    registration: Option<&Registration>,
) -> Option<PolicyBlock> {
    if at(config, &["plugins", "enabled"]).and_then(Value::as_bool) == Some(false) {
        return Some(PolicyBlock::PluginsDisabled);
    }
    let plugin_id = match registration {
        Some(r) => owner_plugin_id(&r.owner)?,
        None => id,
    };
    policy_block(config, plugin_id)
}

/// Why resolution returned the engine it returned.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase", tag = "kind")]
pub enum SelectionReason {
    /// No slot configured: the default.
    SlotUnset,
    /// The slot names the default engine.
    SlotIsDefault,
    /// The configured engine, loaded and guarded.
    Configured,
    /// The configured plugin is switched off by policy: silent default, slot kept.
    PolicyDisabled {
        /// Which rule.
        block: PolicyBlock,
    },
    /// The configured engine is quarantined in this process.
    Quarantined {
        /// Operation that failed.
        operation: String,
        /// Why.
        reason: String,
    },
    /// Registered for read-only discovery only: default without quarantine.
    DiscoveryOnly,
}

/// A resolved engine plus the explanation.
pub struct Resolved {
    /// The engine to call (guarded unless it is the default).
    pub engine: Arc<dyn ContextEngine>,
    /// The slot value (or the default id when unset).
    pub configured_id: String,
    /// The id that is actually serving.
    pub effective_id: String,
    /// Owner of the serving registration.
    pub owner: Option<String>,
    /// Why.
    pub reason: SelectionReason,
}

impl Resolved {
    /// The owner plugin id of the serving engine (`None` for core or after quarantine).
    pub fn owner_plugin_id(&self) -> Option<&str> {
        self.owner.as_deref().and_then(owner_plugin_id)
    }

    /// Whether the configured engine is the one serving.
    pub fn is_configured(&self) -> bool {
        self.configured_id == self.effective_id
    }
}

/// `describeResolvedContextEngineContractError` for a Rust engine: blank info id/name and
/// missing required methods, in the contract's order. `None` when valid.
pub fn contract_error(id: &str, engine: &dyn ContextEngine) -> Option<String> {
    let info = engine.info();
    let mut issues = Vec::new();
    if info.id.trim().is_empty() {
        issues.push("missing info.id");
    }
    if info.name.trim().is_empty() {
        issues.push("missing info.name");
    }
    let methods = engine.methods();
    for (m, issue) in [
        (Method::Ingest, "missing ingest()"),
        (Method::Assemble, "missing assemble()"),
        (Method::Compact, "missing compact()"),
    ] {
        if !methods.has(m) {
            issues.push(issue);
        }
    }
    if issues.is_empty() {
        None
    } else {
        Some(format!(
            "Context engine \"{id}\" factory returned an invalid ContextEngine: {}.",
            issues.join(", ")
        ))
    }
}

/// The contract message for a factory result that is not an object (plugins).
pub fn non_object_contract_error(id: &str, value: &Value) -> String {
    format!("Context engine \"{id}\" factory returned {value} instead of a ContextEngine object.")
}

/// The contract message for a plugin engine whose `info` is not an object.
pub fn missing_info_contract_error(id: &str, missing_methods: &[&str]) -> String {
    let mut issues = vec!["missing info".to_owned()];
    issues.extend(missing_methods.iter().map(|m| format!("missing {m}()")));
    format!(
        "Context engine \"{id}\" factory returned an invalid ContextEngine: {}.",
        issues.join(", ")
    )
}

fn available(registry: &ContextEngineRegistry) -> String {
    let ids = registry.ids();
    if ids.is_empty() {
        "(none)".into()
    } else {
        ids.join(", ")
    }
}

impl ContextEngineRegistry {
    /// The strict default engine (`resolveDefaultContextEngine`): missing → error, factory
    /// error propagates, contract error → `[context-engine] <message>`.
    pub async fn resolve_default(
        &self,
        ctx: FactoryContext,
    ) -> Result<Arc<dyn ContextEngine>, EngineError> {
        let id = self.default_id().to_owned();
        let reg = self.get(&id).ok_or_else(|| {
            EngineError::NotRegistered(format!(
                "[context-engine] fallback failed: default engine \"{id}\" is not registered. Available engines: {}",
                available(self)
            ))
        })?;
        let engine = (reg.factory)(ctx).await?;
        if let Some(msg) = contract_error(&id, engine.as_ref()) {
            return Err(EngineError::Contract(format!("[context-engine] {msg}")));
        }
        Ok(engine)
    }

    /// Standalone resolution (`resolveContextEngine`, §3.5A) with the selection explanation.
    pub async fn resolve(
        self: &Arc<Self>,
        config: Option<Arc<Value>>,
        agent_dir: Option<std::path::PathBuf>,
        workspace_dir: Option<std::path::PathBuf>,
    ) -> Result<Resolved, EngineError> {
        let ctx = self.factory_context(config.clone(), agent_dir, workspace_dir);
        let cfg = config.as_deref();
        let default_id = self.default_id().to_owned();
        let slot = configured_slot(cfg);
        let configured_id = slot.clone().unwrap_or_else(|| default_id.clone());

        let default_with = |reason: SelectionReason| {
            let ctx = ctx.clone();
            let configured_id = configured_id.clone();
            let default_id = default_id.clone();
            async move {
                let engine = self.resolve_default(ctx).await?;
                let owner = self.get(&default_id).map(|r| r.owner);
                Ok::<_, EngineError>(Resolved {
                    engine,
                    configured_id,
                    effective_id: default_id,
                    owner,
                    reason,
                })
            }
        };

        let Some(id) = slot.filter(|s| *s != default_id) else {
            let reason = if configured_slot(cfg).is_some() {
                SelectionReason::SlotIsDefault
            } else {
                SelectionReason::SlotUnset
            };
            return default_with(reason).await;
        };

        let registration = self.get(&id);
        let block = selection_block(cfg, &id, registration.as_ref());
        if let Some(block) = block {
            return default_with(SelectionReason::PolicyDisabled { block }).await;
        }

        if let Some(rec) = self.quarantines().into_iter().find(|r| r.engine_id == id) {
            return default_with(quarantined_reason(&rec)).await;
        }

        let Some(reg) = registration else {
            self.quarantine(&id, None, "resolve", "not registered");
            return default_with(SelectionReason::Quarantined {
                operation: "resolve".into(),
                reason: "not registered".into(),
            })
            .await;
        };

        if reg.lifecycle == Lifecycle::ReadOnlyDiscovery {
            self.log(
                LogLevel::Warn,
                &format!(
                    "[context-engine] Context engine \"{id}\" owner={} is registered for read-only discovery only; falling back to default engine \"{default_id}\" without quarantine until runtime activation registers it.",
                    reg.owner
                ),
            );
            return default_with(SelectionReason::DiscoveryOnly).await;
        }

        let engine = match (reg.factory)(ctx.clone()).await {
            Ok(e) => e,
            Err(EngineError::Aborted { reason }) => return Err(EngineError::Aborted { reason }),
            Err(err) => {
                let reason = err.to_string();
                self.quarantine(&id, Some(&reg.owner), "factory", &reason);
                return default_with(SelectionReason::Quarantined {
                    operation: "factory".into(),
                    reason,
                })
                .await;
            }
        };

        if let Some(msg) = contract_error(&id, engine.as_ref()) {
            let _ = engine.dispose().await;
            self.quarantine(&id, Some(&reg.owner), "contract-validation", &msg);
            return default_with(SelectionReason::Quarantined {
                operation: "contract-validation".into(),
                reason: msg,
            })
            .await;
        }

        let guarded: Arc<dyn ContextEngine> = Arc::new(GuardedEngine::new(
            engine,
            id.clone(),
            Some(reg.owner.clone()),
            self.clone(),
            ctx,
        ));
        Ok(Resolved {
            engine: guarded,
            configured_id,
            effective_id: id,
            owner: Some(reg.owner),
            reason: SelectionReason::Configured,
        })
    }
}

fn quarantined_reason(rec: &QuarantineRecord) -> SelectionReason {
    SelectionReason::Quarantined {
        operation: rec.operation.clone(),
        reason: rec.reason.clone(),
    }
}
