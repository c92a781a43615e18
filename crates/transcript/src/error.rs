//! The one error type at this crate's boundary.
//!
//! Every fallible operation of the transcript store returns [`TranscriptError`]. Each variant
//! says what went wrong in terms the caller can act on: a malformed file needs a human (it is
//! never silently repaired), a lock timeout can be retried, a bad session key or id is a caller
//! bug. Recoverable file damage (a torn last line) is not an error at all: it is reported as a
//! [`crate::TranscriptWarning`] and the file stays usable.

use std::path::PathBuf;

/// Errors of the transcript store.
#[derive(Debug, thiserror::Error)]
pub enum TranscriptError {
    /// Reading or writing a file failed. Retry if the cause is transient (disk full, EINTR);
    /// otherwise give up on this session.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file involved.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },

    /// A line of a transcript (or `sessions.json`) is not what it must be. The file needs
    /// repair by a human; clawctx never rewrites it on its own. Displays as `path:line: what`.
    #[error("{}:{line}: {expected}", path.display())]
    Malformed {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What was expected there (and what was found).
        expected: String,
    },

    /// Another process holds the session write lock and did not release it in time. Retry
    /// later; do not write without the lock.
    #[error("{}: session write lock not acquired within {waited_ms} ms (another process is writing this transcript)", path.display())]
    LockTimeout {
        /// The locked file.
        path: PathBuf,
        /// How long we waited.
        waited_ms: u64,
    },

    /// The entry id is not in this transcript (caller bug or stale id).
    #[error("entry {id:?} not found in {}", path.display())]
    EntryNotFound {
        /// The id asked for.
        id: String,
        /// The transcript.
        path: PathBuf,
    },

    /// A transcript cursor points at an entry that is no longer on the active branch (it was
    /// rewritten or abandoned). Re-read from the start of the active branch.
    #[error("cursor entry {id:?} is not on the active branch of {}", path.display())]
    CursorNotOnActiveBranch {
        /// The cursor entry id.
        id: String,
        /// The transcript.
        path: PathBuf,
    },

    /// A file that must be new already exists (e.g. creating a session over an old one).
    #[error("{} already exists", path.display())]
    AlreadyExists {
        /// The file.
        path: PathBuf,
    },

    /// A session key, agent id or session id cannot be used (empty, or unsafe as a path
    /// component). Caller bug.
    #[error("invalid {what} {value:?}: {reason}")]
    InvalidName {
        /// `session key`, `agent id` or `session id`.
        what: &'static str,
        /// The value given.
        value: String,
        /// Why it was refused.
        reason: &'static str,
    },

    /// A session key is not in the sessions map.
    #[error("no session for key {key:?}")]
    UnknownSessionKey {
        /// The key.
        key: String,
    },

    /// Serializing a value to JSON failed (a value that cannot be JSON, e.g. a NaN).
    #[error("could not serialize transcript data: {0}")]
    Serialize(#[from] serde_json::Error),
}

impl TranscriptError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        TranscriptError::Io {
            path: path.into(),
            source,
        }
    }
}

/// Result alias of this crate.
pub type Result<T, E = TranscriptError> = std::result::Result<T, E>;
