//! Replaying a recorded conversation through any engine (`clawctx replay`).
//!
//! A recording is either an OpenClaw session transcript (JSONL with a `session` header; the
//! active branch is replayed) or plain `{role, content}` JSONL lines. Each user message starts a
//! turn; the recording's assistant messages become the scripted provider's replies, and its
//! tool results are what the replayed tools return for the same calls. Completions an engine or
//! plugin asks for itself (`llm.complete`) do not take the recording's replies: they go to the
//! configured model, or fail naming the key to set. The runtime runs every
//! turn for real — assembly, budget, compaction triggers, maintenance — so the report shows per
//! turn the context tokens before and after, the tokens actually sent, the compactions and the
//! engine in charge, all offline and deterministic.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use clawctx_engine::compaction::CompactionSettings;
use clawctx_engine::{AgentTool, ContextEngineRegistry, HookDispatcher, ToolCallContext};
use clawctx_model::{Exhaustion, ScriptedProvider, ScriptedReply, ScriptedToolCall};
use clawctx_protocol::{AgentMessage, JsonMap};
use clawctx_transcript::SessionFile;
use serde::Serialize;
use serde_json::Value;

use crate::error::{Result, RuntimeError};
use crate::model::{Backend, ModelBinding};
use crate::runtime::AgentRuntime;
use crate::setup::selection_source;
use crate::turn::TurnRequest;

/// The session key replays run on.
pub const REPLAY_SESSION_KEY: &str = "agent:main:replay";
/// The prompt budget when `--budget` is not given.
pub const DEFAULT_REPLAY_BUDGET: u64 = 16_000;
/// The scripted reply for a turn the recording left without a final answer.
pub const NO_RECORDED_REPLY: &str = "(no recorded reply)";

/// One recorded turn: the user's prompt and what followed it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RecordedTurn {
    /// The user's text.
    pub prompt: String,
    /// Assistant messages and tool results until the next user message.
    pub replies: Vec<AgentMessage>,
}

/// A loaded recording.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Recording {
    /// The turns in order.
    pub turns: Vec<RecordedTurn>,
    /// Messages that were skipped (before the first user message, or roles that are not part
    /// of a turn).
    pub skipped: usize,
}

impl Recording {
    /// Groups messages into turns.
    pub fn from_messages(messages: Vec<AgentMessage>) -> Self {
        let mut rec = Recording::default();
        for m in messages {
            match &m {
                AgentMessage::User(_) => rec.turns.push(RecordedTurn {
                    prompt: m.plain_text(),
                    replies: Vec::new(),
                }),
                AgentMessage::Assistant(_) | AgentMessage::ToolResult(_) => {
                    match rec.turns.last_mut() {
                        Some(t) => t.replies.push(m),
                        None => rec.skipped += 1,
                    }
                }
                _ => rec.skipped += 1,
            }
        }
        rec
    }

