//! One OpenClaw session transcript file (contract §10 "Transcript JSONL").
//!
//! The file is the source of truth: line 1 is the session header, every later line one entry
//! `{type, id, parentId, timestamp, ...}`. Entries form a tree; the *leaf* is where the next
//! entry attaches, and the active branch is the path from the leaf to the root. This module
//! loads such a file (ours or OpenClaw's) into an in-memory index, appends durably, moves the
//! leaf, and copes with crash damage:
//!
//! - A *torn last line* (not JSON, no trailing newline: a crash mid-write) is skipped and
//!   reported as a [`TranscriptWarning`]; before the next append it is cut off, so the new line
//!   starts on a fresh line and every complete line before it survives.
//! - A malformed line anywhere else is a [`TranscriptError::Malformed`] `path:line: ...`: the
//!   file is never silently repaired.
//!
//! Every append takes the session write lock ([`crate::lock`]), first catches up with lines
//! other processes appended since we last looked, and writes all of its lines with one
//! `write` call, then flushes (and by default `fsync`s).

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use clawctx_protocol::transcript::{
    BranchSummaryEntryData, CompactionEntryData, CustomMessageEntryData, EntryKind, SessionHeader,
    TranscriptEntry,
};
use clawctx_protocol::{AgentMessage, JsonMap};
use serde_json::Value;

use crate::atomic::{write_atomic, Replace};
use crate::error::{Result, TranscriptError};
use crate::lock::{WriteLock, DEFAULT_LOCK_TIMEOUT};

/// The session file format version clawctx writes in new headers (Pi's current version).
pub const SESSION_FORMAT_VERSION: u64 = 3;

/// Something wrong with a transcript that did not stop it from loading. Show it to the user.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TranscriptWarning {
    /// The last line was cut short by a crash (not valid JSON, no trailing newline). It was
    /// skipped; it is removed before the next append.
    TornLastLine {
        /// The transcript.
        path: PathBuf,
        /// 1-based line number of the torn line.
        line: usize,
        /// Byte offset where the torn line starts.
        offset: u64,
        /// Its length in bytes.
        len: u64,
        /// The start of its text (lossy UTF-8, at most 80 chars), for the log.
        preview: String,
    },
}

impl fmt::Display for TranscriptWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TranscriptWarning::TornLastLine { path, line, len, preview, .. } => write!(
                f,
                "{}:{line}: torn last line skipped ({len} bytes, not valid JSON, no trailing newline; \
                 probably a crash mid-write): {preview:?}",
                path.display()
            ),
        }
    }
}

/// A model-visible message of the active branch together with the entry it came from.
#[derive(Clone, Debug, PartialEq)]
pub struct VisibleMessage {
    /// The transcript entry id (use it as the next delta cursor).
    pub entry_id: String,
    /// The message as the model sees it.
    pub message: AgentMessage,
}

/// An open session transcript with its in-memory index.
#[derive(Debug)]
pub struct SessionFile {
    pub(crate) path: PathBuf,
    pub(crate) header: SessionHeader,
    /// Every entry in file order (all branches).
    pub(crate) entries: Vec<TranscriptEntry>,
    /// id → position in `entries`.
    pub(crate) index: HashMap<String, usize>,
    /// Position of the leaf in `entries`; `None` = before the first entry (root).
    pub(crate) leaf: Option<usize>,
    /// The leaf was moved explicitly (`branch_from` / `reset_leaf`), so entries appended by
    /// other processes do not drag it along.
    leaf_pinned: bool,
    /// Bytes of the file covered by lines we have indexed.
    synced_len: u64,
    /// Physical lines consumed so far (for line numbers of later lines).
    lines_seen: usize,
    /// The last indexed line had no trailing newline (complete JSON); the next write must
    /// start with one.
    needs_newline: bool,
    warnings: Vec<TranscriptWarning>,
    lock_timeout: Duration,
    sync_writes: bool,
}

/// The outcome of scanning a chunk of bytes for lines.
struct Scan {
    /// (1-based line number, parsed object) of each non-blank complete line.
    lines: Vec<(usize, JsonMap)>,
    /// Bytes consumed (everything except a torn tail).
    consumed: u64,
    /// Lines consumed (blank ones included).
    line_count: usize,
    /// The consumed part ended with a complete JSON line lacking its newline.
    unterminated: bool,
    /// A torn tail: (line number, offset within the chunk, bytes).
    torn: Option<(usize, u64, Vec<u8>)>,
}

