//! Every integration test of `clawctx-cli`, as one test binary: each file beside this one is a
//! module here rather than a test target of its own. Each test binary links the whole
//! engine (and the tokenizer's tables, 32 MB), so one binary per file made a fresh
//! `cargo test --workspace` write over 9 GB and fill CI's disk; one per crate links once.
//!
//! One file's tests: `cargo test -p clawctx-cli --test suite <file>::`.

mod common;

mod bridge_e2e;
mod chat;
mod cli;
mod closed_pipe;
mod config_edit;
mod crash_campaign;
mod docs_examples;
mod doctor_json;
mod eval_config;
mod eval_judged;
mod gateway;
mod gateway_engine_files;
mod gateway_logs;
mod gateway_no_model;
mod gateway_pg;
mod gateway_pg_outage;
mod history_reach;
mod lcm;
mod lcm_migrate;
mod lcm_semantic;
mod mcp;
mod openclaw_real;
mod openclaw_real_turns;
mod pg_secrets;
mod plugin_load_errors;
mod plugin_run;
mod plugins;
mod plugins_engine_id;
mod read_only_state;
mod replay_engines;
mod run_file_tools;
mod runtime_commands;
mod secrets;
mod session_views;
mod sessions_trace;
mod summarizer;
mod test_layout;
