//! One module per subcommand.

pub mod config;
pub mod doctor;
pub mod lcm;
pub mod plugins;
pub mod bench;