/// Splits `buf` into lines. `first_line` is the line number of its first line. Complete lines
/// must be JSON objects; the last, unterminated piece may be torn.
fn scan(path: &Path, buf: &[u8], first_line: usize) -> Result<Scan> {
    let mut out = Scan {
        lines: Vec::new(),
        consumed: 0,
        line_count: 0,
        unterminated: false,
        torn: None,
    };
    let mut start = 0usize;
    let mut line_no = first_line;
    while start < buf.len() {
        let (end, terminated) = match buf[start..].iter().position(|&b| b == b'\n') {
            Some(i) => (start + i, true),
            None => (buf.len(), false),
        };
        let mut raw = &buf[start..end];
        if raw.last() == Some(&b'\r') {
            raw = &raw[..raw.len() - 1];
        }
        let next = if terminated { end + 1 } else { end };
        if raw.iter().all(u8::is_ascii_whitespace) {
            if terminated {
                out.consumed = next as u64;
                out.line_count += 1;
            } else {
                // Trailing spaces without a newline: harmless, leave them unconsumed so the
                // next append cuts them off like a torn tail, but do not warn.
                out.torn = Some((line_no, start as u64, Vec::new()));
            }
            start = next;
            line_no += 1;
            continue;
        }
        match serde_json::from_slice::<Value>(raw) {
            Ok(Value::Object(map)) => {
                out.lines.push((line_no, map));
                out.consumed = next as u64;
                out.line_count += 1;
                out.unterminated = !terminated;
            }
            Ok(other) if terminated => {
                return Err(malformed(
                    path,
                    line_no,
                    format!("expected a JSON object, found {}", type_of(&other)),
                ));
            }
            Err(e) if terminated => {
                return Err(malformed(
                    path,
                    line_no,
                    format!("expected a JSON object (one entry per line): {e}"),
                ));
            }
            // Unterminated and not an object: a crash cut this line short.
            Ok(_) | Err(_) => out.torn = Some((line_no, start as u64, raw.to_vec())),
        }
        start = next;
        line_no += 1;
    }
    Ok(out)
}

fn type_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn malformed(path: &Path, line: usize, expected: impl Into<String>) -> TranscriptError {
    TranscriptError::Malformed {
        path: path.to_path_buf(),
        line,
        expected: expected.into(),
    }
}

/// An ISO-8601 UTC timestamp with milliseconds, as JavaScript's `toISOString()` writes it.
pub fn iso_now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// Epoch milliseconds of an ISO timestamp, when it parses.
pub(crate) fn iso_to_ms(iso: &str) -> Option<i64> {
    chrono::DateTime::parse_from_rfc3339(iso)
        .ok()
        .map(|t| t.timestamp_millis())
}

fn serialize_entry(entry: &TranscriptEntry) -> Result<Vec<u8>> {
    let map = entry.to_json()?;
    let mut line = serde_json::to_vec(&Value::Object(map))?;
    line.push(b'\n');
    Ok(line)
}

fn new_header(session_id: &str, cwd: &str, parent_session: Option<String>) -> SessionHeader {
    SessionHeader {
        kind: "session".to_owned(),
        version: Some(Value::from(SESSION_FORMAT_VERSION)),
        id: session_id.to_owned(),
        timestamp: iso_now(),
        cwd: cwd.to_owned(),
        parent_session,
        extra: JsonMap::new(),
    }
}

impl SessionFile {
    /// Creates a new transcript at `path` holding only its header
    /// `{type:"session", version, id, timestamp, cwd}`. The file appears atomically (never a
    /// half-written header); fails with [`TranscriptError::AlreadyExists`] if `path` exists.
    pub fn create(path: impl AsRef<Path>, session_id: &str, cwd: &str) -> Result<Self> {
        Self::create_with_header(path, new_header(session_id, cwd, None))
    }

    /// Creates a new transcript with a caller-built header (e.g. with `parentSession`).
    pub fn create_with_header(path: impl AsRef<Path>, header: SessionHeader) -> Result<Self> {
        Self::create_with_entries(path.as_ref(), header, Vec::new())
    }

