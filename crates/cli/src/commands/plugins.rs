//! `clawctx plugins install|list|info|enable|disable|uninstall|doctor`.
//!
//! Install state lives in `<state dir>/plugins/installs.json`; what a command changes in the
//! config (enable, select the slot, link paths, reset the slot on uninstall) is printed, then
//! written atomically.

use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Subcommand};
use serde_json::{json, Value};

use crate::global::GlobalArgs;

/// `plugins` arguments.
#[derive(Debug, Args)]
pub struct PluginsArgs {
    #[command(subcommand)]
    action: PluginsAction,
}

#[derive(Debug, Subcommand)]
enum PluginsAction {
    /// Install a plugin from a directory (copied), a package archive (`npm pack`) or an npm spec;
    /// enables it and selects its engine.
    Install {
        /// A directory with clawctx.plugin.json / openclaw.plugin.json, a .tgz archive, or an npm spec.
        spec: String,
        /// Link the directory instead of copying it (for development).
        #[arg(short = 'l', long)]
        link: bool,
        /// Overwrite an existing installation (not with --link).
        #[arg(long)]
        force: bool,
    },
    /// List installed and linked plugins.
    List {
        /// JSON output.
        #[arg(long)]
        json: bool,
    },
    /// Show one plugin's install record and manifest.
    Info {
        /// Plugin id.
        id: String,
    },
    /// Enable a plugin (plugins.entries.<id>.enabled = true).
    Enable {
        /// Plugin id.
        id: String,
    },
    /// Disable a plugin; the slot is kept, so re-enabling restores the selection.
    Disable {
        /// Plugin id.
        id: String,
    },
    /// Remove a plugin; a slot pointing at it goes back to legacy.
    Uninstall {
        /// Plugin id.
        id: String,
        /// Keep the copied files.
        #[arg(long)]
        keep_files: bool,
    },
    /// Start every enabled plugin and report whether it loads.
    Doctor,
}

