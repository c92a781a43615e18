//! OpenClaw-compatible session transcripts and the sessions map (contract §9, §10).
//!
//! The host's transcript is the source of truth for a session: an append-only JSONL file whose
//! first line is a session header and whose other lines are entries linked by `parentId` into
//! a tree. This crate reads and writes those files exactly as OpenClaw (Pi's SessionManager)
//! does, walks the active branch, rebuilds the model context after compaction (§7.4), rewrites
//! entries by branching and re-appending (§9), forks a branch for subagents (§8), and keeps the
//! per-agent `sessions.json` map from session keys to sessions (§10).
//!
//! It deliberately knows nothing about engines: it stores and replays, it does not decide what
//! to summarize or when.
//!
//! - [`SessionFile`]: one transcript (create/open, append, branch, walk, rebuild, rewrite, fork).
//! - [`SessionStore`] / [`SessionEntry`]: `sessions.json` and the directory layout.
//! - [`key`]: session key parsing and builders.
//! - [`WriteLock`]: the per-transcript advisory write lock.

mod atomic;
mod context;
mod delta;
mod error;
pub mod key;
mod lock;
mod rewrite;
mod session_file;
mod store;

pub use delta::DeltaError;
pub use error::{Result, TranscriptError};
pub use key::{
    agent_id_of, main_session_key, new_subagent_session_key, SessionKey, SessionKeyKind,
};
pub use lock::{WriteLock, DEFAULT_LOCK_TIMEOUT};
pub use rewrite::{
    REASON_EMPTY_SESSION, REASON_INVALID_FIRST_TARGET, REASON_NO_MATCH, REASON_NO_REPLACEMENTS,
    REASON_SUFFIX_NOT_ALLOWED,
};
pub use session_file::{
    iso_now, SessionFile, TranscriptWarning, VisibleMessage, SESSION_FORMAT_VERSION,
};
pub use store::{
    ResolvedSession, SessionEntry, SessionStore, SessionsMap, TokenCounters, DEFAULT_AGENT_ID,
};
