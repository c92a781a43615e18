//! Recall over the Model Context Protocol: any MCP client (a coding agent, a desktop assistant,
//! an IDE) can search and open a lossless store.
//!
//! One server, two transports, built on the official Rust SDK (`rmcp`): `clawctx mcp` serves it
//! on stdio ([`serve_stdio`]), and the gateway at `/mcp` as streamable HTTP ([`router`]), behind
//! the gateway's own layers (a configured token is required, foreign `Host`/`Origin` refused).
//! The server reads the lossless engine's own store through its [`Recall`] handle, so on
//! SQLite every read but `context_assemble` runs on the store's read thread, off the path of
//! turns, and on PostgreSQL on pooled connections.
//!
//! Tools (each with a JSON schema generated from its argument type, made plain JSON Schema that
//! strict validators accept: integers with `minimum`, no custom `format`; missing, unknown or
//! malformed arguments are a JSON-RPC `invalid_params` error, checked before the call, never a
//! crash):
//! - `lcm_grep`: the three modes of the lcm tools (`full_text`, `any_term`, `regex`; `fts` and
//!   `any`, the CLI's former names, are accepted for the first two), over one
//!   conversation (`sessionKey`), its agent's sessions, or every conversation, a page at a time
//!   with a continuation token (`cursor`) bound to the query it came from;
//! - `lcm_describe`, `lcm_expand` (capped at [`MAX_EXPAND_TOKENS`]);
//! - `sessions_list`: the stored conversations, paged;
//! - `context_assemble`: what the engine would send for a session at a budget and prompt;
//! - `lcm_ingest`, only when `mcp.allowIngest` is `true` in the config (read-only otherwise):
//!   for clients that want the store as their memory.
//!
//! Every result is JSON text of at most [`MAX_RESULT_CHARS`] characters (long strings inside
//! are cut, pages end early with a cursor for the rest), so one call fits a model's context.
//!
//! Resources: `lcm://conversations/{conversationId}/summaries` (a conversation's summary DAG:
//! layers and the top summaries) and `lcm://summaries/{summaryId}` (one summary with its text).
//!
//! Errors: bad arguments and unknown ids are `invalid_params`; a store that fails is an
//! `internal_error` naming the store (its SQLite file or its PostgreSQL URL without password).

use std::sync::Arc;

use clawctx_lossless::{ConvKey, GrepQuery, LosslessError, Recall, Scope};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    CallToolResult, ContentBlock, ListResourceTemplatesResult, ListResourcesResult,
    PaginatedRequestParams, ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult,
    Resource, ResourceContents, ResourceTemplate, ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{tool, tool_handler, tool_router, ErrorData, RoleServer, ServerHandler, ServiceExt};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::recall_args::{RecallMode, RecallSort, RecallTarget};

/// Longest JSON text one tool result or resource carries.
pub const MAX_RESULT_CHARS: usize = 32_000;
/// The most `lcm_expand` returns, whatever is asked.
pub const MAX_EXPAND_TOKENS: u64 = 8_000;
/// Messages `lcm_ingest` takes in one call.
pub const MAX_INGEST_MESSAGES: usize = 500;

/// What the server may do beyond reading.
#[derive(Clone, Copy, Debug, Default)]
pub struct McpOptions {
    /// Offer `lcm_ingest` (`mcp.allowIngest`).
    pub allow_ingest: bool,
}

impl McpOptions {
    /// The options in an OpenClaw-shaped config (`mcp.allowIngest`).
    pub fn from_config(config: &Value) -> Self {
        McpOptions {
            allow_ingest: config
                .pointer("/mcp/allowIngest")
                .and_then(Value::as_bool)
                .unwrap_or(false),
        }
    }
}

/// The MCP server over one lossless store.
#[derive(Clone)]
pub struct RecallServer {
    recall: Recall,
    tool_router: ToolRouter<Self>,
}

impl std::fmt::Debug for RecallServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecallServer")
            .field("store", &self.recall.location())
            .finish_non_exhaustive()
    }
}

