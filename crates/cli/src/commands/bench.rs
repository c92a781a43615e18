//! `clawctx bench`: measure engines on a deterministic workload, and `clawctx bench generate`:
//! write that workload as an OpenClaw session file (format: `docs/workload-format.md`), and
//! `clawctx bench crash`: the crash campaign (SIGKILL at random moments, every acknowledged
//! message checked after each restart), whose children are `clawctx bench crash-child`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};

use anyhow::Context;
use clap::{Args, Subcommand};
use clawctx_bench::crash::child::{run_child, ChildMode, ChildOptions};
use clawctx_bench::crash::{render_crash_table, run_crash_campaign, CrashOptions, KillPoint};
use clawctx_bench::engines::parse_engine_list;
use clawctx_bench::runner::{render_table, run_bench, BenchOptions, WorkloadSource};
use clawctx_bench::stores::{render_store_table, run_store_bench, StoreBenchOptions};
use clawctx_bench::workload::{write_jsonl, WorkloadKind, WorkloadSpec};
use clawctx_lossless::{BackendKind, Durability};

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
    /// The crash campaign: the lossless engine killed with SIGKILL at random moments (per-turn
    /// ingest, batched ingest, a replay through the runtime, two writers at once, compaction,
    /// import, migration) on each backend; after every
    /// restart, every acknowledged message must be stored exactly once and the store must pass
    /// doctor and integrity checks. Exits 1 on any loss, duplicate or failed check.
    Crash(CrashArgs),
    /// One child process of `bench crash` (the process it kills).
    #[command(hide = true)]
    CrashChild(CrashChildArgs),
}

/// `clawctx bench crash`.
#[derive(Debug, Args)]
struct CrashArgs {
    /// Backends, comma-separated: sqlite, postgres.
    #[arg(long, default_value = "sqlite,postgres")]
    backends: String,
    /// Kills per backend, spread over its kill points.
    #[arg(long, default_value_t = 100)]
    kills: usize,
    /// Kill points, comma-separated: turns, batch, replay, reply-commit, concurrent, compact,
    /// import, migrate (PostgreSQL only).
    #[arg(
        long,
        default_value = "turns,batch,replay,reply-commit,concurrent,compact,import,migrate"
    )]
    points: String,
    /// Seed of the kill delays (default: from the clock; printed either way).
    #[arg(long)]
    seed: Option<u64>,
    /// The PostgreSQL server (databases are created on it for the run and dropped after).
    #[arg(long, value_name = "URL", conflicts_with = "pg_url_env")]
    pg_url: Option<String>,
    /// The environment variable holding that URL (keeps the password off the command line).
    #[arg(long, value_name = "VAR")]
    pg_url_env: Option<String>,
    /// Keep the stores and session files here (default: a temporary directory, removed after).
    #[arg(long, value_name = "DIR")]
    work_dir: Option<PathBuf>,
    /// A line per kill on stderr.
    #[arg(long, short)]
    verbose: bool,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
    /// Self-check of the harness: the children acknowledge before they write, so the report
    /// must show losses.
    #[arg(long, hide = true)]
    ack_before_write: bool,
}

/// `clawctx bench crash-child`.
#[derive(Debug, Args)]
struct CrashChildArgs {
    /// turns, batch or compact.
    #[arg(long)]
    mode: String,
    /// A SQLite file, a postgres:// URL, or env:NAME holding either.
    #[arg(long)]
    store: String,
    /// The first message id of the first new unit.
    #[arg(long)]
    first: u64,
    /// New units to send.
    #[arg(long)]
    units: u64,
    /// A unit to send again first: FIRST:COUNT.
    #[arg(long)]
    resend: Option<String>,
    /// Acknowledge before writing (the campaign's self-check).
    #[arg(long)]
    ack_before_write: bool,
    /// `--mode runtime`: the state dir of the child's runtime (transcript, outbox).
    #[arg(long, value_name = "DIR")]
    runtime_state: Option<PathBuf>,
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
    /// With semantic recall: the embedding model (CLAWCTX_EMBED_MODEL, else the default
    /// directory) embeds the store (its throughput is reported), runs in the background during
    /// the per-turn ingests, and each assembly embeds its prompt and fuses the vector hits.
    #[arg(long)]
    semantic: bool,
    /// With --semantic: store pseudo-random vectors under the model's identity instead of
    /// running the model over the store (prompts are still embedded by the model, and each
    /// search scans as many vectors): the assembly latency at sizes the model would take hours
    /// to embed. The hits mean nothing.
    #[arg(long, requires = "semantic")]
    synthetic_vectors: bool,
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
        Some(BenchCommand::Crash(c)) => crash(c).await,
        Some(BenchCommand::CrashChild(c)) => crash_child(c).await,
        None => bench(args.run).await,
    }
}

