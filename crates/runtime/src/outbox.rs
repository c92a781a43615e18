//! Durable turns: the commits of accepted turns on their way to the engine (contract §1.7).
//!
//! An engine with the full `transcriptSemantics` declaration gets `commitTurn` for each
//! accepted turn, keyed by an `advancementKey` it stores atomically. The host writes the commit
//! to the outbox (one JSON file per commit under `<state>/runtime/outbox/`, written to a
//! temporary file, synced and renamed) *before* calling the engine, and removes it only once
//! the engine acknowledged it (`committed` or `duplicate`).
//!
//! Why the transcript and the engine agree after any crash: the commit is written while the
//! transcript's write lock is held, *before* the turn's terminal entry (the reply that ends
//! the turn) is appended, and the terminal entry gets the id the commit names
//! ([`clawctx_transcript::SessionFile::append_with`]). A kill before the commit is on disk
//! leaves a turn without its terminal entry: an unfinished turn, as if the model had not
//! answered, which no engine is owed. A kill after it leaves the commit in the outbox, and the
//! next delivery first puts a missing terminal entry back (under its recorded id, at its
//! recorded parent) and then delivers. So no complete turn in a transcript is ever missing
//! from the outbox or the engine. (The other design, reconciling the transcript against the
//! engine's committed keys at start, needs a way to ask every engine for its keys and to
//! rebuild each turn's anchors from the file; writing the commit first needs neither.)
//!
//! Order: each commit carries a `sequence`, the terminal entry's index in the transcript file,
//! which only grows within a session. A session's commits are delivered in that order, one at
//! a time (a per-session lock), and delivery stops at the first failure: a later turn never
//! reaches the engine before an earlier one. A commit that failed, or whose process died
//! before the answer, is delivered again before the session's next `bootstrap`/`assemble`, and
//! by the runtime's retry task (1 s after the failure, doubling to 30 s, for as long as the
//! session has commits waiting: an engine whose database is down for a while gets the turns in
//! order once it is back, without a restart or a new turn); a new runtime delivers what the
//! outbox holds when it starts ([`crate::AgentRuntime::deliver_pending_commits`]). The
//! engine's idempotency makes a repeat harmless, so the turn reaches the engine exactly once.
//! An unreadable outbox file is reported (with its path) and left where it is for `doctor`
//! and the user: it is never dropped silently, and it never stops the turn.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use clawctx_engine::{ContextEngine, Method};
use clawctx_protocol::transcript::{EntryKind, TranscriptEntry};
use clawctx_protocol::*;
use clawctx_transcript::ResolvedSession;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::Result;
use crate::maintain::MaintenanceReason;
use crate::runtime::{lock, Inner};

/// The outbox directory under a state dir.
pub fn outbox_dir(state_dir: &Path) -> PathBuf {
    state_dir.join("runtime").join("outbox")
}

/// Format version of an outbox file.
const OUTBOX_VERSION: u64 = 1;

/// One commit waiting for its acknowledgement.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct PendingCommit {
    version: u64,
    session_key: String,
    session_id: String,
    /// The terminal entry's index in the transcript file: the session's delivery order
    /// (absent in files of earlier builds: read from `params.terminal.rawSeq`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    sequence: Option<u64>,
    params: CommitTurnParams,
}

impl PendingCommit {
    fn sequence(&self) -> u64 {
        self.sequence.unwrap_or(self.params.terminal.raw_seq)
    }
}

/// An outbox file that cannot be read back (reported by `doctor`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OutboxProblem {
    /// The file.
    pub path: PathBuf,
    /// What is wrong with it.
    pub problem: String,
}

/// What the outbox of a state dir holds: commits waiting, files that cannot be read, and
/// temporary files a killed process left behind.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OutboxReport {
    /// Readable commits waiting for their engine.
    pub pending: usize,
    /// Unreadable files.
    pub problems: Vec<OutboxProblem>,
    /// Temporary files of writes that never finished (see [`sweep_orphans`]).
    pub orphans: Vec<PathBuf>,
}

/// The prefix of a commit's temporary file: `.tmp.<pid>.` and a random part, so that what a
/// killed process left is told from what a running one is writing.
const TMP_PREFIX: &str = ".tmp";

/// A temporary file of another build (no pid in its name) counts as left behind once it is
/// this old: a commit's write takes milliseconds.
const ORPHAN_AGE: std::time::Duration = std::time::Duration::from_secs(60);

