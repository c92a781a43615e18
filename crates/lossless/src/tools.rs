//! The recall tools the engine offers the model: `lcm_grep`, `lcm_describe`, `lcm_expand`.
//!
//! Each is a thin adapter: parse the JSON arguments, scope the query to the calling session
//! (or its agent, never other agents), run the library operation through the backend (on
//! SQLite, on the store's read thread, off the path of other sessions' turns, see
//! [`crate::sqlite`]), and
//! return compact JSON capped at [`MAX_TOOL_OUTPUT_CHARS`]. Bad arguments come back as tool
//! errors the model can read and fix, never as turn failures.

use std::sync::Arc;

use async_trait::async_trait;
use clawctx_engine::{AgentTool, ToolCallContext};
use serde_json::{json, Value};

use crate::config::LosslessConfig;
use crate::core::backend::Backend;
use crate::core::conv::ConvKey;
use crate::core::recall::{GrepMode, GrepQuery, GrepSort, GrepTarget, Scope};

/// Longest tool output returned to the model.
pub const MAX_TOOL_OUTPUT_CHARS: usize = 40_000;

fn cap(s: String) -> String {
    if s.len() <= MAX_TOOL_OUTPUT_CHARS {
        return s;
    }
    let mut end = MAX_TOOL_OUTPUT_CHARS;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!(
        "{}… [output capped at {MAX_TOOL_OUTPUT_CHARS} chars; narrow the query]",
        &s[..end]
    )
}

fn key_of(cx: &ToolCallContext) -> ConvKey {
    ConvKey::from_host(cx.session_key.as_deref(), &cx.session_id)
}

fn to_json<T: serde::Serialize>(v: &T) -> Result<String, String> {
    serde_json::to_string(v).map(cap).map_err(|e| e.to_string())
}

/// The three recall tools over `store`.
pub fn recall_tools(
    store: Arc<dyn Backend>,
    cfg: Arc<LosslessConfig>,
    semantic: Option<Arc<crate::core::semantic::Semantic>>,
) -> Vec<Arc<dyn AgentTool>> {
    vec![
        Arc::new(GrepTool {
            store: store.clone(),
            cfg: cfg.clone(),
            semantic,
        }),
        Arc::new(DescribeTool {
            store: store.clone(),
        }),
        Arc::new(ExpandTool { store, cfg }),
    ]
}

/// `lcm_grep`.
pub struct GrepTool {
    store: Arc<dyn Backend>,
    cfg: Arc<LosslessConfig>,
    semantic: Option<Arc<crate::core::semantic::Semantic>>,
}

#[async_trait]
impl AgentTool for GrepTool {
    fn name(&self) -> &str {
        "lcm_grep"
    }
    fn description(&self) -> &str {
        "Search this conversation's full stored history (including everything summarized away). By default \
         (\"auto\") words and meaning together when the engine has an embedding model, else full-text; mode \
         \"full_text\": 1-3 distinctive terms, all must match; \"any_term\" takes a whole question or description and \
         ranks what shares the most and rarest of its words; \"semantic\" ranks by meaning (paraphrases); \"hybrid\" \
         fuses any_term and semantic; \"regex\" for patterns. Returns message/summary ids with \
         snippets; use lcm_describe / lcm_expand on an id for details."
    }
    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "Terms (full_text), free text (any_term, semantic, hybrid, auto) or a regular expression (regex)."},
                "mode": {"type": "string", "enum": ["auto", "full_text", "any_term", "semantic", "hybrid", "regex"], "default": "auto"},
                "target": {"type": "string", "enum": ["both", "messages", "summaries"], "default": "both"},
                "sort": {"type": "string", "enum": ["relevance", "recency"], "default": "relevance"},
                "scope": {"type": "string", "enum": ["session", "agent"], "default": "session",
                          "description": "session = this conversation (including before /new); agent = all of this agent's sessions."},
                "limit": {"type": "integer", "minimum": 1, "maximum": 200, "default": 20},
                "offset": {"type": "integer", "minimum": 0, "default": 0}
            },
            "required": ["query"]
        })
    }
    async fn execute(&self, args: Value, cx: ToolCallContext) -> Result<String, String> {
        let query = args
            .get("query")
            .and_then(Value::as_str)
            .ok_or("missing \"query\"")?
            .to_owned();
        let parse = |k: &str, d: &str| args.get(k).and_then(Value::as_str).unwrap_or(d).to_owned();
        let mode = GrepMode::from_name(&parse("mode", "auto")).unwrap_or(GrepMode::Auto);
        let target = match parse("target", "both").as_str() {
            "messages" => GrepTarget::Messages,
            "summaries" => GrepTarget::Summaries,
            _ => GrepTarget::Both,
        };
        let sort = match parse("sort", "relevance").as_str() {
            "recency" => GrepSort::Recency,
            _ => GrepSort::Relevance,
        };
        let key = key_of(&cx);
        let scope = match parse("scope", "session").as_str() {
            "agent" => Scope::Agent(key.agent_id.clone()),
            _ => Scope::Session(key),
        };
        let q = GrepQuery {
            pattern: query,
            mode,
            target,
            sort,
            scope,
            limit: args.get("limit").and_then(Value::as_u64).unwrap_or(20) as usize,
            offset: args.get("offset").and_then(Value::as_u64).unwrap_or(0) as usize,
            max_scan_rows: self.cfg.grep_max_scan_rows,
        };
        let report = crate::core::semantic::grep(&*self.store, self.semantic.as_deref(), q)
            .await
            .map_err(|e| e.to_string())?;
        to_json(&report)
    }
}

/// `lcm_describe`.
pub struct DescribeTool {
    store: Arc<dyn Backend>,
}

#[async_trait]
impl AgentTool for DescribeTool {
    fn name(&self) -> &str {
        "lcm_describe"
    }
    fn description(&self) -> &str {
        "Show one summary (sum_…) or message (msg_…) by id: full text, depth, time range, parent and child ids, sources."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]})
    }
    async fn execute(&self, args: Value, cx: ToolCallContext) -> Result<String, String> {
        let id = args
            .get("id")
            .and_then(Value::as_str)
            .ok_or("missing \"id\"")?
            .to_owned();
        let agent = key_of(&cx).agent_id;
        let report = self
            .store
            .describe(&id, Some(&agent))
            .await
            .map_err(|e| e.to_string())?;
        to_json(&report)
    }
}

/// `lcm_expand`.
pub struct ExpandTool {
    store: Arc<dyn Backend>,
    cfg: Arc<LosslessConfig>,
}

#[async_trait]
impl AgentTool for ExpandTool {
    fn name(&self) -> &str {
        "lcm_expand"
    }
    fn description(&self) -> &str {
        "Open a summary (sum_…) back into its children: the summaries or original messages it was made from, in order, \
         up to maxTokens. Expand child summaries again to go deeper."
    }
    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "id": {"type": "string"},
                "maxTokens": {"type": "integer", "minimum": 100, "maximum": 32000}
            },
            "required": ["id"]
        })
    }
    async fn execute(&self, args: Value, cx: ToolCallContext) -> Result<String, String> {
        let id = args
            .get("id")
            .and_then(Value::as_str)
            .ok_or("missing \"id\"")?
            .to_owned();
        let max = args
            .get("maxTokens")
            .and_then(Value::as_u64)
            .unwrap_or(self.cfg.max_expand_tokens)
            .clamp(100, 32_000);
        let agent = key_of(&cx).agent_id;
        let report = self
            .store
            .expand(&id, max, Some(&agent))
            .await
            .map_err(|e| e.to_string())?;
        to_json(&report)
    }
}
