//! Loading a plugin into a registry: manifest, config validation, spawn, handshake, and one
//! registration per engine the plugin declared (owner `plugin:<id>`).
//!
//! Each registration's factory creates a fresh instance over RPC (`engine/create`) with the
//! resolve-time factory context, so factories stay lazy and per-resolution as in OpenClaw. When
//! the plugin fails to load, its id is still registered as an engine id (the equal-id
//! convention of the slot) with a factory that retries the load, so resolution names the real
//! load error instead of "not registered". A load failure proper (the runner's classified
//! error, a process that exited while loading: see [`crate::load_error`]) is also recorded at
//! once as a quarantine with operation `load`, so `doctor` and the quarantine log say that the
//! plugin did not load, and why, rather than that a factory failed. A timeout is not: it may
//! pass, and the first resolve retries.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use clawctx_engine::{factory, ContextEngineRegistry, RegisterOutcome, RuntimeServices};
use serde_json::{json, Value};

use crate::adapter::PluginEngine;
use crate::error::PluginError;
use crate::host::{HostOptions, PluginHost};
use crate::load_error::classify;
use crate::manifest::{load_manifest, plugin_config, PluginEntry, PluginManifest};
use crate::process::SpawnSpec;
use crate::rpc::{EngineDecl, HookDecl, ToolDecl, PROTOCOL_VERSION};
use crate::sdk;

/// How to load a plugin.
#[derive(Clone, Default)]
pub struct PluginOptions {
    /// `agentDir` for the handshake's factory context.
    pub agent_dir: Option<PathBuf>,
    /// `workspaceDir` for the handshake's factory context.
    pub workspace_dir: Option<PathBuf>,
    /// Where the embedded runners are written (default: a versioned temp directory).
    pub runtime_dir: Option<PathBuf>,
    /// Extra environment for the child.
    pub env: Vec<(String, String)>,
    /// Overrides `plugins.entries.<id>.timeoutMs` (default 30 s).
    pub call_timeout: Option<Duration>,
    /// Overrides `plugins.entries.<id>.initTimeoutMs` (default 10 s).
    pub init_timeout: Option<Duration>,
    /// Overrides the 16 MiB message cap.
    pub max_message_bytes: Option<usize>,
    /// Services for plugin→host calls made outside a lifecycle call.
    pub services: Option<Arc<dyn RuntimeServices>>,
    /// Never reference messages the runner already holds (see [`crate::message_refs`]):
    /// every request carries every message in full. Also `plugins.entries.<id>.messageRefs:
    /// false`.
    pub no_message_refs: bool,
    /// Overrides how many messages the runner may hold for references.
    pub message_ref_limits: Option<crate::message_refs::Limits>,
}

impl std::fmt::Debug for PluginOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginOptions")
            .field("agent_dir", &self.agent_dir)
            .field("workspace_dir", &self.workspace_dir)
            .field("call_timeout", &self.call_timeout)
            .finish_non_exhaustive()
    }
}

/// A plugin loaded into a registry.
#[derive(Debug)]
pub struct LoadedPlugin {
    /// Its manifest.
    pub manifest: PluginManifest,
    /// The supervisor (keep it, or the registry's factories, alive to keep the process).
    pub host: Arc<PluginHost>,
    /// Engines it registered.
    pub engines: Vec<EngineDecl>,
    /// Tools it registered.
    pub tools: Vec<ToolDecl>,
    /// Hook handlers it registered (run through [`crate::hooks::PluginHooks`]).
    pub hooks: Vec<HookDecl>,
    /// Registration outcome per engine id.
    pub outcomes: Vec<(String, RegisterOutcome)>,
}

impl LoadedPlugin {
    /// The tools it registered, as agent tools (`tool/execute` on its process). The engine
    /// of a plugin offers them itself; these are for a host whose selected engine is another
    /// one, so a plugin's tools reach the model whether or not its engine is selected.
    pub fn agent_tools(&self) -> Vec<Arc<dyn clawctx_engine::AgentTool>> {
        self.tools
            .iter()
            .map(|decl| {
                Arc::new(crate::adapter::PluginTool::new(
                    self.host.clone(),
                    decl.clone(),
                )) as Arc<dyn clawctx_engine::AgentTool>
            })
            .collect()
    }
}

fn entry_setting<'a>(config: &'a Value, plugin_id: &str, key: &str) -> Option<&'a Value> {
    config
        .get("plugins")
        .and_then(|p| p.get("entries"))
        .and_then(|e| e.get(plugin_id))
        .and_then(|e| e.get(key))
}

