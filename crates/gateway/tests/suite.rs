//! Every integration test of `clawctx-gateway`, as one test binary: each file beside this one is a
//! module here rather than a test target of its own. Each test binary links the whole
//! engine (and the tokenizer's tables, 32 MB), so one binary per file made a fresh
//! `cargo test --workspace` write over 9 GB and fill CI's disk; one per crate links once.
//!
//! One file's tests: `cargo test -p clawctx-gateway --test suite <file>::`.

mod browser_support;
mod common;
mod dashboard_fixture;

mod background_compaction;
mod bad_input;
mod bridge_node;
mod chat;
mod client_tools;
mod dashboard;
mod dashboard_browser;
mod engine_api;
mod engine_call_disconnect;
mod engine_extras;
mod hardening;
mod huge_retry_after;
mod maintain_beside_assemble;
mod metrics;
mod openai_client_retries;
mod ops;
mod prompt_cache;
mod recall_scope;
mod recall_store;
mod resend;
mod semantic_recall;
mod site_check;
mod site_check_browser;
mod trace_browser;
mod turn_trace;
