//! `clawctx-bench`: instruments that measure every context engine the same way.
//!
//! - [`workload`]: a deterministic, seeded generator of OpenClaw-shaped conversations (chat,
//!   tool-heavy, mixed), streamed to a session file of any size (format:
//!   `docs/workload-format.md`) or consumed turn by turn in memory.
//! - [`runner`]: `clawctx bench` — feeds a workload through each engine's lifecycle as a host
//!   does and reports latencies, compactions, summarizer spend, bytes on disk and peak memory.
//! - [`locomo`] and [`eval`]: `clawctx eval locomo` — replays LoCoMo conversations through each
//!   engine at each budget and scores, per question, whether the evidence is in the assembled
//!   context, whether the engine's recall search finds it, and whether the answer is in context.
//! - [`demo`]: `clawctx demo` — the lossless engine's main job, offline, in one command.
//! - [`crash`]: `clawctx bench crash` — the crash campaign: the lossless engine killed with
//!   SIGKILL at random moments on each backend, every acknowledged message checked after each
//!   restart.
//! - [`stores`]: `clawctx bench stores` — the lossless store on SQLite and PostgreSQL side by
//!   side: ingest, assembly, search and size at each store size.
//!
//! The pieces the instruments share: [`host::BenchHost`] (a transcript plus the runtime's
//! built-in compaction), [`engines`] (opening an engine with a chosen summarizer),
//! [`summarizer`] (the fake head-10% summarizer and a counting wrapper) and [`stats`].

pub mod crash;
pub mod demo;
pub mod engines;
pub mod error;
pub mod eval;
pub mod host;
pub mod judged;
pub mod locomo;
pub mod rng;
pub mod runner;
pub mod stats;
pub mod stores;
pub mod summarizer;
pub mod workload;

pub use error::{BenchError, Result};
pub use runner::{run_bench, BenchOptions, BenchReport, EngineReport, WorkloadSource};
pub use workload::{write_jsonl, JsonlTurns, Turn, Workload, WorkloadKind, WorkloadSpec};

/// A fresh temporary directory (removed when dropped), for callers that have no place of
/// their own for the engines' files.
pub fn temp_dir() -> std::io::Result<tempfile::TempDir> {
    tempfile::Builder::new().prefix("clawctx-bench-").tempdir()
}