    /// Loads a recording file (OpenClaw session JSONL or `{role, content}` lines). Errors name
    /// `file:line` and what was expected there.
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| RuntimeError::Recording {
            path: path.display().to_string(),
            line: 0,
            expected: format!("a readable file: {e}"),
        })?;
        let first = text
            .lines()
            .find(|l| !l.trim().is_empty())
            .unwrap_or_default();
        let is_session = serde_json::from_str::<Value>(first)
            .ok()
            .is_some_and(|v| v.get("type").and_then(Value::as_str) == Some("session"));
        if is_session {
            let file = SessionFile::open(path)?;
            let messages = file
                .active_path()
                .iter()
                .filter_map(|e| e.message().cloned())
                .collect();
            return Ok(Self::from_messages(messages));
        }
        let mut messages = Vec::new();
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let bad = |what: String| RuntimeError::Recording {
                path: path.display().to_string(),
                line: i + 1,
                expected: what,
            };
            let value: Value = serde_json::from_str(line).map_err(|e| {
                bad(format!(
                    "expected a JSON object {{\"role\", \"content\"}} per line: {e}"
                ))
            })?;
            let Value::Object(mut map) = value else {
                return Err(bad(format!(
                    "expected a JSON object {{\"role\", \"content\"}}, got {value}"
                )));
            };
            // A transcript `message` entry without a header is accepted too.
            if map.get("type").and_then(Value::as_str) == Some("message") {
                match map.remove("message") {
                    Some(Value::Object(m)) => map = m,
                    _ => {
                        return Err(bad(
                            "expected `message` to be an object in a message entry".into()
                        ))
                    }
                }
            }
            if !map.get("role").is_some_and(Value::is_string) {
                return Err(bad(
                    "expected a string `role` (user, assistant or toolResult)".into(),
                ));
            }
            let message =
                AgentMessage::from_map(map).map_err(|e| bad(format!("expected a message: {e}")))?;
            messages.push(message);
        }
        Ok(Self::from_messages(messages))
    }

    /// The scripted provider's replies, the recorded tool results, and how many model calls
    /// the longest turn needs.
    fn script(&self) -> (Vec<ScriptedReply>, HashMap<String, ToolQueue>, usize) {
        let mut replies = Vec::new();
        let mut results: HashMap<String, String> = HashMap::new();
        let mut queues: HashMap<String, ToolQueue> = HashMap::new();
        let mut max_calls = 1;
        let mut counter = 0usize;
        for turn in &self.turns {
            for r in &turn.replies {
                if let AgentMessage::ToolResult(t) = r {
                    results
                        .entry(t.tool_call_id.clone())
                        .or_insert_with(|| r.plain_text());
                }
            }
            let mut calls_in_turn = 0;
            let mut last_had_tools = true;
            for r in &turn.replies {
                let AgentMessage::Assistant(_) = r else {
                    continue;
                };
                calls_in_turn += 1;
                let mut tool_calls = Vec::new();
                for c in r.tool_calls() {
                    counter += 1;
                    let id = if c.id.is_empty() {
                        format!("replay_call_{counter}")
                    } else {
                        c.id.clone()
                    };
                    queues.entry(c.name.clone()).or_default().push_back(
                        results
                            .get(&c.id)
                            .cloned()
                            .unwrap_or_else(|| "(no recorded result)".into()),
                    );
                    tool_calls.push(ScriptedToolCall {
                        id: Some(id),
                        name: c.name.clone(),
                        arguments: c.arguments.clone(),
                    });
                }
                last_had_tools = !tool_calls.is_empty();
                let text: String = if last_had_tools {
                    text_of(r)
                } else {
                    r.plain_text()
                };
                replies.push(ScriptedReply::Reply {
                    content: text,
                    thinking: None,
                    tool_calls,
                    usage: None,
                    stop_reason: None,
                    error_message: None,
                });
            }
            if last_had_tools {
                calls_in_turn += 1;
                replies.push(ScriptedReply::text(NO_RECORDED_REPLY));
            }
            max_calls = max_calls.max(calls_in_turn);
        }
        (replies, queues, max_calls)
    }
}

