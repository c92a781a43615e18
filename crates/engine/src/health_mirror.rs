//! The persisted quarantine health mirror (contract §4.4): quarantines visible across
//! processes.
//!
//! A quarantine (§4.2) lives in the memory of the process that recorded it and ends with that
//! process. OpenClaw's Gateway is long-lived, so its health surfaces read memory; clawctx's
//! commands are short processes: by the time `clawctx doctor` looks, the `clawctx run` whose
//! plugin failed is gone, and so is its quarantine. The mirror is a small JSON file under the
//! state dir (`<state>/runtime/context-engine-quarantines.json`) that every process running
//! engines writes its quarantine records to, so other processes can show them.
//!
//! **Visibility only.** The contract says an in-memory quarantine never depends on the
//! mirror, so a persisted record does not make the next process skip the engine: it tries the
//! engine again (a broken plugin costs its timeout once per process) and quarantines it itself
//! if it still fails. Every error here is reported to the caller to log, never turned into a
//! failure of the run.
//!
//! The rules, as §4.4 gives them:
//! - A record is `{engineId, owner?, operation, reason, failedAtMs, processId, processToken,
//!   processStartTime|null}`, keyed by `[engineId, processId]`; the first record of a key wins
//!   (the in-memory rule), and the file keeps at most 64 (the oldest go first).
//! - It is written when a process records a quarantine, and a process deletes only its own
//!   rows, when its in-memory quarantine of that id clears (re-registration, activation,
//!   `clear_owner`). Clearing when no mirror exists creates no file.
//! - Listing starts from the process's own in-memory records (authoritative) and appends the
//!   persisted ones for engine ids not already listed; among several rows for one id the
//!   earliest wins.
//! - A row's process is identified by its PID, a per-process random token and the process's
//!   start time (`/proc/<pid>/stat`): a row of this PID with another token is an earlier
//!   incarnation of this PID, and a sibling whose start time differs (PID reused), is gone, or
//!   cannot be read (no `/proc`, null start time) is not running. This fails closed.
//!
//! **Deliberate deviation.** OpenClaw drops the rows of processes that are not running when it
//! lists. Here that would hide every quarantine a finished `clawctx run` recorded, which is the
//! case the mirror exists for, so such rows are listed, marked `processRunning: false`. They
//! are removed when the next process that runs engines (run, chat, gateway) attaches the mirror
//! ([`HealthMirror::begin`]): that process is the restart after which OpenClaw's quarantine
//! would be gone too, and it records its own failures. Rows of running siblings always stay.
//!
//! Writes are atomic (a temp file in the same directory, renamed over the mirror) and
//! serialized between processes by an advisory lock on a side file (`….json.lock`), so two
//! processes quarantining at once cannot lose each other's rows. A mirror that cannot be parsed
//! is never overwritten: writers skip it and `doctor` reports it with its path until it is
//! removed.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{LazyLock, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use fs4::fs_std::FileExt;
use serde::{Deserialize, Serialize};

use crate::error::EngineError;
use crate::registry::QuarantineRecord;

/// The mirror's file name, under `<state>/runtime/`.
pub const MIRROR_FILE: &str = "context-engine-quarantines.json";
/// The store's owner id in OpenClaw (written into the file for reference).
pub const MIRROR_OWNER: &str = "core:context-engine-quarantine-health";
/// The store's namespace in OpenClaw (written into the file for reference).
pub const MIRROR_NAMESPACE: &str = "runtime-quarantines";
/// At most this many rows are kept; the oldest go first.
pub const MAX_ENTRIES: usize = 64;
/// The file format version this build reads and writes.
pub const MIRROR_VERSION: u32 = 1;

/// How long a writer waits for another process's write to finish before giving up.
const LOCK_WAIT: Duration = Duration::from_secs(2);
const LOCK_POLL: Duration = Duration::from_millis(5);

/// `<state_dir>/runtime/context-engine-quarantines.json`.
pub fn mirror_path(state_dir: &Path) -> PathBuf {
    state_dir.join("runtime").join(MIRROR_FILE)
}