/// `plugins.entries.<id>.passEnv`: names of the host's environment variables the plugin's
/// process also gets (see [`crate::process::INHERITED_ENV`] for what it gets anyway).
fn pass_env(config: &Value, plugin_id: &str) -> Result<Vec<String>, PluginError> {
    let Some(v) = entry_setting(config, plugin_id, "passEnv") else {
        return Ok(Vec::new());
    };
    let bad = || PluginError::ConfigInvalid {
        plugin_id: plugin_id.to_owned(),
        path: format!("plugins.entries.{plugin_id}.passEnv"),
        message: format!("must be a list of environment variable names, got {v}"),
    };
    let list = v.as_array().ok_or_else(bad)?;
    list.iter()
        .map(|n| match n.as_str() {
            Some(n) if !n.is_empty() && !n.contains('=') && !n.contains('\0') => Ok(n.to_owned()),
            _ => Err(bad()),
        })
        .collect()
}

fn entry_ms(config: &Value, plugin_id: &str, key: &str) -> Option<Duration> {
    entry_setting(config, plugin_id, key)
        .and_then(Value::as_u64)
        .map(Duration::from_millis)
}

/// Builds the spawn spec for a manifest's entry (writing the embedded runner when needed).
pub fn spawn_spec(
    manifest: &PluginManifest,
    options: &PluginOptions,
) -> Result<SpawnSpec, PluginError> {
    let runtime_dir = options
        .runtime_dir
        .clone()
        .unwrap_or_else(sdk::default_runtime_dir);
    let mut env = options.env.clone();
    let (program, args) = match &manifest.entry {
        PluginEntry::Node(_) => {
            let runner = sdk::install_node_runner(&runtime_dir)?;
            // TypeScript entries load through jiti, and so does a JavaScript entry Node's own
            // loader refuses (the runner falls back as OpenClaw does): every Node plugin may
            // need it. The runner only loads it when it does.
            sdk::install_node_jiti(&runtime_dir)?;
            // jiti's compiled output, kept between starts (a large TypeScript plugin otherwise
            // compiles for seconds on every start). Only under a runtime dir the host chose
            // (the state dir's): the shared default under the temporary directory is not
            // private, and a cache there would be code another user could plant.
            if let Some(dir) = &options.runtime_dir {
                let cache = sdk::jiti_cache_dir(dir, &manifest.id)?;
                env.push(("CLAWCTX_JITI_CACHE_DIR".into(), cache.display().to_string()));
            }
            (PathBuf::from("node"), vec![runner.display().to_string()])
        }
        PluginEntry::Python(_) => {
            let dir = sdk::install_python_runner(&runtime_dir)?;
            let mut pp = dir.display().to_string();
            if let Ok(existing) = std::env::var("PYTHONPATH") {
                if !existing.is_empty() {
                    pp = format!("{pp}:{existing}");
                }
            }
            env.push(("PYTHONPATH".into(), pp));
            env.push(("PYTHONUNBUFFERED".into(), "1".into()));
            (
                PathBuf::from("python3"),
                vec!["-m".into(), "clawctx_plugin.runner".into()],
            )
        }
        PluginEntry::Command { program, args } => (PathBuf::from(program), args.clone()),
    };
    Ok(SpawnSpec {
        plugin_id: manifest.id.clone(),
        program,
        args,
        cwd: manifest.root.clone(),
        env,
        pass_env: Vec::new(),
    })
}

/// The `initialize` params.
pub fn initialize_params(
    manifest: &PluginManifest,
    config: &Value,
    options: &PluginOptions,
) -> Value {
    let entry = match &manifest.entry {
        PluginEntry::Node(p) | PluginEntry::Python(p) => Value::String(p.display().to_string()),
        PluginEntry::Command { .. } => Value::Null,
    };
    json!({
        "protocolVersion": PROTOCOL_VERSION,
        "host": {"name": "clawctx", "version": env!("CARGO_PKG_VERSION")},
        "plugin": {
            "id": manifest.id,
            "root": manifest.root.display().to_string(),
            "entry": entry,
            "runtime": manifest.entry.runtime(),
            "name": manifest.name,
            "version": manifest.version,
        },
        "factoryContext": {
            "config": config,
            "agentDir": options.agent_dir.as_ref().map(|p| p.display().to_string()),
            "workspaceDir": options.workspace_dir.as_ref().map(|p| p.display().to_string()),
        },
        "pluginConfig": plugin_config(config, &manifest.id),
        "capabilities": {"messageRefs": true},
    })
}

fn register_engine(
    registry: &ContextEngineRegistry,
    host: &Arc<PluginHost>,
    plugin_id: &str,
    engine_id: &str,
) -> Result<RegisterOutcome, PluginError> {
    let host = host.clone();
    let id = engine_id.to_owned();
    let f = factory(move |ctx| PluginEngine::create(host.clone(), id.clone(), ctx));
    registry
        .register_plugin_engine(plugin_id, engine_id, f)
        .map_err(|e| PluginError::Install(format!("cannot register engine \"{engine_id}\": {e}")))
}

