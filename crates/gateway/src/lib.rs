//! `clawctx-gateway`: the context engine as a long-running service.
//!
//! One process keeps the engine, its stores and plugin processes warm across requests, so an
//! agent in any language (or any OpenAI client, by changing its base URL) gets clawctx's
//! context management without paying for a process start per turn. The gateway is an axum
//! server over an [`clawctx_runtime::AgentRuntime`]: it knows HTTP, auth, limits, metrics and
//! shutdown, and nothing of how turns, engines or stores work inside.
//!
//! The modules form no circle (`scripts/module-cycles crates/gateway/src`): `state` imports no
//! handler, `router` is the one module that names the handlers, and a handler imports the
//! state and the helpers, never another handler.
//!
//! - [`config`]: the `gateway` config section (OpenClaw's keys and defaults) and the startup
//!   refusals (no token off loopback).
//! - [`lock`]: one gateway per state dir (an OS advisory lock whose file names the holder).
//! - `server`: [`Gateway`]: binding, the serve loop and the graceful shutdown.
//! - `state`: what every handler shares, built from [`GatewayParts`].
//! - `router`: the route table and the router built from it, with its layers (request id,
//!   trace, the site check that refuses a foreign `Host` or `Origin`, CORS, deadline, body
//!   limit, bearer auth, errors as JSON); `openapi`: `/openapi.json` generated from the table.
//! - `metrics`: the Prometheus registry.
//! - `lanes`: one turn at a time per session, with a bounded queue.
//! - `api_error`: OpenAI-shaped error responses and the JSON extractor that takes only
//!   `application/json` and names bad fields.
//! - [`status`]: what `clawctx gateway status` reports.
//! - [`holding`]: which engine holds a session and its compactions, one rule for every list.
//! - The handlers: `ops` (`/healthz`, `/readyz`, `/metrics`); `openai` (`/v1/chat/completions`,
//!   plain and SSE, and `/v1/models`); `engine_api` (the engine's lifecycle methods and the
//!   session list over HTTP); `recall` (the recall routes); [`mcp`] (recall over the Model
//!   Context Protocol, at `/mcp` and for `clawctx mcp` on stdio); [`dashboard`] (the web
//!   dashboard at `/`: embedded assets, its JSON endpoints, live events); the trace's routes.
//! - What the handlers share: `validate` (checks of fields more than one API takes);
//!   `engine_store` (the lossless engine's own store, the one store the gateway, its dashboard
//!   and its MCP server read); `recall_args` (grep's modes, targets, orders); `openai_wire`
//!   (the chat endpoint's JSON shapes) and `chat_input` (what a request asks of its turn:
//!   prompt or tool results, system messages, client tools, sampling, images); `resend` (each
//!   session's last answer, for re-sent requests); `rollbacks` (prepared spawns' rollbacks);
//!   `session_files` (which files an engine-API call may name: the session's own transcript,
//!   or under `gateway.engineApi.transcriptRoots`).
//! - [`trace`]: the per-turn trace in the state dir (what the model saw on every turn and
//!   why), produced by its watcher of every turn (which also keeps each session's last
//!   assembly and publishes live events), its JSON routes, and the reader
//!   `clawctx sessions trace` uses.
//!
//! The binary side (building the runtime from config with every engine and plugin, the
//! signals, the lock's lifetime) is `clawctx gateway` in `crates/cli`.

mod api_error;
mod chat_input;
pub mod config;
pub mod dashboard;
mod engine_api;
mod engine_store;
pub mod error;
#[doc(hidden)]
pub mod fuzzing;
pub mod holding;
mod lanes;
pub mod lock;
pub mod mcp;
mod metrics;
mod openai;
mod openai_wire;
mod openapi;
mod ops;
mod recall;
mod recall_args;
mod resend;
mod rollbacks;
mod router;
mod server;
mod session_files;
mod state;
pub mod status;
pub mod trace;
mod validate;

pub use config::{GatewayConfig, Overrides, Token};
pub use error::{GatewayError, Result};
pub use lock::{LockInfo, StateLock};
pub use server::Gateway;
pub use state::GatewayParts;
pub use status::{status, GatewayStatus};