/// One persisted row (§4.4's record shape).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PersistedQuarantine {
    /// The quarantined engine.
    pub engine_id: String,
    /// Its owner, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// `resolve`, `factory`, `contract-validation` or a guarded method name.
    pub operation: String,
    /// The error message.
    pub reason: String,
    /// When it failed, epoch milliseconds.
    pub failed_at_ms: u64,
    /// The PID of the process that recorded it.
    pub process_id: u32,
    /// A random token of that process (tells a PID's incarnations apart).
    pub process_token: String,
    /// That process's start time (clock ticks after boot, from `/proc/<pid>/stat`), `null`
    /// where it cannot be read.
    pub process_start_time: Option<u64>,
}

impl PersistedQuarantine {
    /// The in-memory record this row mirrors.
    pub fn record(&self) -> QuarantineRecord {
        QuarantineRecord {
            engine_id: self.engine_id.clone(),
            owner: self.owner.clone(),
            operation: self.operation.clone(),
            reason: self.reason.clone(),
            failed_at: UNIX_EPOCH + Duration::from_millis(self.failed_at_ms),
        }
    }
}

/// The file.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct MirrorFile {
    version: u32,
    #[serde(default)]
    owner: String,
    #[serde(default)]
    namespace: String,
    quarantines: Vec<PersistedQuarantine>,
}

/// Who a process is, for the mirror: PID, a random token and its start time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcessIdentity {
    /// PID.
    pub process_id: u32,
    /// Random per process.
    pub process_token: String,
    /// Start time in clock ticks after boot, when `/proc` tells it.
    pub process_start_time: Option<u64>,
}

static CURRENT: LazyLock<ProcessIdentity> = LazyLock::new(|| {
    let process_id = std::process::id();
    ProcessIdentity {
        process_id,
        process_token: random_token(),
        process_start_time: process_start_time(process_id),
    }
});

impl ProcessIdentity {
    /// This process (the same token for the whole process).
    pub fn current() -> Self {
        CURRENT.clone()
    }
}

/// 128 random bits as hex: `RandomState` is seeded from the OS per process (and varied per
/// instance), which is all a token that tells PID incarnations apart needs.
fn random_token() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut out = String::with_capacity(32);
    for salt in 0..2u64 {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(salt);
        h.write_u128(
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0),
        );
        out.push_str(&format!("{:016x}", h.finish()));
    }
    out
}

/// The start time of process `pid` (field 22 of `/proc/<pid>/stat`), `None` when the process
/// does not exist or the system has no `/proc`.
pub fn process_start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may contain spaces or ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// Whether a listed quarantine is this process's own or read from the mirror.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum QuarantineSource {
    /// This process's in-memory record.
    Process,
    /// A row of the persisted mirror (another process, running or not).
    Mirror,
}

/// One entry of [`list`]: the record plus where it comes from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ListedQuarantine {
    /// `{engineId, owner?, operation, reason, failedAt}`.
    #[serde(flatten)]
    pub record: QuarantineRecord,
    /// `process` (this process's memory) or `mirror`.
    pub source: QuarantineSource,
    /// The process that recorded it.
    pub process_id: u32,
    /// Whether that process is still running (always true for this process's own).
    pub process_running: bool,
}

/// Whether the process of `row` is running, seen from `me`; `start_time_of` reads a PID's
/// start time.
fn row_running(
    row: &PersistedQuarantine,
    me: &ProcessIdentity,
    start_time_of: &dyn Fn(u32) -> Option<u64>,
) -> bool {
    if row.process_id == me.process_id {
        return row.process_token == me.process_token;
    }
    match (row.process_start_time, start_time_of(row.process_id)) {
        (Some(recorded), Some(now)) => recorded == now,
        // Gone, or unverifiable: fail closed.
        _ => false,
    }
}

/// `listContextEngineQuarantines` (§4.4) with the deviation in the module header: `in_memory`
/// first (authoritative), then for every other engine id its persisted row (a running
/// process's before others, then the earliest).
pub fn list(
    in_memory: &[QuarantineRecord],
    persisted: &[PersistedQuarantine],
    me: &ProcessIdentity,
) -> Vec<ListedQuarantine> {
    list_with(in_memory, persisted, me, &process_start_time)
}

