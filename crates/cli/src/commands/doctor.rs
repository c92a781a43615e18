//! `clawctx doctor`: which context engine is active and why, whether it loads, whether every
//! configured host can run it, what is quarantined, which summarizer compaction uses, and what
//! is wrong with the config.
//!
//! `--json` prints a [`DoctorReport`] (schema documented in `docs/doctor.md`; fields are only
//! ever added). `--fix` applies the one repair the contract allows: when the selected engine
//! cannot run on any configured agent-run host, the slot is reset to the default.
//!
//! Quarantines: doctor's own process only knows what failed while it resolved the engine, so
//! it also reads the persisted health mirror (contract §4.4) that `run`, `chat` and `gateway`
//! write, and lists what failed there: the operation, the reason, when, and whether that
//! process is still running. Doctor only reads the mirror; a mirror that cannot be read is
//! reported with its path.
//!
//! Config: a file that does not parse is reported as existing and invalid, with its line and
//! column (`configError`), never as absent. Each engine's own settings are checked against the
//! type that reads them, key by key, so a wrong type names its key (`plugins.entries.lossless.
//! config.freshTailCount: expected an integer, got "lots"`) instead of passing with a log line
//! while the engine quietly uses its default; a plugin's config is checked against its
//! manifest's `configSchema` when the plugin is loaded, and a mismatch is listed under the key
//! it names. With the lossless engine selected, doctor names its store (PostgreSQL without the
//! password) and whether it opened. Each step logs at debug level (`CLAWCTX_LOG=debug`).

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::Args;
use clawctx_config::{ConfigFile, ConfigProblem, Severity};
use clawctx_engine::health_mirror::{list as list_quarantines, HealthMirror, QuarantineSource};
use clawctx_engine::host::{cli_backend_host, embedded_host, evaluate};
use clawctx_engine::registry::DEFAULT_ENGINE_ID;
use clawctx_engine::resolve::SelectionReason;
use clawctx_engine::{ContextEngineRegistry, EngineError, ListedQuarantine};
use clawctx_model::{BreakerSnapshot, BreakerState};
use clawctx_protocol::{ContextEngineInfo, ContextEngineOperation, HostDescriptor};
use clawctx_runtime::outbox::{inspect_outbox, OutboxReport};
use clawctx_runtime::setup::{
    host_summarizer, summarizer_breaker_path, ExtractiveReason, SummarizerChoice,
    SummaryModelSource,
};
use clawctx_runtime::{select_backend, RuntimeError};
use serde::Serialize;
use serde_json::Value;

use crate::global::GlobalArgs;

/// `doctor` arguments.
#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Print the report as JSON (stable schema, see docs/doctor.md).
    #[arg(long)]
    json: bool,
    /// Reset plugins.slots.contextEngine when no configured host can run the selected engine.
    #[arg(long)]
    fix: bool,
}

/// The report's schema version.
pub const DOCTOR_SCHEMA_VERSION: u32 = 1;

/// Overall status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Nothing to report.
    Ok,
    /// Works, with findings (fallback, quarantine, incompatible host, config warnings).
    Warning,
    /// Something is broken (unreadable config, config errors).
    Error,
}

/// The selected engine.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EngineReport {
    /// The slot value, or `legacy` when unset.
    pub configured: String,
    /// The engine actually serving.
    pub effective: String,
    /// `default` or `configured`.
    pub source: &'static str,
    /// Why (machine-readable).
    pub reason: SelectionReason,
    /// Why (for people).
    pub explanation: String,
    /// Whether the configured engine loads.
    pub loads: bool,
    /// The serving engine's info.
    pub info: ContextEngineInfo,
    /// Owner of the serving registration.
    pub owner: Option<String>,
}

/// One host checked against the engine's `agent-run` requirements.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HostReport {
    /// Host id.
    pub id: String,
    /// Host label.
    pub label: String,
    /// Whether the engine can run there.
    pub ok: bool,
    /// What it lacks.
    pub missing_capabilities: Vec<String>,
}

/// A registered engine.
#[derive(Debug, Serialize)]
pub struct RegisteredEngine {
    /// Registered id.
    pub id: String,
    /// Owner.
    pub owner: String,
}

/// One installed or linked plugin.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PluginReport {
    /// Plugin id (from its manifest), when known.
    pub id: Option<String>,
    /// Its directory.
    pub dir: PathBuf,
    /// Whether its process started and answered the handshake.
    pub loaded: bool,
    /// Engines it registered.
    pub engines: Vec<String>,
    /// Why it did not load.
    pub error: Option<String>,
    /// When the plugin process started but the plugin did not load: the kind of failure
    /// (`missing-package`, `syntax`, `no-register`, `register-threw`, …), the module at fault,
    /// what it wrote to stderr.
    pub load_error: Option<clawctx_plugin::LoadError>,
    /// What to do about `error`, when there is something to say.
    pub fix: Option<String>,
}

