//! Model providers and the LLM-backed summarizer.
//!
//! Everything in clawctx that needs a model goes through the [`ModelProvider`] trait: the
//! runtime's agent loop, the LLM summarizer, `replay`. Three providers implement it:
//! [`OpenAiProvider`] (Chat Completions; OpenAI, vLLM, llama.cpp server, Ollama),
//! [`AnthropicProvider`] (Messages) and [`ScriptedProvider`] (replies from a script, for tests,
//! demos and replay). Requests and results use the contract's message model (§2), never a
//! provider's wire format. Failures come back as a [`ModelError`] whose variant tells the caller
//! what to do, and maps to a runtimeSettings reason code (§6).
//!
//! Providers are configured in OpenClaw's shape under `models.providers.<id>` ([`config`]).
//! [`LlmSummarizer`] implements `clawctx_summarize::Summarizer` on any provider, behind a
//! [`SpendGuard`] and a persisted [`CircuitBreaker`].
//!
//! This crate knows nothing of engines: it turns messages into a reply and text into a summary.
//! [`prefix_cache`] models the prompt cache a provider keeps (the cached tokens it reports), for
//! the benches and the test mock model.

pub mod anthropic;
pub mod config;
mod error;
pub mod guard;
mod http;
pub mod openai;
pub mod prefix_cache;
mod provider;
pub mod scripted;
pub mod summarizer;
mod types;
mod wire;

pub use anthropic::AnthropicProvider;
pub use config::{
    process_env, ApiKind, KeySource, ModelSpec, ModelsConfig, ProviderConfig, ResolvedModel,
};
pub use error::ModelError;
pub use guard::{BreakerDecision, BreakerSnapshot, BreakerState, CircuitBreaker, SpendGuard};
pub use http::{ApiKey, HttpSettings, RetryPolicy};
pub use openai::OpenAiProvider;
pub use provider::ModelProvider;
pub use scripted::{Exhaustion, ScriptedProvider, ScriptedReply, ScriptedToolCall};
pub use summarizer::{summary_prompt, LlmSummarizer, SummaryPrompt};
pub use types::{
    prompt_cache_key, Completion, CompletionRequest, EventSender, Sampling, StopReason,
    StreamEvent, ToolChoice, ToolSpec,
};