fn list_with(
    in_memory: &[QuarantineRecord],
    persisted: &[PersistedQuarantine],
    me: &ProcessIdentity,
    start_time_of: &dyn Fn(u32) -> Option<u64>,
) -> Vec<ListedQuarantine> {
    let mut out: Vec<ListedQuarantine> = in_memory
        .iter()
        .map(|r| ListedQuarantine {
            record: r.clone(),
            source: QuarantineSource::Process,
            process_id: me.process_id,
            process_running: true,
        })
        .collect();
    let mut best: BTreeMap<&str, (bool, &PersistedQuarantine)> = BTreeMap::new();
    for row in persisted {
        if in_memory.iter().any(|r| r.engine_id == row.engine_id) {
            continue;
        }
        let running = row_running(row, me, start_time_of);
        let better = match best.get(row.engine_id.as_str()) {
            None => true,
            Some((r, b)) => {
                (running, std::cmp::Reverse(row.failed_at_ms))
                    > (*r, std::cmp::Reverse(b.failed_at_ms))
            }
        };
        if better {
            best.insert(&row.engine_id, (running, row));
        }
    }
    out.extend(best.into_values().map(|(running, row)| ListedQuarantine {
        record: row.record(),
        source: QuarantineSource::Mirror,
        process_id: row.process_id,
        process_running: running,
    }));
    out
}

/// The mirror file of one state dir, seen from one process.
#[derive(Debug)]
pub struct HealthMirror {
    path: PathBuf,
    me: ProcessIdentity,
    /// Serializes this process's writers (the file lock covers other processes).
    write: Mutex<()>,
}

