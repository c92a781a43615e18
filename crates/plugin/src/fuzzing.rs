//! Entry points for the fuzz targets in `fuzz/` (not an API: hidden from the docs, may change
//! with them).
//!
//! A plugin's stdout is outside input: a broken or hostile plugin can write any bytes. The
//! host's reader thread splits each line with the positional fast path for the reply shape our
//! runners write and falls back to the envelope parser; the adapter then decodes an
//! `assemble` result, in which messages may come back as references to the ones sent. These
//! functions run exactly those steps on bytes given by the fuzzer, without a process.

use clawctx_protocol::{AgentMessage, AssembleParams, AssembleResult};
use serde_json::Value;

use crate::message_refs::{Limits, MessageRefs};
use crate::rpc::Reply;

/// What the reader thread makes of one line of a plugin's stdout.
#[derive(Debug)]
pub enum Frame {
    /// A blank line, skipped.
    Blank,
    /// The plain reply shape, split by position: the id and the result's text.
    PlainResult {
        /// Request id.
        id: u64,
        /// The result JSON as the line holds it (not validated).
        result: Option<String>,
    },
    /// Any other JSON object, split by the envelope parser.
    Message {
        /// `id` (absent or `null` → `None`).
        id: Option<Value>,
        /// `method`.
        method: Option<Value>,
        /// `params`, raw.
        params: Option<String>,
        /// `result`, raw.
        result: Option<String>,
        /// `error` (absent or `null` → `None`).
        error: Option<Value>,
    },
    /// Not a JSON-RPC message: the host kills the plugin.
    Violation,
}

/// Reads one line (without its newline) as the reader thread does.
pub fn read_line(line: &[u8]) -> Frame {
    if line.iter().all(u8::is_ascii_whitespace) {
        return Frame::Blank;
    }
    if let Ok(text) = std::str::from_utf8(line) {
        if let Some((id, range)) = crate::rpc::plain_result(text) {
            let reply = Reply::in_line(text.to_owned(), range);
            return Frame::PlainResult {
                id,
                result: reply.raw().map(str::to_owned),
            };
        }
    }
    envelope(line)
}

/// The envelope parser alone (what a line that is not the plain shape goes through).
pub fn envelope(line: &[u8]) -> Frame {
    match crate::rpc::parse_incoming(line) {
        Some(m) => Frame::Message {
            id: m.id,
            method: m.method,
            params: m.params.map(|p| p.get().to_owned()),
            result: m.result.map(|r| r.get().to_owned()),
            error: m.error,
        },
        None => Frame::Violation,
    }
}

/// Sends `messages` in an `assemble` request (with message references when `refs`) and
/// decodes `reply` as that request's result, as the adapter does.
pub fn assemble_reply(
    messages: Vec<AgentMessage>,
    refs: bool,
    reply: &str,
) -> Result<AssembleResult, String> {
    let params = AssembleParams {
        session_id: "fuzz".into(),
        messages,
        token_budget: Some(100_000),
        ..Default::default()
    };
    let mut table = MessageRefs::new(Limits::default());
    let sent = crate::adapter::encode_assemble("1", &params, false, refs.then_some(&mut table))
        .map_err(|e| format!("encoding the request: {e}"))?;
    let raw = serde_json::value::RawValue::from_string(reply.to_owned())
        .map_err(|e| format!("not JSON: {e}"))?;
    let reply = Reply::from_raw(Some(raw));
    crate::adapter::decode_assembled(&params, &sent, &reply)
        .map(|(result, _)| result)
        .map_err(|e| e.to_string())
}

/// The `messages` array an `assemble` request with `messages` carries, as the plugin sees it
/// (the messages, or with references their ids), so a fuzz target can answer with it.
pub fn sent_messages_array(messages: Vec<AgentMessage>, refs: bool) -> Result<String, String> {
    let params = AssembleParams {
        session_id: "fuzz".into(),
        messages,
        token_budget: Some(100_000),
        ..Default::default()
    };
    let mut table = MessageRefs::new(Limits::default());
    let sent = crate::adapter::encode_assemble("1", &params, false, refs.then_some(&mut table))
        .map_err(|e| format!("encoding the request: {e}"))?;
    String::from_utf8(sent.echo().to_vec()).map_err(|e| e.to_string())
}
