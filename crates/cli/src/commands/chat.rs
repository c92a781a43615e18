//! `clawctx chat`: an interactive conversation on stdin/stdout with streaming output.
//!
//! Commands: `/compact [instructions]` (the engine's manual compaction), `/new` (a new session
//! for the same key), `/status` (tokens used against the budget, the engine in charge),
//! `/quit`. Ctrl-C during a turn aborts that turn (the transcript stays valid); at the prompt
//! it quits.

use std::io::Write;
use std::process::ExitCode;

use clap::Args;
use clawctx_runtime::{AgentRuntime, SessionStatus};
use tokio::io::AsyncBufReadExt;

use crate::commands::run::{build_runtime, turn_with_ctrl_c, DEFAULT_SESSION_KEY};
use crate::global::GlobalArgs;

/// `chat` arguments.
#[derive(Debug, Args)]
pub struct ChatArgs {
    /// Session key (default agent:main:main).
    #[arg(long, value_name = "KEY")]
    session: Option<String>,
    /// Model as provider/model (default: agents.defaults.model.primary, then OPENAI_*).
    #[arg(long, value_name = "PROVIDER/MODEL")]
    model: Option<String>,
}

/// One line of `/status`.
pub fn status_line(s: &SessionStatus) -> String {
    let pct = if s.limits.prompt_budget == 0 {
        0
    } else {
        s.context_tokens * 100 / s.limits.prompt_budget
    };
    format!(
        "session {} ({})\nengine {} ({}){}\nmodel {} on {}\ncontext {} / {} tokens ({pct}%), {} messages, {} compactions",
        s.session_key,
        s.session_id,
        s.engine_id,
        s.engine_name,
        if s.owns_compaction { ", owns compaction" } else { "" },
        s.model,
        s.host,
        s.context_tokens,
        s.limits.prompt_budget,
        s.context_messages,
        s.compactions
    )
}

fn prompt() {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(b"> ");
    let _ = out.flush();
}

async fn command(runtime: &AgentRuntime, key: &str, line: &str) -> anyhow::Result<bool> {
    let (cmd, rest) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
    match cmd {
        "/quit" | "/exit" => return Ok(false),
        "/new" => {
            let s = runtime.new_session(key).await?;
            println!("new session {}", s.entry.session_id);
        }
        "/status" => println!("{}", status_line(&runtime.status(key)?)),
        "/compact" => {
            let instructions = Some(rest.trim().to_owned()).filter(|s| !s.is_empty());
            let r = runtime.compact(key, instructions).await?;
            match (&r.result, r.compacted) {
                (Some(d), true) => println!(
                    "compacted: {} → {} tokens",
                    d.tokens_before,
                    d.tokens_after
                        .map(|t| t.to_string())
                        .unwrap_or_else(|| "?".into())
                ),
                (_, true) => println!("compacted"),
                _ => println!(
                    "not compacted: {}",
                    r.reason.unwrap_or_else(|| "no reason given".into())
                ),
            }
        }
        other => {
            println!("unknown command {other}; try /compact [instructions], /new, /status, /quit")
        }
    }
    Ok(true)
}

/// Runs `clawctx chat`.
pub async fn run(global: &GlobalArgs, args: ChatArgs) -> anyhow::Result<ExitCode> {
    let (runtime, engines) = build_runtime(global, args.model).await?;
    let mut trace = crate::commands::run::local_trace(global, &runtime, &engines)?;
    let key = args
        .session
        .unwrap_or_else(|| DEFAULT_SESSION_KEY.to_owned());
    let status = runtime.status(&key)?;
    eprintln!(
        "clawctx chat: session {key}, engine {}, model {}. Commands: /compact [instructions], /new, /status, /quit",
        status.engine_id, status.model
    );
    let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    loop {
        prompt();
        let line = tokio::select! {
            l = lines.next_line() => l?,
            _ = tokio::signal::ctrl_c() => None,
        };
        let Some(line) = line else { break };
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        if line.starts_with('/') {
            match command(&runtime, &key, line).await {
                Ok(true) => continue,
                Ok(false) => break,
                Err(e) => {
                    eprintln!("error: {e:#}");
                    continue;
                }
            }
        }
        let (result, printed, watch) =
            turn_with_ctrl_c(&runtime, &mut trace, &key, line, true).await;
        watch.ended(&result);
        match result {
            Ok(o) => {
                if !printed {
                    print!("{}", o.reply);
                }
                println!();
                for w in &o.warnings {
                    eprintln!("warning: {w}");
                }
            }
            Err(clawctx_runtime::RuntimeError::Aborted(reason)) => {
                eprintln!("\n(turn aborted: {reason})")
            }
            Err(e) => eprintln!("\nerror: {e}"),
        }
    }
    println!();
    // Background maintenance (the lossless engine's compaction after the reply) finishes
    // before the process exits; Ctrl-C abandons it (nothing half-written: see RELIABILITY.md).
    tokio::select! {
        _ = runtime.wait_for_maintenance() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    trace.finish().await;
    runtime.shutdown().await;
    drop(engines);
    Ok(ExitCode::SUCCESS)
}