impl HealthMirror {
    /// The mirror at `path`, for this process.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self::with_identity(path, ProcessIdentity::current())
    }

    /// The mirror of `state_dir` ([`mirror_path`]), for this process.
    pub fn in_state_dir(state_dir: &Path) -> Self {
        Self::new(mirror_path(state_dir))
    }

    /// The mirror at `path` as process `me` sees it (tests play siblings with this).
    pub fn with_identity(path: impl Into<PathBuf>, me: ProcessIdentity) -> Self {
        Self {
            path: path.into(),
            me,
            write: Mutex::new(()),
        }
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The process this mirror writes as.
    pub fn identity(&self) -> &ProcessIdentity {
        &self.me
    }

    fn error(&self, problem: impl std::fmt::Display) -> EngineError {
        EngineError::HealthMirror {
            path: self.path.clone(),
            problem: problem.to_string(),
        }
    }

    /// Every persisted row; empty when there is no mirror. A file that cannot be read or
    /// parsed is an error naming it.
    pub fn read(&self) -> Result<Vec<PersistedQuarantine>, EngineError> {
        let text = match std::fs::read_to_string(&self.path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(self.error(format!("cannot be read: {e}"))),
        };
        let file: MirrorFile = serde_json::from_str(&text)
            .map_err(|e| self.error(format!("is not a valid quarantine mirror: {e}")))?;
        if file.version != MIRROR_VERSION {
            return Err(self.error(format!(
                "has version {} (this build reads version {MIRROR_VERSION})",
                file.version
            )));
        }
        Ok(file.quarantines)
    }

    /// [`list`] over this mirror's rows.
    pub fn list(
        &self,
        in_memory: &[QuarantineRecord],
    ) -> Result<Vec<ListedQuarantine>, EngineError> {
        Ok(list(in_memory, &self.read()?, &self.me))
    }

    /// Writes `record` as this process's row for its engine (an existing row of the same
    /// key is kept: the first failure wins).
    pub fn record(&self, record: &QuarantineRecord) -> Result<(), EngineError> {
        let row = PersistedQuarantine {
            engine_id: record.engine_id.clone(),
            owner: record.owner.clone(),
            operation: record.operation.clone(),
            reason: record.reason.clone(),
            failed_at_ms: record
                .failed_at
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_millis() as u64)
                .unwrap_or(0),
            process_id: self.me.process_id,
            process_token: self.me.process_token.clone(),
            process_start_time: self.me.process_start_time,
        };
        self.update(true, |rows| {
            if rows.iter().any(|r| {
                r.engine_id == row.engine_id
                    && r.process_id == row.process_id
                    && r.process_token == row.process_token
            }) {
                return false;
            }
            // A row of this key from an earlier incarnation of this PID is stale: replaced.
            rows.retain(|r| !(r.engine_id == row.engine_id && r.process_id == row.process_id));
            rows.push(row);
            if rows.len() > MAX_ENTRIES {
                rows.sort_by_key(|r| r.failed_at_ms);
                let excess = rows.len() - MAX_ENTRIES;
                rows.drain(..excess);
            }
            true
        })
    }

    /// Deletes this process's rows: of `engine_id`, or all of them. Rows of other processes
    /// stay. Without a mirror file nothing is created.
    pub fn clear(&self, engine_id: Option<&str>) -> Result<(), EngineError> {
        let me = &self.me;
        self.update(false, |rows| {
            let before = rows.len();
            rows.retain(|r| {
                let mine = r.process_id == me.process_id && r.process_token == me.process_token;
                !(mine && engine_id.is_none_or(|id| r.engine_id == id))
            });
            rows.len() != before
        })
    }

    /// The activation step of a process that runs engines: deletes the rows of earlier
    /// incarnations of this PID and of processes that are no longer running (see the module
    /// header); rows of running siblings stay. Answers how many rows went. Without a mirror
    /// file nothing is created.
    pub fn begin(&self) -> Result<usize, EngineError> {
        let mut dropped = 0;
        let me = &self.me;
        self.update(false, |rows| {
            let before = rows.len();
            rows.retain(|r| {
                r.process_id != me.process_id && row_running(r, me, &process_start_time)
            });
            dropped = before - rows.len();
            dropped > 0
        })?;
        Ok(dropped)
    }

    /// Read, change, write back atomically under the file lock. `change` answers whether it
    /// changed anything. With `create` false, an absent mirror is left absent.
    fn update(
        &self,
        create: bool,
        change: impl FnOnce(&mut Vec<PersistedQuarantine>) -> bool,
    ) -> Result<(), EngineError> {
        let _local = self.write.lock().unwrap_or_else(|p| p.into_inner());
        if !create && !self.path.exists() {
            return Ok(());
        }
        let dir = match self.path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        };
        std::fs::create_dir_all(&dir)
            .map_err(|e| self.error(format!("cannot create {}: {e}", dir.display())))?;
        let _lock = self.lock()?;
        let mut rows = self.read()?;
        if !change(&mut rows) {
            return Ok(());
        }
        let file = MirrorFile {
            version: MIRROR_VERSION,
            owner: MIRROR_OWNER.to_owned(),
            namespace: MIRROR_NAMESPACE.to_owned(),
            quarantines: rows,
        };
        let bytes = serde_json::to_vec_pretty(&file)
            .map_err(|e| self.error(format!("cannot be encoded: {e}")))?;
        let mut tmp = tempfile::Builder::new()
            .prefix(".context-engine-quarantines-")
            .suffix(".tmp")
            .tempfile_in(&dir)
            .map_err(|e| {
                self.error(format!(
                    "cannot create a temp file in {}: {e}",
                    dir.display()
                ))
            })?;
        tmp.write_all(&bytes)
            .and_then(|_| tmp.write_all(b"\n"))
            .and_then(|_| tmp.as_file().sync_all())
            .map_err(|e| self.error(format!("cannot write {}: {e}", tmp.path().display())))?;
        tmp.persist(&self.path)
            .map_err(|e| self.error(format!("cannot be replaced: {}", e.error)))?;
        Ok(())
    }

    /// The exclusive advisory lock on `<mirror>.lock`, waited for at most [`LOCK_WAIT`].
    fn lock(&self) -> Result<std::fs::File, EngineError> {
        let mut name = self.path.as_os_str().to_owned();
        name.push(".lock");
        let path = PathBuf::from(name);
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| {
                self.error(format!("cannot open the lock file {}: {e}", path.display()))
            })?;
        let started = Instant::now();
        loop {
            match FileExt::try_lock_exclusive(&file) {
                Ok(true) => return Ok(file),
                Ok(false) if started.elapsed() < LOCK_WAIT => std::thread::sleep(LOCK_POLL),
                Ok(false) => {
                    return Err(self.error(format!(
                        "another process held {} for more than {} ms",
                        path.display(),
                        LOCK_WAIT.as_millis()
                    )))
                }
                Err(e) => return Err(self.error(format!("cannot lock {}: {e}", path.display()))),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn me() -> ProcessIdentity {
        ProcessIdentity {
            process_id: 100,
            process_token: "tok-100".into(),
            process_start_time: Some(5000),
        }
    }

    fn row(
        engine: &str,
        pid: u32,
        token: &str,
        start: Option<u64>,
        at: u64,
    ) -> PersistedQuarantine {
        PersistedQuarantine {
            engine_id: engine.into(),
            owner: Some(format!("plugin:{engine}")),
            operation: "assemble".into(),
            reason: format!("{engine} failed"),
            failed_at_ms: at,
            process_id: pid,
            process_token: token.into(),
            process_start_time: start,
        }
    }

    /// PID 200 runs since tick 7000, PID 300 since 9000; nothing else exists.
    fn probe(pid: u32) -> Option<u64> {
        match pid {
            100 => Some(5000),
            200 => Some(7000),
            300 => Some(9000),
            _ => None,
        }
    }

    #[test]
    fn processes_are_told_apart_by_token_and_start_time() {
        let me = me();
        let cases = [
            (
                row("a", 100, "tok-100", Some(5000), 1),
                true,
                "this process",
            ),
            (
                row("a", 100, "tok-old", Some(5000), 1),
                false,
                "an earlier incarnation of this PID",
            ),
            (row("a", 200, "t", Some(7000), 1), true, "a running sibling"),
            (row("a", 200, "t", Some(6999), 1), false, "a reused PID"),
            (
                row("a", 400, "t", Some(7000), 1),
                false,
                "a process that is gone",
            ),
            (
                row("a", 300, "t", None, 1),
                false,
                "a sibling whose start time was not recorded",
            ),
        ];
        for (r, running, what) in cases {
            assert_eq!(row_running(&r, &me, &probe), running, "{what}");
        }
    }

    #[test]
    fn memory_is_authoritative_and_one_row_per_engine_is_listed() {
        let memory = vec![row("a", 100, "tok-100", Some(5000), 50).record()];
        let persisted = vec![
            row("a", 200, "t", Some(7000), 10), // hidden: "a" is in memory
            row("b", 400, "t", Some(1), 30),    // gone
            row("b", 300, "t", Some(9000), 40), // running: preferred
            row("c", 400, "t", Some(1), 20),    // gone, later
            row("c", 401, "t", Some(1), 15),    // gone, earliest: picked
        ];
        let listed = list_with(&memory, &persisted, &me(), &probe);
        let got: Vec<(&str, QuarantineSource, u32, bool)> = listed
            .iter()
            .map(|l| {
                (
                    l.record.engine_id.as_str(),
                    l.source,
                    l.process_id,
                    l.process_running,
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                ("a", QuarantineSource::Process, 100, true),
                ("b", QuarantineSource::Mirror, 300, true),
                ("c", QuarantineSource::Mirror, 401, false),
            ]
        );
        assert_eq!(
            listed[2].record.failed_at,
            UNIX_EPOCH + Duration::from_millis(15)
        );
    }

    #[test]
    fn the_listed_json_is_the_health_record_plus_its_process() {
        let l = list_with(
            &[],
            &[row("b", 300, "t", Some(9000), 1_700_000_000_123)],
            &me(),
            &probe,
        );
        assert_eq!(
            serde_json::to_value(&l).expect("encodes"),
            serde_json::json!([{
                "engineId": "b", "owner": "plugin:b", "operation": "assemble", "reason": "b failed",
                "failedAt": 1_700_000_000_123u64, "source": "mirror", "processId": 300, "processRunning": true
            }])
        );
    }

    #[test]
    fn the_process_start_time_of_this_process_is_read_where_proc_exists() {
        if Path::new("/proc/self/stat").exists() {
            let me = ProcessIdentity::current();
            assert!(me.process_start_time.is_some_and(|t| t > 0), "{me:?}");
            assert_eq!(process_start_time(me.process_id), me.process_start_time);
            assert_eq!(me, ProcessIdentity::current(), "one identity per process");
        }
        assert_eq!(process_start_time(u32::MAX), None);
    }
}
