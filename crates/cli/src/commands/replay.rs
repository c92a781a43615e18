//! `clawctx replay FILE`: feeds a recorded conversation (OpenClaw session JSONL or
//! `{role, content}` lines) through any registered engine (built-in, or a plugin installed or
//! linked in the state dir) with the scripted provider, offline, and prints per turn the
//! context tokens before/after, the tokens sent against the budget, compactions and the engine
//! in charge. Runs in a temporary state dir unless `--state-dir` is given (plugins are still
//! loaded from the state dir in effect).

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;
use clawctx_engine::ContextEngineRegistry;
use clawctx_runtime::replay::{
    replay, Recording, ReplayOptions, ReplayTurn, DEFAULT_REPLAY_BUDGET,
};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::global::GlobalArgs;

/// `replay` arguments.
#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// The recording (OpenClaw session JSONL, or one {"role","content"} object per line).
    file: PathBuf,
    /// Engine to replay through: any registered id (built-in, installed or linked plugin;
    /// default: the configured slot).
    #[arg(long, value_name = "ID")]
    engine: Option<String>,
    /// Prompt token budget.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_REPLAY_BUDGET)]
    budget: u64,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

fn line(t: &ReplayTurn) -> String {
    format!(
        "turn {:>5}  {:<10} context {:>7} → {:>7}  sent {:>7}/{}  {}",
        t.turn,
        t.engine,
        t.context_tokens_before,
        t.context_tokens_after,
        t.prompt_tokens,
        t.budget,
        if t.compactions.is_empty() {
            String::new()
        } else {
            format!("compacted ({})", t.compactions.join(", "))
        }
    )
}

/// `--engine ID` must name a registered engine: an unknown id is an error naming it and the
/// known ones, never a silent replay on `legacy`.
fn check_registered(registry: &ContextEngineRegistry, id: &str) -> anyhow::Result<()> {
    if registry.get(id).is_some() {
        return Ok(());
    }
    let known = registry.ids();
    anyhow::bail!(
        "engine \"{id}\" is not registered; known engines: {} (a plugin engine needs `clawctx plugins install` or `plugins install -l DIR` first)",
        if known.is_empty() { "(none)".to_owned() } else { known.join(", ") }
    )
}

/// A registered engine can still lose its turns to `legacy` (quarantined after a failure,
/// switched off by policy): say so, with the quarantine's reason when there is one.
fn warn_if_not_served_by(registry: &ContextEngineRegistry, id: &str, turns: &[ReplayTurn]) {
    let elsewhere = turns.iter().filter(|t| t.engine != id).count();
    if elsewhere == 0 {
        return;
    }
    let why = registry
        .quarantines()
        .into_iter()
        .find(|q| q.engine_id == id)
        .map(|q| format!(": quarantined during {} ({})", q.operation, q.reason))
        .unwrap_or_default();
    eprintln!(
        "warning: engine \"{id}\" did not serve {elsewhere} of {} turns{why}; see the `engine` of each turn",
        turns.len()
    );
}

/// Runs `clawctx replay`.
pub async fn run(global: &GlobalArgs, args: ReplayArgs) -> anyhow::Result<ExitCode> {
    let recording = Recording::load(&args.file)?;
    let config = global.load_config()?.value().clone();
    let temp;
    let kept = global.state_dir.is_some();
    let state_dir = match &global.state_dir {
        Some(d) => std::path::absolute(d).unwrap_or_else(|_| d.clone()),
        None => {
            temp = tempfile::tempdir().context("cannot create a temporary state dir")?;
            temp.path().to_path_buf()
        }
    };
    // Every engine `run` and `chat` can use, installed and linked plugins included; the
    // plugin processes live as long as `engines`, which outlives the replay.
    let engines = crate::engines::load(global, &config).await?;
    for (dir, err) in &engines.failed {
        eprintln!("warning: plugin at {} does not load: {err}", dir.display());
    }
    if let Some(id) = &args.engine {
        check_registered(&engines.registry, id)?;
    }
    let bar = if std::io::stderr().is_terminal() {
        ProgressBar::with_draw_target(
            Some(recording.turns.len() as u64),
            ProgressDrawTarget::stderr(),
        )
    } else {
        ProgressBar::hidden()
    };
    if let Ok(style) = ProgressStyle::with_template("{bar:40} {pos}/{len} turns {msg}") {
        bar.set_style(style);
    }
    let json = args.json;
    let mut on_turn = |t: &ReplayTurn| {
        bar.inc(1);
        bar.set_message(format!("{} tokens sent, {}", t.prompt_tokens, t.engine));
        if !json {
            bar.suspend(|| println!("{}", line(t)));
        }
    };
    let requested = args.engine.clone();
    let hooks = clawctx_plugin::PluginHooks::new(&engines.plugins);
    let options = ReplayOptions {
        engine: args.engine,
        budget: args.budget,
        state_dir,
        config,
        hooks: (!hooks.is_empty()).then(|| {
            std::sync::Arc::new(hooks) as std::sync::Arc<dyn clawctx_engine::HookDispatcher>
        }),
    };
    let report = replay(engines.registry.clone(), recording, options, &mut on_turn).await?;
    bar.finish_and_clear();
    if let Some(id) = &requested {
        warn_if_not_served_by(&engines.registry, id, &report.turns);
    }
    drop(engines);
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!(
            "{} turns, {} compactions, most tokens sent {} of {} ({} turns over budget)",
            report.turns.len(),
            report.total_compactions,
            report.max_prompt_tokens,
            report.budget,
            report.over_budget_turns
        );
        if !kept {
            eprintln!(
                "(the state dir was temporary and is gone; with `--state-dir DIR` the engine's store stays, for `clawctx --state-dir DIR lcm grep …`)"
            );
        }
    }
    Ok(if report.over_budget_turns == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