/// Grep's reach.
#[derive(Clone, Copy, Debug, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum GrepScope {
    /// The conversation of `sessionKey` (including before `/new`).
    Conversation,
    /// Every session of `sessionKey`'s agent.
    Agent,
    /// Every conversation in the store.
    All,
}

/// `lcm_grep` arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GrepArgs {
    /// Terms (`full_text`: 1-3 distinctive words, all must match), a whole question
    /// (`any_term`: ranks what shares the most and rarest of its words) or a regular
    /// expression (`regex`).
    pub query: String,
    /// `full_text` (default), `any_term` or `regex`.
    #[serde(default)]
    pub mode: RecallMode,
    /// `both` (default), `messages` or `summaries`.
    #[serde(default)]
    pub target: RecallTarget,
    /// `relevance` (default) or `recency` (regex is always newest first).
    #[serde(default)]
    pub sort: RecallSort,
    /// A session key (`agent:<id>:...`): the conversation to search. Without it, every
    /// conversation.
    #[serde(default)]
    pub session_key: Option<String>,
    /// `conversation` (default with `sessionKey`), `agent` (every session of its agent) or
    /// `all` (default without `sessionKey`).
    #[serde(default)]
    pub scope: Option<GrepScope>,
    /// Hits per page, 1-100 (default 20).
    #[serde(default)]
    pub limit: Option<u32>,
    /// The `nextCursor` of the previous page of the same query.
    #[serde(default)]
    pub cursor: Option<String>,
}

/// `lcm_describe` arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DescribeArgs {
    /// `sum_<n>` or `msg_<n>` (from `lcm_grep`).
    pub id: String,
    /// Limits the lookup to this session key's agent.
    #[serde(default)]
    pub session_key: Option<String>,
}

/// `lcm_expand` arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExpandArgs {
    /// `sum_<n>` (its children) or `msg_<n>` (the message).
    pub id: String,
    /// Token cap (default: the engine's `maxExpandTokens`; at most 8000).
    #[serde(default)]
    pub max_tokens: Option<u64>,
    /// Limits the lookup to this session key's agent.
    #[serde(default)]
    pub session_key: Option<String>,
}

/// `sessions_list` arguments.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SessionsArgs {
    /// Only this agent's sessions.
    #[serde(default)]
    pub agent_id: Option<String>,
    /// Sessions per page, 1-200 (default 50).
    #[serde(default)]
    pub limit: Option<u32>,
    /// The `nextCursor` of the previous page.
    #[serde(default)]
    pub cursor: Option<String>,
}

/// `context_assemble` arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AssembleArgs {
    /// The session key whose stored conversation is assembled.
    pub session_key: String,
    /// Token budget (default: the engine's `defaultTokenBudget`).
    #[serde(default)]
    pub token_budget: Option<u64>,
    /// The prompt of the turn (stored messages matching it are quoted in a recall block).
    #[serde(default)]
    pub prompt: Option<String>,
}

/// A message to store.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct IngestMessage {
    /// `user` or `assistant`.
    pub role: IngestRole,
    /// The text.
    pub text: String,
    /// When it was said (epoch ms); default: now.
    #[serde(default)]
    pub timestamp: Option<i64>,
}

/// Who said it.
#[derive(Clone, Copy, Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum IngestRole {
    /// The user.
    User,
    /// The assistant.
    Assistant,
}

/// `lcm_ingest` arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct IngestArgs {
    /// The session key to store under (`agent:<id>:...`).
    pub session_key: String,
    /// The messages, oldest first (at most 500).
    pub messages: Vec<IngestMessage>,
}

/// `schema` as plain JSON Schema: schemars marks integers with its own formats (`uint32`,
/// `uint64`, `int64`...), which no JSON Schema draft defines and which Ajv in strict mode (the
/// TypeScript MCP SDK's validator) refuses to compile. The range they stand for is already
/// there as `minimum` (kept, and added for an unsigned format that lacks it).
pub fn plain_schema(schema: &rmcp::model::JsonObject) -> rmcp::model::JsonObject {
    fn walk(v: &mut Value) {
        match v {
            Value::Object(map) => {
                if let Some(Value::String(format)) = map.get("format") {
                    let unsigned = format.starts_with("uint");
                    let numeric = unsigned
                        || format.starts_with("int")
                        || matches!(format.as_str(), "float" | "double");
                    if numeric {
                        map.remove("format");
                        if unsigned && !map.contains_key("minimum") {
                            map.insert("minimum".into(), json!(0));
                        }
                    }
                }
                for child in map.values_mut() {
                    walk(child);
                }
            }
            Value::Array(items) => items.iter_mut().for_each(walk),
            _ => {}
        }
    }
    let mut v = Value::Object(schema.clone());
    walk(&mut v);
    match v {
        Value::Object(map) => map,
        _ => schema.clone(),
    }
}