async fn stores(a: StoresArgs) -> anyhow::Result<ExitCode> {
    let mut opts = StoreBenchOptions::default();
    opts.backends = parse_backends(&a.backends)?;
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
    opts.pg_url = pg_url(&a.pg_url, &a.pg_url_env)?;
    opts.durability = match a.durability.as_str() {
        "normal" => Durability::Normal,
        "full" => Durability::Full,
        other => anyhow::bail!("--durability: `{other}` is neither normal nor full"),
    };
    opts.kind = a.kind;
    opts.turns = a.samples;
    opts.assembles = a.samples;
    opts.greps = a.samples;
    if a.semantic {
        let cfg = clawctx_lossless::LosslessConfig::default();
        let embedder = clawctx_lossless::semantic::model::embedder_for(&cfg, &std::env::temp_dir())
            .await?
            .with_context(|| {
                format!(
                    "--semantic: no embedding model: {}",
                    clawctx_lossless::semantic::model::HOW_TO_ENABLE
                )
            })?;
        opts.embedder = Some(embedder);
        opts.synthetic_vectors = a.synthetic_vectors;
    }
    let rows = run_store_bench(&opts).await?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        print!("{}", render_store_table(&rows));
    }
    Ok(ExitCode::SUCCESS)
}

/// The backends of a `--backends` list.
fn parse_backends(list: &str) -> anyhow::Result<Vec<BackendKind>> {
    list.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| match s {
            "sqlite" => Ok(BackendKind::Sqlite),
            "postgres" | "postgresql" => Ok(BackendKind::Postgres),
            other => Err(anyhow::anyhow!(
                "--backends: unknown backend `{other}` (sqlite, postgres)"
            )),
        })
        .collect()
}

/// The PostgreSQL URL of `--pg-url` / `--pg-url-env`.
fn pg_url(url: &Option<String>, var: &Option<String>) -> anyhow::Result<Option<String>> {
    Ok(match (url, var) {
        (Some(url), _) => Some(url.clone()),
        (None, Some(var)) => Some(
            std::env::var(var)
                .with_context(|| format!("--pg-url-env: the variable {var} is not set"))?,
        ),
        (None, None) => None,
    })
}

async fn crash(a: CrashArgs) -> anyhow::Result<ExitCode> {
    let seed = a.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64 % 1_000_000_000)
            .unwrap_or(1)
    });
    eprintln!("crash campaign: seed {seed} (replay the kill delays with --seed {seed})");
    let temp;
    let work_dir = match &a.work_dir {
        Some(d) => {
            std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
            d.clone()
        }
        None => {
            temp = clawctx_bench::temp_dir().context("creating a temporary directory")?;
            temp.path().to_owned()
        }
    };
    let opts = CrashOptions {
        backends: parse_backends(&a.backends)?,
        kills: a.kills,
        points: a
            .points
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(KillPoint::parse)
            .collect::<Result<_, _>>()?,
        seed,
        pg_url: pg_url(&a.pg_url, &a.pg_url_env)?,
        exe: std::env::current_exe()
            .context("finding the clawctx binary for the crash children")?,
        work_dir,
        verbose: a.verbose,
        ack_before_write: a.ack_before_write,
    };
    let report = run_crash_campaign(&opts).await?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", render_crash_table(&report));
    }
    Ok(if report.ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

async fn crash_child(a: CrashChildArgs) -> anyhow::Result<ExitCode> {
    let store = match a.store.strip_prefix("env:") {
        Some(var) => std::env::var(var)
            .with_context(|| format!("--store env:{var}: the variable {var} is not set"))?,
        None => a.store.clone(),
    };
    if a.mode == "runtime" {
        let state = a
            .runtime_state
            .clone()
            .context("crash-child --mode runtime needs --runtime-state DIR")?;
        clawctx_bench::crash::runtime_child::run_runtime_child(&store, state, a.first, a.units)
            .await?;
        return Ok(ExitCode::SUCCESS);
    }
    let resend = match &a.resend {
        None => None,
        Some(s) => {
            let parsed = s
                .split_once(':')
                .and_then(|(f, n)| Some((f.parse::<u64>().ok()?, n.parse::<u64>().ok()?)));
            Some(parsed.with_context(|| format!("--resend {s}: expected FIRST:COUNT"))?)
        }
    };
    let opts = ChildOptions {
        mode: ChildMode::parse(&a.mode)?,
        store,
        first: a.first,
        units: a.units,
        resend,
        ack_before_write: a.ack_before_write,
    };
    run_child(&opts).await?;
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
