//! Flags every command shares: where the state and the config are.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use clawctx_config::ConfigFile;

/// Global flags.
#[derive(Debug, Clone, Args)]
pub struct GlobalArgs {
    /// Config file (JSON5; an existing openclaw.json works). Default: <state dir>/clawctx.json.
    #[arg(long, global = true, value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// State directory. Default: $CLAWCTX_STATE_DIR, else ~/.clawctx.
    #[arg(long, global = true, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
}

impl GlobalArgs {
    /// The state directory in effect.
    pub fn state_dir(&self) -> PathBuf {
        self.state_dir
            .clone()
            .unwrap_or_else(clawctx_config::state_dir)
    }

    /// The config path in effect.
    pub fn config_path(&self) -> PathBuf {
        self.config
            .clone()
            .unwrap_or_else(|| self.state_dir().join("clawctx.json"))
    }

    /// Loads the config file (missing = empty).
    pub fn load_config(&self) -> anyhow::Result<ConfigFile> {
        let path = self.config_path();
        ConfigFile::load(&path)
            .with_context(|| format!("cannot read the config file {}", path.display()))
    }

    /// The state directory in effect, created when absent and checked writable: the commands
    /// that write there (sessions, the lossless store, locks) call this first, so a read-only
    /// state dir is one clear error at start, naming the directory, rather than a failure deep
    /// inside the first turn. (A full disk is not refused here: space may return while a
    /// gateway runs, and each write says so when it fails.)
    pub fn writable_state_dir(&self) -> anyhow::Result<PathBuf> {
        let dir = self.state_dir();
        let hint = "set --state-dir or CLAWCTX_STATE_DIR to a writable directory";
        if let Err(e) = std::fs::create_dir_all(&dir) {
            anyhow::bail!(
                "the state directory {} cannot be created: {} ({hint})",
                dir.display(),
                io_reason(&e)
            );
        }
        let probe = dir.join(format!(".clawctx-write-check-{}", std::process::id()));
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&probe)
        {
            Ok(f) => {
                drop(f);
                let _ = std::fs::remove_file(&probe);
                Ok(dir)
            }
            Err(e) => anyhow::bail!(
                "the state directory {} is not writable: {} ({hint})",
                dir.display(),
                io_reason(&e)
            ),
        }
    }

    /// The directory of agent `agent_id` inside the state dir.
    pub fn agent_dir(&self, agent_id: &str) -> PathBuf {
        self.state_dir().join("agents").join(agent_id)
    }
}

/// What an I/O error means for a directory we must write, in words (`read-only file system`).
fn io_reason(e: &std::io::Error) -> String {
    match e.raw_os_error() {
        Some(30) => "read-only file system".into(),
        Some(13) | Some(1) => "permission denied".into(),
        Some(28) => "no space left on device".into(),
        _ => e.to_string(),
    }
}