/// Whether `path`, a `.tmp*` file of the outbox, was left by a process that is gone: its name
/// carries a pid that no longer runs, or, without one (or without `/proc` to ask), it is older
/// than [`ORPHAN_AGE`]. A file of a process that runs (this one included) is never one.
fn is_orphan(path: &Path) -> bool {
    let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
        return false;
    };
    let Some(rest) = name.strip_prefix(TMP_PREFIX) else {
        return false;
    };
    let pid = rest
        .strip_prefix('.')
        .and_then(|r| r.split_once('.'))
        .and_then(|(pid, _)| pid.parse::<u32>().ok());
    let can_ask = Path::new("/proc/self/stat").exists();
    match pid {
        Some(pid) if can_ask => {
            pid != std::process::id()
                && clawctx_engine::health_mirror::process_start_time(pid).is_none()
        }
        _ => std::fs::metadata(path)
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age >= ORPHAN_AGE),
    }
}

/// The temporary files of the outbox of `state_dir` that processes killed mid-write left.
fn orphans(state_dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(outbox_dir(state_dir)) else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| is_orphan(p))
        .collect();
    out.sort();
    out
}

/// Removes the temporary files that processes killed while writing a commit left in the outbox
/// of `state_dir` (a commit is renamed into place whole, so such a file is never a commit a
/// turn was acknowledged with). A runtime does this when it is built. Answers the files removed;
/// one that cannot be removed is logged and left for `doctor` to report.
pub fn sweep_orphans(state_dir: &Path) -> Vec<PathBuf> {
    let mut removed = Vec::new();
    for path in orphans(state_dir) {
        match std::fs::remove_file(&path) {
            Ok(()) => removed.push(path),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => tracing::warn!(
                "outbox: cannot remove {}, left by a process stopped while writing a commit: {e}",
                path.display()
            ),
        }
    }
    if !removed.is_empty() {
        tracing::info!(
            "outbox: removed {} temporary file(s) left by processes stopped while writing a commit",
            removed.len()
        );
    }
    removed
}

/// Reads every outbox file of `state_dir` (for `doctor`). Never fails: an unreadable directory
/// is one problem.
pub fn inspect_outbox(state_dir: &Path) -> OutboxReport {
    let dir = outbox_dir(state_dir);
    let mut report = OutboxReport::default();
    let entries = match std::fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return report,
        Err(e) => {
            report.problems.push(OutboxProblem {
                path: dir,
                problem: format!("cannot list the directory: {e}"),
            });
            return report;
        }
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().and_then(|e| e.to_str()) != Some("json") {
            continue;
        }
        match read_pending(&path) {
            Ok(_) => report.pending += 1,
            Err(problem) => report.problems.push(OutboxProblem { path, problem }),
        }
    }
    report.problems.sort_by(|a, b| a.path.cmp(&b.path));
    report.orphans = orphans(state_dir);
    report
}

fn read_pending(path: &Path) -> std::result::Result<PendingCommit, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read it: {e}"))?;
    let p: PendingCommit = serde_json::from_str(&text).map_err(|e| {
        format!(
            "not a pending commit (line {}, column {}): {e}",
            e.line(),
            e.column()
        )
    })?;
    if p.version != OUTBOX_VERSION {
        return Err(format!("written by another version of clawctx (outbox format {}, this build reads {OUTBOX_VERSION})", p.version));
    }
    Ok(p)
}

