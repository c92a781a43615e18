//! The embedded runners: the Node runner + SDK and the Python runner + SDK are compiled into
//! the binary (`include_str!`) and written to a runtime directory at spawn, so installing a
//! plugin never needs an extra install step for the runner.
//!
//! jiti (vendored under `sdk/node/vendor/jiti`, 1.7 MB) is written for every Node plugin: it
//! loads TypeScript entries, and it is the fallback when Node's own loader refuses a
//! JavaScript entry that OpenClaw's loader (jiti, native first) accepts. It is written once
//! per runtime directory; the runner only loads it when an entry needs it.
//!
//! The directory name carries a hash of the contents, so different clawctx versions never
//! share files; files are written with temp file + rename, so concurrent hosts never see a
//! half-written runner.

use std::path::{Path, PathBuf};

use crate::error::PluginError;

/// Node runner files, relative to the node directory.
pub const NODE_FILES: &[(&str, &str)] = &[
    ("runner.mjs", include_str!("../../../sdk/node/runner.mjs")),
    ("loader.mjs", include_str!("../../../sdk/node/loader.mjs")),
    (
        "plugin-sdk/core.cjs",
        include_str!("../../../sdk/node/plugin-sdk/core.cjs"),
    ),
    (
        "plugin-sdk/core.mjs",
        include_str!("../../../sdk/node/plugin-sdk/core.mjs"),
    ),
    (
        "plugin-sdk/plugin-entry.cjs",
        include_str!("../../../sdk/node/plugin-sdk/plugin-entry.cjs"),
    ),
    (
        "plugin-sdk/plugin-entry.mjs",
        include_str!("../../../sdk/node/plugin-sdk/plugin-entry.mjs"),
    ),
    (
        "plugin-sdk/session-transcript-runtime.cjs",
        include_str!("../../../sdk/node/plugin-sdk/session-transcript-runtime.cjs"),
    ),
    (
        "plugin-sdk/session-transcript-runtime.mjs",
        include_str!("../../../sdk/node/plugin-sdk/session-transcript-runtime.mjs"),
    ),
    (
        "plugin-sdk/index.mjs",
        include_str!("../../../sdk/node/plugin-sdk/index.mjs"),
    ),
];

/// The vendored jiti, relative to the node directory (see `sdk/node/vendor/jiti/VENDORED.md`).
pub const NODE_JITI_FILES: &[(&str, &str)] = &[
    (
        "vendor/jiti/LICENSE",
        include_str!("../../../sdk/node/vendor/jiti/LICENSE"),
    ),
    (
        "vendor/jiti/package.json",
        include_str!("../../../sdk/node/vendor/jiti/package.json"),
    ),
    (
        "vendor/jiti/lib/jiti.mjs",
        include_str!("../../../sdk/node/vendor/jiti/lib/jiti.mjs"),
    ),
    (
        "vendor/jiti/lib/jiti.cjs",
        include_str!("../../../sdk/node/vendor/jiti/lib/jiti.cjs"),
    ),
    (
        "vendor/jiti/dist/jiti.cjs",
        include_str!("../../../sdk/node/vendor/jiti/dist/jiti.cjs"),
    ),
    (
        "vendor/jiti/dist/babel.cjs",
        include_str!("../../../sdk/node/vendor/jiti/dist/babel.cjs"),
    ),
];

/// Python runner files, relative to the python directory (which goes on `PYTHONPATH`).
pub const PYTHON_FILES: &[(&str, &str)] = &[
    (
        "clawctx_plugin/__init__.py",
        include_str!("../../../sdk/python/clawctx_plugin/__init__.py"),
    ),
    (
        "clawctx_plugin/runner.py",
        include_str!("../../../sdk/python/clawctx_plugin/runner.py"),
    ),
];

