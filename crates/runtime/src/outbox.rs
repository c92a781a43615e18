//! Durable turns: the commits of accepted turns on their way to the engine (contract §1.7).
//!
//! An engine with the full `transcriptSemantics` declaration gets `commitTurn` for each
//! accepted turn, keyed by an `advancementKey` it stores atomically. The host writes the commit
//! to the outbox (one JSON file per commit under `<state>/runtime/outbox/`, written to a
//! temporary file, synced and renamed) *before* calling the engine, and removes it only once
//! the engine acknowledged it (`committed` or `duplicate`). A commit that failed, or whose
//! process died before the answer, is delivered again before the session's next
//! `bootstrap`/`assemble`; the engine's idempotency makes a repeat harmless, so the turn
//! reaches the engine exactly once. An unreadable outbox file is reported (with its path) and
//! left where it is for `doctor` and the user: it is never dropped silently, and it never stops
//! the turn.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use clawctx_engine::{ContextEngine, Method};
use clawctx_protocol::transcript::TranscriptEntry;
use clawctx_protocol::*;
use clawctx_transcript::ResolvedSession;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{Result, RuntimeError};
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
    params: CommitTurnParams,
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

/// What the outbox of a state dir holds: commits waiting, and files that cannot be read.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OutboxReport {
    /// Readable commits waiting for their engine.
    pub pending: usize,
    /// Unreadable files.
    pub problems: Vec<OutboxProblem>,
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

/// The file a commit waits in: named by session id, then the rest of the key, so a session's
/// commits can be found without reading other sessions' files.
fn commit_path(dir: &Path, session_id: &str, advancement_key: &str) -> PathBuf {
    dir.join(format!(
        "{}.{}.json",
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
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
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

impl Inner {
    /// The `commitTurn` params of the turn whose entries run from `first` (the admitted user
    /// entry) to `last` (the accepted terminal entry), at `positions` among the active
    /// messages.
    pub(crate) fn commit_params(
        &self,
        s: &ResolvedSession,
        (first, last): (&str, &str),
        positions: (usize, usize),
        messages: Vec<AgentMessage>,
        is_heartbeat: Option<bool>,
    ) -> Result<CommitTurnParams> {
        let file = self.file(&s.transcript_path)?;
        let f = lock(&file)?;
        let store_path = self
            .store
            .sessions_json_path(&s.agent_id)?
            .to_string_lossy()
            .into_owned();
        let missing = |id: &str| {
            RuntimeError::Internal(format!(
                "turn entry {id} is not in {}",
                s.transcript_path.display()
            ))
        };
        let admission = anchor(s, &store_path, f.entries(), positions.0, first)
            .ok_or_else(|| missing(first))?;
        let terminal =
            anchor(s, &store_path, f.entries(), positions.1, last).ok_or_else(|| missing(last))?;
        Ok(CommitTurnParams {
            advancement_key: format!("{}:{first}:{last}", s.entry.session_id),
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
        })
    }

    /// Writes the commit to the outbox, then delivers it. `Err` is a line for the log: the
    /// commit stays in the outbox for the next run.
    pub(crate) async fn commit_through_outbox(
        self: &Arc<Self>,
        s: &ResolvedSession,
        params: CommitTurnParams,
    ) -> std::result::Result<(), String> {
        let path = commit_path(
            &outbox_dir(&self.state_dir),
            &s.entry.session_id,
            &params.advancement_key,
        );
        let pending = PendingCommit {
            version: OUTBOX_VERSION,
            session_key: s.key.clone(),
            session_id: s.entry.session_id.clone(),
            params,
        };
        let bytes = serde_json::to_vec_pretty(&pending)
            .map_err(|e| format!("context engine commitTurn: cannot encode the commit: {e}"))?;
        if let Err(e) = write_commit(&path, &bytes, self.durable) {
            // Without the outbox the commit is still attempted; it just cannot be retried.
            tracing::warn!(
                "context engine commitTurn: cannot write {}: {e}",
                path.display()
            );
        }
        self.deliver_commit(s, &path, pending.params).await
    }

    async fn deliver_commit(
        self: &Arc<Self>,
        s: &ResolvedSession,
        path: &Path,
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
                if let Err(e) = std::fs::remove_file(path) {
                    if e.kind() != std::io::ErrorKind::NotFound {
                        tracing::warn!("context engine commitTurn: cannot remove {} after the acknowledgement: {e}", path.display());
                    }
                }
                Ok(())
            }
            Err(e) => Err(format!(
                "context engine commitTurn failed for {key} (kept in {} for the next run): {e}",
                path.display()
            )),
        }
    }

    /// Delivers the commits of session `s` still in the outbox (oldest first), then offers
    /// `maintain` once if any was acknowledged. Never fails the turn.
    pub(crate) async fn deliver_outbox(self: &Arc<Self>, s: &ResolvedSession) {
        if !self.engine.methods().has(Method::CommitTurn) {
            return;
        }
        let dir = outbox_dir(&self.state_dir);
        let prefix = format!("{}.", file_safe(&s.entry.session_id));
        let Ok(entries) = std::fs::read_dir(&dir) else {
            return;
        };
        let mut files: Vec<(std::time::SystemTime, PathBuf)> = entries
            .flatten()
            .filter(|e| {
                e.file_name()
                    .to_str()
                    .is_some_and(|n| n.starts_with(&prefix) && n.ends_with(".json"))
            })
            .map(|e| {
                (
                    e.metadata()
                        .and_then(|m| m.modified())
                        .unwrap_or(std::time::UNIX_EPOCH),
                    e.path(),
                )
            })
            .collect();
        files.sort();
        let mut acknowledged = false;
        for (_, path) in files {
            match read_pending(&path) {
                Ok(p) => match self.deliver_commit(s, &path, p.params).await {
                    Ok(()) => acknowledged = true,
                    Err(line) => tracing::warn!("{line}"),
                },
                Err(problem) => tracing::warn!("context engine commitTurn: outbox file {} is unreadable ({problem}); left in place, see `clawctx doctor`", path.display()),
            }
        }
        if acknowledged {
            self.maintain(s, MaintenanceReason::Turn).await;
        }
    }
}
