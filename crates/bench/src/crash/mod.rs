//! `clawctx bench crash`: the crash campaign. The lossless engine runs in a child process
//! through a realistic workload and is killed with SIGKILL at a random moment, again and
//! again, on each backend; after every kill the store is opened again (the restart) and
//! checked against what the engine had acknowledged before it died.
//!
//! Why a campaign and not a unit test: a kill lands wherever the process happens to be (in a
//! transaction, between a commit and its answer, in the checkpoint thread, in a summarizer
//! call, in the middle of copying a file), and only many kills at random moments cover those
//! places. The seed of the random delays is printed; `--seed` replays the same delays (the
//! process's own timing still varies from run to run).
//!
//! Kill points, each a kind of work the child is doing when it dies:
//! - `turns`: per-turn ingest, `commitTurn` and `afterTurn`, each followed by the engine's
//!   threshold compaction ([`child`]);
//! - `batch`: `ingestBatch` of 1,500-message runs (the streamed, deferred-index path);
//! - `compact`: a turn, then a forced compaction with a summarizer slow enough that most kills
//!   land inside it;
//! - `replay`: per-turn ingest through the whole host: `clawctx replay` of a 30-turn
//!   recording on one session (transcript appends, the durable-turn outbox, `commitTurn`,
//!   threshold compaction), a turn acknowledged by its printed line; the next run's start
//!   delivers what the outbox kept, and the session transcript must hold every acknowledged
//!   message exactly once too;
//! - `reply-commit`: a whole host in the child ([`runtime_child`]: the runtime's turn loop, its
//!   session transcript and durable-turn outbox, the lossless engine) killed in the moment
//!   after the model's reply and before the engine's `commitTurn` (a random delay of at most
//!   4 ms after a random turn's `REPLY` line); after each run a recovery run delivers what the
//!   outbox kept, and then every complete turn of the transcript (the prompt and its reply)
//!   must be in the store, and the store must hold the session's messages in turn order;
//! - `concurrent`: two children on the one store at once (per-turn ingest in one session,
//!   batched ingest in another, as a gateway and a CLI share a store); the first is killed,
//!   the second must run to its end through the other's death;
//! - `import`: `clawctx lcm import --apply` of a 3,000-message OpenClaw session file;
//! - `migrate` (PostgreSQL only): `clawctx lcm migrate --to postgres://… --apply` of a SQLite
//!   store into an empty database; after a kill the target must be empty or complete.
//!
//! Acknowledged means: an `ACK` line the child printed after the engine's call returned, or a
//! command that exited 0. After each restart: every acknowledged message is stored exactly
//! once (counted by its token, [`workload`]), no message is stored twice, no message is stored
//! that was never sent, `lcm doctor` passes, `PRAGMA integrity_check` says `ok` (SQLite) and
//! every conversation assembles back. A unit whose answer the kill swallowed is sent again by
//! the next run of the same kill point (the outbox's re-delivery after a restart), so the
//! idempotency of every write path is under the same test.

pub mod check;
pub mod child;
pub mod runtime_child;
pub mod workload;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clawctx_lossless::pg::connect::PgTarget;
use clawctx_lossless::BackendKind;
use serde::Serialize;

use self::check::Snapshot;
use self::child::ChildMode;
use crate::error::{BenchError, Result};
use crate::rng::Rng;
use crate::stores::admin_sql;

/// The environment variable a child reads its PostgreSQL store's URL from (never on a command
/// line, where `ps` would show the password).
pub const STORE_URL_VAR: &str = "CLAWCTX_CRASH_STORE_URL";
/// The environment variable `lcm migrate --to env:…` reads the target's URL from.
const TARGET_URL_VAR: &str = "CLAWCTX_CRASH_TARGET_URL";

/// Ids each run of a child may use (more than any run sends).
const IDS_PER_RUN: u64 = 100_000;
/// Messages in an imported session file.
const IMPORT_MESSAGES: u64 = 3_000;
/// Messages in a replayed recording (30 turns of five).
const REPLAY_MESSAGES: u64 = 150;
/// Turns of a `reply-commit` run.
const RUNTIME_TURNS: u64 = 12;
/// The longest delay after a `REPLY` line at which a `reply-commit` run is killed.
const AFTER_REPLY_MAX_MICROS: u64 = 4_000;
/// The longest a run that is not killed may take.
const RUN_TIMEOUT: Duration = Duration::from_secs(300);

/// Where the campaign kills.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum KillPoint {
    /// Per-turn ingest (`commitTurn`, `afterTurn`) with threshold compaction.
    Turns,
    /// `ingestBatch` of long runs.
    Batch,
    /// `clawctx replay` through the runtime (transcript, outbox, `commitTurn`).
    Replay,
    /// The runtime killed between a turn's reply and its `commitTurn`.
    ReplyCommit,
    /// Two children on one store, one killed.
    Concurrent,
    /// Forced compaction with a slow summarizer.
    Compact,
    /// `clawctx lcm import --apply`.
    Import,
    /// `clawctx lcm migrate --apply` (SQLite → PostgreSQL).
    Migrate,
}

impl KillPoint {
    /// Every kill point.
    pub const ALL: [KillPoint; 8] = [
        KillPoint::Turns,
        KillPoint::Batch,
        KillPoint::Replay,
        KillPoint::ReplyCommit,
        KillPoint::Concurrent,
        KillPoint::Compact,
        KillPoint::Import,
        KillPoint::Migrate,
    ];

    /// The point's name.
    pub fn name(self) -> &'static str {
        match self {
            KillPoint::Turns => "turns",
            KillPoint::Batch => "batch",
            KillPoint::Replay => "replay",
            KillPoint::ReplyCommit => "reply-commit",
            KillPoint::Concurrent => "concurrent",
            KillPoint::Compact => "compact",
            KillPoint::Import => "import",
            KillPoint::Migrate => "migrate",
        }
    }

    /// The point named `s`.
    pub fn parse(s: &str) -> Result<Self> {
        Self::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| {
                BenchError::InvalidArgument(format!(
                    "unknown kill point `{s}` (turns, batch, replay, reply-commit, concurrent, compact, import, migrate)"
                ))
            })
    }

    fn mode(self) -> Option<ChildMode> {
        match self {
            KillPoint::Turns | KillPoint::Concurrent => Some(ChildMode::Turns),
            KillPoint::Batch => Some(ChildMode::Batch),
            KillPoint::Compact => Some(ChildMode::Compact),
            KillPoint::Replay | KillPoint::ReplyCommit | KillPoint::Import | KillPoint::Migrate => {
                None
            }
        }
    }

    /// Units a child run of this point sends.
    fn units(self) -> u64 {
        match self {
            KillPoint::Turns | KillPoint::Concurrent => 40,
            KillPoint::Batch => 4,
            KillPoint::Compact => 30,
            KillPoint::ReplyCommit => RUNTIME_TURNS,
            KillPoint::Replay | KillPoint::Import | KillPoint::Migrate => 1,
        }
    }
}

/// What to run.
#[derive(Clone, Debug)]
pub struct CrashOptions {
    /// Backends, in order.
    pub backends: Vec<BackendKind>,
    /// Kills per backend, spread evenly over its kill points.
    pub kills: usize,
    /// Kill points (those a backend has: `migrate` is PostgreSQL's only).
    pub points: Vec<KillPoint>,
    /// Seed of the kill delays.
    pub seed: u64,
    /// The PostgreSQL server (an admin URL: databases are created on it and dropped after).
    pub pg_url: Option<String>,
    /// The `clawctx` binary the children run.
    pub exe: PathBuf,
    /// Scratch directory (SQLite stores, session files, child state).
    pub work_dir: PathBuf,
    /// Print a line per kill on stderr.
    pub verbose: bool,
    /// The harness's self-check: children acknowledge before they write (see
    /// [`child::ChildOptions::ack_before_write`]); the report must then show losses.
    pub ack_before_write: bool,
}

