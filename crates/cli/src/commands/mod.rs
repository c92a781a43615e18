//! One module per subcommand.

pub mod bench;
pub mod chat;
pub mod config;
pub mod demo;
pub mod doctor;
pub mod eval;
pub mod gateway;
pub mod lcm;
pub mod mcp;
pub mod plugins;
pub mod replay;
pub mod run;
pub mod sessions;
