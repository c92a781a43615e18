//! Where the state lives: `$CLAWCTX_STATE_DIR`, else `~/.clawctx`.

use std::path::PathBuf;

/// The environment variable naming the state dir.
pub const STATE_DIR_ENV: &str = "CLAWCTX_STATE_DIR";

/// The state dir: `$CLAWCTX_STATE_DIR` when set and non-empty, else `~/.clawctx`, else
/// `./.clawctx` when no home directory is known.
pub fn state_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os(STATE_DIR_ENV).filter(|v| !v.is_empty()) {
        return PathBuf::from(dir);
    }
    match std::env::var_os("HOME").filter(|v| !v.is_empty()) {
        Some(home) => PathBuf::from(home).join(".clawctx"),
        None => PathBuf::from(".clawctx"),
    }
}

/// `<state dir>/clawctx.json`.
pub fn default_config_path() -> PathBuf {
    state_dir().join("clawctx.json")
}