/// One backend at one kill point.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PointRow {
    /// `sqlite` or `postgres`.
    pub backend: String,
    /// The kill point.
    pub point: String,
    /// Runs killed (SIGKILL while still running).
    pub kills: u64,
    /// Runs that finished before their kill came (not counted as kills; they calibrate).
    pub ran_to_end: u64,
    /// Kills while the engine was opening (before its `OPEN` line; child runs only).
    pub killed_opening: u64,
    /// Kills while a write was in flight (sent, not yet acknowledged; for `turns` this
    /// includes the threshold compaction that follows each turn's commit; `import` and
    /// `migrate` count every kill here).
    pub killed_in_write: u64,
    /// Kills inside a forced compaction (`compact`).
    pub killed_in_compaction: u64,
    /// Kills between calls.
    pub killed_between: u64,
    /// Messages acknowledged by runs of this point.
    pub acknowledged: u64,
    /// Acknowledged messages missing after a restart (must be 0).
    pub lost: u64,
    /// Messages stored more than once (must be 0).
    pub duplicated: u64,
    /// Messages stored that were never sent, or rows without exactly one token (must be 0).
    pub unexpected: u64,
    /// Restarts after which `lcm doctor` failed (must be 0).
    pub doctor_failures: u64,
    /// Restarts after which `PRAGMA integrity_check` was not `ok` (must be 0; SQLite).
    pub integrity_failures: u64,
    /// Restarts after which a conversation did not assemble back (must be 0).
    pub readback_failures: u64,
    /// Sampled acknowledged messages full-text search did not find exactly once (must be 0).
    pub search_misses: u64,
    /// Migrations found neither empty nor complete after a kill (must be 0).
    pub partial_migrations: u64,
    /// Runs that failed on their own (an error exit, not a kill; must be 0).
    pub run_failures: u64,
    /// Kills after a turn's reply and before its `commitTurn` started (`reply-commit`).
    pub killed_after_reply: u64,
    /// Complete turns in the session transcript that the store did not hold after the
    /// recovery run (`reply-commit`; must be 0).
    pub turns_missing_from_engine: u64,
    /// Stored messages of the session out of turn order (`reply-commit`; must be 0).
    pub out_of_order: u64,
    /// The longest run that finished, in milliseconds (the kill delays are drawn below it).
    pub longest_run_ms: u64,
}

impl PointRow {
    fn bad(&self) -> u64 {
        self.lost
            + self.duplicated
            + self.unexpected
            + self.doctor_failures
            + self.integrity_failures
            + self.readback_failures
            + self.search_misses
            + self.partial_migrations
            + self.run_failures
            + self.turns_missing_from_engine
            + self.out_of_order
    }
}

/// The campaign's figures.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CrashReport {
    /// The seed (`--seed` replays its delays).
    pub seed: u64,
    /// Per backend and kill point.
    pub rows: Vec<PointRow>,
    /// What went wrong, first occurrences, in words.
    pub failures: Vec<String>,
    /// Wall time, seconds.
    pub seconds: f64,
}

impl CrashReport {
    /// No loss, duplicate, doctor, integrity, read-back or run failure anywhere.
    pub fn ok(&self) -> bool {
        self.failures.is_empty() && self.rows.iter().all(|r| r.bad() == 0)
    }

    /// Kills on `backend` (all points).
    pub fn kills(&self, backend: &str) -> u64 {
        self.rows
            .iter()
            .filter(|r| r.backend == backend)
            .map(|r| r.kills)
            .sum()
    }
}

/// The report as a text table, with totals per backend.
pub fn render_crash_table(report: &CrashReport) -> String {
    let mut out = format!("seed {} ({:.0} s)\n", report.seed, report.seconds);
    out.push_str(
        "backend   point       kills (open/write/compact/between)  ran-to-end  acknowledged  lost  duplicated  unexpected  doctor  integrity  read-back  search  partial-migrate  run-errors\n",
    );
    let mut totals: BTreeMap<String, PointRow> = BTreeMap::new();
    let line = |r: &PointRow| {
        format!(
            "{:<9} {:<10} {:>5} {:>28}  {:>10}  {:>12}  {:>4}  {:>10}  {:>10}  {:>6}  {:>9}  {:>9}  {:>6}  {:>15}  {:>10}\n",
            r.backend,
            r.point,
            r.kills,
            format!("({}/{}/{}/{})", r.killed_opening, r.killed_in_write, r.killed_in_compaction, r.killed_between),
            r.ran_to_end,
            r.acknowledged,
            r.lost,
            r.duplicated,
            r.unexpected,
            r.doctor_failures,
            r.integrity_failures,
            r.readback_failures,
            r.search_misses,
            r.partial_migrations,
            r.run_failures
        )
    };
    for r in &report.rows {
        out.push_str(&line(r));
        let t = totals.entry(r.backend.clone()).or_insert_with(|| PointRow {
            backend: r.backend.clone(),
            point: "all".into(),
            ..Default::default()
        });
        t.kills += r.kills;
        t.killed_opening += r.killed_opening;
        t.killed_in_write += r.killed_in_write;
        t.killed_in_compaction += r.killed_in_compaction;
        t.killed_between += r.killed_between;
        t.ran_to_end += r.ran_to_end;
        t.acknowledged += r.acknowledged;
        t.lost += r.lost;
        t.duplicated += r.duplicated;
        t.unexpected += r.unexpected;
        t.doctor_failures += r.doctor_failures;
        t.integrity_failures += r.integrity_failures;
        t.readback_failures += r.readback_failures;
        t.search_misses += r.search_misses;
        t.partial_migrations += r.partial_migrations;
        t.run_failures += r.run_failures;
    }
    for t in totals.values() {
        out.push_str(&line(t));
    }
    for r in report.rows.iter().filter(|r| r.point == "reply-commit") {
        out.push_str(&format!(
            "{} reply-commit: {} kills after a reply and before its commitTurn; complete turns missing from the engine: {}; stored out of turn order: {}\n",
            r.backend, r.killed_after_reply, r.turns_missing_from_engine, r.out_of_order
        ));
    }
    for f in &report.failures {
        out.push_str(&format!("FAILURE: {f}\n"));
    }
    out.push_str(if report.ok() {
        "result: ok\n"
    } else {
        "result: FAILED\n"
    });
    out
}

/// A finished child process.
struct Run {
    lines: Vec<String>,
    killed: bool,
    success: bool,
    /// From the start marker (or the spawn) to the exit.
    elapsed: Duration,
    /// From the spawn to the start marker.
    until_marker: Option<Duration>,
    stderr: String,
}

/// Runs `cmd`, killing it with SIGKILL `kill_after` after it printed the line `marker` (after
/// its spawn without one) when it is still running then.
fn run_process(
    cmd: Command,
    marker: Option<&'static str>,
    kill_after: Option<Duration>,
) -> Result<Run> {
    run_process_at(cmd, marker, 0, kill_after)
}