/// The summarizer one engine's compaction uses, and why.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SummarizerReport {
    /// Engine id.
    pub engine: String,
    /// `llm`, `extractive`, `own` (the engine summarizes by itself) or `error` (the model
    /// config does not resolve: `run` and `chat` fail).
    pub kind: &'static str,
    /// `provider/model` of an LLM summarizer.
    pub model: Option<String>,
    /// Why: `agentModel`, `compactionModel` (for `llm`), `noModel`, `cliBackend` (for
    /// `extractive`).
    pub source: Option<&'static str>,
    /// All of it in words, e.g. `llm openai/gpt-x (agent model)`.
    pub description: String,
}

/// The state dir's persisted quarantine mirror (contract §4.4).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct QuarantineMirrorReport {
    /// `<stateDir>/runtime/context-engine-quarantines.json`.
    pub path: PathBuf,
    /// Whether the file exists (it is created by the first quarantine a run records).
    pub exists: bool,
    /// Why it cannot be read, when it cannot: other processes' quarantines are not listed
    /// then, and runs do not write it until it is removed.
    pub problem: Option<String>,
}

/// This process's quarantines plus the mirror's (see the module header).
fn quarantine_report(
    registry: &ContextEngineRegistry,
    mirror: &HealthMirror,
) -> (Vec<ListedQuarantine>, QuarantineMirrorReport) {
    let own = registry.quarantines();
    let report = |problem| QuarantineMirrorReport {
        path: mirror.path().to_owned(),
        exists: mirror.path().exists(),
        problem,
    };
    match mirror.list(&own) {
        Ok(listed) => (listed, report(None)),
        Err(e) => {
            let problem = match e {
                EngineError::HealthMirror { problem, .. } => problem,
                other => other.to_string(),
            };
            (
                list_quarantines(&own, &[], mirror.identity()),
                report(Some(problem)),
            )
        }
    }
}

/// `3 min ago` for a past time (`just now` under a second).
fn ago(t: std::time::SystemTime) -> String {
    let s = std::time::SystemTime::now()
        .duration_since(t)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    match s {
        0 => "just now".into(),
        1..=119 => format!("{s} s ago"),
        120..=7199 => format!("{} min ago", s / 60),
        7200..=172_799 => format!("{} h ago", s / 3600),
        _ => format!("{} days ago", s / 86_400),
    }
}

/// A config file that exists but cannot be read.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigErrorReport {
    /// The whole message (file, position, the parser's words, a hint).
    pub message: String,
    /// 1-based line of a syntax error.
    pub line: Option<usize>,
    /// 1-based column of a syntax error.
    pub column: Option<usize>,
}

impl ConfigErrorReport {
    fn of(error: &anyhow::Error) -> Self {
        let position = match error.downcast_ref::<clawctx_config::ConfigError>() {
            Some(clawctx_config::ConfigError::Syntax { line, column, .. }) if *line > 0 => {
                Some((*line, *column))
            }
            _ => None,
        };
        Self {
            message: format!("{error:#}"),
            line: position.map(|p| p.0),
            column: position.map(|p| p.1).filter(|c| *c > 0),
        }
    }
}

/// Where the lossless engine keeps its messages.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StoreReport {
    /// `sqlite` or `postgres`.
    pub backend: &'static str,
    /// The SQLite file, or the PostgreSQL database as a URL without its password.
    pub target: String,
    /// Whether the engine loaded and its store answered in this doctor run (`false`: see
    /// `problem`, or `quarantines` when the engine did not load).
    pub ok: bool,
    /// Why the store setting cannot be used, when it cannot.
    pub problem: Option<String>,
}

/// The whole report.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DoctorReport {
    /// Always [`DOCTOR_SCHEMA_VERSION`].
    pub schema_version: u32,
    /// Overall status.
    pub status: Status,
    /// The config file.
    pub config_path: PathBuf,
    /// Whether it exists (a file that cannot be parsed exists: see `config_error`).
    pub config_exists: bool,
    /// Why the config file cannot be read, when it cannot: doctor then reports on the built-in
    /// defaults and `--fix` writes nothing.
    pub config_error: Option<ConfigErrorReport>,
    /// The state dir.
    pub state_dir: PathBuf,
    /// The selected engine.
    pub context_engine: EngineReport,
    /// Engines this build knows.
    pub registered_engines: Vec<RegisteredEngine>,
    /// Installed and linked plugins and whether they load.
    pub plugins: Vec<PluginReport>,
    /// Hosts checked.
    pub host_compatibility: Vec<HostReport>,
    /// Quarantine records: this process's, then those the health mirror holds for other
    /// engine ids (`run`, `chat` and `gateway` processes, running or finished).
    pub quarantines: Vec<ListedQuarantine>,
    /// The persisted quarantine mirror those come from.
    pub quarantine_mirror: QuarantineMirrorReport,
    /// The summarizer each registered engine's compaction uses.
    pub summarizers: Vec<SummarizerReport>,
    /// The LLM summarizer's persisted circuit breaker, once it has recorded anything.
    pub summarizer_breaker: Option<BreakerSnapshot>,
    /// Durable turns' commits waiting for their engine, and outbox files that cannot be read.
    pub outbox: OutboxReport,
    /// The lossless engine's store, when the slot selects `lossless`.
    pub lossless_store: Option<StoreReport>,
    /// The lossless engine's semantic recall, when the slot selects `lossless`.
    pub semantic_recall: Option<SemanticReport>,
    /// Config problems.
    pub config_problems: Vec<ConfigProblem>,
    /// Repairs applied by `--fix`.
    pub fixes: Vec<String>,
}

