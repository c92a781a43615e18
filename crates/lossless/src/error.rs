//! The crate's one error type, at the boundary between the lossless engine and its callers.
//!
//! Variants say what the caller should do: `Refused` (the file is not ours or is damaged: pick
//! another path, never retry on the same file), `Busy` (another process holds the lock past the
//! bounded wait: retry later), `NotFound` (bad id from a user or the model), `InvalidInput`
//! (bad arguments: fix the call), `Closed` (the store worker is gone: reopen), `Panicked` (a
//! bug in one job: that call failed, the store keeps serving), `Unreachable` (the PostgreSQL
//! server cannot be reached or refuses the login: fix the URL or start the server), and
//! `Sqlite` / `Postgres` / `Io` for everything else (a real failure: the guard falls back to
//! `legacy`).

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
    /// Any other SQLite failure.
    #[error("sqlite: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// A file-system failure.
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
    /// A stored payload could not be decoded (the row is damaged).
    #[error("corrupt stored record: {0}")]
    Corrupt(String),
    /// The PostgreSQL database could not be reached (or refused the login) at start.
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

/// Whether `e` means the connection itself failed (so the same call may succeed on a new
/// one): a closed connection, an I/O error, SQLSTATE class 08 (connection exception) or an
/// administrator's or the server's shutdown (57P01–57P03).
fn connection_failed(e: &tokio_postgres::Error) -> bool {
    if e.is_closed() {
        return true;
    }
    match e.code() {
        Some(code) => {
            let c = code.code();
            c.starts_with("08") || matches!(c, "57P01" | "57P02" | "57P03")
        }
        // No server error and not a conversion problem: the socket failed.
        None => e.as_db_error().is_none() && std::error::Error::source(e).is_some_and(|s| s.is::<std::io::Error>()),
    }
}

impl From<tokio_postgres::Error> for LosslessError {
    fn from(e: tokio_postgres::Error) -> Self {
        let text = crate::pg::connect::describe_pg_error(&e);
        if connection_failed(&e) {
            LosslessError::ConnectionLost(text)
        } else {
            LosslessError::Postgres(text)
        }
    }
}

impl From<deadpool_postgres::PoolError> for LosslessError {
    fn from(e: deadpool_postgres::PoolError) -> Self {
        let text = crate::pg::connect::describe_pool_error(&e);
        match &e {
            // No new connection could be made: the server is down or unreachable for now.
            deadpool_postgres::PoolError::Backend(_) => LosslessError::ConnectionLost(text),
            _ => LosslessError::Postgres(text),
        }
    }
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

impl From<LosslessError> for EngineError {
    fn from(e: LosslessError) -> Self {
        EngineError::failed(format!("lossless: {e}"))
    }
}

/// Crate result alias.
pub type Result<T, E = LosslessError> = std::result::Result<T, E>;
