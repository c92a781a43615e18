//! The crate's one error type, at the boundary between the lossless engine and its callers.
//!
//! Variants say what the caller should do: `Refused` (the file is not ours or is damaged: pick
//! another path, never retry on the same file), `Busy` (another process holds the lock past the
//! bounded wait: retry later), `NotFound` (bad id from a user or the model), `InvalidInput`
//! (bad arguments: fix the call), `Closed` (the store worker is gone: reopen), `Panicked` (a
//! bug in one job: that call failed, the store keeps serving), `Unreachable` (the PostgreSQL
//! server cannot be reached or refuses the login: fix the URL or start the server),
//! `DiskFull` / `ReadOnly` (the SQLite store's disk is full or cannot be written: free space or
//! fix the mount, then retry; both name the file, since a bare "database or disk is full"
//! does not say which disk), and `Sqlite` / `Postgres` / `Io` for everything else (a real
//! failure: the guard falls back to `legacy`).

use clawctx_engine::EngineError;

/// An error of the lossless engine or its store.
#[derive(Debug, thiserror::Error)]
pub enum LosslessError {
    /// The database (a SQLite file or a PostgreSQL database) is foreign, corrupt or from a newer
    /// version. It was not modified.
    #[error("refusing to open {path}: {reason} (nothing was modified)")]
    Refused {
        /// The path as given.
        path: String,
        /// Why.
        reason: String,
    },
    /// The database stayed locked by another connection past the configured busy timeout.
    #[error("lossless database is locked by another process (waited {waited_ms} ms); retry later")]
    Busy {
        /// How long SQLite waited.
        waited_ms: u64,
    },
    /// No message or summary with that id in scope.
    #[error("not found: {0}")]
    NotFound(String),
    /// The caller's arguments are invalid (bad regex, bad id syntax, ...).
    #[error("invalid input: {0}")]
    InvalidInput(String),
    /// The store was closed: reopen it.
    #[error("lossless store is closed")]
    Closed,
    /// The embedding model failed (semantic recall; see [`crate::core::semantic`]).
    #[error("embedding failed: {0}")]
    Embedding(String),
    /// A store job panicked (a bug): its transaction was rolled back and the store's
    /// in-memory state rebuilt, so the store keeps serving other calls; this call failed and
    /// will likely fail the same way again.
    #[error("lossless store job {job} panicked: {message} (rolled back; the store keeps serving)")]
    Panicked {
        /// The job: the function that sent it (e.g. `clawctx_lossless::api::grep`).
        job: String,
        /// The panic's message.
        message: String,
    },
    /// The disk holding the SQLite store is full (`SQLITE_FULL`, `ENOSPC`). The call's
    /// transaction was rolled back, so nothing of it was stored; the store keeps serving reads
    /// and writes again once there is space (no reopen needed).
    #[error("the disk is full: cannot write the lossless store {path} ({detail}); nothing of this call was stored, free space and retry")]
    DiskFull {
        /// The store's file.
        path: String,
        /// What SQLite or the OS said.
        detail: String,
    },
    /// The SQLite store's file or its directory cannot be written (a read-only file system,
    /// or no permission). Nothing was modified.
    #[error("cannot write the lossless store {path}: {detail} (make it writable, or point databasePath elsewhere)")]
    ReadOnly {
        /// The store's file.
        path: String,
        /// Why (e.g. `read-only file system`).
        detail: String,
    },
    /// Any other SQLite failure.
    #[error("sqlite: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// A file-system failure.
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
    /// A stored payload could not be decoded (the row is damaged).
    #[error("corrupt stored record: {0}")]
    Corrupt(String),
    /// The PostgreSQL database could not be reached (or refused the login): at start, or when
    /// a connection broke and no new one could be made (the server is down or restarting).
    #[error("cannot reach the PostgreSQL database at {target}: {reason}")]
    Unreachable {
        /// The database's URL without its password (`PgTarget::redacted`).
        target: String,
        /// Why, e.g. `connection refused` or the server's
        /// `password authentication failed for user "..."`.
        reason: String,
    },
    /// Any other PostgreSQL failure (never contains the password).
    #[error("postgres: {0}")]
    Postgres(String),
    /// The connection to PostgreSQL broke (the server restarted, the network dropped, the
    /// connection was terminated) or no new one could be made. What the call was writing is
    /// rolled back by the server; a retry runs on a new connection.
    #[error("lost the connection to PostgreSQL: {0}")]
    ConnectionLost(String),
}

impl LosslessError {
    /// Maps a rusqlite error, turning lock timeouts into [`LosslessError::Busy`].
    pub(crate) fn from_sqlite(e: rusqlite::Error, busy_ms: u64) -> Self {
        if let rusqlite::Error::SqliteFailure(f, _) = &e {
            if matches!(
                f.code,
                rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked
            ) {
                return LosslessError::Busy { waited_ms: busy_ms };
            }
        }
        LosslessError::Sqlite(e)
    }
}

