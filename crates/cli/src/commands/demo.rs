//! `clawctx demo`: the lossless engine's main job offline, in one command, in a temporary
//! state directory (nothing is written to the real state dir; no network, no API key).

use std::process::ExitCode;

use anyhow::Context;
use clap::Args;
use clawctx_bench::demo::{render, run_demo, DemoOptions};

/// `clawctx demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Messages in the synthetic conversation.
    #[arg(long, default_value_t = 3_000)]
    messages: u64,
    /// Token budget.
    #[arg(long, default_value_t = 16_000)]
    budget: u64,
    /// No progress output.
    #[arg(long)]
    quiet: bool,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

/// Runs the command.
pub async fn run(args: DemoArgs) -> anyhow::Result<ExitCode> {
    let temp = clawctx_bench::temp_dir().context("creating a temporary state directory")?;
    let opts = DemoOptions {
        messages: args.messages,
        budget: args.budget,
        state_dir: temp.path().to_owned(),
        progress: !args.quiet,
    };
    let report = run_demo(&opts).await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", render(&report));
    }
    Ok(if report.recall_hit.is_some() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