/// A file-name-safe form of `s` (ids are hex and uuids; anything else becomes `_`).
fn file_safe(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The file a commit waits in: named by session id, then its sequence and the rest of the key,
/// so a session's commits can be found without reading other sessions' files and list in
/// their order.
fn commit_path(dir: &Path, session_id: &str, sequence: u64, advancement_key: &str) -> PathBuf {
    dir.join(format!(
        "{}.{sequence:012}.{}.json",
        file_safe(session_id),
        file_safe(advancement_key)
    ))
}

/// Writes `bytes` to `path` whole: temporary file, rename; with `sync` (the runtime's
/// `durable` setting, off only for replays) the file and the rename are synced to disk first.
fn write_commit(path: &Path, bytes: &[u8], sync: bool) -> std::io::Result<()> {
    use std::io::Write;
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let mut tmp = tempfile::Builder::new()
        .prefix(&format!("{TMP_PREFIX}.{}.", std::process::id()))
        .tempfile_in(dir)?;
    tmp.write_all(bytes)?;
    if sync {
        tmp.as_file().sync_all()?;
    }
    tmp.persist(path).map_err(|e| e.error)?;
    if sync {
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
    }
    Ok(())
}

/// An entry's anchor (§1.7): where it sits in the file and on the active branch. The turn's
/// entries are the newest, so the file is searched from its end.
fn anchor(
    s: &ResolvedSession,
    store_path: &str,
    entries: &[TranscriptEntry],
    position: usize,
    id: &str,
) -> Option<TranscriptEntryAnchor> {
    let raw_seq = entries.iter().rposition(|e| e.id == id)?;
    Some(TranscriptEntryAnchor {
        agent_id: s.agent_id.clone(),
        session_id: s.entry.session_id.clone(),
        session_key: s.key.clone(),
        store_path: store_path.to_owned(),
        // A JSONL transcript has one generation; a rotated successor is another session id.
        generation: Value::from(1),
        entry_id: id.to_owned(),
        raw_seq: raw_seq as u64,
        effective_parent_id: entries[raw_seq].parent_id.clone(),
        active_message_position: position as u64,
        idempotency_key: None,
    })
}

/// What delivering a session's outbox came to.
#[derive(Debug, Default)]
pub(crate) struct Delivery {
    /// Commits the engine acknowledged.
    pub(crate) acknowledged: usize,
    /// The failure that stopped delivery, as a line for the log: that commit and the later
    /// ones wait for the retry.
    pub(crate) blocked: Option<String>,
}

/// A turn's commit as [`Inner::append_terminal`] wrote it: delivered by
/// [`Inner::deliver_outbox`] in its place in the session's order.
pub(crate) struct TurnCommit {
    /// Its outbox file (`None`: the file could not be written; the commit is delivered from
    /// memory and cannot be retried).
    path: Option<PathBuf>,
    sequence: u64,
    params: CommitTurnParams,
}

/// The runtime's retry of commits that failed: the sessions with commits waiting, and
/// whether the retry task runs.
#[derive(Default)]
pub(crate) struct RetryState {
    sessions: std::collections::HashMap<String, ResolvedSession>,
    running: bool,
    /// The failure that stopped the last delivery, while commits wait.
    last_failure: Option<String>,
    /// A delivery asked for by a readiness probe runs ([`Inner::deliver_waiting_now`]).
    on_demand: bool,
}

/// The first wait of the retry task, and its longest (the wait doubles while nothing gets
/// through).
const RETRY_FIRST: std::time::Duration = std::time::Duration::from_secs(1);
const RETRY_MAX: std::time::Duration = std::time::Duration::from_secs(30);

/// Commits the runtime is retrying (for `/readyz`, the dashboard and `/metrics`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RetryStatus {
    /// Sessions with commits waiting for their engine.
    pub sessions: usize,
    /// Why the last delivery failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_failure: Option<String>,
}

/// A commit to deliver: (sequence, its file, the commit as read from disk, or the fresh one's
/// params).
type Waiting = (
    u64,
    Option<PathBuf>,
    Option<PendingCommit>,
    Option<CommitTurnParams>,
);

