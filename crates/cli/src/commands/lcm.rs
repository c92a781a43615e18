//! `clawctx lcm grep|describe|expand|status|doctor|import`: the lossless store from the shell,
//! the same operations the model gets as recall tools.
//!
//! The database is the one the `lossless` engine uses: `--db PATH`, else
//! `plugins.entries.lossless.config.databasePath`, else `<state dir>/agents/main/lossless.db`.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Subcommand, ValueEnum};
use clawctx_lossless::{ConvKey, GrepMode, GrepQuery, GrepSort, GrepTarget, LosslessStore, Scope};
use serde::Serialize;

use crate::global::GlobalArgs;

/// `lcm` arguments.
#[derive(Debug, Args)]
pub struct LcmArgs {
    /// The lossless database (default: the lossless engine's database for agent `main`).
    #[arg(long, global = true, value_name = "PATH")]
    db: Option<PathBuf>,
    /// Print JSON (grep prints one line per hit without it; the other reports are JSON).
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    action: LcmAction,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Mode {
    /// FTS5 / BM25 full-text search, every term must match.
    Fts,
    /// Free text (a question): rows sharing the most and rarest of its words, BM25 ranked.
    Any,
    /// Regular expression.
    Regex,
}

#[derive(Debug, Subcommand)]
enum LcmAction {
    /// Search messages and summaries.
    Grep {
        /// Search terms (or a regex with --mode regex).
        pattern: String,
        /// Search mode.
        #[arg(long, value_enum, default_value = "fts")]
        mode: Mode,
        /// Only this session key (default: everything).
        #[arg(long)]
        session: Option<String>,
        /// Only this agent's conversations.
        #[arg(long)]
        agent: Option<String>,
        /// Newest first instead of by relevance.
        #[arg(long)]
        recent: bool,
        /// Results per page.
        #[arg(long, default_value_t = 20)]
        limit: usize,
        /// Skip this many results.
        #[arg(long, default_value_t = 0)]
        offset: usize,
    },
    /// Show a summary (`sum_N`) or message (`msg_N`): metadata, parents, children, sources.
    Describe {
        /// The id.
        id: String,
    },
    /// Expand a summary back into its children or source messages.
    Expand {
        /// The summary id.
        id: String,
        /// Token cap of the expansion.
        #[arg(long, default_value_t = 4_000)]
        max_tokens: u64,
    },
    /// Counts, sizes and depths.
    Status,
    /// Check DAG integrity: frontier coverage, orphans, tool pairs.
    Doctor,
    /// Backfill an OpenClaw JSONL session (dry run unless --apply, which backs up the DB first).
    Import {
        /// The session file.
        file: PathBuf,
        /// The session key to import into.
        #[arg(long, default_value = "agent:main:main")]
        session: String,
        /// Write (after a backup of the database).
        #[arg(long)]
        apply: bool,
    },
    /// Apply the payload retention policy now: large tool outputs older than N days whose
    /// messages are all summarized become a placeholder (dry run by default).
    Prune {
        /// Age in days (fractions allowed).
        #[arg(long)]
        older_than_days: f64,
        /// Write (after a backup of the database).
        #[arg(long)]
        apply: bool,
    },
}

fn database_path(global: &GlobalArgs, explicit: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    if let Some(p) = explicit {
        return Ok(p);
    }
    let config = global.load_config()?;
    if let Some(p) = config
        .get("plugins.entries.lossless.config.databasePath")?
        .and_then(|v| v.as_str())
    {
        return Ok(PathBuf::from(p));
    }
    Ok(global.agent_dir("main").join("lossless.db"))
}

/// Writes to stdout; a closed pipe (`clawctx lcm grep x | head`) ends quietly.
fn emit(text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out
        .write_all(text.as_bytes())
        .and_then(|_| out.write_all(b"\n"))
        .and_then(|_| out.flush())
    {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => Ok(other?),
    }
}

fn print<T: Serialize>(value: &T) -> anyhow::Result<()> {
    emit(&serde_json::to_string_pretty(value)?)
}

fn print_grep(report: &clawctx_lossless::GrepReport) -> anyhow::Result<()> {
    let v = serde_json::to_value(report)?;
    let mut text = String::new();
    for hit in v["hits"].as_array().into_iter().flatten() {
        let depth = hit
            .get("depth")
            .and_then(|d| d.as_i64())
            .map(|d| format!(" depth {d}"))
            .unwrap_or_default();
        text.push_str(&format!(
            "{:<10} {:<9}{}  {}\n",
            hit["id"].as_str().unwrap_or("?"),
            hit["role"].as_str().unwrap_or("?"),
            depth,
            hit["snippet"].as_str().unwrap_or("").replace('\n', " ")
        ));
    }
    if text.is_empty() {
        text.push_str("no matches\n");
    }
    if let Some(next) = v["nextOffset"].as_u64() {
        text.push_str(&format!("(more: --offset {next})\n"));
    }
    emit(text.trim_end())
}

/// Copies the database (and its WAL) next to itself before a write.
fn backup(db: &std::path::Path) -> anyhow::Result<Option<PathBuf>> {
    if !db.exists() {
        return Ok(None);
    }
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let target = db.with_extension(format!("db.bak-{stamp}"));
    std::fs::copy(db, &target)
        .with_context(|| format!("backing up {} to {}", db.display(), target.display()))?;
    let wal = PathBuf::from(format!("{}-wal", db.display()));
    if wal.exists() {
        std::fs::copy(&wal, PathBuf::from(format!("{}-wal", target.display())))?;
    }
    Ok(Some(target))
}

/// Runs `lcm`.
pub async fn run(global: &GlobalArgs, args: LcmArgs) -> anyhow::Result<ExitCode> {
    let db = database_path(global, args.db)?;
    if !db.exists() && !matches!(args.action, LcmAction::Import { apply: true, .. }) {
        anyhow::bail!(
            "no lossless database at {} (select the engine with `clawctx config set plugins.slots.contextEngine lossless` and run a conversation, or pass --db)",
            db.display()
        );
    }
    let mut backup_path = None;
    if let LcmAction::Import { apply: true, .. } | LcmAction::Prune { apply: true, .. } =
        &args.action
    {
        backup_path = backup(&db)?;
    }
    let store = LosslessStore::open(&db).with_context(|| format!("opening {}", db.display()))?;
    match args.action {
        LcmAction::Grep {
            pattern,
            mode,
            session,
            agent,
            recent,
            limit,
            offset,
        } => {
            let scope = match (session, agent) {
                (Some(s), _) => Scope::Session(ConvKey::from_host(Some(&s), &s)),
                (None, Some(a)) => Scope::Agent(a),
                (None, None) => Scope::All,
            };
            let mut q = GrepQuery::new(pattern, scope);
            q.mode = match mode {
                Mode::Fts => GrepMode::FullText,
                Mode::Any => GrepMode::AnyTerm,
                Mode::Regex => GrepMode::Regex,
            };
            q.target = GrepTarget::Both;
            q.sort = if recent {
                GrepSort::Recency
            } else {
                GrepSort::Relevance
            };
            q.limit = limit;
            q.offset = offset;
            let report = store.grep(q).await?;
            if args.json {
                print(&report)?;
            } else {
                print_grep(&report)?;
            }
        }
        LcmAction::Describe { id } => print(&store.describe(&id).await?)?,
        LcmAction::Expand { id, max_tokens } => print(&store.expand(&id, max_tokens).await?)?,
        LcmAction::Status => print(&store.status().await?)?,
        LcmAction::Doctor => {
            let report = store.doctor().await?;
            print(&report)?;
            if !report.ok {
                store.close_blocking();
                return Ok(ExitCode::from(1));
            }
        }
        LcmAction::Import {
            file,
            session,
            apply,
        } => {
            let key = ConvKey::from_host(Some(&session), &session);
            let report = store.import_openclaw_jsonl(&file, key, apply).await?;
            print(&report)?;
            if let Some(b) = backup_path {
                eprintln!("backup written to {}", b.display());
            }
            if !apply {
                eprintln!("dry run: nothing was written (use --apply)");
            }
        }
        LcmAction::Prune {
            older_than_days,
            apply,
        } => {
            if !older_than_days.is_finite() || older_than_days < 0.0 {
                anyhow::bail!(
                    "--older-than-days must be a non-negative number, got {older_than_days}"
                );
            }
            let now_ms = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_millis() as i64)
                .unwrap_or(0);
            let cutoff = now_ms - (older_than_days * 86_400_000.0) as i64;
            let report = store
                .call(move |db| db.expire_payloads(cutoff, apply))
                .await?;
            print(&report)?;
            if let Some(b) = backup_path {
                eprintln!("backup written to {}", b.display());
            }
            if !apply {
                eprintln!("dry run: nothing was written (use --apply)");
            }
        }
    }
    store.close_blocking();
    Ok(ExitCode::SUCCESS)
}
