//! `clawctx lcm grep|describe|expand|status|doctor|import|prune|migrate`: the lossless store
//! from the shell, the same operations the model gets as recall tools.
//!
//! The store is the one the `lossless` engine uses: `--db PATH|URL` (alias `--database`),
//! else the engine's config (`plugins.entries.lossless.config`: `databaseEnv`, `database`,
//! `databasePath`), else `<state dir>/agents/main/lossless.db`. A `postgres://` URL selects the
//! PostgreSQL store, and `--db env:NAME` reads the path or URL from environment variable
//! `NAME` (so the password stays out of the shell history and the process list). A URL is
//! only ever shown without its password.
//!
//! `lcm migrate --to URL` copies the SQLite store (`--db PATH`, else the config's
//! `databasePath`, else the default file, even when the config names PostgreSQL already) into
//! an empty PostgreSQL database (see `clawctx_lossless::migrate`): a dry run unless `--apply`;
//! `--to env:NAME` reads the URL from the environment. Opening the target creates the store's
//! schema there when it has none (as any start on PostgreSQL does); a dry run writes no rows.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::{Args, Subcommand, ValueEnum};
use clawctx_lossless::migrate::MigrateReport;
use clawctx_lossless::pg::connect::{is_postgres_connection_string, PgTarget};
use clawctx_lossless::pg::PgStore;
use clawctx_lossless::{
    semantic, Backend, ConvKey, GrepMode, GrepQuery, GrepSort, GrepTarget, LosslessConfig,
    LosslessStore, Scope, StoreLocation,
};
use serde::Serialize;

use crate::global::GlobalArgs;

/// `lcm` arguments.
#[derive(Debug, Args)]
pub struct LcmArgs {
    /// The lossless store: a SQLite file, a `postgres://` URL, or `env:NAME` to read either
    /// from environment variable NAME (default: the lossless engine's store for agent `main`).
    #[arg(
        long,
        global = true,
        value_name = "PATH|URL",
        visible_alias = "database"
    )]
    db: Option<PathBuf>,
    /// Print JSON (grep prints one line per hit without it; the other reports are JSON).
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    action: LcmAction,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Mode {
    /// FTS5 / BM25 full-text search, every term must match (`fts` also accepted).
    #[value(name = "full_text", alias = "fts")]
    FullText,
    /// Free text (a question): rows sharing the most and rarest of its words, BM25 ranked
    /// (`any` also accepted).
    #[value(name = "any_term", alias = "any")]
    AnyTerm,
    /// Regular expression.
    Regex,
    /// By meaning: cosine between sentence vectors (needs an embedding model).
    Semantic,
    /// `any_term` and `semantic` fused by reciprocal rank (`any_term` without a model).
    Hybrid,
    /// `hybrid` when an embedding model is configured or found, else `full_text`.
    Auto,
}

