//! One module per subcommand.

pub mod config;
pub mod doctor;
pub mod plugins;
pub mod bench;
