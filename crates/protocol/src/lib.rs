//! Wire types of the OpenClaw context-engine contract.
//!
//! Everything that crosses a process or HTTP boundary is defined here, once, so that an
//! in-process Rust engine and an out-of-process plugin see byte-for-byte the same JSON. The
//! names are OpenClaw's TypeScript names (camelCase); enum values are the exact strings the
//! contract uses. Types that model open records (messages, runtime context, config) keep every
//! field they do not know in an `extra` map, so a round trip through clawctx never loses data.
//!
//! With the `schema` feature every wire type also implements `schemars::JsonSchema` (the
//! gateway's OpenAPI document is generated from these types).
//!
//! This crate holds data only: no I/O, no async, no policy. Behaviour lives in
//! `clawctx-engine` and above.

pub mod info;
pub mod lifecycle;
pub mod message;
pub mod runtime_context;
pub mod runtime_settings;
#[cfg(feature = "schema")]
mod schema;
pub mod transcript;

pub use info::*;
pub use lifecycle::*;
pub use message::*;
pub use runtime_context::*;
pub use runtime_settings::*;

/// An open JSON object: the `extra` bag of every record type.
pub type JsonMap = serde_json::Map<String, serde_json::Value>;
