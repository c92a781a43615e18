//! `clawctx mcp`: the lossless store's recall as an MCP server on stdin/stdout, for an MCP
//! client that starts it as a child process (a coding agent, a desktop assistant, an IDE).
//!
//! The store is the one the `lossless` engine uses, opened the way the engine opens it (its
//! factory, with the config's `plugins.entries.lossless.config` and agent `main`'s directory),
//! unless `--db PATH|URL` names another. Tools, resources and caps are the gateway's `/mcp`
//! (`clawctx_gateway::mcp`): read-only unless `mcp.allowIngest` is set or `--allow-ingest` is
//! given. Stdout carries the protocol only; logs go to stderr (`CLAWCTX_LOG`).

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::Args;
use clawctx_engine::FactoryContext;
use clawctx_gateway::mcp::{serve_stdio, McpOptions};
use clawctx_lossless::Recall;
use serde_json::{json, Value};

use crate::global::GlobalArgs;

/// `clawctx mcp`.
#[derive(Debug, Args)]
pub struct McpArgs {
    /// The lossless store: a SQLite file, a `postgres://` URL, or `env:NAME` to read either from
    /// environment variable NAME (default: the lossless engine's store for agent `main`).
    #[arg(long, value_name = "PATH|URL", visible_alias = "database")]
    db: Option<String>,
    /// Offer the `lcm_ingest` tool (as `mcp.allowIngest: true` in the config does).
    #[arg(long)]
    allow_ingest: bool,
}

/// `--db`'s value, with `env:NAME` read from the environment.
fn db_value(db: &str) -> anyhow::Result<String> {
    match db.strip_prefix("env:") {
        Some(name) => match std::env::var(name) {
            Ok(v) if !v.trim().is_empty() => Ok(v.trim().to_owned()),
            _ => anyhow::bail!("--db env:{name}: the environment variable {name} is not set"),
        },
        None => Ok(db.to_owned()),
    }
}

/// Runs the server until the client closes stdin.
pub async fn run(global: &GlobalArgs, args: McpArgs) -> anyhow::Result<ExitCode> {
    let mut config: Value = global.load_config()?.value().clone();
    if let Some(db) = &args.db {
        let db = db_value(db)?;
        if !config.is_object() {
            config = json!({});
        }
        let entry = &mut config["plugins"]["entries"]["lossless"];
        if !entry.is_object() {
            *entry = json!({});
        }
        if !entry["config"].is_object() {
            entry["config"] = json!({});
        }
        let store = &mut entry["config"];
        if let Some(map) = store.as_object_mut() {
            map.remove("databaseEnv");
            map.remove("databasePath");
            map.remove("dbPath");
            map.insert("database".into(), Value::String(db));
        }
    }
    let mut options = McpOptions::from_config(&config);
    options.allow_ingest |= args.allow_ingest;
    let agent_dir: PathBuf = global.agent_dir("main");
    let engine = (clawctx_lossless::lossless_factory())(FactoryContext {
        config: Some(Arc::new(config)),
        agent_dir: Some(agent_dir.clone()),
        workspace_dir: Some(agent_dir),
        host_summarizer: None,
    })
    .await
    .context("opening the lossless store")?;
    let recall = Recall::of(engine.as_ref())
        .context("the lossless factory did not build a lossless engine")?;
    tracing::info!("mcp: serving {} on stdio", recall.location());
    let served = serve_stdio(recall, options).await;
    // Flushes the store (SQLite: checkpoint, the newest messages' index) before exiting.
    if let Err(e) = engine.dispose().await {
        tracing::warn!("mcp: closing the store: {e}");
    }
    served.context("the MCP server on stdio")?;
    Ok(ExitCode::SUCCESS)
}
