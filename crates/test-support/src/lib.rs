//! Test support shared by every crate's tests.
//!
//! - [`messages`]: deterministic conversation builders (chat, tool calls, huge messages);
//! - [`logs`]: a log sink that records registry/guard lines, and a capture of `tracing`
//!   events, so tests can assert exact text;
//! - [`test_engine`]: a scriptable engine (fails on chosen methods, counts calls, declares
//!   chosen info) for registry and guard tests;
//! - [`host`]: an in-memory host transcript with the runtime's built-in compaction, standing in
//!   for the real runtime where a test needs a host but not files;
//! - [`conformance`]: the one engine conformance suite, run against `legacy`, `lossless` and
//!   plugin engines alike;
//! - [`embed_model`]: where the real sentence model for semantic-recall tests is;
//! - [`pg`]: the PostgreSQL test server (`CLAWCTX_TEST_PG_URL`) and a fresh database per test;
//! - [`mock_model`]: a model that reports prefix caching as providers do (cached tokens of the
//!   longest prefix shared with an earlier request of the session), offline or on loopback;
//! - [`small_fs`]: a tiny `tmpfs` mounted by the test (out-of-space and read-only state dirs).
//!
//! Panicking is how a test fails, so this crate may `unwrap`/`expect` freely.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

pub mod conformance;
pub mod embed_model;
pub mod host;
pub mod logs;
pub mod messages;
pub mod mock_model;
pub mod pg;
pub mod small_fs;
pub mod test_engine;