fn text_of(m: &AgentMessage) -> String {
    match m {
        AgentMessage::Assistant(a) => a
            .content
            .block_slice()
            .iter()
            .filter_map(|b| match b {
                clawctx_protocol::ContentBlock::Text(t) => Some(t.text.as_str()),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join(""),
        other => other.plain_text(),
    }
}

type ToolQueue = VecDeque<String>;

/// A replayed tool: returns the recorded results of its calls, in order.
struct ReplayTool {
    name: String,
    results: Mutex<ToolQueue>,
}

#[async_trait]
impl AgentTool for ReplayTool {
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> &str {
        "A tool from the recorded conversation; returns the recorded result."
    }

    fn parameters(&self) -> Value {
        Value::Object(JsonMap::from_iter([(
            "type".to_owned(),
            Value::String("object".into()),
        )]))
    }

    async fn execute(
        &self,
        _arguments: Value,
        _context: ToolCallContext,
    ) -> std::result::Result<String, String> {
        Ok(self
            .results
            .lock()
            .ok()
            .and_then(|mut q| q.pop_front())
            .unwrap_or_else(|| "(no recorded result)".into()))
    }
}

/// Replay settings.
#[derive(Clone, Debug)]
pub struct ReplayOptions {
    /// Engine slot override (`--engine`); `None` keeps the config's selection.
    pub engine: Option<String>,
    /// The prompt token budget.
    pub budget: u64,
    /// Where sessions and engine stores go.
    pub state_dir: PathBuf,
    /// The config (its `plugins` part selects and configures engines).
    pub config: Value,
    /// Plugin hook handlers fired by the replayed turns (a `tool_result_persist` handler
    /// shrinks the recorded tool results as it would have live).
    pub hooks: Option<Arc<dyn HookDispatcher>>,
}

/// One replayed turn.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReplayTurn {
    /// 1-based turn number.
    pub turn: usize,
    /// Engine in charge after the turn.
    pub engine: String,
    /// Context tokens before the turn.
    pub context_tokens_before: u64,
    /// Context tokens after the turn (and its compactions).
    pub context_tokens_after: u64,
    /// Most tokens sent to the model in one call of this turn.
    pub prompt_tokens: u64,
    /// The budget.
    pub budget: u64,
    /// Compactions this turn: `auto`, `overflow`, `preflight` (run or asked for by the host),
    /// and `engine` when the engine's context epoch changed since the previous turn's assembly
    /// without the host asking (it compacted on its own, e.g. in the previous turn's
    /// `afterTurn`; several rounds between two assemblies count once).
    pub compactions: Vec<String>,
    /// Tool calls replayed.
    pub tool_calls: usize,
    /// Microseconds the host spent on the turn: its wall time less the model's (the scripted
    /// provider's) calls and the engine's. Read it at turn 100 and turn 10,000 to see whether
    /// the runtime's cost of a turn grows with the session.
    pub host_micros: u64,
    /// Microseconds spent inside the engine (assemble, delivery, compact).
    pub engine_micros: u64,
}

/// The whole replay.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReplayReport {
    /// Slot value in effect.
    pub engine_configured: String,
    /// The budget.
    pub budget: u64,
    /// Turns replayed.
    pub turns: Vec<ReplayTurn>,
    /// Compactions overall.
    pub total_compactions: usize,
    /// Most tokens sent in any call.
    pub max_prompt_tokens: u64,
    /// Turns where a call exceeded the budget (should be 0).
    pub over_budget_turns: usize,
    /// Messages of the recording that were not part of a turn.
    pub skipped_messages: usize,
}