fn content_hash() -> u64 {
    // FNV-1a over every embedded file: stable across builds of the same sources. Computed once
    // per process (jiti makes it a couple of megabytes).
    static HASH: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *HASH.get_or_init(|| {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for (name, text) in NODE_FILES.iter().chain(NODE_JITI_FILES).chain(PYTHON_FILES) {
            for b in name.bytes().chain(text.bytes()) {
                h ^= u64::from(b);
                h = h.wrapping_mul(0x0100_0000_01b3);
            }
        }
        h
    })
}

/// The default runtime directory: `<tmp>/clawctx-sdk-<version>-<hash>`.
pub fn default_runtime_dir() -> PathBuf {
    std::env::temp_dir().join(format!(
        "clawctx-sdk-{}-{:016x}",
        env!("CARGO_PKG_VERSION"),
        content_hash()
    ))
}

fn write_files(dir: &Path, files: &[(&str, &str)]) -> Result<(), PluginError> {
    for (rel, text) in files {
        let path = dir.join(rel);
        if std::fs::read_to_string(&path).is_ok_and(|t| t == *text) {
            continue;
        }
        let parent = path.parent().unwrap_or(dir);
        std::fs::create_dir_all(parent).map_err(|e| {
            PluginError::Install(format!("cannot create {}: {e}", parent.display()))
        })?;
        let mut tmp = tempfile::NamedTempFile::new_in(parent).map_err(|e| {
            PluginError::Install(format!("cannot write in {}: {e}", parent.display()))
        })?;
        std::io::Write::write_all(&mut tmp, text.as_bytes())
            .map_err(|e| PluginError::Install(format!("cannot write {}: {e}", path.display())))?;
        tmp.persist(&path).map_err(|e| {
            PluginError::Install(format!("cannot write {}: {}", path.display(), e.error))
        })?;
    }
    Ok(())
}

/// Writes the Node runner under `runtime_dir/node` and returns the path of `runner.mjs`.
pub fn install_node_runner(runtime_dir: &Path) -> Result<PathBuf, PluginError> {
    let dir = runtime_dir.join("node");
    write_files(&dir, NODE_FILES)?;
    Ok(dir.join("runner.mjs"))
}

/// Writes the vendored jiti under `runtime_dir/node/vendor/jiti` (for TypeScript entries and
/// the fallback loader of JavaScript entries).
pub fn install_node_jiti(runtime_dir: &Path) -> Result<(), PluginError> {
    // Written (or found intact) once per directory and process: every Node plugin start asks,
    // and comparing 1.7 MB each time would be waste.
    static DONE: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());
    let dir = runtime_dir.join("node");
    if DONE.lock().is_ok_and(|d| d.contains(&dir)) && dir.join(NODE_JITI_FILES[0].0).is_file() {
        return Ok(());
    }
    write_files(&dir, NODE_JITI_FILES)?;
    if let Ok(mut d) = DONE.lock() {
        d.push(dir);
    }
    Ok(())
}

/// The directory jiti caches `plugin_id`'s compiled TypeScript in:
/// `runtime_dir/jiti-cache/<plugin id>`, created private to this user (0700). jiti checks a
/// hash of each source file against its cached output, so a changed source is compiled again.
pub fn jiti_cache_dir(runtime_dir: &Path, plugin_id: &str) -> Result<PathBuf, PluginError> {
    use std::os::unix::fs::DirBuilderExt;
    let name: String = plugin_id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect();
    let name = if name.is_empty() || name.starts_with('.') {
        format!("_{name}")
    } else {
        name
    };
    let dir = runtime_dir.join("jiti-cache").join(name);
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .map_err(|e| PluginError::Install(format!("cannot create {}: {e}", dir.display())))?;
    Ok(dir)
}

/// Writes the Python SDK under `runtime_dir/python` and returns that directory (for
/// `PYTHONPATH`).
pub fn install_python_runner(runtime_dir: &Path) -> Result<PathBuf, PluginError> {
    let dir = runtime_dir.join("python");
    write_files(&dir, PYTHON_FILES)?;
    Ok(dir)
}
