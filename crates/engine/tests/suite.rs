//! Every integration test of `clawctx-engine`, as one test binary: each file beside this one is a
//! module here rather than a test target of its own. Each test binary links the whole
//! engine (and the tokenizer's tables, 32 MB), so one binary per file made a fresh
//! `cargo test --workspace` write over 9 GB and fill CI's disk; one per crate links once.
//!
//! One file's tests: `cargo test -p clawctx-engine --test suite <file>::`.

mod assemble_checks;
mod compaction;
mod contract;
mod guard_unavailable;
mod health_mirror;
mod logical_turn;
mod registry;
