//! `clawctx`: the command-line face of the context engine.
//!
//! Commands are thin: they parse arguments, build the host pieces from the library crates and
//! print. Errors end here, as `anyhow` with context, printed once on stderr with a non-zero exit.

/// `println!` that cannot panic on a closed pipe (see [`out`]); shadows std's in every module
/// declared below.
macro_rules! println {
    () => { $crate::out::print_out(format_args!("\n")) };
    ($($arg:tt)*) => { $crate::out::print_out(format_args!("{}\n", format_args!($($arg)*))) };
}

/// `print!` that cannot panic on a closed pipe (see [`out`]).
macro_rules! print {
    ($($arg:tt)*) => { $crate::out::print_out(format_args!($($arg)*)) };
}

/// `eprintln!` that cannot panic when stderr is gone (see [`out`]).
macro_rules! eprintln {
    () => { $crate::out::print_err(format_args!("\n")) };
    ($($arg:tt)*) => { $crate::out::print_err(format_args!("{}\n", format_args!($($arg)*))) };
}

mod out;

mod commands;
mod engines;
mod file_tools;
mod global;

/// The agent loop hands every engine call its own copy of the history (the contract's params
/// own their messages), so a turn allocates and frees thousands of small strings; mimalloc
/// does that several times faster than the system allocator, with less fragmentation.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use clap::{Parser, Subcommand};

use crate::global::GlobalArgs;

/// clawctx: an OpenClaw-compatible context engine host.
#[derive(Debug, Parser)]
#[command(name = "clawctx", version, about, propagate_version = true)]
struct Cli {
    #[command(flatten)]
    global: GlobalArgs,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Check the selected context engine, host compatibility, quarantines and the config.
    Doctor(commands::doctor::DoctorArgs),
    /// Read and write the config file.
    Config(commands::config::ConfigArgs),
    /// Chat interactively (streaming; /compact, /new, /status, /quit).
    Chat(commands::chat::ChatArgs),
    /// Run one turn and print the reply (or --json).
    Run(commands::run::RunArgs),
    /// List, show and export sessions.
    Sessions(commands::sessions::SessionsArgs),
    /// Replay a recorded conversation through an engine, offline.
    Replay(commands::replay::ReplayArgs),
    /// Install, link, list, enable, disable and remove plugin engines.
    Plugins(commands::plugins::PluginsArgs),
    /// The lossless store: grep, embed, describe, expand, status, doctor, import, prune, migrate.
    Lcm(commands::lcm::LcmArgs),
    /// Recall over MCP on stdio: lcm_grep, lcm_describe, lcm_expand, sessions_list, context_assemble.
    Mcp(commands::mcp::McpArgs),
    /// Measure engines on a deterministic workload; `bench generate` writes the workload.
    Bench(commands::bench::BenchArgs),
    /// Score engines on a dataset (`eval locomo FILE`).
    Eval(commands::eval::EvalArgs),
    /// Serve engines, stores and plugins over HTTP (OpenAI-compatible chat, engine API); `gateway status`.
    Gateway(commands::gateway::GatewayArgs),
    /// Offline demo of the lossless engine: long conversation, summary DAG, recall of an early detail.
    Demo(commands::demo::DemoArgs),
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("CLAWCTX_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        // Colour only for a terminal: a log file or a pipe gets plain text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Doctor(args) => commands::doctor::run(&cli.global, args).await,
            Command::Config(args) => commands::config::run(&cli.global, args),
            Command::Chat(args) => commands::chat::run(&cli.global, args).await,
            Command::Run(args) => commands::run::run(&cli.global, args).await,
            Command::Sessions(args) => commands::sessions::run(&cli.global, args),
            Command::Replay(args) => commands::replay::run(&cli.global, args).await,
            Command::Plugins(args) => commands::plugins::run(&cli.global, args).await,
            Command::Lcm(args) => commands::lcm::run(&cli.global, args).await,
            Command::Mcp(args) => commands::mcp::run(&cli.global, args).await,
            Command::Bench(args) => commands::bench::run(args).await,
            Command::Eval(args) => commands::eval::run(&cli.global, args).await,
            Command::Demo(args) => commands::demo::run(args).await,
            Command::Gateway(args) => commands::gateway::run(&cli.global, args).await,
        }
    });
    match result {
        Ok(code) => code,
        // The reader of stdout went away (`clawctx … | head`): nothing is wrong, nothing to say.
        Err(e) if out::is_closed_stdout(&e) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
