//! The sessions map (contract §10 "sessions.json") and the per-agent on-disk layout.
//!
//! Each agent has `<stateDir>/agents/<agentId>/sessions/` holding `sessions.json` (a map from
//! session key to [`SessionEntry`]) and one `<sessionId>.jsonl` transcript per session. A
//! session key points at its *current* session; `/new` points it at a fresh one and the old
//! transcript stays on disk. `sessions.json` is rewritten atomically (temp file + rename) under
//! a lock file next to it (`sessions.json.lock`), so concurrent updates from two processes do
//! not lose each other's changes and a reader never sees half a file. Unknown fields of every
//! entry are kept.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clawctx_protocol::JsonMap;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::atomic::{write_atomic, Replace};
use crate::error::{Result, TranscriptError};
use crate::key::{validate_agent_id, validate_session_id, SessionKey};
use crate::lock::{WriteLock, DEFAULT_LOCK_TIMEOUT};
use crate::session_file::SessionFile;

/// The agent id used for keys without one (`cron:<id>`, `hook:<uuid>`), OpenClaw's default.
pub const DEFAULT_AGENT_ID: &str = "main";

/// One value of `sessions.json` (§10). Timestamps are epoch milliseconds.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionEntry {
    /// The current session id (its transcript is `<sessionId>.jsonl` unless `sessionFile`).
    pub session_id: String,
    /// When this session started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_started_at: Option<i64>,
    /// Last user/agent interaction.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_interaction_at: Option<i64>,
    /// Last change to this entry.
    #[serde(default)]
    pub updated_at: i64,
    /// Explicit transcript path override (absolute, or relative to the sessions directory).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_file: Option<String>,
    /// `direct | group | room`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chat_type: Option<String>,
    /// Channel provider.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// Conversation subject.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    /// Room.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub room: Option<String>,
    /// Space.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub space: Option<String>,
    /// Display name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display_name: Option<String>,
    /// Toggle: thinking level.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thinking_level: Option<String>,
    /// Toggle: verbose level.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verbose_level: Option<String>,
    /// Toggle: reasoning level.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_level: Option<String>,
    /// Toggle: elevated level.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub elevated_level: Option<String>,
    /// Toggle: send policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub send_policy: Option<String>,
    /// Provider override.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_override: Option<String>,
    /// Model override.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_override: Option<String>,
    /// Auth profile override.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth_profile_override: Option<String>,
    /// Input tokens of the last run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_tokens: Option<u64>,
    /// Output tokens of the last run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens: Option<u64>,
    /// Total tokens of the last run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_tokens: Option<u64>,
    /// Estimated context tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_tokens: Option<u64>,
    /// Compactions in this session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compaction_count: Option<u64>,
    /// Last memory flush.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_flush_at: Option<i64>,
    /// `compactionCount` at the last memory flush.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_flush_compaction_count: Option<u64>,
    /// The transcript was forked from a parent's active branch (subagent `fork`, §8).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forked_from_parent: Option<bool>,
    /// The context engine that served the session's last turn (clawctx's own field, written
    /// with the turn's counters): which engine holds the session's context.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_engine: Option<String>,
    /// Fields this type does not name, kept verbatim.
    #[serde(flatten)]
    pub extra: JsonMap,
}

/// The whole `sessions.json`: session key → entry.
pub type SessionsMap = BTreeMap<String, SessionEntry>;

/// Token counters of a run, recorded on the session entry. `None` leaves a counter unchanged.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TokenCounters {
    /// `inputTokens`.
    pub input: Option<u64>,
    /// `outputTokens`.
    pub output: Option<u64>,
    /// `totalTokens`.
    pub total: Option<u64>,
    /// `contextTokens`.
    pub context: Option<u64>,
}

/// A session key resolved to its current session.
#[derive(Clone, Debug, PartialEq)]
pub struct ResolvedSession {
    /// The session key.
    pub key: String,
    /// The agent whose directory holds it.
    pub agent_id: String,
    /// Its entry in `sessions.json` (as saved).
    pub entry: SessionEntry,
    /// The transcript file.
    pub transcript_path: PathBuf,
    /// Whether this call created the session.
    pub created: bool,
}