    fn create_with_entries(
        path: &Path,
        header: SessionHeader,
        entries: Vec<TranscriptEntry>,
    ) -> Result<Self> {
        let mut bytes = serde_json::to_vec(&header)?;
        bytes.push(b'\n');
        for e in &entries {
            bytes.extend(serialize_entry(e)?);
        }
        write_atomic(path, &bytes, Replace::CreateNew)?;
        let mut file = SessionFile::empty(path.to_path_buf(), header);
        file.synced_len = bytes.len() as u64;
        file.lines_seen = 1 + entries.len();
        for e in entries {
            file.push_indexed(e);
        }
        file.leaf = file.entries.len().checked_sub(1);
        Ok(file)
    }

    fn empty(path: PathBuf, header: SessionHeader) -> Self {
        SessionFile {
            path,
            header,
            entries: Vec::new(),
            index: HashMap::new(),
            leaf: None,
            leaf_pinned: false,
            synced_len: 0,
            lines_seen: 0,
            needs_newline: false,
            warnings: Vec::new(),
            lock_timeout: DEFAULT_LOCK_TIMEOUT,
            sync_writes: true,
        }
    }

    /// Opens an existing transcript (clawctx's or OpenClaw's) and indexes every entry. The leaf
    /// is the last entry in the file. A torn last line is skipped and reported through
    /// [`Self::warnings`]; any other malformed line is an error naming `path:line`.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let buf = std::fs::read(path).map_err(|e| TranscriptError::io(path, e))?;
        Self::from_bytes(path, &buf)
    }

    /// Indexes a transcript's bytes as [`Self::open`] does after reading `path` (which errors
    /// and warnings name, and later appends write to). Nothing is read or written here.
    pub fn from_bytes(path: impl AsRef<Path>, buf: &[u8]) -> Result<Self> {
        let path = path.as_ref();
        let scan = scan(path, buf, 1)?;
        let mut lines = scan.lines.into_iter();
        let Some((header_line, header_map)) = lines.next() else {
            return Err(malformed(path, 1, "expected a session header {\"type\":\"session\",\"id\",\"timestamp\",\"cwd\"}, found an empty file"));
        };
        if header_map.get("type").and_then(Value::as_str) != Some("session") {
            return Err(malformed(
                path,
                header_line,
                "expected a session header with \"type\":\"session\"",
            ));
        }
        let header: SessionHeader = serde_json::from_value(Value::Object(header_map))
            .map_err(|e| malformed(path, header_line, format!("expected a session header: {e}")))?;
        let mut file = SessionFile::empty(path.to_path_buf(), header);
        for (line, map) in lines {
            file.integrate(line, map)?;
        }
        file.synced_len = scan.consumed;
        file.lines_seen = scan.line_count;
        file.needs_newline = scan.unterminated;
        file.leaf = file.entries.len().checked_sub(1);
        if let Some((line, offset, bytes)) = scan.torn {
            file.note_torn(line, offset, &bytes);
        }
        Ok(file)
    }

    fn note_torn(&mut self, line: usize, offset: u64, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        let already = self.warnings.iter().any(
            |w| matches!(w, TranscriptWarning::TornLastLine { offset: o, .. } if *o == offset),
        );
        if already {
            return;
        }
        let preview: String = String::from_utf8_lossy(bytes).chars().take(80).collect();
        let warning = TranscriptWarning::TornLastLine {
            path: self.path.clone(),
            line,
            offset,
            len: bytes.len() as u64,
            preview,
        };
        tracing::warn!("{warning}");
        self.warnings.push(warning);
    }

    /// Adds one parsed line to the index.
    fn integrate(&mut self, line: usize, map: JsonMap) -> Result<()> {
        let entry = TranscriptEntry::from_json(map).map_err(|e| {
            malformed(
                &self.path,
                line,
                format!("expected a transcript entry {{type, id, parentId, timestamp, ...}}: {e}"),
            )
        })?;
        if entry.id.is_empty() {
            return Err(malformed(
                &self.path,
                line,
                "expected a non-empty entry `id`",
            ));
        }
        if self.index.contains_key(&entry.id) {
            return Err(malformed(
                &self.path,
                line,
                format!(
                    "expected a unique entry id, {:?} is used by an earlier line",
                    entry.id
                ),
            ));
        }
        self.push_indexed(entry);
        Ok(())
    }

    fn push_indexed(&mut self, entry: TranscriptEntry) {
        self.index.insert(entry.id.clone(), self.entries.len());
        self.entries.push(entry);
    }

    /// Catches up with bytes other writers added since we last looked. Must hold the lock;
    /// because no one else can be mid-write, an unterminated non-JSON tail is torn for sure
    /// and is cut off here, so the next line starts fresh.
    fn sync_under_lock(&mut self, lock: &WriteLock) -> Result<()> {
        let mut file = lock.file();
        let len = file
            .metadata()
            .map_err(|e| TranscriptError::io(&self.path, e))?
            .len();
        if len < self.synced_len {
            // Someone truncated what we had indexed: start over from the file.
            let fresh = SessionFile::open(&self.path)?;
            let (timeout, sync) = (self.lock_timeout, self.sync_writes);
            let mut warnings = std::mem::take(&mut self.warnings);
            *self = fresh;
            warnings.append(&mut self.warnings);
            self.warnings = warnings;
            self.lock_timeout = timeout;
            self.sync_writes = sync;
            return self.sync_under_lock(lock);
        }
        if len == self.synced_len {
            return Ok(());
        }
        let mut buf = Vec::new();
        file.seek(SeekFrom::Start(self.synced_len))
            .map_err(|e| TranscriptError::io(&self.path, e))?;
        file.read_to_end(&mut buf)
            .map_err(|e| TranscriptError::io(&self.path, e))?;
        if self.needs_newline && buf.first() != Some(&b'\n') {
            return Err(malformed(
                &self.path,
                self.lines_seen,
                "expected a newline after this line, but another writer continued it",
            ));
        }
        let scan = scan(&self.path, &buf, self.lines_seen + 1)?;
        let before = self.entries.len();
        for (line, map) in scan.lines {
            self.integrate(line, map)?;
        }
        if self.entries.len() > before && !self.leaf_pinned {
            self.leaf = Some(self.entries.len() - 1);
        }
        let base = self.synced_len;
        self.synced_len += scan.consumed;
        self.lines_seen += scan.line_count;
        if scan.consumed > 0 {
            self.needs_newline = scan.unterminated;
        }
        if let Some((line, offset, bytes)) = scan.torn {
            self.note_torn(line, base + offset, &bytes);
            lock.file()
                .set_len(self.synced_len)
                .map_err(|e| TranscriptError::io(&self.path, e))?;
        }
        Ok(())
    }

    /// Writes fully built entries (ids and parents assigned) under `lock`, in one `write`, and
    /// indexes them. The leaf becomes the last one.
    pub(crate) fn write_entries(
        &mut self,
        lock: &WriteLock,
        entries: Vec<TranscriptEntry>,
    ) -> Result<()> {
        if entries.is_empty() {
            return Ok(());
        }
        let mut buf = Vec::new();
        if self.needs_newline {
            buf.push(b'\n');
        }
        for e in &entries {
            buf.extend(serialize_entry(e)?);
        }
        let mut file = lock.file();
        let written = file
            .write_all(&buf)
            .and_then(|()| file.flush())
            .and_then(|()| {
                if self.sync_writes {
                    file.sync_data()
                } else {
                    Ok(())
                }
            });
        if let Err(e) = written {
            // A full disk (or a failing one) can take part of the buffer: cut the file back
            // to its last whole line, so no reader ever sees a half-written entry and the
            // entries are not half there (freeing blocks works on a full disk too).
            if let Err(undo) = file.set_len(self.synced_len) {
                tracing::warn!(
                    "{}: cannot cut a failed append back ({undo}); the next append skips its torn line",
                    self.path.display()
                );
            }
            return Err(TranscriptError::io(&self.path, e));
        }
        self.synced_len += buf.len() as u64;
        self.lines_seen += entries.len();
        self.needs_newline = false;
        for e in entries {
            self.push_indexed(e);
        }
        self.leaf = self.entries.len().checked_sub(1);
        self.leaf_pinned = false;
        Ok(())
    }

    /// Takes the write lock and catches up with the file. Hold the result across a batch of
    /// writes.
    pub(crate) fn lock_and_sync(&mut self) -> Result<WriteLock> {
        let lock = WriteLock::acquire(&self.path, self.lock_timeout)?;
        self.sync_under_lock(&lock)?;
        Ok(lock)
    }

    /// A fresh short id: 8 lowercase hex characters, unique in this file and in `reserved`.
    pub(crate) fn fresh_id(&self, reserved: &HashSet<String>) -> String {
        loop {
            let simple = uuid::Uuid::new_v4().simple().to_string();
            let id: String = simple.chars().take(8).collect();
            if !self.index.contains_key(&id) && !reserved.contains(&id) {
                return id;
            }
        }
    }

    /// Appends one entry at the leaf (fresh id, `parentId` = leaf, timestamp now) and makes it
    /// the new leaf. Durable when this returns. Returns the new entry.
    pub fn append(&mut self, kind: EntryKind) -> Result<&TranscriptEntry> {
        let lock = self.lock_and_sync()?;
        let entry = TranscriptEntry {
            id: self.fresh_id(&HashSet::new()),
            parent_id: self.leaf_id().map(str::to_owned),
            timestamp: iso_now(),
            kind,
        };
        self.write_entries(&lock, vec![entry])?;
        drop(lock);
        self.entries
            .last()
            .ok_or_else(|| TranscriptError::EntryNotFound {
                id: String::new(),
                path: self.path.clone(),
            })
    }

    /// Appends several entries as one chain under one lock and one write. Returns their ids.
    pub fn append_all(&mut self, kinds: Vec<EntryKind>) -> Result<Vec<String>> {
        let lock = self.lock_and_sync()?;
        let mut reserved = HashSet::new();
        let mut parent = self.leaf_id().map(str::to_owned);
        let mut batch = Vec::with_capacity(kinds.len());
        for kind in kinds {
            let id = self.fresh_id(&reserved);
            reserved.insert(id.clone());
            batch.push(TranscriptEntry {
                id: id.clone(),
                parent_id: parent.replace(id),
                timestamp: iso_now(),
                kind,
            });
        }
        let ids = batch.iter().map(|e| e.id.clone()).collect();
        self.write_entries(&lock, batch)?;
        Ok(ids)
    }

    /// Appends one entry as [`Self::append`] does, but first runs `before` under the write
    /// lock with the entry as it will be written (id, parent) and the entries before it (the
    /// new entry's index in the file is `entries.len()`). When `before` fails nothing is
    /// written and its error is returned inside `Ok`. A host writes a record of the entry
    /// elsewhere (a durable outbox) so that it exists no later than the entry itself.
    pub fn append_with<T, E>(
        &mut self,
        kind: EntryKind,
        before: impl FnOnce(&TranscriptEntry, &[TranscriptEntry]) -> std::result::Result<T, E>,
    ) -> Result<std::result::Result<(String, T), E>> {
        let lock = self.lock_and_sync()?;
        let entry = TranscriptEntry {
            id: self.fresh_id(&HashSet::new()),
            parent_id: self.leaf_id().map(str::to_owned),
            timestamp: iso_now(),
            kind,
        };
        let made = match before(&entry, &self.entries) {
            Ok(made) => made,
            Err(e) => return Ok(Err(e)),
        };
        let id = entry.id.clone();
        self.write_entries(&lock, vec![entry])?;
        Ok(Ok((id, made)))
    }

    /// Appends an entry under a given id at the leaf (a host restoring an entry it recorded
    /// with [`Self::append_with`] before a crash cut the append short). Answers `false`
    /// without writing when an entry with that id is already in the file.
    pub fn append_with_id(&mut self, id: &str, kind: EntryKind) -> Result<bool> {
        let lock = self.lock_and_sync()?;
        if self.index.contains_key(id) {
            return Ok(false);
        }
        let entry = TranscriptEntry {
            id: id.to_owned(),
            parent_id: self.leaf_id().map(str::to_owned),
            timestamp: iso_now(),
            kind,
        };
        self.write_entries(&lock, vec![entry])?;
        Ok(true)
    }

    /// Appends a `message` entry. Returns its id.
    pub fn append_message(&mut self, message: AgentMessage) -> Result<String> {
        Ok(self.append(EntryKind::Message(message))?.id.clone())
    }

    /// Appends a `compaction` entry. Returns its id.
    pub fn append_compaction(&mut self, data: CompactionEntryData) -> Result<String> {
        Ok(self.append(EntryKind::Compaction(data))?.id.clone())
    }

    /// Appends a `branch_summary` entry. Returns its id.
    pub fn append_branch_summary(&mut self, data: BranchSummaryEntryData) -> Result<String> {
        Ok(self.append(EntryKind::BranchSummary(data))?.id.clone())
    }

    /// Appends a `custom_message` entry (in model context). Returns its id.
    pub fn append_custom_message(&mut self, data: CustomMessageEntryData) -> Result<String> {
        Ok(self.append(EntryKind::CustomMessage(data))?.id.clone())
    }

    /// Appends any other entry type (`custom`, `model_change`, `label`, `session_info`,
    /// `thinking_level_change`, ...) with its payload fields. Returns its id.
    pub fn append_other(&mut self, kind: &str, fields: JsonMap) -> Result<String> {
        Ok(self
            .append(EntryKind::Other {
                kind: kind.to_owned(),
                fields,
            })?
            .id
            .clone())
    }

    /// Appends a `label {targetId, label}` entry. Returns its id.
    pub fn append_label(&mut self, target_id: &str, label: &str) -> Result<String> {
        let mut fields = JsonMap::new();
        fields.insert("targetId".into(), Value::String(target_id.to_owned()));
        fields.insert("label".into(), Value::String(label.to_owned()));
        self.append_other("label", fields)
    }

    /// Moves the leaf to `entry_id`: the next append becomes its child, starting a new branch.
    /// Nothing is written until then (as in Pi, an unused branch point is not persisted).
    pub fn branch_from(&mut self, entry_id: &str) -> Result<()> {
        let pos = *self
            .index
            .get(entry_id)
            .ok_or_else(|| TranscriptError::EntryNotFound {
                id: entry_id.to_owned(),
                path: self.path.clone(),
            })?;
        self.leaf = Some(pos);
        self.leaf_pinned = true;
        Ok(())
    }

    /// Moves the leaf before the first entry: the next append is a new root (`parentId: null`).
    pub fn reset_leaf(&mut self) {
        self.leaf = None;
        self.leaf_pinned = true;
    }

    /// Re-reads lines other processes appended since this file was opened (under the lock).
    pub fn refresh(&mut self) -> Result<()> {
        self.lock_and_sync().map(drop)
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The header line.
    pub fn header(&self) -> &SessionHeader {
        &self.header
    }

    /// The session id (from the header).
    pub fn session_id(&self) -> &str {
        &self.header.id
    }

    /// Torn-line warnings seen so far (show them to the user).
    pub fn warnings(&self) -> &[TranscriptWarning] {
        &self.warnings
    }

    /// Every entry in file order, all branches included.
    pub fn entries(&self) -> &[TranscriptEntry] {
        &self.entries
    }

    /// The entry with this id.
    pub fn entry(&self, id: &str) -> Option<&TranscriptEntry> {
        self.index.get(id).and_then(|&i| self.entries.get(i))
    }

    /// The leaf entry's id (`None` when the next append is a root).
    pub fn leaf_id(&self) -> Option<&str> {
        self.leaf
            .and_then(|i| self.entries.get(i))
            .map(|e| e.id.as_str())
    }

    /// How long an append waits for the session write lock (default 60 s, as OpenClaw's
    /// `session.writeLock.acquireTimeoutMs`).
    pub fn set_lock_timeout(&mut self, timeout: Duration) {
        self.lock_timeout = timeout;
    }

    /// Whether appends `fsync` (default true). Off trades power-loss durability for speed;
    /// a process crash still loses at most the line being written.
    pub fn set_sync_writes(&mut self, sync: bool) {
        self.sync_writes = sync;
    }

    /// The active branch, root first, leaf last. Walks parent links through the index, so the
    /// cost is the length of the path. A `parentId` that names no entry ends the walk, and so
    /// does one that names an entry already on the path: a cycle (an entry its own parent, or
    /// two naming each other) cannot come from appends, but a file is outside input, and each
    /// entry is on the path once.
    pub fn active_path(&self) -> Vec<&TranscriptEntry> {
        let mut out = Vec::new();
        let mut seen = HashSet::new();
        let mut cur = self.leaf;
        while let Some(i) = cur {
            let Some(entry) = self.entries.get(i) else {
                break;
            };
            if !seen.insert(i) {
                break;
            }
            out.push(entry);
            cur = entry
                .parent_id
                .as_deref()
                .and_then(|p| self.index.get(p).copied());
        }
        out.reverse();
        out
    }

    /// Forks the active branch into a new child transcript at `child_path` (subagent `fork`
    /// mode, §8): same entries and ids, a header with `parentSession` = this file's path. The
    /// child file appears atomically; fails if it exists.
    pub fn fork_to(
        &self,
        child_path: impl AsRef<Path>,
        child_session_id: &str,
    ) -> Result<SessionFile> {
        let mut entries: Vec<TranscriptEntry> = self.active_path().into_iter().cloned().collect();
        if let Some(first) = entries.first_mut() {
            first.parent_id = None;
        }
        let header = new_header(
            child_session_id,
            &self.header.cwd,
            Some(self.path.to_string_lossy().into_owned()),
        );
        Self::create_with_entries(child_path.as_ref(), header, entries)
    }
}
