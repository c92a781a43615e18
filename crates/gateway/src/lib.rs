//! `clawctx-gateway`: the context engine as a long-running service.
//!
//! One process keeps the engine, its stores and plugin processes warm across requests, so an
//! agent in any language (or any OpenAI client, by changing its base URL) gets clawctx's
//! context management without paying for a process start per turn. The gateway is an axum
//! server over an [`clawctx_runtime::AgentRuntime`]: it knows HTTP, auth, limits, metrics and
//! shutdown, and nothing of how turns, engines or stores work inside.
//!
//! - [`config`]: the `gateway` config section (OpenClaw's keys and defaults) and the startup
//!   refusals (no token off loopback).
//! - [`lock`]: one gateway per state dir (an OS advisory lock whose file names the holder).
//! - [`server`]: the router, its layers (request id, trace, the site check that refuses a
//!   foreign `Host` or `Origin`, CORS, deadline, body limit, bearer auth, errors as JSON),
//!   `/healthz`, `/readyz`, `/metrics`, and the serve loop with graceful shutdown.
//! - [`metrics`]: the Prometheus registry.
//! - [`lanes`]: one turn at a time per session, with a bounded queue.
//! - [`api_error`]: OpenAI-shaped error responses and the JSON extractor that takes only
//!   `application/json` and names bad fields.
//! - [`status`]: what `clawctx gateway status` reports.
//! - [`holding`]: which engine holds a session and its compactions, one rule for every list.
//! - `openai`: `/v1/chat/completions` (plain and SSE) and `/v1/models`; `chat_input` reads
//!   what a request asks of its turn (prompt or tool results, system messages, client tools,
//!   sampling, images).
//! - `engine_api`: the engine's lifecycle methods and the session list over HTTP;
//!   `session_files` decides which files a call may name (the session's own transcript, or
//!   under `gateway.engineApi.transcriptRoots`).
//! - `recall`: the recall routes, over the lossless engine's own store (the one store the
//!   gateway, its dashboard and its MCP server read).
//! - [`openapi`]: the route table the router is built from and `/openapi.json` generated from it.
//! - [`dashboard`]: the web dashboard at `/` (embedded assets, its JSON endpoints, live events).
//! - [`mcp`]: recall over the Model Context Protocol, at `/mcp` and for `clawctx mcp` (stdio).
//! - [`trace`]: the per-turn trace in the state dir (what the model saw on every turn and
//!   why), its JSON routes, and the reader `clawctx sessions trace` uses.
//!
//! The binary side (building the runtime from config with every engine and plugin, the
//! signals, the lock's lifetime) is `clawctx gateway` in `crates/cli`.

pub mod api_error;
mod chat_input;
pub mod config;
pub mod dashboard;
mod engine_api;
mod engine_store;
pub mod error;
#[doc(hidden)]
pub mod fuzzing;
pub mod holding;
pub mod lanes;
pub mod lock;
pub mod mcp;
pub mod metrics;
mod openai;
pub mod openapi;
mod recall;
mod recall_args;
pub mod server;
mod session_files;
pub mod status;
pub mod trace;
mod validate;

pub use config::{GatewayConfig, Overrides, Token};
pub use error::{GatewayError, Result};
pub use lock::{LockInfo, StateLock};
pub use server::{Gateway, GatewayParts};
pub use status::{status, GatewayStatus};
