//! The engine boundary's error type.
//!
//! Variants tell the caller what to do: `Aborted` is the caller's own cancellation and must
//! never quarantine; `NotImplemented` means "absent optional method" (the host picks another
//! path); `HostRequirement` fails the run closed before it starts; everything an engine throws
//! while working is `Failed`, which the quarantine guard turns into a fallback to `legacy`.
//! `Unavailable` is the one transient failure: the engine's store cannot be reached for now (a
//! database outage). It is not a fault of the engine, so it never quarantines: the guard
//! answers that one call as a failure would be answered and calls the engine again next time,
//! and a host keeps what it must deliver (the outbox's commits) until the store is back.

use crate::engine::Method;

/// An error crossing the engine boundary.
#[derive(Debug, Clone, thiserror::Error)]
pub enum EngineError {
    /// The engine (or a plugin process) failed. The message is what OpenClaw would record as
    /// the quarantine `reason` (`error.message`).
    #[error("{0}")]
    Failed(String),
    /// The engine's store cannot be reached for now (the database is down or unreachable).
    /// The message names the database (host and port, never a password). Transient: never
    /// quarantines (see the module header).
    #[error("{0}")]
    Unavailable(String),
    /// The operation was cancelled. When the caller's abort signal is aborted this propagates
    /// without quarantine; an abort error with a live signal is an ordinary failure.
    #[error("{reason}")]
    Aborted {
        /// The abort reason (`Context engine operation aborted.` when none was given).
        reason: String,
    },
    /// An optional method the engine does not implement.
    #[error("context engine does not implement {}", .0.name())]
    NotImplemented(Method),
    /// The engine's declared host requirements are not met (fail closed, no fallback).
    #[error("{0}")]
    HostRequirement(String),
    /// A factory result that is not a valid engine (contract §3.4).
    #[error("{0}")]
    Contract(String),
    /// No engine under that id, or the default engine is unusable.
    #[error("{0}")]
    NotRegistered(String),
    /// The persisted quarantine mirror (contract §4.4) cannot be read or written. The mirror
    /// is best effort: callers report this (doctor names the file), never fail a run on it.
    #[error("quarantine mirror {}: {problem}", .path.display())]
    HealthMirror {
        /// The mirror file.
        path: std::path::PathBuf,
        /// What is wrong with it.
        problem: String,
    },
}

impl EngineError {
    /// Shorthand for [`EngineError::Failed`].
    pub fn failed(msg: impl Into<String>) -> Self {
        EngineError::Failed(msg.into())
    }

    /// Whether this is the transient [`EngineError::Unavailable`].
    pub fn is_unavailable(&self) -> bool {
        matches!(self, EngineError::Unavailable(_))
    }

    /// Whether this error looks like an abort rejection (§4.1 step 4): an `Aborted` error, or a
    /// message mentioning abort/cancelled/canceled.
    pub fn looks_like_abort(&self) -> bool {
        match self {
            EngineError::Aborted { .. } => true,
            other => {
                let m = other.to_string().to_ascii_lowercase();
                m.contains("abort") || m.contains("cancelled") || m.contains("canceled")
            }
        }
    }
}
