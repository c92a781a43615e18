//! Every integration test of `clawctx-plugin`, as one test binary: each file beside this one is a
//! module here rather than a test target of its own. Each test binary links the whole
//! engine (and the tokenizer's tables, 32 MB), so one binary per file made a fresh
//! `cargo test --workspace` write over 9 GB and fill CI's disk; one per crate links once.
//!
//! One file's tests: `cargo test -p clawctx-plugin --test suite <file>::`.

mod common;

mod faults;
mod faults_hang;
mod host_time_not_plugin_time;
mod jiti_cache;
mod manifest_install;
mod manifest_openclaw;
mod node_hooks;
mod node_lazy_llm;
mod node_lifecycle;
mod node_load_errors;
mod node_loading;
mod node_openclaw_loading;
mod node_seed;
mod node_typescript;
mod over_budget_assemble;
mod plugin_env;
mod protocol_edges;
mod python_plugin;