/// Checks a tool call's arguments against the tool's argument type before the call, so that
/// missing, unknown or mistyped arguments are the JSON-RPC `invalid_params` error the README
/// promises (rmcp answers them as a tool result flagged `isError`). A tool this server does
/// not have is left to the router, which says so.
fn check_arguments(
    tool: &str,
    arguments: Option<&rmcp::model::JsonObject>,
) -> Result<(), ErrorData> {
    fn parse<T: serde::de::DeserializeOwned>(
        tool: &str,
        arguments: Option<&rmcp::model::JsonObject>,
    ) -> Result<(), ErrorData> {
        let v = Value::Object(arguments.cloned().unwrap_or_default());
        serde_json::from_value::<T>(v)
            .map(|_| ())
            .map_err(|e| invalid(format!("{tool}: invalid arguments: {e}")))
    }
    match tool {
        "lcm_grep" => parse::<GrepArgs>(tool, arguments),
        "lcm_describe" => parse::<DescribeArgs>(tool, arguments),
        "lcm_expand" => parse::<ExpandArgs>(tool, arguments),
        "sessions_list" => parse::<SessionsArgs>(tool, arguments),
        "context_assemble" => parse::<AssembleArgs>(tool, arguments),
        "lcm_ingest" => parse::<IngestArgs>(tool, arguments),
        _ => Ok(()),
    }
}

fn invalid(message: impl Into<String>) -> ErrorData {
    ErrorData::invalid_params(message.into(), None)
}

fn key_of(session_key: &str) -> Result<ConvKey, ErrorData> {
    let k = session_key.trim();
    if k.is_empty() {
        return Err(invalid("`sessionKey` must not be empty"));
    }
    if k.len() > 512 || k.chars().any(char::is_control) {
        return Err(invalid(
            "`sessionKey` must be at most 512 bytes without control characters",
        ));
    }
    Ok(ConvKey::from_host(Some(k), k))
}

/// A cursor: the query's fingerprint and the offset of the next page.
fn cursor(fingerprint: &str, offset: usize) -> String {
    format!("{fingerprint}.{offset}")
}

fn read_cursor(c: &str, fingerprint: &str) -> Result<usize, ErrorData> {
    let bad = || {
        invalid(format!(
            "`cursor` {c:?} is not a nextCursor of this query (repeat the same arguments with the cursor the last page returned)"
        ))
    };
    let (fp, offset) = c.rsplit_once('.').ok_or_else(bad)?;
    if fp != fingerprint {
        return Err(bad());
    }
    offset.parse().map_err(|_| bad())
}

fn fingerprint(parts: &[&str]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p.as_bytes());
        h.update([0]);
    }
    h.finalize()[..6]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Shortens the longest strings in `v` until its JSON fits [`MAX_RESULT_CHARS`].
fn fit(mut v: Value) -> String {
    for _ in 0..64 {
        let text = v.to_string();
        if text.len() <= MAX_RESULT_CHARS {
            return text;
        }
        let over = text.len() - MAX_RESULT_CHARS;
        let Some(longest) = longest_string(&mut v) else {
            break;
        };
        let keep = longest
            .len()
            .saturating_sub(over + 64)
            .max(longest.len() / 2);
        let mut end = keep.min(longest.len());
        while !longest.is_char_boundary(end) {
            end -= 1;
        }
        longest.truncate(end);
        longest.push_str("… [cut to fit the result cap]");
    }
    let text = v.to_string();
    if text.len() <= MAX_RESULT_CHARS {
        return text;
    }
    json!({"error": "the result does not fit the result cap; narrow the request", "capChars": MAX_RESULT_CHARS})
        .to_string()
}