/// `errno` values that say the disk rather than the data is the problem.
const ENOSPC: i32 = 28;
const EROFS: i32 = 30;
const EACCES: i32 = 13;
const EPERM: i32 = 1;

impl LosslessError {
    /// Names the store file `path` in the errors that are about its disk: a full disk
    /// ([`LosslessError::DiskFull`]) or one that cannot be written
    /// ([`LosslessError::ReadOnly`]). Other errors are returned as they are.
    pub(crate) fn on_file(self, path: &std::path::Path) -> Self {
        let shown = || path.display().to_string();
        match self {
            LosslessError::Sqlite(rusqlite::Error::SqliteFailure(f, msg))
                if f.code == rusqlite::ErrorCode::DiskFull =>
            {
                LosslessError::DiskFull {
                    path: shown(),
                    detail: msg.unwrap_or_else(|| "database or disk is full".into()),
                }
            }
            LosslessError::Sqlite(rusqlite::Error::SqliteFailure(f, msg))
                if f.code == rusqlite::ErrorCode::ReadOnly =>
            {
                let detail = match probe_write(path) {
                    Some(os) => os,
                    None => msg.unwrap_or_else(|| "attempt to write a readonly database".into()),
                };
                LosslessError::ReadOnly {
                    path: shown(),
                    detail,
                }
            }
            // SQLite reports a file it cannot create or extend as "unable to open" or a disk
            // I/O error without the reason; the directory says whether it is the disk.
            LosslessError::Sqlite(rusqlite::Error::SqliteFailure(f, msg))
                if matches!(
                    f.code,
                    rusqlite::ErrorCode::CannotOpen | rusqlite::ErrorCode::SystemIoFailure
                ) =>
            {
                match probe_errno(path) {
                    Some(ENOSPC) => LosslessError::DiskFull {
                        path: shown(),
                        detail: msg.unwrap_or_else(|| f.to_string()),
                    },
                    Some(e @ (EROFS | EACCES | EPERM)) => LosslessError::ReadOnly {
                        path: shown(),
                        detail: os_text(e),
                    },
                    _ => LosslessError::Sqlite(rusqlite::Error::SqliteFailure(f, msg)),
                }
            }
            LosslessError::Io(e) if e.raw_os_error() == Some(ENOSPC) => LosslessError::DiskFull {
                path: shown(),
                detail: os_text(ENOSPC),
            },
            LosslessError::Io(e) => match e.raw_os_error() {
                Some(code @ (EROFS | EACCES | EPERM)) => LosslessError::ReadOnly {
                    path: shown(),
                    detail: os_text(code),
                },
                _ => LosslessError::Io(e),
            },
            other => other,
        }
    }
}

/// What `errno` means, for the errors above.
fn os_text(errno: i32) -> String {
    match errno {
        ENOSPC => "no space left on device".into(),
        EROFS => "read-only file system".into(),
        EACCES | EPERM => "permission denied".into(),
        other => std::io::Error::from_raw_os_error(other).to_string(),
    }
}

/// Why a file cannot be created next to `path`, `None` when one can.
fn probe_write(path: &std::path::Path) -> Option<String> {
    probe_errno(path).map(os_text)
}

/// The `errno` of creating a file next to `path` (removed at once), `None` when it worked or
/// failed for a reason without one. Only called on an error path.
fn probe_errno(path: &std::path::Path) -> Option<i32> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => std::path::PathBuf::from("."),
    };
    // The nearest existing directory: the store's may not exist yet.
    let mut dir = dir.as_path();
    while !dir.exists() {
        dir = dir.parent()?;
    }
    let probe = dir.join(format!(".clawctx-write-probe-{}", std::process::id()));
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)
    {
        Ok(f) => {
            drop(f);
            let _ = std::fs::remove_file(&probe);
            // Room for a name is not room for data: a full disk still takes an empty file.
            None
        }
        Err(e) => e.raw_os_error(),
    }
}

impl From<LosslessError> for EngineError {
    /// A database that cannot be reached ([`LosslessError::Unreachable`], a connection lost
    /// and not made again) is [`EngineError::Unavailable`]: an outage, which the host's guard
    /// does not quarantine; everything else is a failure.
    fn from(e: LosslessError) -> Self {
        match e {
            LosslessError::Unreachable { .. } | LosslessError::ConnectionLost(_) => {
                EngineError::Unavailable(format!("lossless: {e}"))
            }
            other => EngineError::failed(format!("lossless: {other}")),
        }
    }
}

/// Crate result alias.
pub type Result<T, E = LosslessError> = std::result::Result<T, E>;