/// [`run_process`] counting the delay from the `nth` (from 0) line that is `marker` or starts
/// with it and a space.
fn run_process_at(
    mut cmd: Command,
    marker: Option<&'static str>,
    nth: usize,
    kill_after: Option<Duration>,
) -> Result<Run> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let started = Instant::now();
    let mut child = cmd
        .spawn()
        .map_err(|e| BenchError::io("spawning the crash child", e))?;
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let out_reader = std::thread::spawn(move || {
        if let Some(s) = stdout {
            for line in BufReader::new(s).lines().map_while(std::io::Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        }
    });
    let err_reader = std::thread::spawn(move || {
        let mut text = String::new();
        if let Some(mut s) = stderr {
            let _ = s.read_to_string(&mut text);
        }
        text
    });
    let mut lines = Vec::new();
    let mut anchor = if marker.is_none() {
        Some(started)
    } else {
        None
    };
    let mut killed = false;
    let mut seen = 0usize;
    let status = loop {
        while let Ok(line) = rx.try_recv() {
            let matches = marker.is_some_and(|m| {
                line == m || line.strip_prefix(m).is_some_and(|r| r.starts_with(' '))
            });
            if anchor.is_none() && matches {
                if seen == nth {
                    anchor = Some(Instant::now());
                }
                seen += 1;
            }
            lines.push(line);
        }
        if let Some(status) = child
            .try_wait()
            .map_err(|e| BenchError::io("waiting for the crash child", e))?
        {
            break status;
        }
        let due = match (anchor, kill_after) {
            (Some(a), Some(delay)) => a.elapsed() >= delay,
            _ => false,
        };
        if due || started.elapsed() >= RUN_TIMEOUT {
            // `Child::kill` is SIGKILL on Unix.
            child
                .kill()
                .map_err(|e| BenchError::io("killing the crash child", e))?;
            killed = true;
            break child
                .wait()
                .map_err(|e| BenchError::io("waiting for the crash child", e))?;
        }
        std::thread::sleep(Duration::from_micros(500));
    };
    let _ = out_reader.join();
    // Lines the child wrote before it died still count.
    lines.extend(rx.try_iter());
    let elapsed = anchor.unwrap_or(started).elapsed();
    let until_marker = anchor.map(|a| a.duration_since(started));
    let stderr = err_reader.join().unwrap_or_default();
    if killed && !matches!((anchor, kill_after), (Some(a), Some(d)) if a.elapsed() >= d) {
        return Err(BenchError::Invariant {
            engine: "lossless".into(),
            message: format!(
                "a crash child ran longer than {} s; its stderr:\n{}",
                RUN_TIMEOUT.as_secs(),
                tail(&stderr)
            ),
        });
    }
    Ok(Run {
        lines,
        killed,
        success: status.success(),
        elapsed,
        until_marker,
        stderr,
    })
}

/// The last lines of a child's stderr, for a failure message.
fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(15)..].join("\n")
}

/// When a run is killed.
#[derive(Clone, Copy, Debug)]
struct Kill {
    /// The delay.
    after: Duration,
    /// Counted from the spawn rather than from the child's `OPEN` line.
    from_spawn: bool,
}

/// A PostgreSQL database the campaign made, dropped at the end.
struct PgDb {
    admin: PgTarget,
    name: String,
    url: String,
}

/// `url` with its database replaced by `dbname` (a `postgres://` URL's path, or an appended
/// `dbname=` in the key=value form).
fn with_dbname(url: &str, dbname: &str) -> String {
    for scheme in ["postgres://", "postgresql://"] {
        if let Some(rest) = url.strip_prefix(scheme) {
            let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
            let (authority, after) = rest.split_at(authority_end);
            let query = after.find('?').map(|i| &after[i..]).unwrap_or("");
            return format!("{scheme}{authority}/{dbname}{query}");
        }
    }
    format!("{url} dbname={dbname}")
}

impl PgDb {
    async fn create(admin_url: &str, name: String) -> Result<Self> {
        let admin =
            PgTarget::parse(admin_url).map_err(|e| BenchError::engine("postgres", "connect", e))?;
        admin_sql(
            &admin,
            &format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
        )
        .await?;
        admin_sql(&admin, &format!("CREATE DATABASE {name}")).await?;
        Ok(Self {
            url: with_dbname(admin_url, &name),
            admin,
            name,
        })
    }

    async fn drop_now(&self) -> Result<()> {
        if std::env::var_os("CLAWCTX_BENCH_KEEP_DB").is_some() {
            return Ok(());
        }
        admin_sql(
            &self.admin,
            &format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name),
        )
        .await
    }
}

/// What the campaign knows about one store.
#[derive(Default)]
struct Ledger {
    /// Every id ever sent (an upper bound of what may be stored).
    sent: HashSet<u64>,
    /// Every id acknowledged (must be stored exactly once).
    acked: HashSet<u64>,
    /// The same ids in the order they were acknowledged (for sampling).
    acked_order: Vec<u64>,
    /// Ids acknowledged by the last run.
    last_acked: Vec<u64>,
    /// Ids acknowledged by `replay` runs (must be in the session transcript exactly once).
    transcript_acked: HashSet<u64>,
    /// Ids already reported lost, duplicated or unexpected (reported once).
    reported: HashSet<u64>,
}

/// A kill point's state between its runs.
#[derive(Default)]
struct PointState {
    /// The last finished run's duration: kill delays are drawn below it.
    window: Option<Duration>,
    /// The last run's time from its spawn to `OPEN` (child runs).
    opening: Option<Duration>,
    /// Runs killed since the last one that finished: after three the window grows by a
    /// quarter (a run that grows with the store, such as a replay reading its whole session
    /// or an import backing the file up first, would otherwise be killed ever earlier in
    /// its course).
    killed_in_a_row: u32,
    /// A unit whose answer a kill swallowed: (first id, count).
    pending: Option<(u64, u64)>,
    /// The import's session key of the pending unit.
    pending_session: Option<String>,
    imports: u64,
}

impl PointState {
    /// The kill window after `run` (see [`PointState::killed_in_a_row`]).
    fn adapt(&mut self, run: &Run) {
        if !run.killed {
            self.window = Some(run.elapsed);
            self.killed_in_a_row = 0;
            return;
        }
        self.killed_in_a_row += 1;
        if self.killed_in_a_row >= 3 {
            self.window = self.window.map(|w| w * 5 / 4);
            self.killed_in_a_row = 0;
        }
    }
}

/// One backend's campaign.
struct Campaign<'a> {
    opts: &'a CrashOptions,
    kind: BackendKind,
    name: &'static str,
    /// A SQLite path, or a `postgres://` URL.
    store: String,
    dir: PathBuf,
    ledger: Ledger,
    rows: BTreeMap<KillPoint, PointRow>,
    states: HashMap<KillPoint, PointState>,
    failures: Vec<String>,
    next_id: u64,
    /// `migrate`: the source file, its ids, its counts, and the current target.
    migrate_source: Option<(PathBuf, HashSet<u64>, Snapshot)>,
    migrate_target: Option<PgDb>,
    migrations: u64,
}