fn longest_string(v: &mut Value) -> Option<&mut String> {
    match v {
        Value::String(s) if s.len() > 200 => Some(s),
        Value::Array(items) => items
            .iter_mut()
            .filter_map(longest_string)
            .max_by_key(|s| s.len()),
        Value::Object(map) => map
            .values_mut()
            .filter_map(longest_string)
            .max_by_key(|s| s.len()),
        _ => None,
    }
}

fn text_result(v: Value) -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::text(fit(v))])
}

fn encode<T: serde::Serialize>(v: &T) -> Result<Value, ErrorData> {
    serde_json::to_value(v)
        .map_err(|e| ErrorData::internal_error(format!("cannot encode the result: {e}"), None))
}

impl RecallServer {
    /// A server over `recall`'s store.
    pub fn new(recall: Recall, options: McpOptions) -> Self {
        let mut tool_router = Self::tool_router();
        if !options.allow_ingest {
            tool_router.remove_route("lcm_ingest");
        }
        for route in tool_router.map.values_mut() {
            route.attr.input_schema = Arc::new(plain_schema(route.attr.input_schema.as_ref()));
            if let Some(out) = &route.attr.output_schema {
                route.attr.output_schema = Some(Arc::new(plain_schema(out.as_ref())));
            }
        }
        RecallServer {
            recall,
            tool_router,
        }
    }

    /// The MCP error of a failed store call `what`.
    fn store_error(&self, what: &str, e: LosslessError) -> ErrorData {
        match e {
            LosslessError::NotFound(m) => invalid(format!("{what}: not found: {m}")),
            LosslessError::InvalidInput(m) => invalid(format!("{what}: {m}")),
            e if crate::engine_store::is_unavailable(&e) => ErrorData::internal_error(
                format!(
                    "{what} failed: the lossless store {} is unavailable: {e}",
                    self.recall.location()
                ),
                None,
            ),
            e => ErrorData::internal_error(
                format!(
                    "{what} failed: the lossless store {} failed: {e}",
                    self.recall.location()
                ),
                None,
            ),
        }
    }
}