/// The registration of a plugin that did not load: its factory starts the process again (the
/// supervisor's backoff applies) and, when that fails too, answers the classified load error.
fn register_retrying_engine(
    registry: &ContextEngineRegistry,
    host: &Arc<PluginHost>,
    manifest: &PluginManifest,
) -> Result<RegisterOutcome, PluginError> {
    let host = host.clone();
    let manifest_for_factory = manifest.clone();
    let f = factory(move |ctx| {
        let host = host.clone();
        let manifest = manifest_for_factory.clone();
        async move {
            if let Err(e) = host.connection().await {
                return Err(classify(e, &manifest).into());
            }
            PluginEngine::create(host, manifest.id.clone(), ctx).await
        }
    });
    registry
        .register_plugin_engine(&manifest.id, &manifest.id, f)
        .map_err(|e| {
            PluginError::Install(format!("cannot register engine \"{}\": {e}", manifest.id))
        })
}

/// Loads the plugin in `plugin_dir`: reads the manifest, validates
/// `plugins.entries.<id>.config` against `configSchema`, starts the process, performs the
/// handshake, and registers every engine the plugin declared in `registry`.
///
/// On a load failure (after the manifest and config were accepted) the plugin id is still
/// registered with a factory that retries the load, and the load error is returned (a
/// [`PluginError::Load`] when the plugin itself failed to load, which is also quarantined
/// with operation `load`).
pub async fn register_plugin(
    registry: &ContextEngineRegistry,
    plugin_dir: &Path,
    config: &Value,
    options: PluginOptions,
) -> Result<LoadedPlugin, PluginError> {
    let manifest = load_manifest(plugin_dir)?;
    manifest.validate_config(config)?;
    let mut spec = spawn_spec(&manifest, &options)?;
    spec.pass_env = pass_env(config, &manifest.id)?;
    let host_options = HostOptions {
        call_timeout: options
            .call_timeout
            .or_else(|| entry_ms(config, &manifest.id, "timeoutMs"))
            .unwrap_or(crate::host::DEFAULT_CALL_TIMEOUT),
        init_timeout: options
            .init_timeout
            .or_else(|| entry_ms(config, &manifest.id, "initTimeoutMs"))
            .unwrap_or(crate::host::DEFAULT_INIT_TIMEOUT),
        max_message_bytes: options
            .max_message_bytes
            .unwrap_or(crate::rpc::DEFAULT_MAX_MESSAGE_BYTES),
        message_refs: !options.no_message_refs
            && entry_setting(config, &manifest.id, "messageRefs")
                .and_then(Value::as_bool)
                .unwrap_or(true),
        message_ref_limits: options.message_ref_limits.unwrap_or_default(),
        ..HostOptions::default()
    };
    let mut init = initialize_params(&manifest, config, &options);
    init["capabilities"]["messageRefs"] = Value::Bool(host_options.message_refs);
    let host = Arc::new(PluginHost::new(
        manifest.id.clone(),
        spec,
        init,
        host_options,
    ));
    host.set_default_services(options.services.clone());
    match host.connection().await {
        Ok(_) => {
            let init = host.initialize_result().unwrap_or_default();
            let mut outcomes = Vec::new();
            for engine in &init.engines {
                outcomes.push((
                    engine.id.clone(),
                    register_engine(registry, &host, &manifest.id, &engine.id)?,
                ));
            }
            Ok(LoadedPlugin {
                manifest,
                host,
                engines: init.engines,
                tools: init.tools,
                hooks: init.hooks,
                outcomes,
            })
        }
        Err(err) => {
            let err = classify(err, &manifest);
            if manifest.is_context_engine() || manifest.kinds.is_empty() {
                let _ = register_retrying_engine(registry, &host, &manifest);
                if matches!(err, PluginError::Load(_)) {
                    // After the registration: registering clears the id's quarantine.
                    registry.quarantine(
                        &manifest.id,
                        Some(&format!("plugin:{}", manifest.id)),
                        "load",
                        &err.to_string(),
                    );
                }
            }
            Err(err)
        }
    }
}

/// Loads every installed or linked plugin (see [`crate::install::plugin_dirs`]) that is not
/// disabled, returning one result per directory. A failing plugin never stops the others.
pub async fn load_plugins(
    registry: &ContextEngineRegistry,
    state_dir: &Path,
    config: &Value,
    options: PluginOptions,
) -> Result<Vec<(PathBuf, Result<LoadedPlugin, PluginError>)>, PluginError> {
    let mut out = Vec::new();
    if config.pointer("/plugins/enabled").and_then(Value::as_bool) == Some(false) {
        return Ok(out);
    }
    for dir in crate::install::plugin_dirs(state_dir, config)? {
        if let Ok(m) = load_manifest(&dir) {
            if config
                .pointer(&format!("/plugins/entries/{}/enabled", m.id))
                .and_then(Value::as_bool)
                == Some(false)
            {
                continue;
            }
        }
        let r = register_plugin(registry, &dir, config, options.clone()).await;
        out.push((dir, r));
    }
    Ok(out)
}
