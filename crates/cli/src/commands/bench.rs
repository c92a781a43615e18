//! `clawctx bench`: measure engines on a deterministic workload, and `clawctx bench generate`:
//! write that workload as an OpenClaw session file (format: `docs/workload-format.md`).

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};

use anyhow::Context;
use clap::{Args, Subcommand};
use clawctx_bench::engines::parse_engine_list;
use clawctx_bench::runner::{render_table, run_bench, BenchOptions, WorkloadSource};
use clawctx_bench::stores::{render_store_table, run_store_bench, StoreBenchOptions};
use clawctx_lossless::{BackendKind, Durability};
use clawctx_bench::workload::{write_jsonl, WorkloadKind, WorkloadSpec};

/// `clawctx bench`.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct BenchArgs {
    #[command(subcommand)]
    command: Option<BenchCommand>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Debug, Subcommand)]
enum BenchCommand {
    /// Write a deterministic workload (OpenClaw session JSONL) to a file, streamed.
    Generate(GenerateArgs),
    /// The lossless store on SQLite and PostgreSQL side by side: ingest, assembly, search and
    /// size at each store size.
    Stores(StoresArgs),
}

/// `clawctx bench stores`.
#[derive(Debug, Args)]
struct StoresArgs {
    /// Backends, comma-separated: sqlite, postgres.
    #[arg(long, default_value = "sqlite,postgres")]
    backends: String,
    /// Store sizes in messages, comma-separated.
    #[arg(long, default_value = "10000,100000")]
    messages: String,
    /// The PostgreSQL server (a database is created on it for each run and dropped after).
    #[arg(long, value_name = "URL", conflicts_with = "pg_url_env")]
    pg_url: Option<String>,
    /// The environment variable holding that URL (keeps the password off the command line).
    #[arg(long, value_name = "VAR")]
    pg_url_env: Option<String>,
    /// chat, tools or mixed.
    #[arg(long, default_value = "mixed")]
    kind: WorkloadKind,
    /// Per-turn ingests, assemblies and searches measured (each).
    #[arg(long, default_value_t = 200)]
    samples: usize,
    /// The SQLite store's durability: normal or full.
    #[arg(long, default_value = "normal")]
    durability: String,
    /// Print the rows as JSON.
    #[arg(long)]
    json: bool,
}

/// `clawctx bench generate`.
#[derive(Debug, Args)]
struct GenerateArgs {
    /// chat, tools or mixed.
    #[arg(long, default_value = "chat")]
    kind: WorkloadKind,
    /// Number of messages (exact).
    #[arg(long, default_value_t = 10_000)]
    messages: u64,
    /// Seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Output file.
    #[arg(short, long)]
    output: PathBuf,
}

/// `clawctx bench` (run).
#[derive(Debug, Args)]
struct RunArgs {
    /// Engines to measure, comma-separated (the first is the ratios' baseline).
    #[arg(long, default_value = "legacy,lossless")]
    engine: String,
    /// Messages to generate.
    #[arg(long, default_value_t = 10_000)]
    messages: u64,
    /// chat, tools or mixed.
    #[arg(long, default_value = "chat")]
    kind: WorkloadKind,
    /// Seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Replay this workload file instead of generating one.
    #[arg(long, value_name = "FILE")]
    workload: Option<PathBuf>,
    /// Token budget (context window).
    #[arg(long, default_value_t = 128_000)]
    budget: u64,
    /// Assemble before every K-th turn only.
    #[arg(long, default_value_t = 1)]
    assemble_every: u64,
    /// Keep the engines' files here (default: a temporary directory, removed afterwards).
    #[arg(long, value_name = "DIR")]
    work_dir: Option<PathBuf>,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

/// Runs the command.
pub async fn run(args: BenchArgs) -> anyhow::Result<ExitCode> {
    match args.command {
        Some(BenchCommand::Generate(g)) => generate(g),
        Some(BenchCommand::Stores(s)) => stores(s).await,
        None => bench(args.run).await,
    }
}

async fn stores(a: StoresArgs) -> anyhow::Result<ExitCode> {
    let mut opts = StoreBenchOptions::default();
    opts.backends = a
        .backends
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| match s {
            "sqlite" => Ok(BackendKind::Sqlite),
            "postgres" | "postgresql" => Ok(BackendKind::Postgres),
            other => Err(anyhow::anyhow!("--backends: unknown backend `{other}` (sqlite, postgres)")),
        })
        .collect::<anyhow::Result<_>>()?;
    opts.sizes = a
        .messages
        .split(',')
        .map(|s| {
            s.trim()
                .replace('_', "")
                .parse::<u64>()
                .with_context(|| format!("--messages: `{s}` is not a number of messages"))
        })
        .collect::<anyhow::Result<_>>()?;
    opts.pg_url = match (&a.pg_url, &a.pg_url_env) {
        (Some(url), _) => Some(url.clone()),
        (None, Some(var)) => Some(
            std::env::var(var).with_context(|| format!("--pg-url-env: the variable {var} is not set"))?,
        ),
        (None, None) => None,
    };
    opts.durability = match a.durability.as_str() {
        "normal" => Durability::Normal,
        "full" => Durability::Full,
        other => anyhow::bail!("--durability: `{other}` is neither normal nor full"),
    };
    opts.kind = a.kind;
    opts.turns = a.samples;
    opts.assembles = a.samples;
    opts.greps = a.samples;
    let rows = run_store_bench(&opts).await?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        print!("{}", render_store_table(&rows));
    }
    Ok(ExitCode::SUCCESS)
}

fn generate(g: GenerateArgs) -> anyhow::Result<ExitCode> {
    let spec = WorkloadSpec {
        kind: g.kind,
        messages: g.messages,
        seed: g.seed,
    };
    let report =
        write_jsonl(spec, &g.output).with_context(|| format!("writing {}", g.output.display()))?;
    eprintln!(
        "wrote {} messages in {} turns ({} bytes, {} bytes of text) to {}",
        report.messages,
        report.turns,
        report.bytes,
        report.text_bytes,
        g.output.display()
    );
    Ok(ExitCode::SUCCESS)
}

async fn bench(a: RunArgs) -> anyhow::Result<ExitCode> {
    let engines = parse_engine_list(&a.engine)?;
    let source = match &a.workload {
        Some(p) => WorkloadSource::File(p.clone()),
        None => WorkloadSource::Generated(WorkloadSpec {
            kind: a.kind,
            messages: a.messages,
            seed: a.seed,
        }),
    };
    let temp;
    let work_dir = match &a.work_dir {
        Some(d) => d.clone(),
        None => {
            temp = clawctx_bench::temp_dir().context("creating a temporary directory")?;
            temp.path().to_owned()
        }
    };
    let mut opts = BenchOptions::new(engines, source, work_dir);
    opts.budget = a.budget;
    opts.assemble_every = a.assemble_every;
    let step = (a.messages / 10).max(1);
    let next: Mutex<(String, u64)> = Mutex::new((String::new(), step));
    opts.progress = Some(Arc::new(move |engine: &str, done: u64| {
        let mut g = next.lock().unwrap_or_else(|p| p.into_inner());
        if g.0 != engine {
            *g = (engine.to_owned(), step);
        }
        if done >= g.1 {
            eprintln!("[{engine}] {done} messages");
            g.1 = done - done % step + step;
        }
    }));
    let report = run_bench(&opts).await?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", render_table(&report));
    }
    Ok(ExitCode::SUCCESS)
}