/// The configured agent-run hosts, from the model policy: every model ref in
/// `agents.defaults.model.primary` and `.fallbacks` whose provider is a CLI backend
/// (`agents.defaults.cliBackends.<id>`, optional `capabilities` list) runs on that backend;
/// any other ref (or no model configured) runs on the embedded runner.
pub fn configured_hosts(config: &Value) -> Vec<HostDescriptor> {
    let backends = config
        .pointer("/agents/defaults/cliBackends")
        .and_then(Value::as_object);
    let model = config.pointer("/agents/defaults/model");
    let mut refs: Vec<String> = Vec::new();
    match model {
        Some(Value::String(s)) => refs.push(s.clone()),
        Some(Value::Object(m)) => {
            if let Some(p) = m.get("primary").and_then(Value::as_str) {
                refs.push(p.to_owned());
            }
            if let Some(f) = m.get("fallbacks").and_then(Value::as_array) {
                refs.extend(f.iter().filter_map(|v| v.as_str().map(str::to_owned)));
            }
        }
        _ => {}
    }
    let mut hosts: Vec<HostDescriptor> = Vec::new();
    let mut push = |h: HostDescriptor| {
        if !hosts.iter().any(|x| x.id == h.id) {
            hosts.push(h);
        }
    };
    if refs.is_empty() {
        push(embedded_host());
    }
    for r in refs {
        let provider = r.split('/').next().unwrap_or_default();
        match backends.and_then(|b| b.get(provider)) {
            Some(spec) => {
                let caps = spec.get("capabilities").and_then(Value::as_array).map(|a| {
                    a.iter()
                        .filter_map(|c| c.as_str().map(str::to_owned))
                        .collect()
                });
                push(cli_backend_host(provider, caps));
            }
            None => push(embedded_host()),
        }
    }
    hosts
}

/// What compaction summarizes with under `config`, as `run` and `chat` would set it up:
/// `Err` when the model config does not resolve.
fn summarizer_choice(
    global: &GlobalArgs,
    config: &Value,
) -> Result<SummarizerChoice, RuntimeError> {
    let env = &clawctx_model::process_env;
    let backend = match select_backend(config, None, env) {
        Ok(b) => Some(b),
        Err(RuntimeError::NoModel) => None,
        Err(e) => return Err(e),
    };
    host_summarizer(config, backend.as_ref(), env, &global.state_dir()).map(|h| h.choice)
}

/// One line per registered engine: `legacy` compacts with the runtime's summarizer, `lossless`
/// with the same model offered through the registry, plugin engines with their own (or the
/// runtime's when they delegate compaction).
fn summarizer_reports(
    engines: &[RegisteredEngine],
    choice: &Result<SummarizerChoice, RuntimeError>,
) -> Vec<SummarizerReport> {
    let host = |engine: &str| match choice {
        Ok(c) => {
            let (kind, model, source) = match c {
                SummarizerChoice::Llm { model, source } => (
                    "llm",
                    Some(model.clone()),
                    match source {
                        SummaryModelSource::AgentModel => "agentModel",
                        SummaryModelSource::CompactionModel => "compactionModel",
                    },
                ),
                SummarizerChoice::Extractive { reason } => (
                    "extractive",
                    None,
                    match reason {
                        ExtractiveReason::NoModel => "noModel",
                        ExtractiveReason::CliBackend => "cliBackend",
                    },
                ),
            };
            SummarizerReport {
                engine: engine.to_owned(),
                kind,
                model,
                source: Some(source),
                description: c.to_string(),
            }
        }
        Err(e) => SummarizerReport {
            engine: engine.to_owned(),
            kind: "error",
            model: None,
            source: None,
            description: format!("none ({e})"),
        },
    };
    engines
        .iter()
        .map(|e| {
            if e.id == DEFAULT_ENGINE_ID || e.id == clawctx_lossless::ENGINE_ID {
                host(&e.id)
            } else {
                let runtime = match choice {
                    Ok(c) => c.to_string(),
                    Err(_) => "none".into(),
                };
                SummarizerReport {
                    engine: e.id.clone(),
                    kind: "own",
                    model: None,
                    source: None,
                    description: format!(
                        "its own (compaction delegated to the runtime uses {runtime})"
                    ),
                }
            }
        })
        .collect()
}

