//! Every integration test of `clawctx-runtime`, as one test binary: each file beside this one is a
//! module here rather than a test target of its own. Each test binary links the whole
//! engine (and the tokenizer's tables, 32 MB), so one binary per file made a fresh
//! `cargo test --workspace` write over 9 GB and fill CI's disk; one per crate links once.
//!
//! One file's tests: `cargo test -p clawctx-runtime --test suite <file>::`.

mod common;

mod delivery;
mod early_answer;
mod out_of_space;
mod outbox_order;
mod overflow_prompt;
mod plugin_hooks;
mod plugin_transcript_delta;
mod replay;
mod replay_plugin_llm;
mod retried_prompt;
mod runtime;
mod scenario;
mod successor;
mod summarizer;
mod system_messages;
mod turn_contract;
mod warm_sessions;