#[tool_router]
impl RecallServer {
    #[tool(
        name = "lcm_grep",
        description = "Search the stored conversation history, including everything summarized away. Full-text by default \
                       (1-3 distinctive terms, all must match); mode \"any_term\" takes a whole question and ranks what \
                       shares the most and rarest of its words; mode \"regex\" for patterns. Scope: one conversation \
                       (sessionKey), its agent's sessions, or all. Returns message/summary ids with snippets and a \
                       nextCursor for the next page; open an id with lcm_describe or lcm_expand."
    )]
    async fn lcm_grep(
        &self,
        Parameters(a): Parameters<GrepArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        if a.query.trim().is_empty() {
            return Err(invalid("`query` must not be empty"));
        }
        let scope_kind = match (a.scope, &a.session_key) {
            (None, Some(_)) => GrepScope::Conversation,
            (None, None) => GrepScope::All,
            (Some(GrepScope::All), _) => GrepScope::All,
            (Some(s), Some(_)) => s,
            (Some(s), None) => {
                return Err(invalid(format!(
                    "`scope` {s:?} needs `sessionKey` (or use scope \"all\")"
                )))
            }
        };
        let scope = match (scope_kind, &a.session_key) {
            (GrepScope::Conversation, Some(k)) => Scope::Session(key_of(k)?),
            (GrepScope::Agent, Some(k)) => Scope::Agent(key_of(k)?.agent_id),
            _ => Scope::All,
        };
        let limit = a.limit.unwrap_or(20);
        if !(1..=100).contains(&limit) {
            return Err(invalid(format!("`limit` must be 1-100, not {limit}")));
        }
        let fp = fingerprint(&[
            &a.query,
            &format!("{:?}{:?}{:?}{scope_kind:?}", a.mode, a.target, a.sort),
            a.session_key.as_deref().unwrap_or(""),
        ]);
        let offset = match &a.cursor {
            Some(c) => read_cursor(c, &fp)?,
            None => 0,
        };
        let mut q = GrepQuery::new(a.query, scope);
        q.mode = a.mode.into();
        q.target = a.target.into();
        q.sort = a.sort.into();
        q.limit = limit as usize;
        q.offset = offset;
        q.max_scan_rows = self.recall.config().grep_max_scan_rows;
        let report = self
            .recall
            .grep(q)
            .await
            .map_err(|e| self.store_error("lcm_grep", e))?;
        // Keep whole hits while the page fits the cap; the rest is the next page.
        let mut hits = Vec::new();
        let mut size = 256;
        for hit in &report.hits {
            let h = encode(hit)?;
            let len = h.to_string().len() + 1;
            if size + len > MAX_RESULT_CHARS && !hits.is_empty() {
                break;
            }
            size += len;
            hits.push(h);
        }
        let next = if hits.len() < report.hits.len() {
            Some(offset + hits.len())
        } else {
            report.next_offset
        };
        Ok(text_result(json!({
            "hits": hits,
            "nextCursor": next.map(|o| cursor(&fp, o)),
            "scanTruncated": report.scan_truncated,
            "ftsQuery": report.fts_query,
        })))
    }

    #[tool(
        name = "lcm_describe",
        description = "Describe a stored message (msg_<n>) or summary (sum_<n>): its text, time range, what it covers, \
                       its parents and children in the summary DAG."
    )]
    async fn lcm_describe(
        &self,
        Parameters(a): Parameters<DescribeArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let agent = match &a.session_key {
            Some(k) => Some(key_of(k)?.agent_id),
            None => None,
        };
        let r = self
            .recall
            .describe(a.id.trim(), agent.as_deref())
            .await
            .map_err(|e| self.store_error("lcm_describe", e))?;
        Ok(text_result(encode(&r)?))
    }

    #[tool(
        name = "lcm_expand",
        description = "Expand a summary (sum_<n>) into what it summarizes (its child summaries or the original messages), \
                       oldest first, within a token cap; or show one message (msg_<n>)."
    )]
    async fn lcm_expand(
        &self,
        Parameters(a): Parameters<ExpandArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let agent = match &a.session_key {
            Some(k) => Some(key_of(k)?.agent_id),
            None => None,
        };
        if a.max_tokens == Some(0) {
            return Err(invalid("`maxTokens` must be at least 1"));
        }
        let max = a
            .max_tokens
            .unwrap_or(self.recall.config().max_expand_tokens)
            .min(MAX_EXPAND_TOKENS);
        let r = self
            .recall
            .expand(a.id.trim(), Some(max), agent.as_deref())
            .await
            .map_err(|e| self.store_error("lcm_expand", e))?;
        Ok(text_result(encode(&r)?))
    }

    #[tool(
        name = "sessions_list",
        description = "List the stored conversations (session key, agent, messages, tokens stored and in the current \
                       context), a page at a time, with the URI of each conversation's summaries."
    )]
    async fn sessions_list(
        &self,
        Parameters(a): Parameters<SessionsArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let limit = a.limit.unwrap_or(50);
        if !(1..=200).contains(&limit) {
            return Err(invalid(format!("`limit` must be 1-200, not {limit}")));
        }
        let fp = fingerprint(&["sessions", a.agent_id.as_deref().unwrap_or("")]);
        let offset = match &a.cursor {
            Some(c) => read_cursor(c, &fp)?,
            None => 0,
        };
        let mut rows = self
            .recall
            .conversations()
            .await
            .map_err(|e| self.store_error("sessions_list", e))?;
        rows.retain(|c| c.active && a.agent_id.as_ref().is_none_or(|id| &c.agent_id == id));
        rows.sort_by(|x, y| x.session_key.cmp(&y.session_key));
        let total = rows.len();
        let page: Vec<Value> = rows
            .iter()
            .skip(offset)
            .take(limit as usize)
            .map(|c| {
                json!({
                    "sessionKey": c.session_key, "agentId": c.agent_id, "conversationId": c.id,
                    "messages": c.msg_count, "storedTokens": c.msg_tokens, "contextTokens": c.frontier_tokens,
                    "summaries": format!("lcm://conversations/{}/summaries", c.id),
                })
            })
            .collect();
        let end = offset + page.len();
        Ok(text_result(json!({
            "sessions": page,
            "total": total,
            "nextCursor": (end < total).then(|| cursor(&fp, end)),
        })))
    }

    #[tool(
        name = "context_assemble",
        description = "What the context engine would send the model for a session: its stored conversation packed into a \
                       token budget (summaries, then the newest messages; stored messages matching the prompt quoted in a \
                       recall block). Shows the newest messages that fit the result cap and counts the rest."
    )]
    async fn context_assemble(
        &self,
        Parameters(a): Parameters<AssembleArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let key = key_of(&a.session_key)?;
        if let Some(b) = a.token_budget {
            if !(1..=2_000_000).contains(&b) {
                return Err(invalid(format!("`tokenBudget` must be 1-2000000, not {b}")));
            }
        }
        let out = self
            .recall
            .assemble(&key, a.token_budget, a.prompt)
            .await
            .map_err(|e| self.store_error("context_assemble", e))?;
        let budget = a
            .token_budget
            .unwrap_or(self.recall.config().default_token_budget);
        // The newest messages that fit the cap, in order.
        let mut shown: Vec<Value> = Vec::new();
        let mut size = 512 + out.system_prompt_addition.as_ref().map_or(0, String::len);
        for m in out.messages.iter().rev() {
            let v = encode(m)?;
            let len = v.to_string().len() + 1;
            if size + len > MAX_RESULT_CHARS && !shown.is_empty() {
                break;
            }
            size += len;
            shown.push(v);
        }
        shown.reverse();
        let omitted = out.messages.len() - shown.len();
        Ok(text_result(json!({
            "sessionKey": key.session_key,
            "tokenBudget": budget,
            "estimatedTokens": out.estimated_tokens,
            "systemPromptAddition": out.system_prompt_addition,
            "summaries": out.summaries,
            "recalled": out.recalled,
            "truncated": out.truncated,
            "messagesTotal": out.messages.len(),
            "omittedMessages": omitted,
            "messages": shown,
        })))
    }

    #[tool(
        name = "lcm_ingest",
        description = "Store messages in a session's conversation (idempotent: a message already stored is not stored \
                       again). Offered only when the server's config sets mcp.allowIngest."
    )]
    async fn lcm_ingest(
        &self,
        Parameters(a): Parameters<IngestArgs>,
    ) -> Result<CallToolResult, ErrorData> {
        let key = key_of(&a.session_key)?;
        if a.messages.is_empty() || a.messages.len() > MAX_INGEST_MESSAGES {
            return Err(invalid(format!(
                "`messages` must hold 1-{MAX_INGEST_MESSAGES} messages, not {}",
                a.messages.len()
            )));
        }
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0);
        let mut messages = Vec::with_capacity(a.messages.len());
        for (i, m) in a.messages.into_iter().enumerate() {
            let ts = m.timestamp.unwrap_or(now);
            let v = match m.role {
                IngestRole::User => json!({"role": "user", "content": m.text, "timestamp": ts}),
                IngestRole::Assistant => {
                    json!({"role": "assistant", "content": [{"type": "text", "text": m.text}],
                                                "stopReason": "stop", "timestamp": ts})
                }
            };
            messages.push(
                serde_json::from_value(v).map_err(|e| invalid(format!("`messages[{i}]`: {e}")))?,
            );
        }
        let r = self
            .recall
            .ingest(&key, messages)
            .await
            .map_err(|e| self.store_error("lcm_ingest", e))?;
        Ok(text_result(encode(&r)?))
    }
}

