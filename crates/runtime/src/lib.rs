//! The clawctx agent runtime: the run loop that drives a context engine.
//!
//! For every user message the runtime persists the transcript, lets the selected engine
//! assemble the model's context within the token budget, calls the model (streaming), runs the
//! tool loop, hands the finished turn back to the engine, compacts when the contract says so,
//! and schedules maintenance. It also implements the host side of subagents, manual `/compact`,
//! provider-overflow recovery, a generic CLI-backend host, and `replay` of recorded
//! conversations through any engine.
//!
//! - [`AgentRuntime`] / [`RuntimeBuilder`]: the runtime and its settings ([`runtime`]).
//! - [`TurnRequest`] → [`TurnOutcome`]: one turn ([`turn`]); `/compact` is
//!   [`AgentRuntime::compact`].
//! - [`maintain`]: the per-sessionKey background maintenance lanes.
//! - [`hooks`]: plugin hooks (`api.on`) at the points of a turn, `/compact` and `/new`.
//! - [`subagent`]: spawn (isolated / fork) and end hooks.
//! - [`cli_backend`]: the generic CLI backend host and context projection.
//! - [`model`] and [`setup`]: model/backend selection and building a runtime from config.
//! - [`replay`]: feeding a recorded conversation through an engine with the scripted provider.
//!
//! It knows nothing of HTTP: providers come from `clawctx-model`, transcripts from
//! `clawctx-transcript`, engines from `clawctx-engine` and the crates that implement it.

pub mod cli_backend;
mod cli_turn;
mod engine_passes;
pub mod error;
mod history;
pub mod hooks;
pub mod maintain;
pub mod model;
pub mod outbox;
pub mod replay;
pub mod runtime;
pub mod setup;
pub mod subagent;
pub mod turn;
pub mod warm;

pub use error::{Result, RuntimeError};
pub use maintain::{MaintainJob, MaintenanceReason, MaintenanceScheduler, Scheduled};
pub use model::{select_backend, Backend, ModelBinding, UnconfiguredModel, NO_MODEL_PROVIDER};
pub use runtime::{AgentRuntime, Limits, RuntimeBuilder, SessionStatus};
pub use subagent::{SpawnRequest, SubagentHandle};
pub use turn::{
    AssembledView, CompactionRecord, ModelOptions, ModelledCache, TurnOutcome, TurnRequest,
};