impl Campaign<'_> {
    fn row(&mut self, point: KillPoint) -> &mut PointRow {
        let name = self.name;
        self.rows.entry(point).or_insert_with(|| PointRow {
            backend: name.into(),
            point: point.name().into(),
            ..Default::default()
        })
    }

    fn fail(&mut self, message: String) {
        if self.failures.len() < 50 {
            self.failures.push(format!("{}: {message}", self.name));
        }
    }

    fn base_command(&self) -> Command {
        let mut cmd = Command::new(&self.opts.exe);
        cmd.env("CLAWCTX_STATE_DIR", self.dir.join("state"))
            .env_remove("CLAWCTX_LOG")
            .env_remove("RUST_LOG");
        if self.kind == BackendKind::Postgres {
            cmd.env(STORE_URL_VAR, &self.store);
        }
        cmd
    }

    /// The store as children name it: the path, or `env:` the variable holding the URL.
    fn store_arg(&self) -> String {
        match self.kind {
            BackendKind::Sqlite => self.store.clone(),
            BackendKind::Postgres => format!("env:{STORE_URL_VAR}"),
        }
    }

    /// When to kill the next run of `point`: a delay after its `OPEN` line drawn below the
    /// last finished run's duration, or (one run in eight of a child point) a delay after its
    /// spawn drawn below its time to open, so the open itself (schema checks, log recovery)
    /// is killed too.
    fn delay(&self, point: KillPoint, rng: &mut Rng) -> Option<Kill> {
        let state = self.states.get(&point)?;
        let window = state.window?;
        if let (Some(_), Some(opening), true) = (point.mode(), state.opening, rng.chance(1, 8)) {
            let ms = opening.as_millis().max(2) as u64;
            return Some(Kill {
                after: Duration::from_millis(rng.range(1, ms)),
                from_spawn: true,
            });
        }
        let ms = window.as_millis().max(2) as u64;
        Some(Kill {
            after: Duration::from_millis(rng.range(1, ms)),
            from_spawn: false,
        })
    }

    /// One run of `point`, killed as `kill` says (or left to finish: the calibration).
    async fn episode(&mut self, point: KillPoint, kill: Option<Kill>, rng: &mut Rng) -> Result<()> {
        let kill_after = kill.map(|k| k.after);
        let first = self.next_id;
        self.next_id += IDS_PER_RUN;
        let state = self.states.entry(point).or_default();
        let pending = state.pending.take();
        let pending_session = state.pending_session.take();
        let mut cmd = self.base_command();
        // The unit this run is about to send (import and migrate: the whole run's).
        let mut whole: Option<(u64, u64)> = None;
        let mut session = None;
        let mut replay_turns: Vec<(u64, u64)> = Vec::new();
        match point {
            KillPoint::Concurrent => {
                return self.concurrent_episode(kill, first, pending, rng).await
            }
            KillPoint::Turns | KillPoint::Batch | KillPoint::Compact => {
                let mode = point.mode().unwrap_or(ChildMode::Turns);
                cmd.args(["bench", "crash-child", "--mode", mode.name(), "--store"])
                    .arg(self.store_arg())
                    .args([
                        "--first",
                        &first.to_string(),
                        "--units",
                        &point.units().to_string(),
                    ]);
                if let Some((f, n)) = pending {
                    cmd.args(["--resend", &format!("{f}:{n}")]);
                }
                if self.opts.ack_before_write {
                    cmd.arg("--ack-before-write");
                }
            }
            KillPoint::Import => {
                let (f, n, key) = match (pending, pending_session) {
                    (Some((f, n)), Some(key)) => (f, n, key),
                    _ => {
                        let k = self.states.entry(point).or_default();
                        k.imports += 1;
                        (
                            first,
                            IMPORT_MESSAGES,
                            format!("agent:main:crash-import-{}", k.imports),
                        )
                    }
                };
                let file = self.dir.join(format!("import-{f}.jsonl"));
                if !file.exists() {
                    std::fs::write(&file, workload::session_jsonl(&key, f, n))
                        .map_err(|e| BenchError::io(&file, e))?;
                }
                cmd.arg("lcm")
                    .arg("--db")
                    .arg(self.store_arg())
                    .args(["import"])
                    .arg(&file)
                    .args(["--session", &key, "--apply"]);
                whole = Some((f, n));
                session = Some(key);
            }
            KillPoint::Replay => {
                let file = self.dir.join(format!("replay-{first}.jsonl"));
                std::fs::write(
                    &file,
                    workload::session_jsonl("replay", first, REPLAY_MESSAGES),
                )
                .map_err(|e| BenchError::io(&file, e))?;
                self.write_replay_config()?;
                cmd.arg("--state-dir")
                    .arg(self.replay_state())
                    .arg("replay")
                    .arg(&file)
                    .args(["--engine", "lossless"]);
                self.ledger.sent.extend(first..first + REPLAY_MESSAGES);
                replay_turns = workload::turn_ranges(first, REPLAY_MESSAGES);
            }
            KillPoint::ReplyCommit => return self.reply_commit_episode(kill, first, rng).await,
            KillPoint::Migrate => return self.migrate_episode(kill_after, rng).await,
        }
        if let Some((f, n)) = whole {
            self.ledger.sent.extend(f..f + n);
        }
        self.ledger.last_acked.clear();
        let marker = match kill {
            Some(Kill {
                from_spawn: true, ..
            }) => None,
            _ => point.mode().map(|_| "OPEN"),
        };
        let run = tokio::task::spawn_blocking(move || run_process(cmd, marker, kill_after))
            .await
            .map_err(|e| BenchError::engine("crash", "run", e))??;
        if !run.killed && !run.success {
            self.row(point).run_failures += 1;
            let message = format!(
                "a {} run failed on its own; its stderr:\n{}",
                point.name(),
                tail(&run.stderr)
            );
            self.fail(message);
        }
        let mut open: Option<(u64, u64)> = None;
        let mut acked = 0u64;
        for line in &run.lines {
            let mut words = line.split_whitespace();
            let (tag, a, n) = (words.next(), words.next(), words.next());
            if point == KillPoint::Replay {
                // `turn     3  lossless   context …`: the third turn ran to its end.
                if let (Some("turn"), Some(Some((f, n)))) = (
                    tag,
                    a.and_then(|a| a.parse::<usize>().ok())
                        .map(|i| replay_turns.get(i.wrapping_sub(1)).copied()),
                ) {
                    self.ledger.acked.extend(f..f + n);
                    self.ledger.acked_order.extend(f..f + n);
                    self.ledger.last_acked.extend(f..f + n);
                    self.ledger.transcript_acked.extend(f..f + n);
                    acked += n;
                }
                continue;
            }
            let (Some(a), Some(n)) = (
                a.and_then(|a| a.parse::<u64>().ok()),
                n.and_then(|n| n.parse::<u64>().ok()),
            ) else {
                continue;
            };
            match tag {
                Some("SEND") => {
                    self.ledger.sent.extend(a..a + n);
                    open = Some((a, n));
                }
                Some("ACK") => {
                    self.ledger.acked.extend(a..a + n);
                    self.ledger.acked_order.extend(a..a + n);
                    self.ledger.last_acked.extend(a..a + n);
                    acked += n;
                    open = None;
                }
                _ => {}
            }
        }
        if let Some((f, n)) = whole {
            if !run.killed && run.success {
                self.ledger.acked.extend(f..f + n);
                self.ledger.acked_order.extend(f..f + n);
                self.ledger.last_acked.extend(f..f + n);
                acked += n;
            } else {
                open = Some((f, n));
            }
            self.remove_backups();
        }
        let state = self.states.entry(point).or_default();
        state.pending = open;
        state.pending_session = if open.is_some() { session } else { None };
        state.adapt(&run);
        if marker.is_some() && run.until_marker.is_some() {
            state.opening = run.until_marker;
        }
        let phase = run
            .lines
            .iter()
            .rev()
            .find_map(|l| l.split_whitespace().next())
            .unwrap_or("");
        let opened = point.mode().is_none() || run.lines.iter().any(|l| l == "OPEN");
        let row = self.row(point);
        row.acknowledged += acked;
        if run.killed {
            row.kills += 1;
            match phase {
                _ if !opened => row.killed_opening += 1,
                _ if point.mode().is_none() => row.killed_in_write += 1,
                "SEND" => row.killed_in_write += 1,
                "COMPACT" => row.killed_in_compaction += 1,
                _ => row.killed_between += 1,
            }
        } else {
            row.ran_to_end += 1;
            row.longest_run_ms = row.longest_run_ms.max(run.elapsed.as_millis() as u64);
        }
        if self.opts.verbose {
            eprintln!(
                "[{}] {} {} after {} ms, {acked} messages acknowledged (last line: {:?})",
                self.name,
                point.name(),
                if run.killed { "killed" } else { "ran to end" },
                run.elapsed.as_millis(),
                run.lines.last().map_or("", String::as_str)
            );
        }
        if point == KillPoint::Replay {
            self.judge_transcript();
        }
        self.check_store(point, rng).await
    }

    /// The `SEND` / `ACK` lines of a child into the ledger: (messages acknowledged, the unit
    /// sent and not acknowledged).
    fn absorb(&mut self, lines: &[String]) -> (u64, Option<(u64, u64)>) {
        let mut open = None;
        let mut acked = 0;
        for line in lines {
            let mut words = line.split_whitespace();
            let (tag, a, n) = (words.next(), words.next(), words.next());
            let (Some(a), Some(n)) = (
                a.and_then(|a| a.parse::<u64>().ok()),
                n.and_then(|n| n.parse::<u64>().ok()),
            ) else {
                continue;
            };
            match tag {
                Some("SEND") => {
                    self.ledger.sent.extend(a..a + n);
                    open = Some((a, n));
                }
                Some("ACK") => {
                    self.ledger.acked.extend(a..a + n);
                    self.ledger.acked_order.extend(a..a + n);
                    self.ledger.last_acked.extend(a..a + n);
                    acked += n;
                    open = None;
                }
                _ => {}
            }
        }
        (acked, open)
    }

    /// `concurrent`: a `turns` child (killed) and a `batch` child (left to finish) on the
    /// store at once.
    async fn concurrent_episode(
        &mut self,
        kill: Option<Kill>,
        first: u64,
        pending: Option<(u64, u64)>,
        rng: &mut Rng,
    ) -> Result<()> {
        let point = KillPoint::Concurrent;
        self.ledger.last_acked.clear();
        let store = self.store_arg();
        let mut victim = self.base_command();
        victim
            .args(["bench", "crash-child", "--mode", "turns", "--store", &store])
            .args([
                "--first",
                &first.to_string(),
                "--units",
                &point.units().to_string(),
            ]);
        if let Some((f, n)) = pending {
            victim.args(["--resend", &format!("{f}:{n}")]);
        }
        let mut survivor = self.base_command();
        survivor
            .args(["bench", "crash-child", "--mode", "batch", "--store", &store])
            .args([
                "--first",
                &(first + IDS_PER_RUN / 2).to_string(),
                "--units",
                "2",
            ]);
        let marker = match kill {
            Some(Kill {
                from_spawn: true, ..
            }) => None,
            _ => Some("OPEN"),
        };
        let kill_after = kill.map(|k| k.after);
        let a = tokio::task::spawn_blocking(move || run_process(victim, marker, kill_after));
        let b = tokio::task::spawn_blocking(move || run_process(survivor, Some("OPEN"), None));
        let ra = a
            .await
            .map_err(|e| BenchError::engine("crash", "run", e))??;
        let rb = b
            .await
            .map_err(|e| BenchError::engine("crash", "run", e))??;
        let (acked_a, open_a) = self.absorb(&ra.lines);
        let (acked_b, _) = self.absorb(&rb.lines);
        for (run, who) in [(&ra, "killed"), (&rb, "surviving")] {
            if !run.killed && !run.success {
                self.row(point).run_failures += 1;
                self.fail(format!(
                    "the {who} child of a concurrent run failed on its own; its stderr:\n{}",
                    tail(&run.stderr)
                ));
            }
        }
        let state = self.states.entry(point).or_default();
        state.pending = open_a;
        state.adapt(&ra);
        if marker.is_some() && ra.until_marker.is_some() {
            state.opening = ra.until_marker;
        }
        let opened = ra.lines.iter().any(|l| l == "OPEN");
        let phase = ra
            .lines
            .iter()
            .rev()
            .find_map(|l| l.split_whitespace().next())
            .unwrap_or("")
            .to_owned();
        let row = self.row(point);
        row.acknowledged += acked_a + acked_b;
        if ra.killed {
            row.kills += 1;
            match phase.as_str() {
                _ if !opened => row.killed_opening += 1,
                "SEND" => row.killed_in_write += 1,
                _ => row.killed_between += 1,
            }
        } else {
            row.ran_to_end += 1;
            row.longest_run_ms = row.longest_run_ms.max(ra.elapsed.as_millis() as u64);
        }
        if self.opts.verbose {
            eprintln!(
                "[{}] concurrent: turns {} after {} ms ({acked_a} acknowledged), batch beside it {} ({acked_b} acknowledged)",
                self.name,
                if ra.killed { "killed" } else { "ran to end" },
                ra.elapsed.as_millis(),
                if rb.success { "ran to end" } else { "FAILED" },
            );
        }
        self.check_store(point, rng).await
    }

    /// The state dir of the `reply-commit` runs (session transcript, outbox).
    fn runtime_state(&self) -> PathBuf {
        self.dir.join("runtime-state")
    }

    /// A `reply-commit` child: `units` turns from `first` (none: the recovery run).
    fn runtime_child(&self, first: u64, units: u64) -> Command {
        let mut cmd = self.base_command();
        cmd.args(["bench", "crash-child", "--mode", "runtime", "--store"])
            .arg(self.store_arg())
            .args(["--first", &first.to_string(), "--units", &units.to_string()])
            .arg("--runtime-state")
            .arg(self.runtime_state());
        cmd
    }

    /// `reply-commit`: a run killed a moment after a random turn's reply (or left to finish:
    /// the calibration), then a recovery run, then the transcript against the store.
    async fn reply_commit_episode(
        &mut self,
        kill: Option<Kill>,
        first: u64,
        rng: &mut Rng,
    ) -> Result<()> {
        let point = KillPoint::ReplyCommit;
        self.ledger.last_acked.clear();
        let units = point.units();
        let (nth, after) = match kill {
            Some(_) => (
                rng.range(0, units - 1) as usize,
                Some(Duration::from_micros(rng.range(0, AFTER_REPLY_MAX_MICROS))),
            ),
            None => (0, None),
        };
        let cmd = self.runtime_child(first, units);
        let run =
            tokio::task::spawn_blocking(move || run_process_at(cmd, Some("REPLY"), nth, after))
                .await
                .map_err(|e| BenchError::engine("crash", "run", e))??;
        if !run.killed && !run.success {
            self.row(point).run_failures += 1;
            let message = format!(
                "a reply-commit run failed on its own; its stderr:\n{}",
                tail(&run.stderr)
            );
            self.fail(message);
        }
        let (acked, _) = self.absorb(&run.lines);
        // (The window only tells `delay` that this point has run once; the kill delay is this
        // point's own.)
        self.states.entry(point).or_default().adapt(&run);
        let phase = run
            .lines
            .iter()
            .rev()
            .find_map(|l| l.split_whitespace().next())
            .unwrap_or("")
            .to_owned();
        let opened = run.lines.iter().any(|l| l == "OPEN");
        let row = self.row(point);
        row.acknowledged += acked;
        if run.killed {
            row.kills += 1;
            match phase.as_str() {
                _ if !opened => row.killed_opening += 1,
                "REPLY" => row.killed_after_reply += 1,
                "SEND" | "COMMIT" => row.killed_in_write += 1,
                _ => row.killed_between += 1,
            }
        } else {
            row.ran_to_end += 1;
            row.longest_run_ms = row.longest_run_ms.max(run.elapsed.as_millis() as u64);
        }
        if self.opts.verbose {
            eprintln!(
                "[{}] reply-commit {} after turn {nth}'s reply + {} us, {acked} messages acknowledged (last line: {:?})",
                self.name,
                if run.killed { "killed" } else { "ran to end" },
                after.map_or(0, |d| d.as_micros()),
                run.lines.last().map_or("", String::as_str)
            );
        }
        // The restart: a run that only delivers what the outbox kept.
        let cmd = self.runtime_child(first + 2 * units, 0);
        let recovery = tokio::task::spawn_blocking(move || run_process(cmd, None, None))
            .await
            .map_err(|e| BenchError::engine("crash", "run", e))??;
        if !recovery.success {
            self.row(point).run_failures += 1;
            let message = format!(
                "the recovery run after a reply-commit kill failed; its stderr:\n{}",
                tail(&recovery.stderr)
            );
            self.fail(message);
        }
        self.judge_runtime_transcript().await;
        self.check_store(point, rng).await
    }

    /// The `reply-commit` session transcript against the store: every complete turn (a prompt
    /// with id `x` followed by its reply `x + 1`) must be stored, and the session's stored
    /// messages must be in turn order.
    async fn judge_runtime_transcript(&mut self) {
        let mut turns: Vec<u64> = Vec::new();
        let mut problems: Vec<String> = Vec::new();
        let dir = self.runtime_state().join("agents");
        let mut stack = vec![dir];
        while let Some(dir) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for e in entries.flatten() {
                let path = e.path();
                if path.is_dir() {
                    stack.push(path);
                    continue;
                }
                if path.extension().and_then(|x| x.to_str()) != Some("jsonl") {
                    continue;
                }
                let Ok(text) = std::fs::read_to_string(&path) else {
                    problems.push(format!("{} cannot be read", path.display()));
                    continue;
                };
                // (role, id) of each message entry, in file order.
                let mut messages: Vec<(String, u64)> = Vec::new();
                for line in text.lines() {
                    let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
                        continue;
                    };
                    if v.get("type").and_then(|t| t.as_str()) != Some("message") {
                        continue;
                    }
                    let role = v["message"]["role"].as_str().unwrap_or("").to_owned();
                    let body = v.get("message").map(|m| m.to_string()).unwrap_or_default();
                    if let Some(id) = workload::tokens_in(&body).first() {
                        messages.push((role, *id));
                    }
                }
                for w in messages.windows(2) {
                    if w[0].0 == "user" && w[1].0 == "assistant" && w[1].1 == w[0].1 + 1 {
                        turns.push(w[0].1);
                    }
                }
            }
        }
        let order = match self.kind {
            BackendKind::Sqlite => {
                check::sqlite_session_order(
                    Path::new(&self.store),
                    runtime_child::RUNTIME_SESSION_KEY,
                )
                .await
            }
            BackendKind::Postgres => {
                check::postgres_session_order(&self.store, runtime_child::RUNTIME_SESSION_KEY).await
            }
        };
        let order = match order {
            Ok(o) => o,
            Err(e) => {
                self.row(KillPoint::ReplyCommit).readback_failures += 1;
                self.fail(format!(
                    "the reply-commit session's stored order cannot be read: {e}"
                ));
                return;
            }
        };
        let stored: HashSet<u64> = order.iter().copied().collect();
        let mut missing: Vec<u64> = turns
            .iter()
            .copied()
            .filter(|x| !(stored.contains(x) && stored.contains(&(x + 1))))
            .filter(|x| self.ledger.reported.insert(*x))
            .collect();
        missing.sort_unstable();
        let out_of_order: Vec<(u64, u64)> = order
            .windows(2)
            .filter(|w| w[1] <= w[0])
            .map(|w| (w[0], w[1]))
            .collect();
        let row = self.row(KillPoint::ReplyCommit);
        row.turns_missing_from_engine += missing.len() as u64;
        row.out_of_order += out_of_order.len() as u64;
        if !missing.is_empty() {
            self.fail(format!(
                "{} complete turns of the transcript are not in the store after the recovery run (prompt ids {:?})",
                missing.len(),
                &missing[..missing.len().min(20)]
            ));
        }
        if !out_of_order.is_empty() {
            self.fail(format!(
                "the reply-commit session's messages are stored out of turn order at {:?}",
                &out_of_order[..out_of_order.len().min(20)]
            ));
        }
        if !problems.is_empty() {
            self.fail(format!("reply-commit transcripts: {problems:?}"));
        }
    }

    /// The state dir of the `replay` runs (config, session transcript, outbox).
    fn replay_state(&self) -> PathBuf {
        self.dir.join("replay-state")
    }

    /// The `replay` runs' config: the lossless engine on the campaign's store, with the
    /// campaign's small thresholds so turns compact.
    fn write_replay_config(&self) -> Result<()> {
        let state = self.replay_state();
        std::fs::create_dir_all(&state).map_err(|e| BenchError::io(&state, e))?;
        let cfg = child::crash_config();
        let mut lossless = serde_json::json!({
            "freshTailCount": cfg.fresh_tail_count,
            "leafChunkTokens": cfg.leaf_chunk_tokens,
            "leafMinFanout": cfg.leaf_min_fanout,
            "condensedMinFanout": cfg.condensed_min_fanout,
            "contextThreshold": cfg.context_threshold,
            "minSalientRetention": 0,
            "promptRecallShare": 0,
        });
        match self.kind {
            BackendKind::Sqlite => lossless["databasePath"] = self.store.clone().into(),
            BackendKind::Postgres => lossless["databaseEnv"] = STORE_URL_VAR.into(),
        }
        let config = serde_json::json!({
            "plugins": {
                "slots": {"contextEngine": "lossless"},
                "entries": {"lossless": {"config": lossless}}
            }
        });
        let path = state.join("clawctx.json");
        std::fs::write(&path, config.to_string()).map_err(|e| BenchError::io(&path, e))
    }

    /// Reads back the `replay` session transcripts: (count per token, unreadable lines other
    /// than a torn last line).
    fn replay_transcripts(&self) -> (HashMap<u64, u32>, Vec<String>) {
        let mut counts = HashMap::new();
        let mut problems = Vec::new();
        let mut stack = vec![self.replay_state().join("agents")];
        while let Some(dir) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for e in entries.flatten() {
                let path = e.path();
                if path.is_dir() {
                    stack.push(path);
                    continue;
                }
                if path.extension().and_then(|x| x.to_str()) != Some("jsonl")
                    || path.to_string_lossy().contains("outbox")
                {
                    continue;
                }
                let text = match std::fs::read_to_string(&path) {
                    Ok(t) => t,
                    Err(e) => {
                        problems.push(format!("{}: {e}", path.display()));
                        continue;
                    }
                };
                let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
                for (i, line) in lines.iter().enumerate() {
                    match serde_json::from_str::<serde_json::Value>(line) {
                        Ok(v) if v.get("type").and_then(|t| t.as_str()) == Some("message") => {
                            let body = v.get("message").map(|m| m.to_string()).unwrap_or_default();
                            for id in workload::tokens_in(&body) {
                                *counts.entry(id).or_default() += 1;
                            }
                        }
                        Ok(_) => {}
                        // A torn last line is what a kill during an append leaves (readers skip it).
                        Err(_) if i + 1 == lines.len() && !text.ends_with('\n') => {}
                        Err(e) => problems.push(format!("{} line {}: {e}", path.display(), i + 1)),
                    }
                }
            }
        }
        (counts, problems)
    }

    /// The session transcript against the `replay` runs' acknowledgements.
    fn judge_transcript(&mut self) {
        let (counts, problems) = self.replay_transcripts();
        let mut lost: Vec<u64> = self
            .ledger
            .transcript_acked
            .iter()
            .filter(|id| !counts.contains_key(id))
            .copied()
            .collect();
        let mut twice: Vec<(u64, u32)> = counts
            .iter()
            .filter(|(_, n)| **n > 1)
            .map(|(id, n)| (*id, *n))
            .collect();
        lost.sort_unstable();
        twice.sort_unstable();
        if lost.is_empty() && twice.is_empty() && problems.is_empty() {
            return;
        }
        self.row(KillPoint::Replay).readback_failures += 1;
        self.fail(format!(
            "the replay session transcript does not read back: {} acknowledged messages missing ({:?}), {} stored twice ({:?}), unreadable lines {:?}",
            lost.len(),
            &lost[..lost.len().min(20)],
            twice.len(),
            &twice[..twice.len().min(20)],
            problems
        ));
        // Reported once.
        self.ledger
            .transcript_acked
            .retain(|id| counts.contains_key(id));
    }

    /// `lcm import --apply` on SQLite backs the file up first; the copies would fill the disk.
    fn remove_backups(&self) {
        let Some(name) = Path::new(&self.store)
            .file_name()
            .and_then(|n| n.to_str())
            .map(str::to_owned)
        else {
            return;
        };
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        for e in entries.flatten() {
            if e.file_name()
                .to_str()
                .is_some_and(|f| f.starts_with(&format!("{name}.bak-")))
            {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }

    /// The restart: the store opened again and checked against the ledger.
    async fn check_store(&mut self, point: KillPoint, rng: &mut Rng) -> Result<()> {
        let search = self.search_sample(rng);
        let snap = match self.kind {
            BackendKind::Sqlite => check::sqlite(Path::new(&self.store), &search).await,
            BackendKind::Postgres => check::postgres(&self.store, &search).await,
        };
        let snap = match snap {
            Ok(s) => s,
            Err(e) => {
                self.row(point).doctor_failures += 1;
                self.fail(format!(
                    "after a {} run the store did not open or read: {e}",
                    point.name()
                ));
                return Ok(());
            }
        };
        self.judge(point, &snap, None);
        Ok(())
    }

    /// Ids to search for after a run: the last ten the run acknowledged (the newest rows,
    /// whose index entries are the likeliest to be missing) and ten from the whole history.
    fn search_sample(&self, rng: &mut Rng) -> Vec<u64> {
        let last = &self.ledger.last_acked;
        let mut ids: Vec<u64> = last[last.len().saturating_sub(10)..].to_vec();
        let all = &self.ledger.acked_order;
        if !all.is_empty() {
            ids.extend((0..10).map(|_| all[rng.index(all.len())]));
        }
        ids.sort_unstable();
        ids.dedup();
        ids
    }

    /// Compares `snap` with the ledger (or, for a migration target, with `expected`).
    fn judge(&mut self, point: KillPoint, snap: &Snapshot, expected: Option<&HashSet<u64>>) {
        let (acked, sent) = match expected {
            Some(ids) => (ids.clone(), ids.clone()),
            None => (
                std::mem::take(&mut self.ledger.acked),
                std::mem::take(&mut self.ledger.sent),
            ),
        };
        let mut lost = Vec::new();
        for id in &acked {
            if !snap.counts.contains_key(id) && self.ledger.reported.insert(*id) {
                lost.push(*id);
            }
        }
        let mut duplicated = Vec::new();
        let mut unexpected = Vec::new();
        for (id, n) in &snap.counts {
            if *n > 1 && self.ledger.reported.insert(*id) {
                duplicated.push((*id, *n));
            } else if !sent.contains(id) && self.ledger.reported.insert(*id) {
                unexpected.push(*id);
            }
        }
        if expected.is_none() {
            self.ledger.acked = acked;
            self.ledger.sent = sent;
        }
        lost.sort_unstable();
        duplicated.sort_unstable();
        unexpected.sort_unstable();
        let doctor_ok = snap.doctor_ok;
        let integrity_ok = snap.integrity_ok();
        let row = self.row(point);
        row.lost += lost.len() as u64;
        row.duplicated += duplicated.len() as u64;
        row.unexpected += unexpected.len() as u64 + snap.untokened;
        row.doctor_failures += u64::from(!doctor_ok);
        row.integrity_failures += u64::from(!integrity_ok);
        row.readback_failures += u64::from(!snap.readback.is_empty());
        row.search_misses += snap.search_misses.len() as u64;
        let what = point.name();
        if !lost.is_empty() {
            self.fail(format!(
                "after a {what} run, {} acknowledged messages are missing: ids {:?}",
                lost.len(),
                &lost[..lost.len().min(20)]
            ));
        }
        if !duplicated.is_empty() {
            self.fail(format!(
                "after a {what} run, {} messages are stored more than once (id, copies): {:?}",
                duplicated.len(),
                &duplicated[..duplicated.len().min(20)]
            ));
        }
        if !unexpected.is_empty() || snap.untokened > 0 {
            self.fail(format!(
                "after a {what} run, {} messages are stored that were never sent (ids {:?}) and {} rows carry no single token",
                unexpected.len(),
                &unexpected[..unexpected.len().min(20)],
                snap.untokened
            ));
        }
        if !doctor_ok {
            self.fail(format!(
                "after a {what} run, lcm doctor failed: {:?}",
                snap.doctor_issues
            ));
        }
        if !integrity_ok {
            self.fail(format!(
                "after a {what} run, PRAGMA integrity_check: {:?}",
                snap.integrity
            ));
        }
        if !snap.readback.is_empty() {
            self.fail(format!(
                "after a {what} run, conversations did not read back: {:?}",
                snap.readback
            ));
        }
        if !snap.search_misses.is_empty() {
            self.fail(format!(
                "after a {what} run, full-text search did not find these acknowledged messages exactly once (id, hits): {:?}",
                snap.search_misses
            ));
        }
    }

    /// Builds the SQLite store `lcm migrate` copies: turns with their compactions, and a
    /// batch, through the engine in this process.
    async fn build_migrate_source(&mut self) -> Result<()> {
        let path = self.dir.join("migrate-source.db");
        let engine = child::open_engine(
            &path.display().to_string(),
            Arc::new(clawctx_summarize::ExtractiveSummarizer),
        )
        .await?;
        let mut ids = HashSet::new();
        let mut first = self.next_id;
        self.next_id += IDS_PER_RUN;
        for u in 0..120u64 {
            let mode = if u == 60 {
                ChildMode::Batch
            } else {
                ChildMode::Turns
            };
            let n = mode.unit_len(first);
            child::send(&engine, mode, first, n).await?;
            ids.extend(first..first + n);
            first += n;
        }
        engine.backend().close().await;
        let snap = check::sqlite(&path, &[]).await?;
        if snap.counts.len() != ids.len() || !snap.doctor_ok || snap.summaries == 0 {
            return Err(BenchError::Invariant {
                engine: "lossless".into(),
                message: format!(
                    "the migration's source store is not as written: {} of {} messages, {} summaries, doctor {:?}",
                    snap.counts.len(),
                    ids.len(),
                    snap.summaries,
                    snap.doctor_issues
                ),
            });
        }
        self.migrate_source = Some((path, ids, snap));
        Ok(())
    }

    async fn new_migrate_target(&mut self) -> Result<()> {
        let admin = self.opts.pg_url.clone().unwrap_or_default();
        self.migrations += 1;
        let name = format!(
            "clawctx_crash_{}_mig{}",
            std::process::id(),
            self.migrations
        );
        self.migrate_target = Some(PgDb::create(&admin, name).await?);
        Ok(())
    }

    /// One `lcm migrate --apply` run; after it the target must be empty or complete.
    async fn migrate_episode(&mut self, kill_after: Option<Duration>, rng: &mut Rng) -> Result<()> {
        let point = KillPoint::Migrate;
        if self.migrate_source.is_none() {
            self.build_migrate_source().await?;
        }
        if self.migrate_target.is_none() {
            self.new_migrate_target().await?;
        }
        let (Some((source, ids, source_snap)), Some(target)) =
            (&self.migrate_source, &self.migrate_target)
        else {
            return Ok(());
        };
        let (source, ids, source_snap) = (source.clone(), ids.clone(), source_snap.clone());
        let target_url = target.url.clone();
        let mut cmd = self.base_command();
        cmd.env(TARGET_URL_VAR, &target_url)
            .arg("lcm")
            .arg("--db")
            .arg(&source)
            .args([
                "migrate",
                "--to",
                &format!("env:{TARGET_URL_VAR}"),
                "--apply",
            ]);
        let run = tokio::task::spawn_blocking(move || run_process(cmd, None, kill_after))
            .await
            .map_err(|e| BenchError::engine("crash", "run", e))??;
        let acknowledged = !run.killed && run.success;
        if !run.killed && !run.success {
            self.row(point).run_failures += 1;
            self.fail(format!(
                "a migrate run failed on its own; its stderr:\n{}",
                tail(&run.stderr)
            ));
        }
        let search: Vec<u64> = {
            let mut all: Vec<u64> = ids.iter().copied().collect();
            all.sort_unstable();
            (0..10).map(|_| all[rng.index(all.len())]).collect()
        };
        let snap = match check::postgres(&target_url, &search).await {
            Ok(s) => s,
            Err(e) => {
                self.row(point).doctor_failures += 1;
                self.fail(format!(
                    "after a migrate run the target did not open or read: {e}"
                ));
                return Ok(());
            }
        };
        let empty = snap.messages == 0 && snap.summaries == 0;
        let complete =
            snap.messages == source_snap.messages && snap.summaries == source_snap.summaries;
        {
            let row = self.row(point);
            if run.killed {
                row.kills += 1;
                row.killed_in_write += 1;
            } else {
                row.ran_to_end += 1;
                row.longest_run_ms = row.longest_run_ms.max(run.elapsed.as_millis() as u64);
            }
            if acknowledged {
                row.acknowledged += ids.len() as u64;
            }
        }
        self.states.entry(point).or_default().adapt(&run);
        if self.opts.verbose {
            eprintln!(
                "[{}] migrate {} after {} ms: target {}",
                self.name,
                if run.killed { "killed" } else { "ran to end" },
                run.elapsed.as_millis(),
                if empty {
                    "empty"
                } else if complete {
                    "complete"
                } else {
                    "PARTIAL"
                }
            );
        }
        if empty && !acknowledged {
            // Nothing was written: the next run migrates into the same database (a retry).
            return self.judge_empty_target(&snap);
        }
        if !complete {
            self.row(point).partial_migrations += 1;
            self.fail(format!(
                "after a migrate run (exit {}), the target holds {} of {} messages and {} of {} summaries",
                if run.killed { "killed".to_owned() } else { format!("ok={}", run.success) },
                snap.messages,
                source_snap.messages,
                snap.summaries,
                source_snap.summaries
            ));
        }
        self.judge(point, &snap, Some(&ids));
        if let Some(t) = self.migrate_target.take() {
            t.drop_now().await?;
        }
        Ok(())
    }

    /// `lcm migrate` opens its source like any store: the kills must not have changed it.
    async fn check_migrate_source(&mut self) {
        let Some((path, ids, before)) = self.migrate_source.clone() else {
            return;
        };
        match check::sqlite(&path, &[]).await {
            Ok(after) => {
                let same = after.counts.len() == ids.len()
                    && after.counts.values().all(|n| *n == 1)
                    && after.summaries == before.summaries;
                if !same || !after.doctor_ok || !after.integrity_ok() {
                    self.row(KillPoint::Migrate).integrity_failures += 1;
                    self.fail(format!(
                        "the migration's source changed under the killed migrations: {} of {} messages, {} of {} summaries, doctor {:?}, integrity {:?}",
                        after.counts.len(),
                        ids.len(),
                        after.summaries,
                        before.summaries,
                        after.doctor_issues,
                        after.integrity
                    ));
                }
            }
            Err(e) => {
                self.row(KillPoint::Migrate).integrity_failures += 1;
                self.fail(format!(
                    "the migration's source does not open after the killed migrations: {e}"
                ));
            }
        }
    }

    fn judge_empty_target(&mut self, snap: &Snapshot) -> Result<()> {
        if !snap.doctor_ok || !snap.readback.is_empty() {
            self.row(KillPoint::Migrate).doctor_failures += 1;
            self.fail(format!(
                "an empty migration target fails doctor: {:?} {:?}",
                snap.doctor_issues, snap.readback
            ));
        }
        Ok(())
    }
}

/// The kill points `kind` has.
fn points_of(kind: BackendKind, wanted: &[KillPoint]) -> Vec<KillPoint> {
    wanted
        .iter()
        .copied()
        .filter(|p| *p != KillPoint::Migrate || kind == BackendKind::Postgres)
        .collect()
}

/// Runs the campaign (see the module header).
pub async fn run_crash_campaign(opts: &CrashOptions) -> Result<CrashReport> {
    let started = Instant::now();
    let mut report = CrashReport {
        seed: opts.seed,
        ..Default::default()
    };
    let mut rng = Rng::new(opts.seed);
    for &kind in &opts.backends {
        let name = match kind {
            BackendKind::Sqlite => "sqlite",
            BackendKind::Postgres => "postgres",
        };
        let dir = opts.work_dir.join(name);
        std::fs::create_dir_all(dir.join("state")).map_err(|e| BenchError::io(&dir, e))?;
        let pg = match kind {
            BackendKind::Sqlite => None,
            BackendKind::Postgres => {
                let url = opts.pg_url.as_deref().ok_or_else(|| {
                    BenchError::InvalidArgument(
                        "the postgres backend needs a server: --pg-url postgres://… (or --pg-url-env VAR)".into(),
                    )
                })?;
                Some(
                    PgDb::create(url, format!("clawctx_crash_{}_store", std::process::id()))
                        .await?,
                )
            }
        };
        let store = match &pg {
            Some(db) => db.url.clone(),
            None => dir.join("store.db").display().to_string(),
        };
        let mut c = Campaign {
            opts,
            kind,
            name,
            store,
            dir,
            ledger: Ledger::default(),
            rows: BTreeMap::new(),
            states: HashMap::new(),
            failures: Vec::new(),
            next_id: 1,
            migrate_source: None,
            migrate_target: None,
            migrations: 0,
        };
        let points = points_of(kind, &opts.points);
        let out = async {
            if points.is_empty() {
                return Ok(());
            }
            // Each point runs once to its end first: a check of the path without a kill, and the
            // window the kill delays are drawn from.
            for &p in &points {
                c.episode(p, None, &mut rng).await?;
            }
            let mut done = 0usize;
            let mut attempts = 0usize;
            while done < opts.kills && attempts < opts.kills * 4 {
                let point = points[attempts % points.len()];
                attempts += 1;
                let delay = c.delay(point, &mut rng);
                let before = c.row(point).kills;
                c.episode(point, delay, &mut rng).await?;
                if c.row(point).kills > before {
                    done += 1;
                }
            }
            c.check_migrate_source().await;
            Ok::<_, BenchError>(())
        }
        .await;
        if let Some(t) = c.migrate_target.take() {
            let _ = t.drop_now().await;
        }
        if let Some(db) = &pg {
            let _ = db.drop_now().await;
        }
        out?;
        report.rows.extend(c.rows.into_values());
        report.failures.extend(c.failures);
    }
    report.seconds = started.elapsed().as_secs_f64();
    Ok(report)
}
