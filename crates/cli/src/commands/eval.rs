//! `clawctx eval locomo FILE`: replay LoCoMo conversations through engines at several budgets
//! and score whether each question's evidence is still reachable (in context or by recall).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Subcommand};
use clawctx_bench::engines::parse_engine_list;
use clawctx_bench::eval::{render_table, run_eval, EvalOptions};

/// `clawctx eval`.
#[derive(Debug, Args)]
pub struct EvalArgs {
    #[command(subcommand)]
    command: EvalCommand,
}

#[derive(Debug, Subcommand)]
enum EvalCommand {
    /// LoCoMo evidence reachability: raw evidence in context, recall@k, answer in context.
    Locomo(LocomoArgs),
}

#[derive(Debug, Args)]
struct LocomoArgs {
    /// A LoCoMo JSON file (e.g. locomo10.json or a split of it). Never bundled: CC BY-NC 4.0.
    file: PathBuf,
    /// Engines, comma-separated.
    #[arg(long, default_value = "legacy,lossless")]
    engine: String,
    /// Token budgets, comma-separated.
    #[arg(long, default_value = "4000")]
    budget: String,
    /// Recall top-k.
    #[arg(long, default_value_t = 5)]
    k: usize,
    /// Only the first N conversations.
    #[arg(long)]
    limit: Option<usize>,
    /// Print the report (with per-question outcomes) as JSON.
    #[arg(long)]
    json: bool,
}

/// Runs the command.
pub async fn run(args: EvalArgs) -> anyhow::Result<ExitCode> {
    let EvalCommand::Locomo(a) = args.command;
    let engines = parse_engine_list(&a.engine)?;
    let budgets = a
        .budget
        .split(',')
        .map(|b| {
            b.trim()
                .replace('_', "")
                .parse::<u64>()
                .with_context(|| format!("invalid budget `{b}`"))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let mut conversations = clawctx_bench::locomo::load(&a.file)?;
    if let Some(n) = a.limit {
        conversations.truncate(n);
    }
    let temp = clawctx_bench::temp_dir().context("creating a temporary directory")?;
    let opts = EvalOptions {
        engines,
        budgets,
        k: a.k,
        work_dir: temp.path().to_owned(),
        lossless_config: serde_json::json!({}),
    };
    let report = run_eval(&a.file, &conversations, &opts).await?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", render_table(&report));
    }
    Ok(ExitCode::SUCCESS)
}