/// The breaker state file, when the LLM summarizer has written one.
fn summarizer_breaker(global: &GlobalArgs) -> Option<BreakerSnapshot> {
    let text = std::fs::read_to_string(summarizer_breaker_path(&global.state_dir())).ok()?;
    serde_json::from_str(&text).ok()
}

fn explain(reason: &SelectionReason, configured: &str) -> String {
    match reason {
        SelectionReason::SlotUnset => {
            "plugins.slots.contextEngine is not set: the default engine is used".into()
        }
        SelectionReason::SlotIsDefault => {
            "plugins.slots.contextEngine selects the default engine".into()
        }
        SelectionReason::Configured => {
            format!("selected by plugins.slots.contextEngine = \"{configured}\"")
        }
        SelectionReason::PolicyDisabled { block } => {
            let why = match block {
                clawctx_engine::resolve::PolicyBlock::PluginsDisabled => {
                    "plugins are disabled (plugins.enabled: false)".to_owned()
                }
                clawctx_engine::resolve::PolicyBlock::PluginDisabled { plugin_id } => {
                    format!("plugin \"{plugin_id}\" is disabled (plugins.entries.{plugin_id}.enabled: false)")
                }
                clawctx_engine::resolve::PolicyBlock::PluginDenied { plugin_id } => {
                    format!("plugin \"{plugin_id}\" is listed in plugins.deny")
                }
                clawctx_engine::resolve::PolicyBlock::PluginNotAllowed { plugin_id } => {
                    format!("plugin \"{plugin_id}\" is not in plugins.allow")
                }
            };
            format!("\"{configured}\" is selected but {why}: the default engine is used; the slot is kept")
        }
        SelectionReason::Quarantined { operation, reason } => {
            format!("\"{configured}\" failed during {operation} ({reason}): quarantined, falling back to the default engine")
        }
        SelectionReason::DiscoveryOnly => {
            format!("\"{configured}\" is registered for discovery only: falling back to the default engine without quarantine")
        }
    }
}

