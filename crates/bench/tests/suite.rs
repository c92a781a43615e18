//! Every integration test of `clawctx-bench`, as one test binary: each file beside this one is a
//! module here rather than a test target of its own. Each test binary links the whole
//! engine (and the tokenizer's tables, 32 MB), so one binary per file made a fresh
//! `cargo test --workspace` write over 9 GB and fill CI's disk; one per crate links once.
//!
//! One file's tests: `cargo test -p clawctx-bench --test suite <file>::`.

mod bench_runner;
mod demo;
mod eval;
mod workload;
