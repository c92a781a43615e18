//! Every integration test of `clawctx-embed`, as one test binary (the workspace's rule: one
//! binary per crate links once).
//!
//! One file's tests: `cargo test -p clawctx-embed --test suite <file>::`. The reference test
//! (`reference::`) needs `CLAWCTX_TEST_EMBED_MODEL="$(scripts/fetch-embed-model)"`.

mod common;

mod local;
mod reference;
mod remote;
mod resolve;