/// `lcm://conversations/<id>/summaries` or `lcm://summaries/<sum_n>`.
enum Uri {
    Conversation(i64),
    Summary(String),
}

fn parse_uri(uri: &str) -> Option<Uri> {
    let rest = uri.strip_prefix("lcm://")?;
    if let Some(id) = rest
        .strip_prefix("conversations/")
        .and_then(|r| r.strip_suffix("/summaries"))
    {
        return id.parse().ok().map(Uri::Conversation);
    }
    let id = rest.strip_prefix("summaries/")?;
    (id.starts_with("sum_") && id[4..].parse::<i64>().is_ok()).then(|| Uri::Summary(id.to_owned()))
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for RecallServer {
    async fn call_tool(
        &self,
        request: rmcp::model::CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::CallToolResponse, ErrorData> {
        check_arguments(&request.name, request.arguments.as_ref())?;
        let call = rmcp::handler::server::tool::ToolCallContext::new(self, request, context);
        self.tool_router.call(call).await
    }

    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .build(),
        )
        .with_server_info(rmcp::model::Implementation::new(
            "clawctx",
            env!("CARGO_PKG_VERSION"),
        ))
        .with_instructions(
            "Recall over a clawctx lossless store: every message of every stored conversation, and the summaries \
             that replaced older ones. Find with lcm_grep, open with lcm_describe / lcm_expand, list conversations \
             with sessions_list, see what a model would get with context_assemble.",
        )
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let rows = self
            .recall
            .conversations()
            .await
            .map_err(|e| self.store_error("listing the conversations", e))?;
        let resources = rows
            .iter()
            .filter(|c| c.active)
            .take(200)
            .map(|c| {
                Resource::new(
                    format!("lcm://conversations/{}/summaries", c.id),
                    format!("{} summaries", c.session_key),
                )
                .with_description(format!(
                    "The summary DAG of {} ({} messages stored)",
                    c.session_key, c.msg_count
                ))
                .with_mime_type("application/json")
            })
            .collect();
        Ok(ListResourcesResult::with_all_items(resources))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        Ok(ListResourceTemplatesResult::with_all_items(vec![
            ResourceTemplate::new(
                "lcm://conversations/{conversationId}/summaries",
                "conversation summaries",
            )
            .with_description(
                "A conversation's summary DAG: layers by depth and the top summaries (ids from sessions_list)",
            )
            .with_mime_type("application/json"),
            ResourceTemplate::new("lcm://summaries/{summaryId}", "summary")
                .with_description("One summary (sum_<n>) with its text and what it covers")
                .with_mime_type("application/json"),
        ]))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let uri = request.uri;
        let not_found = |why: &str| ErrorData::resource_not_found(format!("{uri}: {why}"), None);
        let value = match parse_uri(&uri) {
            Some(Uri::Conversation(id)) => {
                let rows = self
                    .recall
                    .conversations()
                    .await
                    .map_err(|e| self.store_error("reading the conversation", e))?;
                let Some(c) = rows.into_iter().find(|c| c.id == id) else {
                    return Err(not_found("no such conversation"));
                };
                let key = ConvKey::from_host(Some(&c.session_key), &c.session_key);
                let dag = self
                    .recall
                    .store()
                    .dag_overview(&key)
                    .await
                    .map_err(|e| self.store_error("reading the summaries", e))?;
                encode(&dag)?
            }
            Some(Uri::Summary(id)) => {
                let r = self
                    .recall
                    .describe(&id, None)
                    .await
                    .map_err(|e| match e {
                        LosslessError::NotFound(_) => not_found("no such summary"),
                        e => self.store_error("reading the summary", e),
                    })?;
                encode(&r)?
            }
            None => {
                return Err(not_found(
                    "not a clawctx resource (lcm://conversations/<id>/summaries or lcm://summaries/sum_<n>)",
                ))
            }
        };
        Ok(ReadResourceResult::new(vec![
            ResourceContents::text(fit(value), uri.clone()).with_mime_type("application/json")
        ])
        .into())
    }
}

