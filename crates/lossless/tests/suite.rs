//! Every integration test of `clawctx-lossless`, as one test binary: each file beside this one is a
//! module here rather than a test target of its own. Each test binary links the whole
//! engine (and the tokenizer's tables, 32 MB), so one binary per file made a fresh
//! `cargo test --workspace` write over 9 GB and fill CI's disk; one per crate links once.
//!
//! One file's tests: `cargo test -p clawctx-lossless --test suite <file>::`.

#[macro_use]
mod common;

mod assemble_twice;
mod backends;
mod background;
mod background_crash;
mod budget_split;
mod cache_stable;
mod commit_turn;
mod concurrent_open;
mod conformance;
mod crash;
mod host_overhead;
mod inspect_parity;
mod lossless;
mod migrate;
mod out_of_space;
mod overflow_compact;
mod pg_parity;
mod pg_tls;
mod power_loss;
mod prompt_recall;
mod props;
mod recall_methods;
mod semantic;
mod store;
mod store_threads;