impl Inner {
    /// Appends the turn's terminal entry `message` after writing the turn's commit to the
    /// outbox, both under the transcript's write lock (see the module header): the turn's
    /// entries run from `first` (the admitted user entry) to the new one, at `positions` among
    /// the active messages; `messages` are the turn's messages before this one. Answers the
    /// new entry's id and the commit (`None` when the turn cannot be described: logged, the
    /// entry is appended all the same).
    pub(crate) fn append_terminal(
        &self,
        s: &ResolvedSession,
        message: AgentMessage,
        first: &str,
        positions: (usize, usize),
        mut messages: Vec<AgentMessage>,
        is_heartbeat: Option<bool>,
    ) -> Result<(String, Option<TurnCommit>)> {
        messages.push(message.clone());
        let store_path = self
            .store
            .sessions_json_path(&s.agent_id)?
            .to_string_lossy()
            .into_owned();
        let dir = outbox_dir(&self.state_dir);
        let durable = self.durable;
        let file = self.file(&s.transcript_path)?;
        let mut f = lock(&file)?;
        let mut written: Option<PathBuf> = None;
        let appended = f.append_with(
            EntryKind::Message(message),
            |entry, entries| -> std::result::Result<Option<TurnCommit>, std::convert::Infallible> {
                let Some(admission) = anchor(s, &store_path, entries, positions.0, first) else {
                    tracing::warn!(
                        "context engine commitTurn: cannot describe the turn: its first entry {first} is not in {}",
                        s.transcript_path.display()
                    );
                    return Ok(None);
                };
                let sequence = entries.len() as u64;
                let terminal = TranscriptEntryAnchor {
                    agent_id: s.agent_id.clone(),
                    session_id: s.entry.session_id.clone(),
                    session_key: s.key.clone(),
                    store_path: store_path.clone(),
                    generation: Value::from(1),
                    entry_id: entry.id.clone(),
                    raw_seq: sequence,
                    effective_parent_id: entry.parent_id.clone(),
                    active_message_position: positions.1 as u64,
                    idempotency_key: None,
                };
                let params = CommitTurnParams {
                    advancement_key: format!("{}:{first}:{}", s.entry.session_id, entry.id),
                    admission: TranscriptTurnAdmission {
                        anchor: admission,
                        logical_turn_id: format!("turn-{first}"),
                        role: "user".into(),
                    },
                    terminal,
                    messages,
                    session_id: s.entry.session_id.clone(),
                    session_key: Some(s.key.clone()),
                    session_target: Some(self.session_target(s)),
                    runtime_settings: None,
                    runtime_context: None,
                    is_heartbeat,
                };
                let path = commit_path(&dir, &s.entry.session_id, sequence, &params.advancement_key);
                let pending = PendingCommit {
                    version: OUTBOX_VERSION,
                    session_key: s.key.clone(),
                    session_id: s.entry.session_id.clone(),
                    sequence: Some(sequence),
                    params,
                };
                let kept = serde_json::to_vec_pretty(&pending)
                    .map_err(|e| e.to_string())
                    .and_then(|bytes| write_commit(&path, &bytes, durable).map_err(|e| e.to_string()));
                match kept {
                    Ok(()) => written = Some(path.clone()),
                    // Without the outbox the commit is still delivered; it just cannot be
                    // retried.
                    Err(e) => tracing::warn!(
                        "context engine commitTurn: cannot write {}: {e}",
                        path.display()
                    ),
                }
                Ok(Some(TurnCommit {
                    path: written.clone(),
                    sequence,
                    params: pending.params,
                }))
            },
        );
        match appended {
            Ok(Ok((id, commit))) => Ok((id, commit)),
            Ok(Err(never)) => match never {},
            Err(e) => {
                // The reply is not in the transcript, so the turn is not accepted: its commit
                // must not be delivered (nor restored by the next delivery).
                if let Some(path) = written {
                    let _ = std::fs::remove_file(path);
                }
                Err(e.into())
            }
        }
    }

    /// The lock that makes one delivery at a time of session `session_id`'s commits.
    fn outbox_gate(&self, session_id: &str) -> Arc<tokio::sync::Mutex<()>> {
        // Poison recovered: a fresh gate per delivery would let a session's deliveries run at
        // once (the map is only inserted into and pruned, whole at every step).
        let mut gates = self.outbox_gates.lock().unwrap_or_else(|p| p.into_inner());
        // Gates nobody holds or waits for are dropped as others are made.
        if gates.len() > 1024 {
            gates.retain(|_, g| Arc::strong_count(g) > 1);
        }
        gates.entry(session_id.to_owned()).or_default().clone()
    }

    async fn deliver_commit(
        self: &Arc<Self>,
        s: &ResolvedSession,
        path: Option<&Path>,
        mut params: CommitTurnParams,
    ) -> std::result::Result<(), String> {
        params.runtime_settings = Some(self.runtime_settings());
        params.runtime_context = Some(self.runtime_context(s, None, None, false));
        let engine: &Arc<dyn ContextEngine> = &self.engine;
        let key = params.advancement_key.clone();
        match engine
            .commit_turn(&params, &self.call_context(s, None))
            .await
        {
            Ok(r) => {
                tracing::debug!(advancement_key = %key, status = ?r.status, "context engine commitTurn");
                if let Some(path) = path {
                    if let Err(e) = std::fs::remove_file(path) {
                        if e.kind() != std::io::ErrorKind::NotFound {
                            tracing::warn!("context engine commitTurn: cannot remove {} after the acknowledgement: {e}", path.display());
                        }
                    }
                }
                Ok(())
            }
            Err(e) => Err(match path {
                Some(path) => format!(
                    "context engine commitTurn failed for {key} (kept in {} and retried): {e}",
                    path.display()
                ),
                None => format!(
                    "context engine commitTurn failed for {key} (its outbox file could not be written, so it is not retried): {e}"
                ),
            }),
        }
    }

