//! The per-turn trace: what the model saw on every turn and why, kept in the state dir; and
//! its producer, the watcher of every turn, whose records the dashboard reads.
//!
//! Why: each session's last `assemble` answer (`assembled`, what the dashboard's session view
//! shows) is kept only in memory, so "what did the model see on turn N, and why was the rest
//! left out?" could not be answered one compaction or one restart later (issue #31). This
//! module records, for every turn through `/v1/chat/completions`, `clawctx run` and
//! `clawctx chat`, and every `POST /v1/engine/assemble`, the time, the engine that served it and why, the budget, the
//! parts sent in order with their tokens, what was left out with a reason per item when the
//! engine's store tells, the gateway's count against the engine's estimate, the model's
//! latency and usage (cached tokens included), the compactions the turn triggered and the
//! summarizer calls made meanwhile. Messages are never stored a second time: a part is a
//! reference (a lossless `msg_<n>`/`sum_<n>` id when the frontier tells which, else a 32-bit
//! hash of its text) with its token count, so a turn costs about a kilobyte (`codec`).
//!
//! The trace is produced here, not by the dashboard: the turn path, the engine API and
//! `clawctx run` start a watcher (`watch`) that records each assembly (`assembled`),
//! publishes the turn's live events (`bus`) and writes the trace; the dashboard only reads the
//! records, the bus and the file.
//!
//! - `watch`: the producer: the task that watches a turn (or an engine-API `assemble`), records
//!   each assembly, reads the lossless frontier while the model answers, and hands the finished
//!   trace to the writer.
//! - `assembled`: each session's last `assemble` answer, in memory, and its split into parts.
//! - `bus`: the live events of turns (`/v1/dashboard/events` streams them).
//! - `build`: a trace from what the turn path and the engine API hand over.
//! - `writer`: `Tracer`, the thread that owns the file's connection.
//! - [`store`]: the SQLite file `<state>/runtime/turn-trace.sqlite` (WAL), its schema,
//!   retention (`gateway.trace.maxTurnsPerSession`, `gateway.trace.maxBytes`, oldest first)
//!   and the queries, shared by the gateway and `clawctx sessions trace` (which opens the file
//!   read-only).
//! - `codec`: the compact binary form of a turn's parts.
//! - [`views`]: what is derived on reading: warnings in words, the diff between a turn and
//!   the one before, the session's record of engines and usage.
//! - `api`: the JSON routes under `/v1/dashboard/trace/` (in the OpenAPI document).
//! - [`LocalTrace`]: the same trace for the turns of `clawctx run` and `clawctx chat`.
//!
//! Writing never fails or slows a turn: `Tracer` hands a finished trace to its own thread,
//! the connection's one owner, through a bounded channel (full: the trace is dropped and
//! counted); errors are logged and counted, never returned to the turn. Reads for the API go
//! through the same thread. The process-wide summarizer observer (`clawctx_summarize::observe`)
//! is sampled into a ring, and a trace takes the calls made during its turn (process-wide: a
//! concurrent session's summaries show there too).

pub(crate) mod api;
pub(crate) mod assembled;
mod build;
pub(crate) mod bus;
mod codec;
mod local;
pub mod store;
pub mod views;
pub(crate) mod watch;
mod writer;

use std::path::{Path, PathBuf};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[doc(hidden)]
pub use assembled::breakdown;
#[doc(hidden)]
pub use build::parts_of;
pub(crate) use build::{Builder, TurnEnd};
pub use local::{LocalTrace, TurnWatch};
pub(crate) use writer::Tracer;

/// The trace file under the state dir.
pub fn trace_path(state_dir: &Path) -> PathBuf {
    state_dir.join("runtime").join("turn-trace.sqlite")
}

/// Default `gateway.trace.maxTurnsPerSession`.
pub const DEFAULT_MAX_TURNS_PER_SESSION: u64 = 1000;
/// Default `gateway.trace.maxBytes` (256 MiB).
pub const DEFAULT_MAX_BYTES: u64 = 256 * 1024 * 1024;
/// `gateway.trace`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceSettings {
    /// `gateway.trace.enabled` (default true).
    pub enabled: bool,
    /// Turns kept per session, oldest dropped first (`gateway.trace.maxTurnsPerSession`).
    pub max_turns_per_session: u64,
    /// Bytes of traces kept in all, oldest dropped first (`gateway.trace.maxBytes`).
    pub max_bytes: u64,
}

