//! `clawctx-lossless`: the lossless DAG context engine (engine id `lossless`).
//!
//! Every message is stored once in SQLite (bundled, WAL, a contentless FTS5 index of each
//! message's distinct words, large payloads once per content); older ranges of the active
//! context are replaced by summaries that form a DAG (leaf summaries of raw messages, condensed
//! summaries of summaries); assembly returns the fresh tail and then the newest frontier items
//! that fit the token budget, plus stored messages that match the prompt; recall tools
//! (`lcm_grep`, `lcm_describe`, `lcm_expand`) reach everything that was summarized away.
//!
//! Module map, by layer (ARCHITECTURE.md has the file-by-file map):
//! - the engine and its callers' surface: `engine` (the `ContextEngine`, factory and
//!   registration), `tools` (the agent tools), `api` (async library API for the CLI, and
//!   [`Recall`]: recall and inspection over a running engine's own store), `backend` (the
//!   [`Backend`] trait every store implements, which names no database type), `config`,
//!   `policy` (ignored / read-only session globs), [`error`], [`migrate`] (copying a SQLite
//!   store into PostgreSQL);
//! - `core`: the logic written once for every store: compaction planning and rounds, the
//!   budgeted packer, the `<recalled>` block, ranking, the recall reports, the dashboard's
//!   views ([`inspect`]), doctor checks, the message codec and index terms, recall by meaning
//!   ([`semantic`]);
//! - `sqlite` (the embedded file: its store, read and checkpoint threads, schema, and each
//!   feature's queries) and [`pg`] (the PostgreSQL store, the same features in its dialect).
//!
//! The public surface is what other crates use (the engine and its factory, [`Recall`], the
//! stores, the reports, the config); `core` and `sqlite` are public only with the `internals`
//! feature, for the crate's tests, benches and the fuzz targets.
//!
//! # Configuration (`plugins.entries.lossless.config`)
//!
//! | key | default | meaning |
//! |---|---|---|
//! | `enabled` | `true` | store anything at all |
//! | `databasePath` (`dbPath`) | `<agentDir>/lossless.db`, else `$CLAWCTX_STATE_DIR/lossless.db` | SQLite file |
//! | `database` | none | the store: a `postgres://` URL (PostgreSQL, shared by several gateways) or a SQLite path |
//! | `databaseEnv` | none | name of an environment variable holding that URL (keeps the password out of the config) |
//! | `poolSize` | `16` | PostgreSQL connections at most |
//! | `durability` | `normal` | SQLite: `normal` (a commit is synced at the next checkpoint: an OS crash or power cut can lose the last ones) or `full` (every commit synced before it is acknowledged); see `BENCHMARKS.md` §11 for the cost |
//! | `contextThreshold` | `0.8` | compact when frontier tokens > threshold × budget |
//! | `lowWaterRatio` | `0.5` | compaction goes down to this fraction of the budget |
//! | `backgroundCompaction` | `true` | threshold compaction runs in background maintenance after the reply (`turnMaintenanceMode: "background"`); a turn compacts in the foreground only over the whole budget; `false`: inline, the reply waits |
//! | `defaultTokenBudget` | `128000` | budget when the host gives none |
//! | `freshTailCount` | `64` | newest raw messages never compacted |
//! | `freshTailMaxTokens` | `0` (= budget/16) | token cap of that tail (the newest user message and what follows it always stay raw); at a small budget it lets compaction bring the frontier well under the threshold, so the context then grows by appending for many turns (prompt cache) |
//! | `leafChunkTokens` | `20000` | max source tokens per leaf summary (and per condensed chunk) |
//! | `leafTargetTokens` | `2400` | leaf summary target (≤ 35% of source, ≤ budget/10, ≥ 192) |
//! | `condensedTargetTokens` | `2000` | condensed summary target (≤ 50% of source, ≤ budget/10, ≥ 128) |
//! | `leafMinFanout` | `8` | min messages in a partial leaf chunk (unless forced) |
//! | `condensedMinFanout` | `4` | min same-depth summaries condensed together |
//! | `condensedMinFanoutHard` | `2` | fanout under pressure (no depth cap) |
//! | `incrementalMaxDepth` | `3` | deepest summary routine condensation creates (`-1` unlimited) |
//! | `summaryPrefixTargetTokens` | `0` (= `min(leafChunkTokens, budget/4)`) | condense when summaries outside the tail exceed this |
//! | `maxCompactionRounds` | `8` | summarize-and-commit rounds per compaction |
//! | `summaryConcurrency` | `4` | independent summaries in flight |
//! | `minSalientRetention` | `0.25` | fraction of the source's salient terms (capped at maxTokens/16 terms) a summary must keep |
//! | `summaryMaxOverageFactor` | `1.5` | a summary may exceed its target by this factor |
//! | `summaryMaxCallsPerWindow` / `summaryCallWindowMs` | `240` / `600000` | spend guard (then extractive only) |
//! | `circuitBreakerThreshold` / `circuitBreakerCooldownMs` | `3` / `1800000` | consecutive failures that open the breaker (extractive only meanwhile) |
//! | `ignoreSessionPatterns` | `[]` | session-key globs never stored (`*` in a `:` segment, `**` across) |
//! | `readOnlySessionPatterns` (`statelessSessionPatterns`) | `[]` | globs served from the store, never written |
//! | `newSessionRetainDepth` | `2` | on `/new`, summaries of depth ≥ this carry over (negative: none) |
//! | `maxExpandTokens` | `4000` | default `lcm_expand` cap |
//! | `busyTimeoutMs` | `5000` | SQLite busy timeout, then a clear `Busy` error |
//! | `grepMaxScanRows` | `50000` | rows a regex grep scans at most |
//! | `customInstructions` | none | passed to every summary request |
//! | `largePayloadBytes` | `8192` | message texts this large are stored once per content (`0` = never) |
//! | `payloadRetentionDays` | none | large payloads older than this, once summarized, become a placeholder (`maintain`, `clawctx lcm prune`) |
//! | `promptRecallShare` | `0.25` | budget share kept for stored messages matching the prompt, quoted verbatim (`0` = off); the block also takes what the history leaves |
//! | `promptRecallMaxTokens` | `6000` | cap of the block (and of that share) |
//! | `promptRecallMaxMessages` | `40` | messages quoted at most |
//! | `cacheBlockShare` | `0.5` | when the context is full, share of the history budget dropped at once so the prompt's front (provider prompt cache) stays still for the next turns (`0` = drop one unit at a time) |