/// Replays `recording` with engines from `registry`; `on_turn` sees each turn as it finishes.
pub async fn replay(
    registry: Arc<ContextEngineRegistry>,
    recording: Recording,
    options: ReplayOptions,
    on_turn: &mut (dyn FnMut(&ReplayTurn) + Send),
) -> Result<ReplayReport> {
    let mut config = options.config.clone();
    if let Some(id) = &options.engine {
        set_slot(&mut config, id);
    }
    let config = Arc::new(config);
    let agent_dir = options.state_dir.join("agents").join("main");
    let resolved = registry
        .resolve(
            Some(config.clone()),
            Some(agent_dir.clone()),
            Some(agent_dir.clone()),
        )
        .await
        .map_err(|e| RuntimeError::engine("(selection)", "resolve", e))?;
    let (replies, queues, max_calls) = recording.script();
    // The script holds the replies now; only the prompts are needed from here on (a long
    // recording is not kept twice).
    let skipped = recording.skipped;
    let prompts: Vec<String> = recording.turns.into_iter().map(|t| t.prompt).collect();
    let provider = Arc::new(ScriptedProvider::new(replies, Exhaustion::Error).without_recording());
    let budget = options.budget.max(crate::runtime::MIN_PROMPT_BUDGET);
    let max_out = (budget / 4).clamp(64, 4096);
    let compaction = CompactionSettings {
        reserve_tokens: budget / 4,
        reserve_tokens_floor: 0,
        ..CompactionSettings::default()
    };
    let binding = ModelBinding::new(provider, "replay", budget + max_out + budget / 4, max_out);
    let mut builder = AgentRuntime::builder(
        &options.state_dir,
        resolved.engine.clone(),
        Backend::Model(binding),
    )
    .selection(
        resolved.effective_id.clone(),
        selection_source(&resolved.reason),
    )
    .fallback_reason(crate::setup::fallback_reason(&resolved.reason))
    .compaction(compaction)
    .prompt_budget(Some(budget))
    .max_tool_iterations(max_calls + 1)
    .durable(false)
    .workspace_dir(agent_dir.to_string_lossy().into_owned());
    if let Some(hooks) = options.hooks.clone() {
        builder = builder.hooks(hooks);
    }
    // A plugin's own completions (`api.llm.complete`) get their own answerer: the configured
    // model, else an error naming the key to set. Served from the script, they would take
    // the recording's replies and shift every later turn (issue #28 item 9).
    builder = builder.services_backend(
        match crate::model::select_backend(&config, None, &clawctx_model::process_env) {
            Ok(b @ Backend::Model(_)) => b,
            _ => Backend::unconfigured(),
        },
    );
    let mut names: Vec<&String> = queues.keys().collect();
    names.sort();
    for name in names {
        let q = queues.get(name).cloned().unwrap_or_default();
        builder = builder.tool(Arc::new(ReplayTool {
            name: name.clone(),
            results: Mutex::new(q),
        }));
    }
    let runtime = builder.build();
    let mut report = ReplayReport {
        engine_configured: resolved.configured_id.clone(),
        budget,
        turns: Vec::with_capacity(prompts.len()),
        total_compactions: 0,
        max_prompt_tokens: 0,
        over_budget_turns: 0,
        skipped_messages: skipped,
    };
    let result = async {
        let mut epoch: Option<String> = None;
        let mut host_compacted = false;
        for (i, prompt) in prompts.into_iter().enumerate() {
            let started = std::time::Instant::now();
            let outcome = runtime
                .run_turn(TurnRequest::new(REPLAY_SESSION_KEY, prompt))
                .await?;
            let wall = started.elapsed().as_micros() as u64;
            // A recording's turns come back to back, a user's seconds apart, by which time the
            // turn's background maintenance has run: waiting for it (outside the turn's timing)
            // makes the report the same on every run however loaded the machine (under load
            // the lane's first compaction could end after the last turn, and none was listed).
            runtime
                .wait_for_session_maintenance(REPLAY_SESSION_KEY)
                .await;
            let prompt_tokens = outcome.prompt_tokens.iter().copied().max().unwrap_or(0);
            let mut compactions: Vec<String> = outcome
                .compactions
                .iter()
                .map(|c| c.trigger.clone())
                .collect();
            // The runtime lists the engine's own compactions of the turn; a store compacted
            // in between (the maintenance lane, after the last reply) shows in its epoch.
            let engine_listed = outcome.compactions.iter().any(|c| c.trigger == "engine");
            if let Some(now) = &outcome.context_epoch {
                if !host_compacted
                    && !engine_listed
                    && epoch.as_ref().is_some_and(|before| before != now)
                {
                    compactions.push("engine".into());
                }
                epoch = Some(now.clone());
            }
            host_compacted = !outcome.compactions.is_empty();
            let t = ReplayTurn {
                turn: i + 1,
                engine: outcome.engine.clone(),
                context_tokens_before: outcome.context_tokens_before,
                context_tokens_after: outcome.context_tokens_after,
                prompt_tokens,
                budget,
                compactions,
                tool_calls: outcome.tool_calls,
                host_micros: wall.saturating_sub(outcome.model_micros + outcome.engine_micros),
                engine_micros: outcome.engine_micros,
            };
            report.total_compactions += t.compactions.len();
            report.max_prompt_tokens = report.max_prompt_tokens.max(prompt_tokens);
            if prompt_tokens > budget {
                report.over_budget_turns += 1;
            }
            on_turn(&t);
            report.turns.push(t);
        }
        Ok::<(), RuntimeError>(())
    }
    .await;
    runtime.shutdown().await;
    result.map(|_| report)
}

fn set_slot(config: &mut Value, id: &str) {
    if !config.is_object() {
        *config = Value::Object(JsonMap::new());
    }
    let Some(root) = config.as_object_mut() else {
        return;
    };
    let plugins = root
        .entry("plugins")
        .or_insert_with(|| Value::Object(JsonMap::new()));
    if !plugins.is_object() {
        *plugins = Value::Object(JsonMap::new());
    }
    let Some(plugins) = plugins.as_object_mut() else {
        return;
    };
    let slots = plugins
        .entry("slots")
        .or_insert_with(|| Value::Object(JsonMap::new()));
    if !slots.is_object() {
        *slots = Value::Object(JsonMap::new());
    }
    if let Some(slots) = slots.as_object_mut() {
        slots.insert("contextEngine".into(), Value::String(id.to_owned()));
    }
}