/// Builds the report (and applies `--fix` to `config` when asked).
pub async fn build_report(
    global: &GlobalArgs,
    config: &mut ConfigFile,
    config_error: Option<ConfigErrorReport>,
    fix: bool,
) -> anyhow::Result<DoctorReport> {
    let value = Arc::new(config.value().clone());
    tracing::debug!(config = %config.path().display(), exists = config.exists(), readable = config_error.is_none(), "doctor: config");
    tracing::debug!(state_dir = %global.state_dir().display(), "doctor: loading engines and plugins");
    let engines = crate::engines::load(global, &value).await?;
    tracing::debug!(
        plugins_loaded = engines.plugins.len(),
        plugins_failed = engines.failed.len(),
        engines = ?engines.registry.ids(),
        "doctor: engines loaded"
    );
    let registry = engines.registry.clone();
    let mut plugins: Vec<PluginReport> = engines
        .plugins
        .iter()
        .map(|p| PluginReport {
            id: Some(p.manifest.id.clone()),
            dir: p.manifest.root.clone(),
            loaded: true,
            engines: p.engines.iter().map(|e| e.id.clone()).collect(),
            error: None,
            load_error: None,
            fix: None,
        })
        .collect();
    plugins.extend(engines.failed.iter().map(|(dir, e)| PluginReport {
        id: clawctx_plugin::load_manifest(dir).ok().map(|m| m.id),
        dir: dir.clone(),
        loaded: false,
        engines: Vec::new(),
        error: Some(e.to_string()),
        load_error: match e {
            clawctx_plugin::PluginError::Load(load) => Some((**load).clone()),
            _ => None,
        },
        fix: e.suggested_fix(),
    }));
    let resolved = registry
        .resolve(Some(value.clone()), Some(global.agent_dir("main")), None)
        .await?;
    tracing::debug!(configured = %resolved.configured_id, effective = %resolved.effective_id, reason = ?resolved.reason, "doctor: engine resolved");
    let info = resolved.engine.info();
    let hosts = configured_hosts(&value);
    let host_compatibility: Vec<HostReport> = hosts
        .iter()
        .map(|h| {
            let e = evaluate(&info, ContextEngineOperation::AgentRun, h);
            HostReport {
                id: h.id.clone(),
                label: h.label.clone(),
                ok: e.ok,
                missing_capabilities: e.missing_capabilities,
            }
        })
        .collect();
    // The lossless engine starts while its PostgreSQL server is down (it waits for it), so
    // whether the store answers is asked, not inferred from the engine having loaded.
    let store_probe = if resolved.effective_id == clawctx_lossless::ENGINE_ID {
        Some(resolved.engine.probe().await.map_err(|e| e.to_string()))
    } else {
        None
    };
    let _ = resolved.engine.dispose().await;
    for p in &engines.plugins {
        p.host.shutdown().await;
    }

    let mut fixes = Vec::new();
    // Never rewrite a config file that could not be read: that would lose the user's text.
    if fix
        && config_error.is_none()
        && resolved.is_configured()
        && !host_compatibility.is_empty()
        && host_compatibility.iter().all(|h| !h.ok)
    {
        config.unset("plugins.slots.contextEngine", true)?;
        config.save()?;
        fixes.push(format!(
            "Reset plugins.slots.contextEngine to the default \"legacy\" because context engine \"{}\" is incompatible with every configured agent-run host.",
            resolved.effective_id
        ));
    }

    let mut config_problems = clawctx_config::check(config.value());
    config_problems.extend(lossless_config_problems(config.value()));
    config_problems.extend(plugin_config_problems(&engines.failed));
    if let Some(e) = &config_error {
        config_problems.insert(
            0,
            ConfigProblem {
                key: "(file)".into(),
                severity: Severity::Error,
                message: e.message.clone(),
            },
        );
    }
    tracing::debug!(problems = config_problems.len(), "doctor: config checked");
    // Not for a slot switched off by policy: the engine was not meant to open its store.
    let lossless_store = (resolved.configured_id == clawctx_lossless::ENGINE_ID
        && !matches!(resolved.reason, SelectionReason::PolicyDisabled { .. }))
    .then(|| store_report(global, config.value(), store_probe.clone()));
    if let Some(store) = &lossless_store {
        tracing::debug!(backend = store.backend, target = %store.target, ok = store.ok, "doctor: lossless store");
    }
    let semantic_recall = match &lossless_store {
        Some(_) => Some(semantic_report(global, config.value()).await),
        None => None,
    };
    let loads = !matches!(
        resolved.reason,
        SelectionReason::Quarantined { .. } | SelectionReason::DiscoveryOnly
    );
    let mut status = Status::Ok;
    let warn = |s: &mut Status| *s = (*s).max(Status::Warning);
    if !loads || matches!(resolved.reason, SelectionReason::PolicyDisabled { .. }) {
        warn(&mut status);
    }
    let (quarantines, quarantine_mirror) =
        quarantine_report(&registry, &HealthMirror::in_state_dir(&global.state_dir()));
    if host_compatibility.iter().any(|h| !h.ok)
        || !quarantines.is_empty()
        || quarantine_mirror.problem.is_some()
        || plugins.iter().any(|p| !p.loaded)
    {
        warn(&mut status);
    }
    if semantic_recall
        .as_ref()
        .is_some_and(|s| s.problem.is_some())
    {
        warn(&mut status);
    }
    if lossless_store.as_ref().is_some_and(|s| !s.ok) {
        warn(&mut status);
    }
    for p in &config_problems {
        status = status.max(if p.severity == Severity::Error {
            Status::Error
        } else {
            Status::Warning
        });
    }
    let registered_engines: Vec<RegisteredEngine> = registry
        .ids()
        .into_iter()
        .filter_map(|id| {
            registry
                .get(&id)
                .map(|r| RegisteredEngine { id, owner: r.owner })
        })
        .collect();
    let choice = summarizer_choice(global, &value);
    if choice.is_err() {
        warn(&mut status);
    }
    let summarizers = summarizer_reports(&registered_engines, &choice);
    let summarizer_breaker = summarizer_breaker(global);
    if summarizer_breaker
        .as_ref()
        .is_some_and(|b| b.state != BreakerState::Closed)
    {
        warn(&mut status);
    }
    let outbox = inspect_outbox(&global.state_dir());
    if !outbox.problems.is_empty() {
        warn(&mut status);
    }
    tracing::debug!(
        pending = outbox.pending,
        problems = outbox.problems.len(),
        orphans = outbox.orphans.len(),
        quarantines = quarantines.len(),
        ?status,
        "doctor: outbox and quarantines read"
    );
    Ok(DoctorReport {
        schema_version: DOCTOR_SCHEMA_VERSION,
        status,
        config_path: config.path().to_owned(),
        config_exists: config.exists() || config_error.is_some(),
        config_error,
        state_dir: global.state_dir(),
        context_engine: EngineReport {
            explanation: explain(&resolved.reason, &resolved.configured_id),
            source: if resolved.effective_id == registry.default_id() {
                "default"
            } else {
                "configured"
            },
            configured: resolved.configured_id.clone(),
            effective: resolved.effective_id.clone(),
            reason: resolved.reason.clone(),
            loads,
            info,
            owner: resolved.owner.clone(),
        },
        registered_engines,
        plugins,
        host_compatibility,
        quarantines,
        quarantine_mirror,
        summarizers,
        summarizer_breaker,
        outbox,
        lossless_store,
        semantic_recall,
        config_problems,
        fixes,
    })
}

