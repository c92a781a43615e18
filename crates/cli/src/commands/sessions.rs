//! `clawctx sessions list|show KEY|export KEY|trace KEY`: the sessions map and transcripts of
//! an agent, and the gateway's per-turn trace of a session.
//!
//! `trace` reads the trace file in the state dir (`clawctx_gateway::trace`) read-only, as the
//! other subcommands read the transcripts: it needs no running gateway, and a running one
//! keeps writing meanwhile (WAL). The views (warnings in words, the diff to the turn before)
//! are the gateway API's own functions, so both give the same answer.

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
    /// What the model saw on each of a session's turns (the turn trace `gateway`, `run` and
    /// `chat` write):
    /// the turns, or one turn's parts, left-out reasons, warnings and diff to the turn before.
    Trace {
        /// Session key.
        key: String,
        /// One turn (its number in the list).
        #[arg(long)]
        turn: Option<u64>,
        /// Turns listed at most (newest first).
        #[arg(long, default_value_t = 50)]
        limit: usize,
        /// Print JSON (the gateway API's shapes).
        #[arg(long)]
        json: bool,
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
            // Which engine holds each session and its compactions: the rule the gateway's
            // session list and the dashboard show (`clawctx_gateway::holding`). A session
            // listed here has an entry, which is the rule's answer.
            let held = |e: &clawctx_transcript::SessionEntry| {
                (
                    clawctx_gateway::holding::engine(Some(e), false),
                    clawctx_gateway::holding::compactions(Some(e), None),
                )
            };
            if json {
                let map: serde_json::Map<String, serde_json::Value> = list
                    .into_iter()
                    .map(|(k, e)| {
                        let (engine, compactions) = held(&e);
                        let mut v = serde_json::to_value(e)?;
                        v["engine"] = engine.into();
                        v["compactions"] = compactions.into();
                        Ok((k, v))
                    })
                    .collect::<anyhow::Result<_>>()?;
                println!("{}", serde_json::to_string_pretty(&map)?);
            } else if list.is_empty() {
                println!("no sessions for agent {agent}");
            } else {
                for (key, e) in list {
                    let (engine, compactions) = held(&e);
                    println!(
                        "{key}\t{}\t{engine}\tcontext {} tokens\t{compactions} compactions",
                        e.session_id,
                        e.context_tokens
                            .map(|t| t.to_string())
                            .unwrap_or_else(|| "?".into()),
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
        SessionsCommand::Trace {
            key,
            turn,
            limit,
            json,
        } => {
            let state_dir = std::path::absolute(global.state_dir())?;
            return trace(&state_dir, &key, turn, limit, json);
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

/// `clawctx sessions trace`.
fn trace(
    state_dir: &std::path::Path,
    key: &str,
    turn: Option<u64>,
    limit: usize,
    json: bool,
) -> anyhow::Result<ExitCode> {
    use clawctx_gateway::trace::{store::TraceDb, trace_path, views};
    let path = trace_path(state_dir);
    let Some(db) = TraceDb::open_read_only(&path)? else {
        anyhow::bail!(
            "no turn trace in this state dir yet ({}): turns are traced by `clawctx gateway`, `clawctx run` and `clawctx chat`",
            path.display()
        );
    };
    let Some(n) = turn else {
        let page = db.list(key, None, limit)?;
        let record = views::session_record(&db, key)?;
        if page.total == 0 {
            anyhow::bail!("session {key:?} has no traced turns");
        }
        if json {
            println!(
                "{}",
                serde_json::to_string_pretty(
                    &serde_json::json!({"session": record, "page": page})
                )?
            );
            return Ok(ExitCode::SUCCESS);
        }
        println!("{key}: {} turns kept", page.total);
        for e in &record.engines {
            println!(
                "engine {}: turns {}..{} ({} turns)",
                e.engine, e.first_turn, e.last_turn, e.turns
            );
        }
        if let Some(l) = &record.last {
            println!(
                "last assembly (turn {}): {} tokens of {} ({})",
                l.turn,
                l.tokens,
                l.token_budget
                    .map_or_else(|| "no budget".into(), |b| b.to_string()),
                l.usage
                    .map_or_else(|| "-".into(), |u| format!("{:.0}%", u * 100.0))
            );
        }
        println!(
            "{:>5}  {:<19}  {:<10}  {:<9}  {:>7}  {:>7}  {:>4}  {:>4}  {:>4}  {:>6}  {:>7}",
            "turn",
            "at (UTC)",
            "source",
            "engine",
            "tokens",
            "budget",
            "sum",
            "rec",
            "raw",
            "left",
            "cached"
        );
        for t in &page.turns {
            let opt = |v: Option<u64>| v.map_or_else(|| "-".into(), |x| x.to_string());
            println!(
                "{:>5}  {:<19}  {:<10}  {:<9}  {:>7}  {:>7}  {:>4}  {:>4}  {:>4}  {:>6}  {:>7}",
                t.turn,
                utc(t.at_ms),
                t.source,
                t.engine,
                t.tokens,
                opt(t.token_budget),
                t.summaries,
                t.recalled,
                t.raw,
                opt(t.left_out),
                opt(t.cached_tokens)
            );
        }
        if let Some(b) = page.next_before {
            println!("(older turns: fewer than turn {b}; raise --limit)");
        }
        return Ok(ExitCode::SUCCESS);
    };
    let Some(t) = db.get(key, Some(n))? else {
        anyhow::bail!("session {key:?} has no turn {n} in the trace (never recorded, or dropped by retention)");
    };
    let before = db.previous(key, n)?;
    let diff = views::diff(&t, before.as_ref());
    let view = views::view(t);
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({"turn": view, "diff": diff}))?
        );
        return Ok(ExitCode::SUCCESS);
    }
    let t = &view.trace;
    println!(
        "{key} turn {} ({}, {} UTC), session {}",
        t.turn,
        t.source,
        utc(t.at_ms),
        t.session_id
    );
    println!("engine {}: {}", t.engine.id, t.engine.reason);
    println!(
        "sent {} tokens (engine estimate {}) in a budget of {}",
        t.gateway_tokens,
        t.engine_estimate,
        t.token_budget.map_or_else(|| "-".into(), |b| b.to_string())
    );
    if let Some(m) = &t.model {
        println!(
            "model: {} calls, {:.1} ms ({:.1} ms in the gateway), {} in / {} out tokens, {} cached: {}",
            m.calls, m.latency_ms, m.turn_ms, m.input_tokens, m.output_tokens, m.cached_tokens, m.outcome
        );
    }
    println!(
        "{:>5}  {:<20}  {:<10}  {:>6}  {:<12}  detail",
        "#", "kind", "role", "tokens", "ref"
    );
    for p in &t.parts {
        let detail = match p.kind.as_str() {
            "summary" => format!(
                "depth {}{}",
                p.depth.map_or_else(|| "-".into(), |d| d.to_string()),
                p.span
                    .map(|[a, b]| format!(", messages {a}..{b}"))
                    .unwrap_or_default()
            ),
            "recalled" if !p.hits.is_empty() => {
                let hits: Vec<String> = p
                    .hits
                    .iter()
                    .map(|h| match h.score {
                        Some(s) => format!("{} (score {s:.2}, {} matched)", h.id, h.matched),
                        None => format!("{} (the message after a quoted one)", h.id),
                    })
                    .collect();
                format!("quotes {}", hits.join(" "))
            }
            "recalled" => format!("quotes {}", p.quotes.join(" ")),
            _ => String::new(),
        };
        println!(
            "{:>5}  {:<20}  {:<10}  {:>6}  {:<12}  {detail}",
            p.index.map_or_else(|| "-".into(), |i| i.to_string()),
            p.kind,
            p.role.as_deref().unwrap_or("-"),
            p.tokens,
            p.id.clone().unwrap_or_else(|| format!("#{}", p.digest)),
        );
    }
    if let Some(l) = &t.left_out {
        println!(
            "left out: {} items, {} tokens, {} messages{}",
            l.items,
            l.tokens,
            l.messages,
            l.unknown
                .as_deref()
                .map(|u| format!(" ({u})"))
                .unwrap_or_default()
        );
        for i in &l.listed {
            println!("  {:<12} {:>6} tokens  {}", i.id, i.tokens, i.reason);
        }
    }
    for c in &t.compactions {
        println!(
            "compaction: {} by {}, {} -> {} tokens, {:.1} ms",
            c.trigger,
            c.by,
            c.tokens_before,
            c.tokens_after.map_or_else(|| "?".into(), |x| x.to_string()),
            c.ms
        );
    }
    for s in &t.summarizer {
        println!(
            "summarizer {}: {} ok, {} failed, {:.1} ms",
            s.summarizer, s.ok, s.failed, s.ms
        );
    }
    for w in &view.warnings {
        println!("warning: {w}");
    }
    match diff.previous {
        Some(p) => println!("since turn {p}:"),
        None => println!("no earlier turn kept:"),
    }
    for w in &diff.words {
        println!("  {w}");
    }
    Ok(ExitCode::SUCCESS)
}

/// `YYYY-MM-DD HH:MM:SS` of epoch milliseconds, UTC.
fn utc(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil from days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}