impl Default for TraceSettings {
    fn default() -> Self {
        TraceSettings {
            enabled: true,
            max_turns_per_session: DEFAULT_MAX_TURNS_PER_SESSION,
            max_bytes: DEFAULT_MAX_BYTES,
        }
    }
}

/// What can go wrong with the trace file. None of it reaches a turn.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// SQLite refused (file damaged, disk full, read-only): the traces of this process are
    /// logged and counted as failed; the turns go on.
    #[error("turn trace {path}: {source}")]
    Sqlite {
        /// The trace file.
        path: String,
        /// SQLite's error.
        source: rusqlite::Error,
    },
    /// The file or its directory could not be made.
    #[error("turn trace {path}: {source}")]
    Io {
        /// The trace file.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// A stored row that does not decode (written by a newer clawctx, or damaged).
    #[error("turn trace {path}: a stored turn does not decode: {what}")]
    Corrupt {
        /// The trace file.
        path: String,
        /// What did not decode.
        what: String,
    },
    /// The trace file is of a newer schema than this build reads.
    #[error("turn trace {path}: schema version {found} is newer than this clawctx reads ({supported}); upgrade clawctx")]
    NewerSchema {
        /// The trace file.
        path: String,
        /// Its `user_version`.
        found: i64,
        /// What this build writes.
        supported: i64,
    },
    /// The writer thread is gone (the gateway is stopping) or tracing is disabled.
    #[error("the turn trace is not available: {0}")]
    Unavailable(String),
}

/// One part of an assembled context as the trace keeps it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TracePart {
    /// `systemPromptAddition`, `summary`, `recalled` or `raw`.
    pub kind: String,
    /// Position in the assembled messages (none for the system prompt addition).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<u32>,
    /// `sum_<n>` for a lossless summary, `msg_<n>` for a raw message the store identified.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// A summary's depth.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub depth: Option<i64>,
    /// The message's role.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// Tokens (the one estimator).
    pub tokens: u64,
    /// A 32-bit hash of the part's text (hex): the reference when no id is known, and what the
    /// diff compares. Empty in a stored trace when `id` names the part (a stored message's or
    /// summary's text never changes, so the id is its reference).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub digest: String,
    /// The message sequences a summary stands for, `[first, last]`, when the frontier told.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub span: Option<[i64; 2]>,
    /// The stored messages a `<recalled>` block quotes (`msg_<n>`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub quotes: Vec<String>,
    /// Why the `<recalled>` block quotes each message, best first, when the engine told
    /// (lossless, for an assembly of this process).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hits: Vec<RecallHitTrace>,
}

/// Why one message is in a `<recalled>` block.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RecallHitTrace {
    /// `msg_<n>`.
    pub id: String,
    /// Its search score for the prompt's telling words (BM25, two decimals); none when it was
    /// brought along as the message after a quoted one (a question's answer, or room left).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub score: Option<f64>,
    /// The prompt's search terms it contains.
    pub matched: u32,
}

/// One frontier item that was not sent, and why.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LeftItem {
    /// `msg_<n>` or `sum_<n>`.
    pub id: String,
    /// Its tokens.
    pub tokens: i64,
    /// The message sequences it stands for.
    pub first_seq: i64,
    /// Last of them.
    pub last_seq: i64,
    /// Whether the recalled block quotes it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub quoted: bool,
    /// Why it was not sent, in words (made on reading from the numbers, not stored).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
}

/// What was left out of a turn's context.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LeftOut {
    /// Whether the reasons are known; `false` with `unknown` saying why.
    pub known: bool,
    /// Why the reasons are not known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unknown: Option<String>,
    /// Items left out (frontier items under lossless, history messages otherwise).
    pub items: u64,
    /// Their tokens, when known.
    pub tokens: u64,
    /// Stored messages they stand for.
    pub messages: u64,
    /// The newest of them, one reason each (at most 32).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub listed: Vec<LeftItem>,
    /// Stored messages of the session (lossless), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stored_messages: Option<i64>,
    /// Stored messages that reached the model only inside a summary that was sent.
    pub summarized_messages: u64,
    /// Tokens of the budget the assembly left unused (what a left-out item is compared with).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unused: Option<i64>,
}

/// The model calls of a turn.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModelTrace {
    /// Calls made (retries included).
    pub calls: u64,
    /// Time waiting for the model (ms).
    pub latency_ms: f64,
    /// The whole turn's wall time in the gateway (ms).
    pub turn_ms: f64,
    /// Input tokens the provider reported.
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// Input tokens read from the provider's prompt cache (`cacheRead`).
    pub cached_tokens: u64,
    /// Tokens written to the prompt cache (`cacheWrite`).
    pub cache_write_tokens: u64,
    /// The gateway's estimate of each call's prompt.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub prompt_estimates: Vec<u64>,
    /// `ok`, or the error that ended the turn.
    pub outcome: String,
}