/// `plugins.entries.lossless.config` read key by key with the type the engine reads it with:
/// one problem per key of the wrong type, naming it. (The engine itself falls back to the
/// default for such a key, with a warning in the log only.)
fn lossless_config_problems(config: &Value) -> Vec<ConfigProblem> {
    let base = "plugins.entries.lossless.config";
    let Some(Value::Object(map)) = config.pointer("/plugins/entries/lossless/config") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    // The keys the engine reads: every field (a default config serializes all of them) and
    // the older names it still accepts.
    let known: Vec<String> = serde_json::to_value(clawctx_lossless::LosslessConfig::default())
        .ok()
        .and_then(|v| v.as_object().map(|m| m.keys().cloned().collect()))
        .unwrap_or_default();
    let aliases = ["dbPath", "statelessSessionPatterns"];
    for key in map.keys() {
        if !known.is_empty() && !known.contains(key) && !aliases.contains(&key.as_str()) {
            out.push(ConfigProblem {
                key: format!("{base}.{key}"),
                severity: Severity::Warning,
                message: "is not a lossless setting: the engine ignores it (a misspelling?)".into(),
            });
        }
    }
    for (key, value) in map {
        let one = Value::Object([(key.clone(), value.clone())].into_iter().collect());
        if let Err(e) = serde_path_to_error::deserialize::<_, clawctx_lossless::LosslessConfig>(one)
        {
            let path = e.path().to_string();
            let at = if path.is_empty() || path == "?" {
                key.clone()
            } else {
                path
            };
            let got = (at == *key).then_some(value);
            out.push(ConfigProblem {
                key: format!("{base}.{at}"),
                severity: Severity::Error,
                message: type_message(&e.into_inner().to_string(), got),
            });
        }
    }
    out
}

/// serde's `invalid type: string "lots", expected usize` in a config user's words:
/// `expected an integer, got "lots"`.
fn type_message(serde: &str, got: Option<&Value>) -> String {
    let expected = serde
        .rsplit_once(", expected ")
        .map(|(_, e)| e.trim())
        .map(|e| match e {
            "usize" | "u64" | "u32" | "u16" | "u8" => "a non-negative integer",
            "isize" | "i64" | "i32" | "i16" | "i8" => "an integer",
            "f64" | "f32" => "a number",
            "a boolean" | "bool" => "a boolean",
            "a sequence" => "an array",
            "a map" => "an object",
            other if other.starts_with("struct ") => "an object",
            other => other,
        });
    match (expected, got) {
        (Some(expected), Some(got)) => format!("expected {expected}, got {got}"),
        (Some(expected), None) => format!("expected {expected} ({serde})"),
        _ => serde.to_owned(),
    }
}

/// A plugin whose config does not match its manifest's `configSchema` does not load; list it
/// under the key the schema check names too.
fn plugin_config_problems(failed: &[(PathBuf, clawctx_plugin::PluginError)]) -> Vec<ConfigProblem> {
    failed
        .iter()
        .filter_map(|(_, e)| match e {
            clawctx_plugin::PluginError::ConfigInvalid { path, message, .. } => {
                Some(ConfigProblem {
                    key: path.clone(),
                    severity: Severity::Error,
                    message: format!("{message} (the plugin's configSchema)"),
                })
            }
            _ => None,
        })
        .collect()
}

/// Whether the lossless engine recalls by meaning too (issue #43): the embedding model the
/// config or the environment names, loaded as the engine loads it.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SemanticReport {
    /// Hybrid recall is on.
    pub on: bool,
    /// The model's identity, when one loaded.
    pub model: Option<String>,
    /// What is wrong with the model named, when one is named and does not load.
    pub problem: Option<String>,
    /// How to turn it on, when it is off.
    pub how_to_enable: Option<String>,
}

async fn semantic_report(global: &GlobalArgs, config: &Value) -> SemanticReport {
    use clawctx_lossless::semantic::model;
    let cfg = clawctx_lossless::LosslessConfig::from_host_config(config);
    let off = |why: Option<String>| SemanticReport {
        on: false,
        model: None,
        problem: why,
        how_to_enable: Some(model::HOW_TO_ENABLE.to_owned()),
    };
    if cfg.recall_method == clawctx_lossless::RecallMethod::Lexical {
        return SemanticReport {
            how_to_enable: Some("recallMethod is lexical: set it to hybrid".into()),
            ..off(None)
        };
    }
    match model::embedder_for(&cfg, &global.state_dir()).await {
        Ok(Some(e)) => SemanticReport {
            on: true,
            model: Some(e.model_id().to_owned()),
            problem: None,
            how_to_enable: None,
        },
        Ok(None) => off(None),
        Err(e) => off(Some(e.to_string())),
    }
}

