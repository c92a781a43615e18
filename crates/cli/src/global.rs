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

    /// The directory of agent `agent_id` inside the state dir.
    pub fn agent_dir(&self, agent_id: &str) -> PathBuf {
        self.state_dir().join("agents").join(agent_id)
    }
}