    /// Puts back a commit's terminal entry that a crash kept out of the transcript (the commit
    /// was written first, see the module header): under its recorded id, when the
    /// transcript's leaf is its recorded parent.
    fn restore_terminal(&self, s: &ResolvedSession, p: &PendingCommit) {
        let t = &p.params.terminal;
        let Some(message) = p.params.messages.last().cloned() else {
            return;
        };
        let restored = (|| -> Result<Option<bool>> {
            let file = self.file(&s.transcript_path)?;
            let mut f = lock(&file)?;
            f.refresh()?;
            if f.session_id() != p.session_id {
                // A rotated session's commit: its transcript is not this one.
                return Ok(Some(false));
            }
            if f.entry(&t.entry_id).is_some() {
                return Ok(Some(false));
            }
            if f.leaf_id() != t.effective_parent_id.as_deref() {
                return Ok(None);
            }
            Ok(Some(f.append_with_id(
                &t.entry_id,
                EntryKind::Message(message),
            )?))
        })();
        match restored {
            Ok(Some(true)) => tracing::info!(
                "context engine commitTurn: restored the turn's last entry {} to {} (the process stopped between the outbox and the transcript)",
                t.entry_id,
                s.transcript_path.display()
            ),
            Ok(Some(false)) => {}
            Ok(None) => tracing::warn!(
                "context engine commitTurn: the turn's last entry {} is not in {} and its parent is no longer the last entry; the commit is delivered as written",
                t.entry_id,
                s.transcript_path.display()
            ),
            Err(e) => tracing::warn!(
                "context engine commitTurn: cannot restore the turn's last entry {} to {}: {e}",
                t.entry_id,
                s.transcript_path.display()
            ),
        }
    }

    /// Delivers the commits of session `s` waiting in the outbox, with `fresh` (the commit of
    /// the turn that just ended) in its place, in the session's order, stopping at the first
    /// failure (the retry task then takes the session). With `maintain_after`, offers
    /// `maintain` once if any was acknowledged. Never fails the turn.
    pub(crate) async fn deliver_outbox(
        self: &Arc<Self>,
        s: &ResolvedSession,
        fresh: Option<TurnCommit>,
        maintain_after: bool,
    ) -> Delivery {
        let mut out = Delivery::default();
        if !self.engine.methods().has(Method::CommitTurn) {
            return out;
        }
        let gate = self.outbox_gate(&s.entry.session_id);
        let _one_at_a_time = gate.lock().await;
        let dir = outbox_dir(&self.state_dir);
        let prefix = format!("{}.", file_safe(&s.entry.session_id));
        let mut waiting: Vec<Waiting> = Vec::new();
        if let Ok(entries) = std::fs::read_dir(&dir) {
            for e in entries.flatten() {
                let named = e
                    .file_name()
                    .to_str()
                    .is_some_and(|n| n.starts_with(&prefix) && n.ends_with(".json"));
                if !named {
                    continue;
                }
                let path = e.path();
                if fresh
                    .as_ref()
                    .is_some_and(|f| f.path.as_deref() == Some(&path))
                {
                    continue;
                }
                match read_pending(&path) {
                    Ok(p) => waiting.push((p.sequence(), Some(path), Some(p), None)),
                    Err(_) if !path.exists() => {}
                    Err(problem) => tracing::warn!("context engine commitTurn: outbox file {} is unreadable ({problem}); left in place, see `clawctx doctor`", path.display()),
                }
            }
        }
        if let Some(f) = fresh {
            waiting.push((f.sequence, f.path, None, Some(f.params)));
        }
        waiting.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
        for (_, path, pending, params) in waiting {
            let params = match (pending, params) {
                (Some(p), _) => {
                    self.restore_terminal(s, &p);
                    p.params
                }
                (None, Some(params)) => params,
                (None, None) => continue,
            };
            match self.deliver_commit(s, path.as_deref(), params).await {
                Ok(()) => out.acknowledged += 1,
                Err(line) => {
                    out.blocked = Some(line);
                    break;
                }
            }
        }
        drop(_one_at_a_time);
        match &out.blocked {
            Some(line) => self.retry_later(s, line),
            None => self.retried(s),
        }
        if maintain_after && out.acknowledged > 0 {
            self.maintain(s, MaintenanceReason::Turn).await;
        }
        out
    }