impl ResolvedSession {
    /// Opens the session's transcript.
    pub fn open_transcript(&self) -> Result<SessionFile> {
        SessionFile::open(&self.transcript_path)
    }
}

/// The host's session store rooted at a state directory.
#[derive(Clone, Debug)]
pub struct SessionStore {
    state_dir: PathBuf,
    default_agent_id: String,
    cwd: String,
    lock_timeout: Duration,
}

/// 1-based line where `"key"` first appears in `text` (1 if it cannot be found).
fn line_of_key(text: &str, key: &str) -> usize {
    let needle = serde_json::to_string(key).unwrap_or_default();
    text.find(&needle)
        .map_or(1, |at| text[..at].matches('\n').count() + 1)
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

impl SessionStore {
    /// A store under `state_dir` (`<stateDir>/agents/<agentId>/sessions/`). New transcript
    /// headers record the process's current directory as `cwd`.
    pub fn new(state_dir: impl Into<PathBuf>) -> Self {
        let cwd = std::env::current_dir()
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default();
        SessionStore {
            state_dir: state_dir.into(),
            default_agent_id: DEFAULT_AGENT_ID.to_owned(),
            cwd,
            lock_timeout: DEFAULT_LOCK_TIMEOUT,
        }
    }

    /// Uses `agent_id` for keys that carry none (`cron:`, `hook:`).
    pub fn with_default_agent(mut self, agent_id: &str) -> Result<Self> {
        validate_agent_id(agent_id)?;
        self.default_agent_id = agent_id.to_owned();
        Ok(self)
    }

    /// Sets the `cwd` written into new transcript headers.
    pub fn with_cwd(mut self, cwd: impl Into<String>) -> Self {
        self.cwd = cwd.into();
        self
    }

    /// Bounds the wait for the `sessions.json` lock.
    pub fn with_lock_timeout(mut self, timeout: Duration) -> Self {
        self.lock_timeout = timeout;
        self
    }

    /// The state directory.
    pub fn state_dir(&self) -> &Path {
        &self.state_dir
    }

    /// The agent a key belongs to: its `agent:<id>:` segment, else the default agent.
    pub fn agent_id_for<'k>(&'k self, key: &'k str) -> &'k str {
        SessionKey::parse(key)
            .agent_id()
            .unwrap_or(&self.default_agent_id)
    }

    /// `<stateDir>/agents/<agentId>/sessions`.
    pub fn sessions_dir(&self, agent_id: &str) -> Result<PathBuf> {
        validate_agent_id(agent_id)?;
        Ok(self
            .state_dir
            .join("agents")
            .join(agent_id)
            .join("sessions"))
    }

    /// `<stateDir>/agents/<agentId>/sessions/sessions.json`.
    pub fn sessions_json_path(&self, agent_id: &str) -> Result<PathBuf> {
        Ok(self.sessions_dir(agent_id)?.join("sessions.json"))
    }

    /// The transcript path of `entry`: its `sessionFile` override (relative paths resolve in
    /// the sessions directory), else `<sessionId>.jsonl`.
    pub fn transcript_path(&self, agent_id: &str, entry: &SessionEntry) -> Result<PathBuf> {
        let dir = self.sessions_dir(agent_id)?;
        if let Some(file) = entry
            .session_file
            .as_deref()
            .filter(|f| !f.trim().is_empty())
        {
            return Ok(dir.join(file)); // join keeps an absolute `file` as is
        }
        validate_session_id(&entry.session_id)?;
        Ok(dir.join(format!("{}.jsonl", entry.session_id)))
    }

    /// Reads an agent's `sessions.json`; a missing file is an empty map.
    pub fn load(&self, agent_id: &str) -> Result<SessionsMap> {
        let path = self.sessions_json_path(agent_id)?;
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(SessionsMap::new()),
            Err(e) => return Err(TranscriptError::io(&path, e)),
        };
        if text.trim().is_empty() {
            return Ok(SessionsMap::new());
        }
        let raw: serde_json::Map<String, Value> =
            serde_json::from_str(&text).map_err(|e| TranscriptError::Malformed {
                path: path.clone(),
                line: e.line(),
                expected: format!("expected a JSON object mapping session keys to entries: {e}"),
            })?;
        let mut map = SessionsMap::new();
        for (key, value) in raw {
            let entry: SessionEntry =
                serde_json::from_value(value).map_err(|e| TranscriptError::Malformed {
                    path: path.clone(),
                    line: line_of_key(&text, &key),
                    expected: format!("expected a session entry for key {key:?}: {e}"),
                })?;
            map.insert(key, entry);
        }
        Ok(map)
    }

    /// Writes an agent's `sessions.json` atomically (no lock; prefer [`Self::update_map`]).
    pub fn save(&self, agent_id: &str, map: &SessionsMap) -> Result<()> {
        let path = self.sessions_json_path(agent_id)?;
        let mut bytes = serde_json::to_vec_pretty(map)?;
        bytes.push(b'\n');
        write_atomic(&path, &bytes, Replace::Overwrite)
    }

    /// Read-modify-write of an agent's map under its lock file; the change is saved
    /// atomically only if `f` succeeds.
    pub fn update_map<T>(
        &self,
        agent_id: &str,
        f: impl FnOnce(&mut SessionsMap) -> Result<T>,
    ) -> Result<T> {
        let dir = self.sessions_dir(agent_id)?;
        std::fs::create_dir_all(&dir).map_err(|e| TranscriptError::io(&dir, e))?;
        let lock_path = dir.join("sessions.json.lock");
        let lock_file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&lock_path)
            .map_err(|e| TranscriptError::io(&lock_path, e))?;
        let _lock = WriteLock::acquire_on(lock_file, &lock_path, self.lock_timeout)?;
        let mut map = self.load(agent_id)?;
        let out = f(&mut map)?;
        self.save(agent_id, &map)?;
        Ok(out)
    }

    /// The entry of `key`, if any.
    pub fn get(&self, key: &str) -> Result<Option<SessionEntry>> {
        Ok(self.load(self.agent_id_for(key))?.remove(key))
    }

    /// Lists an agent's sessions, most recently updated first.
    pub fn list(&self, agent_id: &str) -> Result<Vec<(String, SessionEntry)>> {
        let mut all: Vec<_> = self.load(agent_id)?.into_iter().collect();
        all.sort_by(|a, b| {
            b.1.updated_at
                .cmp(&a.1.updated_at)
                .then_with(|| a.0.cmp(&b.0))
        });
        Ok(all)
    }

    /// Resolves `key` to its current session, creating the session (entry and transcript) if
    /// the key has none, or the transcript if its file is missing.
    pub fn resolve(&self, key: &str) -> Result<ResolvedSession> {
        let agent_id = self.agent_id_for(key).to_owned();
        self.update_map(&agent_id, |map| {
            if let Some(entry) = map.get(key).cloned() {
                let path = self.transcript_path(&agent_id, &entry)?;
                if !path.exists() {
                    match SessionFile::create(&path, &entry.session_id, &self.cwd) {
                        Ok(_) | Err(TranscriptError::AlreadyExists { .. }) => {}
                        Err(e) => return Err(e),
                    }
                }
                return Ok(ResolvedSession {
                    key: key.to_owned(),
                    agent_id: agent_id.clone(),
                    entry,
                    transcript_path: path,
                    created: false,
                });
            }
            self.start_session(map, &agent_id, key, SessionEntry::default())
        })
    }

    /// Points `key` at a brand-new session (`/new`, `/reset`). The previous transcript stays on
    /// disk. Settings (toggles, overrides, channel facts, unknown fields) carry over; ids,
    /// timestamps, counters and the fork marker start fresh.
    pub fn new_session(&self, key: &str) -> Result<ResolvedSession> {
        let agent_id = self.agent_id_for(key).to_owned();
        self.update_map(&agent_id, |map| {
            let base = map.get(key).cloned().unwrap_or_default();
            self.start_session(map, &agent_id, key, base)
        })
    }

    fn start_session(
        &self,
        map: &mut SessionsMap,
        agent_id: &str,
        key: &str,
        base: SessionEntry,
    ) -> Result<ResolvedSession> {
        let session_id = uuid::Uuid::new_v4().to_string();
        let now = now_ms();
        let entry = SessionEntry {
            session_id: session_id.clone(),
            session_started_at: Some(now),
            last_interaction_at: Some(now),
            updated_at: now,
            session_file: None,
            input_tokens: None,
            output_tokens: None,
            total_tokens: None,
            context_tokens: None,
            compaction_count: None,
            memory_flush_at: None,
            memory_flush_compaction_count: None,
            forked_from_parent: None,
            context_engine: None,
            ..base
        };
        let path = self.transcript_path(agent_id, &entry)?;
        let entry = SessionEntry {
            session_file: Some(path.to_string_lossy().into_owned()),
            ..entry
        };
        SessionFile::create(&path, &session_id, &self.cwd)?;
        map.insert(key.to_owned(), entry.clone());
        Ok(ResolvedSession {
            key: key.to_owned(),
            agent_id: agent_id.to_owned(),
            entry,
            transcript_path: path,
            created: true,
        })
    }

    /// Changes the entry of an existing `key` under the lock; `updatedAt` is set to now.
    pub fn update(&self, key: &str, f: impl FnOnce(&mut SessionEntry)) -> Result<SessionEntry> {
        let agent_id = self.agent_id_for(key).to_owned();
        self.update_map(&agent_id, |map| {
            let entry = map
                .get_mut(key)
                .ok_or_else(|| TranscriptError::UnknownSessionKey {
                    key: key.to_owned(),
                })?;
            f(entry);
            entry.updated_at = now_ms();
            Ok(entry.clone())
        })
    }

    /// Records a run's token counters (and the interaction time) on `key`'s entry.
    pub fn record_tokens(&self, key: &str, counters: TokenCounters) -> Result<SessionEntry> {
        self.record_turn(key, counters, None)
    }

    /// [`SessionStore::record_tokens`], and the engine that served the turn
    /// (`contextEngine`) when given, in one write.
    pub fn record_turn(
        &self,
        key: &str,
        counters: TokenCounters,
        engine: Option<&str>,
    ) -> Result<SessionEntry> {
        self.update(key, |e| {
            if let Some(id) = engine {
                e.context_engine = Some(id.to_owned());
            }
            let set = |slot: &mut Option<u64>, v: Option<u64>| {
                if v.is_some() {
                    *slot = v;
                }
            };
            set(&mut e.input_tokens, counters.input);
            set(&mut e.output_tokens, counters.output);
            set(&mut e.total_tokens, counters.total);
            set(&mut e.context_tokens, counters.context);
            e.last_interaction_at = Some(now_ms());
        })
    }

    /// Increments `compactionCount` on `key`'s entry.
    pub fn record_compaction(&self, key: &str) -> Result<SessionEntry> {
        self.update(key, |e| {
            e.compaction_count = Some(e.compaction_count.unwrap_or(0) + 1)
        })
    }

    /// Subagent `fork` mode (§8): copies the parent session's active branch into a new child
    /// transcript and records `{sessionId, sessionFile, forkedFromParent: true}` under
    /// `child_key` (replacing any previous child entry; its transcript stays on disk).
    pub fn fork_session(&self, parent_key: &str, child_key: &str) -> Result<ResolvedSession> {
        let parent_agent = self.agent_id_for(parent_key).to_owned();
        let parent_entry = self
            .load(&parent_agent)?
            .remove(parent_key)
            .ok_or_else(|| TranscriptError::UnknownSessionKey {
                key: parent_key.to_owned(),
            })?;
        let parent = SessionFile::open(self.transcript_path(&parent_agent, &parent_entry)?)?;
        let child_agent = self.agent_id_for(child_key).to_owned();
        self.update_map(&child_agent, |map| {
            let session_id = uuid::Uuid::new_v4().to_string();
            let now = now_ms();
            let probe = SessionEntry {
                session_id: session_id.clone(),
                ..Default::default()
            };
            let path = self.transcript_path(&child_agent, &probe)?;
            parent.fork_to(&path, &session_id)?;
            let entry = SessionEntry {
                session_id,
                session_started_at: Some(now),
                last_interaction_at: Some(now),
                updated_at: now,
                session_file: Some(path.to_string_lossy().into_owned()),
                chat_type: parent_entry.chat_type.clone(),
                forked_from_parent: Some(true),
                ..Default::default()
            };
            map.insert(child_key.to_owned(), entry.clone());
            Ok(ResolvedSession {
                key: child_key.to_owned(),
                agent_id: child_agent.clone(),
                entry,
                transcript_path: path,
                created: true,
            })
        })
    }
}