#[derive(Debug, Subcommand)]
enum LcmAction {
    /// Search messages and summaries.
    Grep {
        /// Search terms (or a regex with --mode regex).
        pattern: String,
        /// Search mode.
        #[arg(long, value_enum, default_value = "auto")]
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
    /// Embed every message and summary the embedding model has not embedded yet (resumable:
    /// the progress is kept in the store), with a progress bar. The model: the config's
    /// `embeddings`, else CLAWCTX_EMBED_MODEL, else the default directory
    /// `scripts/fetch-embed-model` fills.
    Embed,
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
    /// Copy the SQLite store into an empty PostgreSQL database: every conversation, message,
    /// summary and DAG link with its id, counts checked before commit (dry run by default).
    Migrate {
        /// The target database: a `postgres://` URL, or `env:NAME` to read it from environment
        /// variable NAME.
        #[arg(long, value_name = "URL")]
        to: String,
        /// Write (in one transaction; a failure leaves the target as it was).
        #[arg(long)]
        apply: bool,
    },
}

/// The store the commands run on.
enum StoreArg {
    /// A SQLite file.
    Sqlite(PathBuf),
    /// A PostgreSQL database (the URL holds the password: never print it).
    Postgres(String),
}

/// `value`, or for `env:NAME` the value of environment variable NAME; `flag` names the
/// option in errors.
fn from_env(value: &str, flag: &str) -> anyhow::Result<String> {
    let Some(name) = value.strip_prefix("env:") else {
        return Ok(value.to_string());
    };
    match std::env::var(name) {
        Ok(v) if !v.trim().is_empty() => Ok(v.trim().to_string()),
        _ => anyhow::bail!("{flag} env:{name}: the environment variable {name} is not set"),
    }
}

/// The selected store. With `sqlite_source` (`lcm migrate`'s source) a config that names a
/// PostgreSQL database (the one being migrated to, typically) selects its SQLite file instead:
/// `databasePath`, else the default.
fn store_arg(
    global: &GlobalArgs,
    explicit: Option<PathBuf>,
    sqlite_source: bool,
) -> anyhow::Result<StoreArg> {
    if let Some(p) = explicit {
        return Ok(match p.to_str() {
            Some(s) if s.starts_with("env:") || is_postgres_connection_string(s) => {
                let v = from_env(s, "--db")?;
                if is_postgres_connection_string(&v) {
                    StoreArg::Postgres(v)
                } else {
                    StoreArg::Sqlite(PathBuf::from(v))
                }
            }
            _ => StoreArg::Sqlite(p),
        });
    }
    let config = global.load_config()?;
    let cfg = LosslessConfig::from_host_config(config.value());
    let location = match cfg.store_location() {
        Ok(StoreLocation::Postgres(_)) | Err(_) if sqlite_source => {
            StoreLocation::Sqlite(cfg.database_path.clone().map(Into::into))
        }
        other => other?,
    };
    Ok(match location {
        StoreLocation::Postgres(url) => StoreArg::Postgres(url),
        StoreLocation::Sqlite(Some(p)) => StoreArg::Sqlite(p),
        StoreLocation::Sqlite(None) => {
            StoreArg::Sqlite(global.agent_dir("main").join("lossless.db"))
        }
    })
}

/// Opens the PostgreSQL store at `url`; errors name it without its password.
async fn open_pg(url: &str) -> anyhow::Result<PgStore> {
    let target = PgTarget::parse(url)?;
    let shown = target.redacted();
    PgStore::open(target, 4)
        .await
        .with_context(|| format!("opening the PostgreSQL store {shown}"))
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

/// Prints a migration report as a table (or JSON).
fn print_migration(report: &MigrateReport, json: bool) -> anyhow::Result<()> {
    if json {
        return print(report);
    }
    let mut text = format!(
        "{} {} -> {}\n{:<18} {:>10} {:>10}  verified\n",
        if report.dry_run {
            "dry run:"
        } else {
            "migrated"
        },
        report.source,
        report.target,
        "table",
        "read",
        "written"
    );
    for t in &report.tables {
        let verified = if report.dry_run {
            "-"
        } else if t.verified {
            "yes"
        } else {
            "NO"
        };
        text.push_str(&format!(
            "{:<18} {:>10} {:>10}  {verified}\n",
            t.table, t.read, t.written
        ));
    }
    if report.messages_copied_verbatim > 0 {
        text.push_str(&format!(
            "{} messages did not decode and were copied as stored (see `lcm doctor`)\n",
            report.messages_copied_verbatim
        ));
    }
    if !report.next_ids.is_empty() {
        let next: Vec<String> = report
            .next_ids
            .iter()
            .map(|(t, n)| format!("{t} {n}"))
            .collect();
        text.push_str(&format!("next ids: {}\n", next.join(", ")));
    }
    emit(text.trim_end())
}

/// `lcm migrate`: the selected SQLite store into the empty database `to`.
async fn migrate(store: StoreArg, to: &str, apply: bool, json: bool) -> anyhow::Result<ExitCode> {
    let StoreArg::Sqlite(db) = store else {
        anyhow::bail!(
            "lcm migrate copies a SQLite store: the selected store is PostgreSQL already (pass the SQLite file with --db PATH)"
        );
    };
    if !db.exists() {
        anyhow::bail!("no lossless database at {} (pass --db PATH)", db.display());
    }
    let url = from_env(to, "--to")?;
    if !is_postgres_connection_string(&url) {
        anyhow::bail!(
            "--to must be a postgres:// URL or a libpq key=value connection string (or env:NAME holding one)"
        );
    }
    let target = open_pg(&url).await?;
    let source = LosslessStore::open(&db).with_context(|| format!("opening {}", db.display()))?;
    let out = clawctx_lossless::migrate::sqlite_to_postgres(&source, &target, apply).await;
    source.close_wait().await;
    target.close().await;
    let report = out.with_context(|| {
        format!(
            "migrating {} to {}",
            db.display(),
            target.target().redacted()
        )
    })?;
    print_migration(&report, json)?;
    if !apply {
        eprintln!("dry run: nothing was written (use --apply)");
    }
    Ok(ExitCode::SUCCESS)
}

/// The commands on a PostgreSQL store (through the `Backend` trait, as the engine uses it).
async fn run_pg(
    global: &GlobalArgs,
    url: &str,
    json: bool,
    action: LcmAction,
) -> anyhow::Result<ExitCode> {
    let pg = open_pg(url).await?;
    let store: Arc<dyn Backend> = Arc::new(pg);
    let code = run_backend(global, store.as_ref(), json, action).await;
    store.close().await;
    code
}

/// The commands both backends answer the same way; import and prune on PostgreSQL (SQLite's
/// back the file up first and run in [`run`]).
async fn run_backend(
    global: &GlobalArgs,
    store: &dyn Backend,
    json: bool,
    action: LcmAction,
) -> anyhow::Result<ExitCode> {
    match action {
        LcmAction::Embed => {
            let Some(semantic) = semantic_of(global).await? else {
                anyhow::bail!(
                    "no embedding model configured or found: {}",
                    semantic::model::HOW_TO_ENABLE
                );
            };
            embed(store, &semantic, json).await?;
        }
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
                Mode::FullText => GrepMode::FullText,
                Mode::AnyTerm => GrepMode::AnyTerm,
                Mode::Regex => GrepMode::Regex,
                Mode::Semantic => GrepMode::Semantic,
                Mode::Hybrid => GrepMode::Hybrid,
                Mode::Auto => GrepMode::Auto,
            };
            q.target = GrepTarget::Both;
            q.sort = if recent {
                GrepSort::Recency
            } else {
                GrepSort::Relevance
            };
            q.limit = limit;
            q.offset = offset;
            let semantic = match mode {
                Mode::Semantic | Mode::Hybrid => semantic_of(global).await?,
                // `auto` with a model that does not load is full-text, said once.
                Mode::Auto => semantic_of(global).await.unwrap_or_else(|e| {
                    eprintln!("semantic search off: {e:#}");
                    None
                }),
                _ => None,
            };
            let report = semantic::grep(store, semantic.as_ref(), q).await?;
            if json {
                print(&report)?;
            } else {
                print_grep(&report)?;
            }
        }
        LcmAction::Describe { id } => print(&store.describe(&id, None).await?)?,
        LcmAction::Expand { id, max_tokens } => print(&store.expand(&id, max_tokens, None).await?)?,
        LcmAction::Status => print(&store.status().await?)?,
        LcmAction::Doctor => {
            let report = store.doctor().await?;
            print(&report)?;
            if !report.ok {
                return Ok(ExitCode::from(1));
            }
        }
        LcmAction::Import {
            file,
            session,
            apply,
        } => {
            let key = ConvKey::from_host(Some(&session), &session);
            let report = store.import_jsonl(&key, file, apply, false).await?;
            print(&report)?;
            if !apply {
                eprintln!("dry run: nothing was written (use --apply)");
            }
        }
        LcmAction::Prune {
            older_than_days,
            apply,
        } => {
            let report = store
                .expire_payloads(prune_cutoff(older_than_days)?, apply)
                .await?;
            print(&report)?;
            if !apply {
                eprintln!("dry run: nothing was written (use --apply)");
            }
        }
        LcmAction::Migrate { .. } => {
            anyhow::bail!("lcm migrate copies a SQLite store (pass the SQLite file with --db PATH)")
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Semantic search with the model the config or the environment names (see
/// [`semantic::model::embedder_for`]); `None` when there is none.
async fn semantic_of(global: &GlobalArgs) -> anyhow::Result<Option<semantic::Semantic>> {
    let config = global.load_config()?;
    let cfg = LosslessConfig::from_host_config(config.value());
    let embedder = semantic::model::embedder_for(&cfg, &global.state_dir()).await?;
    Ok(embedder.map(|e| semantic::Semantic::new(e).with_min_score(cfg.semantic_min_score)))
}

/// `lcm embed`: every batch the model has not embedded, with a progress bar on stderr, then
/// what was done.
async fn embed(
    store: &dyn Backend,
    semantic: &semantic::Semantic,
    json: bool,
) -> anyhow::Result<()> {
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct EmbedReport {
        model: String,
        embedded_now: u64,
        embedded: u64,
        total: u64,
        seconds: f64,
        per_second: f64,
    }
    let (done, total) = semantic.progress(store).await?;
    let bar = indicatif::ProgressBar::new(total);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{msg} [{bar:40}] {pos}/{len} ({per_sec}, {eta} left)",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    bar.set_message(format!("embedding with {}", semantic.model_id()));
    bar.set_position(done);
    let start = std::time::Instant::now();
    let now = semantic
        .embed_all(store, |done, total| {
            bar.set_length(total);
            bar.set_position(done);
        })
        .await?;
    bar.finish_and_clear();
    let (embedded, total) = semantic.progress(store).await?;
    let seconds = start.elapsed().as_secs_f64();
    let report = EmbedReport {
        model: semantic.model_id().to_owned(),
        embedded_now: now,
        embedded,
        total,
        seconds,
        per_second: if seconds > 0.0 {
            now as f64 / seconds
        } else {
            0.0
        },
    };
    if json {
        print(&report)?;
    } else {
        println!(
            "{}: {embedded} of {total} items embedded ({now} now, {:.1}/s)",
            report.model, report.per_second
        );
    }
    Ok(())
}

/// The retention cutoff (epoch ms) of `prune --older-than-days`.
fn prune_cutoff(older_than_days: f64) -> anyhow::Result<i64> {
    if !older_than_days.is_finite() || older_than_days < 0.0 {
        anyhow::bail!("--older-than-days must be a non-negative number, got {older_than_days}");
    }
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0);
    Ok(now_ms - (older_than_days * 86_400_000.0) as i64)
}

/// Runs `lcm`.
pub async fn run(global: &GlobalArgs, args: LcmArgs) -> anyhow::Result<ExitCode> {
    let migrating = matches!(args.action, LcmAction::Migrate { .. });
    let store = store_arg(global, args.db, migrating)?;
    if let LcmAction::Migrate { to, apply } = &args.action {
        return migrate(store, to, *apply, args.json).await;
    }
    let db = match store {
        StoreArg::Postgres(url) => return run_pg(global, &url, args.json, args.action).await,
        StoreArg::Sqlite(db) => db,
    };
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
    let code = match args.action {
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
            ExitCode::SUCCESS
        }
        LcmAction::Prune {
            older_than_days,
            apply,
        } => {
            let cutoff = prune_cutoff(older_than_days)?;
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
            ExitCode::SUCCESS
        }
        action => run_backend(global, &store, args.json, action).await?,
    };
    store.close_wait().await;
    Ok(code)
}