    /// Hands session `s` to the retry task (started when it is not running).
    fn retry_later(self: &Arc<Self>, s: &ResolvedSession, line: &str) {
        let start = {
            let Ok(mut r) = self.retry.lock() else {
                return;
            };
            r.sessions.insert(s.entry.session_id.clone(), s.clone());
            r.last_failure = Some(line.to_owned());
            !std::mem::replace(&mut r.running, true)
        };
        if !start {
            return;
        }
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                handle.spawn(retry_task(Arc::downgrade(self)));
            }
            Err(_) => {
                if let Ok(mut r) = self.retry.lock() {
                    r.running = false;
                }
            }
        }
    }

    /// Session `s` has no commit waiting any more.
    fn retried(&self, s: &ResolvedSession) {
        if let Ok(mut r) = self.retry.lock() {
            if r.sessions.remove(&s.entry.session_id).is_some() && r.sessions.is_empty() {
                r.last_failure = None;
            }
        }
    }

    /// The retry's state now.
    pub(crate) fn retry_status(&self) -> RetryStatus {
        match self.retry.lock() {
            Ok(r) => RetryStatus {
                sessions: r.sessions.len(),
                last_failure: r.last_failure.clone(),
            },
            Err(_) => RetryStatus::default(),
        }
    }

    /// Delivers the commits of the sessions the retry task waits for, now, once (a readiness
    /// probe found the engine's store back: the retry task's next attempt may be 30 s away).
    /// One such delivery at a time; another probe meanwhile does not start a second.
    pub(crate) async fn deliver_waiting_now(self: &Arc<Self>) {
        let sessions: Vec<ResolvedSession> = {
            let Ok(mut r) = self.retry.lock() else {
                return;
            };
            if r.on_demand || r.sessions.is_empty() {
                return;
            }
            r.on_demand = true;
            r.sessions.values().cloned().collect()
        };
        struct Done<'a>(&'a Inner);
        impl Drop for Done<'_> {
            fn drop(&mut self) {
                if let Ok(mut r) = self.0.retry.lock() {
                    r.on_demand = false;
                }
            }
        }
        let _done = Done(self);
        for s in sessions {
            if self.deliver_outbox(&s, None, true).await.blocked.is_some() {
                // Still failing: the retry task keeps its schedule.
                break;
            }
        }
    }

    /// Delivers every session's commits the outbox holds (a runtime's start: turns accepted
    /// before a restart whose engine was down reach it without waiting for the session's next
    /// turn). Answers the commits acknowledged.
    pub(crate) async fn deliver_all(self: &Arc<Self>) -> usize {
        if !self.engine.methods().has(Method::CommitTurn) {
            return 0;
        }
        let Ok(entries) = std::fs::read_dir(outbox_dir(&self.state_dir)) else {
            return 0;
        };
        let mut keys: std::collections::BTreeMap<String, String> = Default::default();
        for e in entries.flatten() {
            let path = e.path();
            if path.extension().and_then(|x| x.to_str()) != Some("json") {
                continue;
            }
            if let Ok(p) = read_pending(&path) {
                keys.insert(p.session_id, p.session_key);
            }
        }
        let mut acknowledged = 0;
        for (session_id, key) in keys {
            let s = match self.session(&key) {
                Ok(s) if s.entry.session_id == session_id => s,
                Ok(mut s) => {
                    // A rotated session: its commits are delivered under their own id (the
                    // transcript is the successor's, so nothing is restored to it).
                    s.entry.session_id = session_id;
                    s
                }
                Err(e) => {
                    tracing::warn!("context engine commitTurn: cannot resolve session {key} for its waiting commits: {e}");
                    continue;
                }
            };
            acknowledged += self.deliver_outbox(&s, None, true).await.acknowledged;
        }
        acknowledged
    }
}

/// The retry task: delivers the waiting sessions' commits, 1 s after a failure, the wait
/// doubling to 30 s while nothing gets through, until no session has commits waiting. Holds
/// the runtime only while it delivers, so a dropped runtime ends it.
async fn retry_task(rt: std::sync::Weak<Inner>) {
    let mut wait = RETRY_FIRST;
    loop {
        tokio::time::sleep(wait).await;
        let Some(inner) = rt.upgrade() else {
            return;
        };
        let sessions: Vec<ResolvedSession> = match inner.retry.lock() {
            Ok(r) => r.sessions.values().cloned().collect(),
            Err(_) => return,
        };
        let mut progressed = false;
        for s in sessions {
            let d = inner.deliver_outbox(&s, None, true).await;
            progressed |= d.acknowledged > 0;
        }
        {
            let Ok(mut r) = inner.retry.lock() else {
                return;
            };
            if r.sessions.is_empty() {
                r.running = false;
                return;
            }
        }
        wait = if progressed {
            RETRY_FIRST
        } else {
            (wait * 2).min(RETRY_MAX)
        };
    }
}