/// A compaction the turn ran or asked for.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CompactionTrace {
    /// `auto`, `overflow`, `preflight` or `manual`.
    pub trigger: String,
    /// The engine id, or `runtime`.
    pub by: String,
    /// Tokens before.
    pub tokens_before: u64,
    /// Tokens after, when reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_after: Option<u64>,
    /// How long it took (ms).
    pub ms: f64,
}

/// Summarizer calls observed while the turn ran (process-wide).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SummarizerTrace {
    /// The summarizer's name (`extractive`, `llm`, ...).
    pub summarizer: String,
    /// Calls that succeeded.
    pub ok: u64,
    /// Calls that failed.
    pub failed: u64,
    /// Their time (ms).
    pub ms: f64,
}

/// The LLM summarizer's circuit breaker when it was not closed at the end of a turn: while it
/// is open, compaction summarizes extractively (the turn's summaries are not the model's).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BreakerTrace {
    /// `open` or `halfOpen`.
    pub state: String,
    /// Failures in a row that it counts.
    pub consecutive_failures: u32,
    /// When it opened (epoch ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub opened_at_ms: Option<u64>,
    /// The failure that opened it (at most 300 characters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

impl BreakerTrace {
    /// The breaker persisted under `state_dir` when it is not closed (`None`: closed, never
    /// tripped, or its file unreadable, which the summarizer itself treats as closed).
    pub fn read(state_dir: &Path) -> Option<BreakerTrace> {
        let path = clawctx_runtime::setup::summarizer_breaker_path(state_dir);
        let text = std::fs::read_to_string(path).ok()?;
        let snap: clawctx_model::BreakerSnapshot = serde_json::from_str(&text).ok()?;
        let state = match snap.state {
            clawctx_model::BreakerState::Closed => return None,
            clawctx_model::BreakerState::Open => "open",
            clawctx_model::BreakerState::HalfOpen => "halfOpen",
        };
        Some(BreakerTrace {
            state: state.into(),
            consecutive_failures: snap.consecutive_failures,
            opened_at_ms: snap.opened_at_ms,
            last_error: snap.last_error.map(|e| e.chars().take(300).collect()),
        })
    }
}

/// The engine that served a turn, and why it was that one.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EngineServed {
    /// The engine that answered.
    pub id: String,
    /// The engine the config selects, when it differs or is known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selected: Option<String>,
    /// Why this engine answered, in words.
    pub reason: String,
}

/// One turn's trace.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct TurnTrace {
    /// The session key.
    pub session_key: String,
    /// The turn's number in the session's trace (1, 2, ...; given by the store).
    pub turn: u64,
    /// When the turn's (last) assembly was made (epoch ms).
    pub at_ms: i64,
    /// `turn` (a chat completion) or `engine-api` (`POST /v1/engine/assemble`).
    pub source: String,
    /// The session id the engine was called with.
    pub session_id: String,
    /// Who served it.
    pub engine: EngineServed,
    /// The `tokenBudget` the engine got.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_budget: Option<u64>,
    /// History messages the engine was given.
    pub history_messages: u64,
    /// `assemble` calls in the turn (the parts are the last one's).
    pub assemble_calls: u64,
    /// The parts sent, in order (the system prompt addition first).
    pub parts: Vec<TracePart>,
    /// The gateway's count of the parts.
    pub gateway_tokens: u64,
    /// The engine's own `estimatedTokens` (0: none given).
    pub engine_estimate: u64,
    /// `contextProjection.epoch` of the assembly, when the engine gives one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epoch: Option<String>,
    /// What was left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub left_out: Option<LeftOut>,
    /// The model's side (turns only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<ModelTrace>,
    /// Compactions the turn ran or asked for.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub compactions: Vec<CompactionTrace>,
    /// Summarizer calls while it ran.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub summarizer: Vec<SummarizerTrace>,
    /// The LLM summarizer's circuit breaker at the turn's end, when it was not closed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summarizer_breaker: Option<BreakerTrace>,
    /// The runtime's warnings for the turn.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub runtime_warnings: Vec<String>,
}

/// Now, in milliseconds since the epoch (what every record and event is stamped with).
pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
