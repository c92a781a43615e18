//! The engines this build of clawctx knows: `legacy` (core), the bundled `lossless` plugin, and
//! the out-of-process plugins installed in the state dir or linked with `plugins install -l`.
//!
//! Commands that run turns (`run`, `chat`, `gateway`) load them with [`load_for_turns`], which
//! also attaches the persisted quarantine mirror (contract §4.4,
//! `<state>/runtime/context-engine-quarantines.json`): a plugin quarantined during `clawctx run`
//! stays visible to `clawctx doctor` after the run exits. Inspecting commands (`doctor`,
//! `plugins`) load with [`load`] and never write it (doctor reads it), so looking changes
//! nothing. The mirror is for visibility only: the next process still tries a plugin the last
//! one quarantined.

use std::path::PathBuf;
use std::sync::Arc;

use clawctx_engine::{ContextEngineRegistry, HealthMirror};
use clawctx_plugin::{LoadedPlugin, PluginError, PluginOptions};
use serde_json::Value;

use crate::global::GlobalArgs;

/// A registry with every built-in engine registered.
pub fn builtin_registry() -> anyhow::Result<Arc<ContextEngineRegistry>> {
    let registry = Arc::new(ContextEngineRegistry::with_legacy());
    clawctx_lossless::register(&registry)
        .map_err(|e| anyhow::anyhow!("registering the lossless engine: {e}"))?;
    Ok(registry)
}

/// The registry plus the plugin processes backing its plugin engines. Keep it alive while the
/// engines are in use: dropping a [`LoadedPlugin`] stops its process.
pub struct Engines {
    /// Every engine: built-in and plugin.
    pub registry: Arc<ContextEngineRegistry>,
    /// Plugins that loaded.
    pub plugins: Vec<LoadedPlugin>,
    /// Plugin directories that failed to load, with the error (a load error carries its kind,
    /// module, stderr tail and suggested fix: see `PluginError::suggested_fix`).
    pub failed: Vec<(PathBuf, PluginError)>,
}

/// Built-in engines plus every enabled installed or linked plugin.
pub async fn load(global: &GlobalArgs, config: &Value) -> anyhow::Result<Engines> {
    let registry = builtin_registry()?;
    let options = PluginOptions {
        agent_dir: Some(global.agent_dir("main")),
        runtime_dir: Some(global.state_dir().join("runtime")),
        ..Default::default()
    };
    let mut plugins = Vec::new();
    let mut failed = Vec::new();
    match clawctx_plugin::load_plugins(&registry, &global.state_dir(), config, options).await {
        Ok(results) => {
            for (dir, r) in results {
                match r {
                    Ok(p) => plugins.push(p),
                    Err(e) => failed.push((dir, e)),
                }
            }
        }
        Err(e) => failed.push((global.state_dir().join("plugins"), e)),
    }
    Ok(Engines {
        registry,
        plugins,
        failed,
    })
}

/// [`load`] for a command that runs turns: the registry also mirrors its quarantines to the
/// state dir's health mirror (after dropping the rows of processes that are gone, see
/// `clawctx_engine::health_mirror`). A mirror that cannot be used is a warning: the run goes
/// on, its quarantines are only not visible to other processes.
pub async fn load_for_turns(global: &GlobalArgs, config: &Value) -> anyhow::Result<Engines> {
    let engines = load(global, config).await?;
    let mirror = Arc::new(HealthMirror::in_state_dir(&global.state_dir()));
    if let Err(e) = engines.registry.attach_health_mirror(mirror) {
        eprintln!("warning: {e}; quarantines of this run are not visible to `clawctx doctor`");
    }
    Ok(engines)
}