// The engine and its callers' surface.
mod api;

mod config;
mod engine;
pub mod error;
pub mod migrate;
mod policy;
mod tools;

// The layers: the logic written once (`core`), the two stores under it. Tests, benches and
// fuzz targets reach inside with the `internals` feature; other crates use the re-exports.
#[cfg(feature = "internals")]
pub mod core;
#[cfg(not(feature = "internals"))]
mod core;
pub mod pg;
#[cfg(feature = "internals")]
pub mod sqlite;
#[cfg(not(feature = "internals"))]
mod sqlite;

pub use crate::core::assemble::parse_summary_header;
pub use crate::core::backend::{AssembleRequest, Backend, BackendKind, CompactionLock};
pub use crate::core::compaction::{CompactionOptions, CompactionReport};
pub use crate::core::conv::{ConvKey, ConvRow};
pub use crate::core::doctor::StoreCheck;
pub use crate::core::doctor::{DagLevel, DoctorIssue, DoctorReport, StatusReport};
pub use crate::core::import::ImportReport;
pub use crate::core::prompt_recall::{is_recalled_block, quoted_ids, RecallHit};
pub use crate::core::recall::{
    DescribeReport, ExpandReport, ExpandedItem, GrepHit, GrepMode, GrepQuery, GrepReport, GrepSort,
    GrepTarget, MessageInfo, Scope, SummaryInfo,
};
pub use crate::core::retention::RetentionReport;
pub use crate::core::search::query_terms;
pub use crate::core::session::CarryReport;
pub use crate::core::{inspect, semantic};
pub use crate::sqlite::{LosslessStore, DEFAULT_BUSY_TIMEOUT_MS};
pub use api::{AssembledContext, IngestCount, Recall};
pub use config::{DatabaseUrl, Durability, LosslessConfig, RecallMethod, StoreLocation};
pub use engine::{lossless_factory, lossless_info, register, LosslessEngine};

/// The engine id (registered slot id and `info.id`).
pub const ENGINE_ID: &str = "lossless";
pub use error::LosslessError;
