//! The context-engine contract and its core machinery.
//!
//! This crate is what every engine and every host stands on: the async [`ContextEngine`]
//! trait, the owner-scoped registry with slot selection and the process quarantine, the guard
//! that falls back to `legacy` when an engine fails, host-param projection, host-requirement
//! checks, the `runtimeSettings` builder, the built-in `legacy` engine, and the runtime's
//! built-in summarization compaction and history pipeline that `legacy` relies on.
//!
//! It knows nothing of HTTP, processes or SQL: plugin processes, model providers, transcripts on
//! disk and the lossless store live in the crates above it.

pub mod abort;
pub mod compaction;
pub mod engine;
pub mod error;
pub mod guard;
pub mod health_mirror;
pub mod hooks;
pub mod host;
pub mod legacy;
pub mod logical_turn;
pub mod pipeline;
pub mod projection;
pub mod registry;
pub mod resolve;
pub mod runtime_settings;

pub use abort::{AbortController, AbortSignal};
pub use engine::*;
pub use error::EngineError;
pub use guard::GuardedEngine;
pub use health_mirror::{HealthMirror, ListedQuarantine};
pub use hooks::{HookDispatcher, HookOutput};
pub use legacy::LegacyEngine;
pub use logical_turn::{LogicalTurnEngines, LogicalTurnLease, TurnRecorderState};
pub use registry::{
    factory, global_registry, ContextEngineRegistry, EngineLogger, Factory, FactoryContext,
    Lifecycle, LogLevel, QuarantineRecord, RegisterOptions, RegisterOutcome,
};
pub use resolve::{Resolved, SelectionReason};
