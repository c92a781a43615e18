//! `clawctx sessions list|show KEY|export KEY`: the sessions map and transcripts of an agent.

use std::io::Write;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Subcommand};
use clawctx_protocol::transcript::EntryKind;
use clawctx_transcript::{SessionFile, SessionStore};

use crate::global::GlobalArgs;

/// `sessions` arguments.
#[derive(Debug, Args)]
pub struct SessionsArgs {
    #[command(subcommand)]
    command: SessionsCommand,
}

#[derive(Debug, Subcommand)]
enum SessionsCommand {
    /// List an agent's sessions, most recent first.
    List {
        /// Agent id.
        #[arg(long, default_value = "main")]
        agent: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Show a session's entry and its active-branch messages (compaction summaries in full).
    Show {
        /// Session key.
        key: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print a session's transcript (OpenClaw JSONL) to stdout.
    Export {
        /// Session key.
        key: String,
    },
}

fn one_line(text: &str, max: usize) -> String {
    let flat: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match flat.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &flat[..i]),
        None => flat,
    }
}

/// Runs `clawctx sessions`.
pub fn run(global: &GlobalArgs, args: SessionsArgs) -> anyhow::Result<ExitCode> {
    let state_dir = global.state_dir();
    let store = SessionStore::new(std::path::absolute(&state_dir).unwrap_or(state_dir));
    match args.command {
        SessionsCommand::List { agent, json } => {
            let list = store.list(&agent)?;
            if json {
                let map: serde_json::Map<String, serde_json::Value> = list
                    .into_iter()
                    .map(|(k, e)| Ok((k, serde_json::to_value(e)?)))
                    .collect::<anyhow::Result<_>>()?;
                println!("{}", serde_json::to_string_pretty(&map)?);
            } else if list.is_empty() {
                println!("no sessions for agent {agent}");
            } else {
                for (key, e) in list {
                    println!(
                        "{key}\t{}\tcontext {} tokens\t{} compactions",
                        e.session_id,
                        e.context_tokens
                            .map(|t| t.to_string())
                            .unwrap_or_else(|| "?".into()),
                        e.compaction_count.unwrap_or(0)
                    );
                }
            }
        }
        SessionsCommand::Show { key, json } => {
            let entry = store
                .get(&key)?
                .with_context(|| format!("no session for key {key:?}"))?;
            let path = store.transcript_path(store.agent_id_for(&key), &entry)?;
            let file = SessionFile::open(&path)?;
            let active = file.active_path();
            if json {
                let messages: Vec<_> = active.iter().filter_map(|e| e.context_message()).collect();
                println!(
                    "{}",
                    serde_json::to_string_pretty(&serde_json::json!({
                        "sessionKey": key, "entry": entry, "transcript": path, "messages": messages
                    }))?
                );
            } else {
                println!(
                    "{key}\nsession {}\ntranscript {}",
                    entry.session_id,
                    path.display()
                );
                for w in file.warnings() {
                    println!("warning: {w}");
                }
                for e in &active {
                    match &e.kind {
                        // A compaction's summary is what the model sees instead of everything
                        // before it: shown whole, not cut to one line.
                        EntryKind::Compaction(c) => {
                            println!(
                                "{:>17}: {} tokens before, kept from entry {}",
                                "compaction", c.tokens_before, c.first_kept_entry_id
                            );
                            for line in c.summary.lines() {
                                println!("{:>17}  {line}", "|");
                            }
                        }
                        _ => {
                            if let Some(m) = e.context_message() {
                                println!("{:>17}: {}", m.role(), one_line(&m.plain_text(), 120));
                            }
                        }
                    }
                }
            }
        }
        SessionsCommand::Export { key } => {
            let entry = store
                .get(&key)?
                .with_context(|| format!("no session for key {key:?}"))?;
            let path = store.transcript_path(store.agent_id_for(&key), &entry)?;
            let bytes =
                std::fs::read(&path).with_context(|| format!("cannot read {}", path.display()))?;
            std::io::stdout().lock().write_all(&bytes)?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
