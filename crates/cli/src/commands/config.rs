//! `clawctx config path|get|set|unset`.

use std::process::ExitCode;

use clap::{Args, Subcommand};
use clawctx_config::parse_cli_value;

use crate::global::GlobalArgs;

/// `config` arguments.
#[derive(Debug, Args)]
pub struct ConfigArgs {
    #[command(subcommand)]
    action: ConfigAction,
}

#[derive(Debug, Subcommand)]
enum ConfigAction {
    /// Print the config file path.
    Path,
    /// Print the value at a dotted key (JSON).
    Get {
        /// e.g. plugins.slots.contextEngine
        key: String,
    },
    /// Set a dotted key. The value is JSON5 when it parses (true, 42, {a: 1}), else a string.
    Set {
        /// e.g. plugins.slots.contextEngine
        key: String,
        /// e.g. lossless
        value: String,
    },
    /// Remove a dotted key.
    Unset {
        /// e.g. plugins.slots.contextEngine
        key: String,
    },
}

/// Runs `config`.
pub fn run(global: &GlobalArgs, args: ConfigArgs) -> anyhow::Result<ExitCode> {
    match args.action {
        ConfigAction::Path => {
            println!("{}", global.config_path().display());
        }
        ConfigAction::Get { key } => {
            let config = global.load_config()?;
            match config.get(&key)? {
                Some(v) => println!("{}", serde_json::to_string_pretty(v)?),
                None => {
                    eprintln!("{key} is not set in {}", config.path().display());
                    return Ok(ExitCode::from(1));
                }
            }
        }
        ConfigAction::Set { key, value } => {
            let mut config = global.load_config()?;
            config.set(&key, parse_cli_value(&value))?;
            config.save()?;
            println!("set {key} in {}", config.path().display());
        }
        ConfigAction::Unset { key } => {
            let mut config = global.load_config()?;
            match config.unset(&key, false)? {
                Some(_) => {
                    config.save()?;
                    println!("removed {key} from {}", config.path().display());
                }
                None => println!("{key} was not set"),
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
