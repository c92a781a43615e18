//! `clawctx replay FILE`: feeds a recorded conversation (OpenClaw session JSONL or
//! `{role, content}` lines) through any engine with the scripted provider, offline, and prints
//! per turn the context tokens before/after, the tokens sent against the budget, compactions
//! and the engine in charge. Runs in a temporary state dir unless `--state-dir` is given.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;
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
    /// Engine to replay through (default: the configured slot).
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
    let registry = crate::engines::builtin_registry()?;
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
    let options = ReplayOptions {
        engine: args.engine,
        budget: args.budget,
        state_dir,
        config,
    };
    let report = replay(registry, &recording, options, &mut on_turn).await?;
    bar.finish_and_clear();
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