/// The lossless engine's store as its config places it (`opened`: whether the engine came up
/// in this run, which for PostgreSQL means the database answered).
/// `probe` is `None` when the lossless engine did not load (see `quarantines`), else whether
/// its store answered.
fn store_report(
    global: &GlobalArgs,
    config: &Value,
    probe: Option<Result<(), String>>,
) -> StoreReport {
    let opened = matches!(probe, Some(Ok(())));
    let unreachable = match probe {
        Some(Err(e)) => Some(e),
        _ => None,
    };
    let lcm = clawctx_lossless::LosslessConfig::from_host_config(config);
    match lcm.store_location() {
        Ok(clawctx_lossless::StoreLocation::Postgres(url)) => {
            match clawctx_lossless::pg::connect::PgTarget::parse(&url) {
                Ok(target) => StoreReport {
                    backend: "postgres",
                    target: target.redacted(),
                    ok: opened,
                    problem: unreachable,
                },
                Err(e) => StoreReport {
                    backend: "postgres",
                    target: "(unparseable URL)".into(),
                    ok: false,
                    problem: Some(e.to_string()),
                },
            }
        }
        Ok(clawctx_lossless::StoreLocation::Sqlite(path)) => StoreReport {
            backend: "sqlite",
            target: path
                .unwrap_or_else(|| global.agent_dir("main").join("lossless.db"))
                .display()
                .to_string(),
            ok: opened,
            problem: unreachable,
        },
        Err(e) => StoreReport {
            backend: "unknown",
            target: String::new(),
            ok: false,
            problem: Some(e.to_string()),
        },
    }
}

/// How many of a plugin's last stderr lines the text report shows (`--json` has all 8 KiB).
const STDERR_LINES: usize = 12;