/// Runs `plugins`.
pub async fn run(global: &GlobalArgs, args: PluginsArgs) -> anyhow::Result<ExitCode> {
    let state = global.state_dir();
    match args.action {
        PluginsAction::Install { spec, link, force } => {
            let opts = clawctx_plugin::InstallOptions { link, force };
            let report = clawctx_plugin::install_with(&spec, &state, &opts)
                .with_context(|| format!("installing {spec}"))?;
            let mut config = global.load_config()?;
            let mut value = config.value().clone();
            let (slot, mut changes): (Vec<_>, Vec<_>) = report
                .config_changes
                .iter()
                .cloned()
                .partition(clawctx_plugin::is_slot_change);
            // The slot names an engine: start the plugin (enabled, with its config) to learn
            // the engine it registers, which OpenClaw expects to be its plugin id.
            let mut refused = None;
            if !slot.is_empty() {
                let id = &report.manifest.id;
                let mut probe = value.clone();
                clawctx_plugin::apply_changes(&mut probe, &changes);
                match registered_engines(global, &probe, &report.record.install_path).await {
                    Ok(engines) => match clawctx_plugin::engine_to_select(id, &engines) {
                        Ok(engine) => changes.push(clawctx_plugin::select_engine_change(&engine)),
                        Err(why) => refused = Some(why),
                    },
                    Err(e) => {
                        eprintln!(
                            "warning: plugin {id} did not start ({e}); selecting its id as the engine"
                        );
                        changes.extend(slot);
                    }
                }
            }
            clawctx_plugin::apply_changes(&mut value, &changes);
            // Edited in place: the user's comments and layout stay (clawctx_config::edit).
            config.replace_value(value);
            config.save()?;
            println!(
                "{} plugin {} {} from {}",
                if link { "linked" } else { "installed" },
                report.manifest.id,
                report.manifest.version.as_deref().unwrap_or(""),
                report.record.install_path.display()
            );
            for c in &changes {
                println!("  config: {}", c.describe());
            }
            if let Some(why) = refused {
                println!("  engine not selected: {why}");
            }
            println!("run `clawctx doctor` to check that it loads");
        }
        PluginsAction::List { json } => {
            let list = clawctx_plugin::list(&state)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&list)?);
            } else if list.is_empty() {
                println!("no plugins installed (state dir {})", state.display());
            } else {
                let config = global.load_config()?;
                for r in list {
                    let enabled = config
                        .value()
                        .pointer(&format!("/plugins/entries/{}/enabled", r.id))
                        .and_then(Value::as_bool)
                        .unwrap_or(true);
                    println!(
                        "{:<24} {:<10} {:<8} {}",
                        r.id,
                        r.version.as_deref().unwrap_or("-"),
                        if enabled { "enabled" } else { "disabled" },
                        r.install_path.display()
                    );
                }
            }
        }
        PluginsAction::Info { id } => {
            let (record, manifest) = clawctx_plugin::info(&state, &id)?;
            let manifest = match manifest {
                Ok(m) => {
                    json!({"id": m.id, "name": m.name, "version": m.version, "kinds": m.kinds, "root": m.root, "configSchema": m.config_schema})
                }
                Err(e) => json!({"error": e.to_string()}),
            };
            println!(
                "{}",
                serde_json::to_string_pretty(&json!({"install": record, "manifest": manifest}))?
            );
        }
        PluginsAction::Enable { id } | PluginsAction::Disable { id } if id.trim().is_empty() => {
            anyhow::bail!("a plugin id is required");
        }
        PluginsAction::Enable { id } => set_enabled(global, &id, true)?,
        PluginsAction::Disable { id } => set_enabled(global, &id, false)?,
        PluginsAction::Uninstall { id, keep_files } => {
            let mut config = global.load_config()?;
            let report = clawctx_plugin::uninstall(&state, &id, config.value(), keep_files)?;
            let mut value = config.value().clone();
            clawctx_plugin::apply_changes(&mut value, &report.config_changes);
            config.replace_value(value);
            config.save()?;
            println!(
                "uninstalled {id}{}",
                if report.removed_files {
                    ""
                } else {
                    " (files kept)"
                }
            );
            for c in &report.config_changes {
                println!("  config: {}", c.describe());
            }
        }
        PluginsAction::Doctor => {
            let config = global.load_config()?;
            let engines = crate::engines::load(global, config.value()).await?;
            let mut bad = false;
            for p in &engines.plugins {
                let ids: Vec<&str> = p.engines.iter().map(|e| e.id.as_str()).collect();
                println!(
                    "[ok] {} loaded from {}: engines {}",
                    p.manifest.id,
                    p.manifest.root.display(),
                    ids.join(", ")
                );
                p.host.shutdown().await;
            }
            for (dir, e) in &engines.failed {
                bad = true;
                println!("[!!] {} does not load: {e}", dir.display());
                if let Some(fix) = e.suggested_fix() {
                    println!("     fix: {fix}");
                }
            }
            if engines.plugins.is_empty() && engines.failed.is_empty() {
                println!("no plugins installed or linked");
            }
            if bad {
                return Ok(ExitCode::from(1));
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The engine ids the plugin in `dir` registers when started with `config` (its process is
/// stopped again).
async fn registered_engines(
    global: &GlobalArgs,
    config: &Value,
    dir: &std::path::Path,
) -> anyhow::Result<Vec<String>> {
    let registry = crate::engines::builtin_registry()?;
    let options = clawctx_plugin::PluginOptions {
        agent_dir: Some(global.agent_dir("main")),
        runtime_dir: Some(global.state_dir().join("runtime")),
        ..Default::default()
    };
    let loaded = clawctx_plugin::register_plugin(&registry, dir, config, options).await?;
    let ids = loaded.engines.iter().map(|e| e.id.clone()).collect();
    loaded.host.shutdown().await;
    Ok(ids)
}

fn set_enabled(global: &GlobalArgs, id: &str, enabled: bool) -> anyhow::Result<()> {
    let mut config = global.load_config()?;
    config.set(
        &format!("plugins.entries.{id}.enabled"),
        Value::Bool(enabled),
    )?;
    config.save()?;
    println!(
        "{} {id}",
        if enabled {
            "enabled"
        } else {
            "disabled (the slot is kept)"
        }
    );
    Ok(())
}