/// Serves `recall` over stdin/stdout until the client closes the connection.
pub async fn serve_stdio(recall: Recall, options: McpOptions) -> std::io::Result<()> {
    let server = RecallServer::new(recall, options)
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| std::io::Error::other(format!("MCP initialization failed: {e}")))?;
    server
        .waiting()
        .await
        .map_err(|e| std::io::Error::other(format!("the MCP server stopped: {e}")))?;
    Ok(())
}

/// `/mcp` on the gateway: streamable HTTP, stateless (every request is answered on its own,
/// as JSON), over the engine's own store. The gateway's layers (token, `Host`/`Origin`
/// checks, body limit) apply as to every route, so the SDK's own host check is off here.
pub(crate) fn router(shared: &crate::state::AppState) -> axum::Router<crate::state::AppState> {
    use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
    use rmcp::transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService,
    };
    let options = McpOptions::from_config(&shared.host_config);
    let weak = Arc::downgrade(shared);
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_sse_keep_alive(None)
        .disable_allowed_hosts();
    let service: StreamableHttpService<RecallServer, LocalSessionManager> =
        StreamableHttpService::new(
            move || {
                let shared = weak
                    .upgrade()
                    .ok_or_else(|| std::io::Error::other("the gateway is shutting down"))?;
                let recall = crate::engine_store::lossless(&shared).ok_or_else(|| {
                    std::io::Error::other(format!(
                        "MCP recall needs the lossless engine; the engine in charge is \"{}\"",
                        shared.runtime.engine_id()
                    ))
                })?;
                Ok(RecallServer::new(recall, options))
            },
            Default::default(),
            config,
        );
    // Without the lossless engine there is no store to serve: a 409 naming the engine in
    // charge (as the recall routes answer), not the SDK's generic 500 from the factory above.
    let weak = Arc::downgrade(shared);
    axum::Router::new()
        .nest_service("/mcp", service)
        .layer(axum::middleware::from_fn(
            move |req: axum::extract::Request, next: axum::middleware::Next| {
                let weak = weak.clone();
                async move {
                    if let Some(shared) = weak.upgrade() {
                        if let Err(e) = crate::engine_store::handle(&shared) {
                            return axum::response::IntoResponse::into_response(e);
                        }
                    }
                    next.run(req).await
                }
            },
        ))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn a_result_too_large_is_cut_to_the_cap_and_stays_json() {
        let big = "word ".repeat(40_000);
        let v = json!({"id": "sum_1", "text": big, "items": [{"text": big}, {"text": "short"}]});
        let text = fit(v);
        assert!(text.len() <= MAX_RESULT_CHARS, "{}", text.len());
        let back: Value = serde_json::from_str(&text).expect("still JSON");
        assert_eq!(back["id"], "sum_1");
        assert_eq!(back["items"][1]["text"], "short", "short strings are kept");
        assert!(back["text"]
            .as_str()
            .unwrap()
            .ends_with("[cut to fit the result cap]"));
        // Multi-byte text is cut on a character boundary.
        let v = json!({"text": "é".repeat(40_000)});
        let text = fit(v);
        assert!(text.len() <= MAX_RESULT_CHARS);
        serde_json::from_str::<Value>(&text).expect("still JSON");
    }

    #[test]
    fn a_cursor_reads_back_only_for_its_own_query() {
        let a = fingerprint(&["obsidian", "FullText", ""]);
        let b = fingerprint(&["obsidian", "Regex", ""]);
        assert_ne!(a, b);
        assert_eq!(read_cursor(&cursor(&a, 40), &a).unwrap(), 40);
        assert!(read_cursor(&cursor(&a, 40), &b).is_err());
        for bad in ["", "40", "x.y", &format!("{a}.-1"), &format!("{a}.")] {
            assert!(read_cursor(bad, &a).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn only_the_two_lcm_uri_shapes_are_resources() {
        assert!(matches!(
            parse_uri("lcm://conversations/12/summaries"),
            Some(Uri::Conversation(12))
        ));
        assert!(
            matches!(parse_uri("lcm://summaries/sum_7"), Some(Uri::Summary(s)) if s == "sum_7")
        );
        for bad in [
            "lcm://summaries/msg_7",
            "lcm://summaries/sum_x",
            "lcm://conversations/x/summaries",
            "lcm://conversations/1",
            "file:///etc/passwd",
            "",
        ] {
            assert!(parse_uri(bad).is_none(), "{bad:?}");
        }
    }

    #[test]
    fn session_keys_are_checked_like_chats() {
        assert!(key_of("agent:main:x").is_ok());
        assert!(key_of("  ").is_err());
        assert!(key_of(&"k".repeat(513)).is_err());
        assert!(key_of("agent:main:\u{7}").is_err());
    }
}