fn print_text(r: &DoctorReport) {
    println!(
        "clawctx doctor: {}",
        match r.status {
            Status::Ok => "ok",
            Status::Warning => "warnings",
            Status::Error => "errors",
        }
    );
    println!(
        "  config          {}{}",
        r.config_path.display(),
        match (&r.config_error, r.config_exists) {
            (Some(e), _) => match (e.line, e.column) {
                (Some(l), Some(c)) => {
                    format!(" (exists but is invalid at line {l}, column {c}: built-in defaults)")
                }
                (Some(l), None) =>
                    format!(" (exists but is invalid at line {l}: built-in defaults)"),
                _ => " (exists but cannot be read: built-in defaults)".to_owned(),
            },
            (None, true) => String::new(),
            (None, false) => " (not found: built-in defaults)".to_owned(),
        }
    );
    println!("  state dir       {}", r.state_dir.display());
    let e = &r.context_engine;
    println!("  context engine  {} ({})", e.effective, e.explanation);
    if e.configured != e.effective {
        println!("  configured      {} — not serving", e.configured);
    }
    if e.loads {
        println!(
            "  [ok] loads       {} {}{}",
            e.info.name,
            e.info.version.as_deref().unwrap_or(""),
            e.owner
                .as_deref()
                .map(|o| format!(", owner {o}"))
                .unwrap_or_default()
        );
    } else {
        println!(
            "  [!!] loads       no: \"{}\" does not load; serving {} instead",
            e.configured, e.info.name
        );
    }
    println!(
        "      owns compaction: {}",
        if e.info.owns_compaction() {
            "yes"
        } else {
            "no (runtime compaction)"
        }
    );
    for (i, sr) in r.summarizers.iter().enumerate() {
        let label = if i == 0 { "summarizer" } else { "" };
        let mark = if sr.kind == "error" { "[!!]" } else { "[ok]" };
        println!("  {mark} {label:<12}{}: {}", sr.engine, sr.description);
    }
    if let Some(b) = r
        .summarizer_breaker
        .as_ref()
        .filter(|b| b.state != BreakerState::Closed)
    {
        println!(
            "  [!!] summarizer  circuit breaker {} after {} consecutive failures (last: {}); summaries are extractive meanwhile",
            match b.state {
                BreakerState::HalfOpen => "half-open",
                _ => "open",
            },
            b.consecutive_failures,
            b.last_error.as_deref().unwrap_or("?")
        );
    }
    if let Some(store) = &r.lossless_store {
        match (&store.problem, store.ok) {
            (Some(p), _) => println!("  [!!] store       {} {}: {p}", store.backend, store.target),
            (None, true) => println!("  [ok] store       {} {}", store.backend, store.target),
            (None, false) => println!(
                "  [!!] store       {} {} did not open (see the quarantine below)",
                store.backend, store.target
            ),
        }
    }
    if let Some(sem) = &r.semantic_recall {
        match (&sem.model, &sem.problem) {
            (Some(m), _) => println!("  [ok] recall      hybrid: words and meaning ({m})"),
            (None, Some(p)) => {
                println!("  [!!] recall      lexical only: the embedding model does not load: {p}")
            }
            (None, None) => println!(
                "  [ok] recall      lexical only (no embedding model); for recall by meaning: {}",
                sem.how_to_enable.as_deref().unwrap_or("")
            ),
        }
    }
    if r.outbox.pending > 0 {
        println!(
            "  [ok] outbox      {} durable turn commit(s) waiting: delivered before the session's next turn",
            r.outbox.pending
        );
    }
    if !r.outbox.orphans.is_empty() {
        println!(
            "  [ok] outbox      {} temporary file(s) left by a process stopped while writing a commit (no acknowledged turn is in one): removed when the gateway, run or chat next starts: {}",
            r.outbox.orphans.len(),
            r.outbox
                .orphans
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    for p in &r.outbox.problems {
        println!(
            "  [!!] outbox      {} cannot be read ({}); the turn it holds was not delivered to its engine: fix or remove the file",
            p.path.display(),
            p.problem
        );
    }
    for h in &r.host_compatibility {
        if h.ok {
            println!("  [ok] host        {} can run it", h.label);
        } else {
            println!(
                "  [!!] host        {} cannot run it: missing {}",
                h.label,
                h.missing_capabilities.join(", ")
            );
        }
    }
    if r.quarantines.is_empty() && r.quarantine_mirror.problem.is_none() {
        println!("  [ok] quarantine  none");
    }
    for q in &r.quarantines {
        let rec = &q.record;
        let by = match (q.source, q.process_running) {
            (QuarantineSource::Process, _) => "in this doctor run".to_owned(),
            (QuarantineSource::Mirror, true) => format!("in process {} (running)", q.process_id),
            (QuarantineSource::Mirror, false) => format!("in process {} (exited)", q.process_id),
        };
        println!(
            "  [!!] quarantine  \"{}\"{} failed during {}: {} ({by}, {})",
            rec.engine_id,
            rec.owner
                .as_deref()
                .map(|o| format!(" (owner {o})"))
                .unwrap_or_default(),
            rec.operation,
            rec.reason,
            ago(rec.failed_at)
        );
    }
    if let Some(problem) = &r.quarantine_mirror.problem {
        println!(
            "  [!!] quarantine  mirror {} {problem}: quarantines of other processes are not shown; remove the file",
            r.quarantine_mirror.path.display()
        );
    }
    let engines: Vec<String> = r.registered_engines.iter().map(|x| x.id.clone()).collect();
    println!("  engines         {}", engines.join(", "));
    for p in &r.plugins {
        let id = p.id.as_deref().unwrap_or("?");
        match &p.error {
            None => println!(
                "  [ok] plugin      {id} loaded ({}), engines: {}",
                p.dir.display(),
                p.engines.join(", ")
            ),
            Some(e) => {
                // A load error's stderr goes on lines of its own, under its summary.
                let shown = p.load_error.as_ref().map(|l| l.summary());
                println!(
                    "  [!!] plugin      {id} does not load ({}): {}",
                    p.dir.display(),
                    shown.as_deref().unwrap_or(e)
                );
                if let Some(l) = p.load_error.as_ref().filter(|l| !l.stderr_tail.is_empty()) {
                    let lines: Vec<&str> = l.stderr_tail.lines().collect();
                    for line in &lines[lines.len().saturating_sub(STDERR_LINES)..] {
                        println!("                  stderr | {line}");
                    }
                }
                if let Some(fix) = &p.fix {
                    println!("                  fix: {fix}");
                }
            }
        }
    }
    if r.config_problems.is_empty() {
        println!("  [ok] config     no problems");
    }
    for p in &r.config_problems {
        println!("  [!!] config     {}: {}", p.key, p.message);
    }
    for f in &r.fixes {
        println!("  fixed           {f}");
    }
}

/// Runs `doctor`.
pub async fn run(global: &GlobalArgs, args: DoctorArgs) -> anyhow::Result<ExitCode> {
    let (mut config, config_error) = match global.load_config() {
        Ok(c) => (c, None),
        Err(e) => (
            ConfigFile::from_value(global.config_path(), Value::Object(Default::default())),
            Some(ConfigErrorReport::of(&e)),
        ),
    };
    let report = build_report(global, &mut config, config_error, args.fix).await?;
    tracing::debug!(status = ?report.status, "doctor: report built");
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_text(&report);
    }
    Ok(if report.status == Status::Error {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}
