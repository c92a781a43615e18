//! One module per subcommand.

pub mod config;
pub mod doctor;
pub mod lcm;
pub mod chat;
pub mod replay;
pub mod run;
pub mod sessions;
pub mod plugins;
pub mod bench;
pub mod eval;
pub mod demo;
