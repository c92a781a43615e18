//! How a message is stored: its model-visible text once, plus a compact "skeleton" holding only
//! what the text does not.
//!
//! The text column (indexed by FTS5 as external content) is the concatenation, in a fixed walk
//! order, of the message's text-bearing strings: string content, text and thinking blocks,
//! tool calls as `name(arguments)`, bash command and output, summary text. The skeleton is the
//! message's JSON with each of those strings replaced by a length marker (`{"$t":n}`, or
//! `{"$c":n}` for a tool call), without `role` (a column) and without an integer `timestamp`
//! (a column). A plain user message has no skeleton at all. Decoding walks the same order and
//! slices the text back, so `decode(encode(m)) == m`.

use clawctx_protocol::AgentMessage;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use super::terms::index_terms;
use crate::error::{LosslessError, Result};

/// Role codes stored in `messages.role`.
pub mod role {
    /// `user`.
    pub const USER: i64 = 0;
    /// `assistant`.
    pub const ASSISTANT: i64 = 1;
    /// `toolResult`.
    pub const TOOL_RESULT: i64 = 2;
    /// Every other role (kept in the skeleton).
    pub const OTHER: i64 = 3;
}

/// A message ready for insertion.
#[derive(Clone, Debug)]
pub struct Encoded {
    /// Role code.
    pub role: i64,
    /// Model-visible text (FTS content).
    pub text: String,
    /// Compact JSON of everything else; `None` for a plain user message. This canonical form
    /// is what the identity hash covers (every version of the store computes it the same way).
    pub skeleton: Option<String>,
    /// The skeleton as stored: [`Self::skeleton`] with its last length marker replaced by
    /// [`REST`] ("the rest of the text"), so messages that differ only in their text length
    /// share one stored skeleton (see `skeletons` in [`crate::sqlite::schema::V4`]).
    pub stored_skeleton: Option<String>,
    /// Integer epoch-ms timestamp, when the message has one.
    pub ts: Option<i64>,
    /// The call id a tool result answers.
    pub tool_call_id: Option<String>,
    /// Number of tool calls an assistant message makes.
    pub n_calls: i64,
    /// Tokens of the one estimator.
    pub tokens: u64,
    /// Identity hash (idempotency key within a conversation).
    pub hash: i64,
    /// What the full-text index gets: [`index_terms`] of `text`.
    pub fts: String,
    /// `text` compressed for storage ([`super::pack::pack`]), when that is worth it.
    pub packed: Option<Vec<u8>>,
}

const SEP: char = '\n';

fn role_code(m: &AgentMessage) -> i64 {
    match m {
        AgentMessage::User(_) => role::USER,
        AgentMessage::Assistant(_) => role::ASSISTANT,
        AgentMessage::ToolResult(_) => role::TOOL_RESULT,
        _ => role::OTHER,
    }
}

/// The role name of a stored role code (`None` for [`role::OTHER`], whose name is in the
/// skeleton).
pub fn role_name(code: i64) -> Option<&'static str> {
    match code {
        role::USER => Some("user"),
        role::ASSISTANT => Some("assistant"),
        role::TOOL_RESULT => Some("toolResult"),
        _ => None,
    }
}

fn marker(key: &str, n: usize) -> Value {
    let mut m = Map::with_capacity(1);
    m.insert(key.to_owned(), Value::from(n as u64));
    Value::Object(m)
}

/// The key that wraps a value found where a marker goes (see [`escape`]).
const LIT: &str = "$lit";

/// A message may hold anything where its text usually is (a plugin's role with an object for
/// `content`, a tool call without a name). Such a value is left in the skeleton as it is,
/// unless decoding would take it for a marker (`{"$t":n}`, `{"$c":n}`) or for this wrapping
/// (`{"$lit":…}`): then it is kept as `{"$lit": value}`, and [`slot_len`] gives it back.
fn escape(v: &mut Value) {
    let ambiguous = marker_len(v, "$t").is_some()
        || marker_len(v, "$c").is_some()
        || matches!(v, Value::Object(m) if m.len() == 1 && m.contains_key(LIT));
    if ambiguous {
        let mut m = Map::with_capacity(1);
        m.insert(LIT.to_owned(), std::mem::take(v));
        *v = Value::Object(m);
    }
}

/// The length of the marker in slot `v` (see [`marker_len`]); a value [`escape`] wrapped is
/// put back instead, and is no marker.
fn slot_len(v: &mut Value, key: &str) -> Option<usize> {
    if let Value::Object(m) = v {
        if m.len() == 1 {
            if let Some(inner) = m.remove(LIT) {
                *v = inner;
                return None;
            }
        }
    }
    marker_len(v, key)
}

fn push_seg(text: &mut String, first: &mut bool, s: &str) {
    if !*first {
        text.push(SEP);
    }
    *first = false;
    text.push_str(s);
}

/// Walks the text-bearing fields in the fixed order, calling `f` on each slot.
fn extract(map: &mut Map<String, Value>, text: &mut String) {
    let mut first = true;
    if let Some(content) = map.get_mut("content") {
        match content {
            Value::String(s) => {
                let s = std::mem::take(s);
                push_seg(text, &mut first, &s);
                *content = marker("$t", s.len());
            }
            Value::Array(blocks) => {
                for b in blocks.iter_mut() {
                    let Value::Object(bm) = b else { continue };
                    let ty = bm
                        .get("type")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_owned();
                    match ty.as_str() {
                        "text" | "thinking" => match bm.get_mut(ty.as_str()) {
                            Some(Value::String(s)) => {
                                let s = std::mem::take(s);
                                push_seg(text, &mut first, &s);
                                bm.insert(ty.clone(), marker("$t", s.len()));
                            }
                            Some(other) => escape(other),
                            None => {}
                        },
                        "toolCall" => {
                            let name = bm.get("name").and_then(Value::as_str).map(str::to_owned);
                            match (name, bm.get_mut("arguments")) {
                                (Some(name), Some(args)) => {
                                    let seg = format!("{name}({args})");
                                    push_seg(text, &mut first, &seg);
                                    bm.insert("arguments".into(), marker("$c", seg.len()));
                                }
                                (None, Some(args)) => escape(args),
                                _ => {}
                            }
                        }
                        _ => {}
                    }
                }
            }
            other => escape(other),
        }
    }
    for key in ["summary", "command", "output"] {
        match map.get_mut(key) {
            Some(Value::String(s)) => {
                let s = std::mem::take(s);
                push_seg(text, &mut first, &s);
                map.insert(key.into(), marker("$t", s.len()));
            }
            Some(other) => escape(other),
            None => {}
        }
    }
}

/// The length a stored skeleton's last marker may carry instead of the real one: the segment
/// runs to the end of the text.
pub const REST: i64 = -1;

fn marker_len(v: &Value, key: &str) -> Option<usize> {
    match v {
        Value::Object(m) if m.len() == 1 => m.get(key).and_then(|n| match n.as_u64() {
            Some(n) => Some(n as usize),
            None => (n.as_i64() == Some(REST)).then_some(usize::MAX),
        }),
        _ => None,
    }
}

/// Where the last length marker of an extracted skeleton is (the walk order of [`extract`]).
enum LastMarker {
    Top(&'static str),
    Content,
    Block(usize, &'static str),
}

fn last_marker(map: &Map<String, Value>) -> Option<LastMarker> {
    for key in ["output", "command", "summary"] {
        if map.get(key).and_then(|v| marker_len(v, "$t")).is_some() {
            return Some(LastMarker::Top(key));
        }
    }
    match map.get("content")? {
        Value::Array(blocks) => blocks.iter().enumerate().rev().find_map(|(i, b)| {
            let Value::Object(bm) = b else { return None };
            for (field, key) in [("text", "$t"), ("thinking", "$t"), ("arguments", "$c")] {
                let ty = bm.get("type").and_then(Value::as_str).unwrap_or("");
                let wanted = match field {
                    "arguments" => ty == "toolCall",
                    f => ty == f,
                };
                if wanted && bm.get(field).and_then(|v| marker_len(v, key)).is_some() {
                    return Some(LastMarker::Block(i, field));
                }
            }
            None
        }),
        c if marker_len(c, "$t").is_some() => Some(LastMarker::Content),
        _ => None,
    }
}

/// The last length marker of an extracted skeleton, in place.
fn last_marker_mut(map: &mut Map<String, Value>) -> Option<&mut Value> {
    match last_marker(map)? {
        LastMarker::Top(key) => map.get_mut(key),
        LastMarker::Content => map.get_mut("content"),
        LastMarker::Block(i, field) => map
            .get_mut("content")
            .and_then(|c| c.get_mut(i))
            .and_then(|b| b.get_mut(field)),
    }
}

/// Replaces the last length marker of an extracted skeleton by [`REST`]; returns the marker
/// as it was (`{"$t":12}`) and as it is now (`{"$t":-1}`), or `None` when there is none.
fn mark_rest(map: &mut Map<String, Value>) -> Option<(Value, Value)> {
    let slot = last_marker_mut(map)?;
    let was = slot.clone();
    let Value::Object(m) = slot else {
        return None;
    };
    *m.values_mut().next()? = Value::from(REST);
    Some((was, slot.clone()))
}

/// Compact JSON of a skeleton or a part of one (what `Value`'s `Display` writes, without its
/// formatter adapter).
fn json(v: &impl serde::Serialize) -> Result<String> {
    serde_json::to_string(v).map_err(|e| LosslessError::InvalidInput(format!("message: {e}")))
}

/// The skeleton and the stored skeleton of an extracted message, serialized once.
///
/// The stored skeleton is the skeleton with its last marker set to [`REST`]: it is written
/// first, and the skeleton is made from it by putting the marker's length back. That is exact
/// when the rest-marker's text occurs once (a string cannot hold it unescaped, but an object
/// among the message's own fields could); otherwise the skeleton is serialized again.
fn skeletons(map: &mut Map<String, Value>) -> Result<(String, String)> {
    let Some((was, rest)) = mark_rest(map) else {
        let s = json(map)?;
        return Ok((s.clone(), s));
    };
    let stored = json(map)?;
    let rest = json(&rest)?;
    let mut hits = stored.match_indices(&rest);
    if let (Some((at, _)), None) = (hits.next(), hits.next()) {
        let was = json(&was)?;
        let mut skeleton = String::with_capacity(stored.len() + was.len());
        skeleton.push_str(&stored[..at]);
        skeleton.push_str(&was);
        skeleton.push_str(&stored[at + rest.len()..]);
        return Ok((skeleton, stored));
    }
    if let Some(slot) = last_marker_mut(map) {
        *slot = was;
    }
    Ok((json(map)?, stored))
}

struct Cursor<'a> {
    text: &'a str,
    pos: usize,
    first: bool,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a str> {
        if !self.first {
            self.pos += SEP.len_utf8();
        }
        self.first = false;
        let end = if n == usize::MAX {
            self.text.len()
        } else {
            self.pos + n
        };
        let s = self
            .text
            .get(self.pos..end)
            .ok_or_else(|| LosslessError::Corrupt("text segment out of range".into()))?;
        self.pos = end;
        Ok(s)
    }
}

fn restore(map: &mut Map<String, Value>, text: &str) -> Result<()> {
    let mut cur = Cursor {
        text,
        pos: 0,
        first: true,
    };
    if let Some(content) = map.get_mut("content") {
        if let Some(n) = slot_len(content, "$t") {
            *content = Value::String(cur.take(n)?.to_owned());
        } else if let Value::Array(blocks) = content {
            for b in blocks.iter_mut() {
                let Value::Object(bm) = b else { continue };
                let ty = bm
                    .get("type")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned();
                match ty.as_str() {
                    "text" | "thinking" => {
                        if let Some(n) = bm.get_mut(ty.as_str()).and_then(|v| slot_len(v, "$t")) {
                            let s = cur.take(n)?.to_owned();
                            bm.insert(ty.clone(), Value::String(s));
                        }
                    }
                    "toolCall" => {
                        if let Some(n) = bm.get_mut("arguments").and_then(|v| slot_len(v, "$c")) {
                            let seg = cur.take(n)?;
                            let name_len = bm
                                .get("name")
                                .and_then(Value::as_str)
                                .map(str::len)
                                .unwrap_or(0);
                            let args = seg
                                .get(name_len + 1..seg.len().saturating_sub(1))
                                .ok_or_else(|| {
                                    LosslessError::Corrupt("tool call segment".into())
                                })?;
                            let v: Value = serde_json::from_str(args).map_err(|e| {
                                LosslessError::Corrupt(format!("tool call arguments: {e}"))
                            })?;
                            bm.insert("arguments".into(), v);
                        }
                    }
                    _ => {}
                }
            }
        }
    }
    for key in ["summary", "command", "output"] {
        if let Some(n) = map.get_mut(key).and_then(|v| slot_len(v, "$t")) {
            let s = cur.take(n)?.to_owned();
            map.insert(key.into(), Value::String(s));
        }
    }
    Ok(())
}

/// The columns a message's identity is made of: role, text, skeleton, timestamp, hash.
struct Identity {
    role: i64,
    text: String,
    skeleton: Option<String>,
    stored_skeleton: Option<String>,
    ts: Option<i64>,
    hash: i64,
}

fn identity_of(m: &AgentMessage, stored: bool) -> Result<Identity> {
    let role = role_code(m);
    let mut v = serde_json::to_value(m)
        .map_err(|e| LosslessError::InvalidInput(format!("message: {e}")))?;
    let Value::Object(map) = &mut v else {
        return Err(LosslessError::InvalidInput(
            "message is not an object".into(),
        ));
    };
    let mut ts = None;
    if role != role::OTHER {
        map.remove("role");
        if let Some(t) = map.get("timestamp").and_then(Value::as_i64) {
            if map.get("timestamp").map(Value::is_i64).unwrap_or(false)
                || map.get("timestamp").map(Value::is_u64).unwrap_or(false)
            {
                ts = Some(t);
                map.remove("timestamp");
            }
        }
    }
    let mut text = String::new();
    extract(map, &mut text);
    let plain_user = role == role::USER
        && map.len() == 1
        && map.get("content").and_then(|c| marker_len(c, "$t")) == Some(text.len());
    let (skeleton, stored_skeleton) = match (plain_user, stored) {
        (true, _) => (None, None),
        (false, false) => (Some(json(map)?), None),
        (false, true) => {
            let (skeleton, stored) = skeletons(map)?;
            (Some(skeleton), Some(stored))
        }
    };
    let mut h = Sha256::new();
    h.update([role as u8]);
    h.update(skeleton.as_deref().unwrap_or("").as_bytes());
    h.update([0xff]);
    h.update(ts.unwrap_or(i64::MIN).to_le_bytes());
    h.update(text.as_bytes());
    let d = h.finalize();
    let mut b = [0u8; 8];
    b.copy_from_slice(&d[..8]);
    Ok(Identity {
        role,
        text,
        skeleton,
        stored_skeleton,
        ts,
        hash: i64::from_le_bytes(b),
    })
}

/// The `(timestamp, hash)` identity under which `m` would be stored (see
/// [`crate::sqlite::Db::has_message`]), without the token count, index terms and compression that
/// [`encode`] adds: assembly checks which of the host's newest messages are stored every turn.
pub fn identity(m: &AgentMessage) -> Result<(Option<i64>, i64)> {
    let id = identity_of(m, false)?;
    Ok((id.ts, id.hash))
}

/// Encodes `m` for storage. `tokens` is computed here, once, with the one estimator.
pub fn encode(m: &AgentMessage) -> Result<Encoded> {
    let Identity {
        role,
        text,
        skeleton,
        stored_skeleton,
        ts,
        hash,
    } = identity_of(m, true)?;
    Ok(Encoded {
        fts: index_terms(&text),
        packed: super::pack::pack(&text),
        tool_call_id: m.tool_result_id().map(str::to_owned),
        n_calls: m.tool_calls().count() as i64,
        tokens: clawctx_tokens::message_tokens(m),
        role,
        text,
        skeleton,
        stored_skeleton,
        ts,
        hash,
    })
}

/// Rebuilds the message from its stored columns.
pub fn decode(
    role: i64,
    text: &str,
    skeleton: Option<&str>,
    ts: Option<i64>,
) -> Result<AgentMessage> {
    let mut map: Map<String, Value> = match skeleton {
        Some(s) => {
            serde_json::from_str(s).map_err(|e| LosslessError::Corrupt(format!("skeleton: {e}")))?
        }
        None => {
            let mut m = Map::new();
            m.insert("content".into(), marker("$t", text.len()));
            m
        }
    };
    restore(&mut map, text)?;
    if let Some(name) = role_name(role) {
        map.insert("role".into(), Value::String(name.into()));
        if let Some(t) = ts {
            map.insert("timestamp".into(), Value::from(t));
        }
    }
    AgentMessage::from_map(map).map_err(LosslessError::Corrupt)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rt(v: Value) {
        let e = rt_any(v);
        if let Some(s) = &e.stored_skeleton {
            assert!(s.contains(&format!(":{REST}}}")), "{s}");
        }
    }

    /// [`rt`] for messages that may hold no text (their stored skeleton has no rest marker).
    fn rt_any(v: Value) -> Encoded {
        let m: AgentMessage = serde_json::from_value(v).unwrap();
        let e = encode(&m).unwrap();
        assert_eq!(
            identity(&m).unwrap(),
            (e.ts, e.hash),
            "identity() must match encode()"
        );
        let back = decode(e.role, &e.text, e.skeleton.as_deref(), e.ts).unwrap();
        assert_eq!(back, m);
        let stored = decode(e.role, &e.text, e.stored_skeleton.as_deref(), e.ts).unwrap();
        assert_eq!(stored, m, "the stored skeleton decodes to the same message");
        assert_eq!(
            serde_json::to_string(&back).unwrap(),
            serde_json::to_string(&m).unwrap()
        );
        e
    }

    #[test]
    fn round_trips() {
        rt(json!({"role":"user","content":"hi\nthere","timestamp":5}));
        rt(
            json!({"role":"user","content":[{"type":"text","text":"a"},{"type":"image","data":"AAA","mimeType":"image/png"}]}),
        );
        rt(
            json!({"role":"assistant","content":[{"type":"thinking","thinking":"hmm","thinkingSignature":"x"},{"type":"text","text":"ok"},{"type":"toolCall","id":"c1","name":"read","arguments":{"path":"a(b).rs","n":1.5}}],"api":"x","model":"m","usage":{"input":1,"output":2,"cacheRead":0,"cacheWrite":0,"totalTokens":3},"stopReason":"toolUse","timestamp":1.5}),
        );
        rt(
            json!({"role":"toolResult","toolCallId":"c1","toolName":"read","content":[{"type":"text","text":""},{"type":"text","text":"x\ny"}],"isError":false,"timestamp":9}),
        );
        rt(json!({"role":"bashExecution","command":"ls","output":"a\nb","exitCode":0}));
        rt(json!({"role":"compactionSummary","summary":"s","tokensBefore":10}));
        rt(json!({"role":"system","content":"sys","timestamp":3}));
        rt(json!({"role":"custom","customType":"x","content":"c","display":true}));
    }

    /// Found by the `lossless_codec` fuzz target: a message of a plugin's role whose `content`
    /// was the object `{"$t":5}` was stored, then read back as a marker for five bytes of text
    /// that were not there (`{"$t":0}` would have come back as an empty string, silently).
    /// Values that read like markers, wherever a marker goes, come back as they went in.
    #[test]
    fn values_that_look_like_markers_come_back_as_they_were() {
        rt_any(json!({"role":"compactiom","content":{"$t":5},"summary":{"+t":3}}));
        rt_any(
            json!({"role":"pluginNote","content":{"$t":0},"summary":{"$t":-1},"command":{"$c":2},"output":{"$lit":{"$t":1}}}),
        );
        rt_any(json!({"role":"pluginNote","content":{"$lit":"x"},"summary":"real text"}));
        rt_any(json!({"role":"pluginNote","content":[
            {"type":"text","text":{"$t":0}},
            {"type":"thinking","thinking":{"$lit":7}},
            {"type":"toolCall","id":"c1","arguments":{"$c":3}},
            {"type":"toolCall","id":"c2","name":"read","arguments":{"$c":3}},
            {"type":"text","text":"after"}
        ]}));
        // Objects that only resemble one (more keys, another key, not a length) are left as
        // they are: their skeletons, and so their identities, do not change.
        let m: AgentMessage = serde_json::from_value(
            json!({"role":"pluginNote","content":{"$t":5,"x":1},"summary":{"$t":"five"}}),
        )
        .unwrap();
        let e = encode(&m).unwrap();
        assert!(!e.skeleton.unwrap().contains(LIT));
    }

    /// Found by the `lossless_codec` fuzz target: a number with a long mantissa (here 103
    /// digits) parsed one unit off, was stored as that float, and read back as another one, so
    /// the message that came out of the store was not the one that went in. serde_json's
    /// `float_roundtrip` parses correctly rounded; every float survives the codec.
    #[test]
    fn long_floats_survive_the_codec_unchanged() {
        let long = format!("3{}", "9".repeat(102));
        let text = format!(
            r#"{{"role":"system","content":"a plugin message","x-vendor":{{"kept":[1,2,{long}]}},"x":0.30000000000000004}}"#
        );
        let m: AgentMessage = serde_json::from_str(&text).unwrap();
        let e = encode(&m).unwrap();
        let back = decode(e.role, &e.text, e.stored_skeleton.as_deref(), e.ts).unwrap();
        assert_eq!(back, m, "the stored message reads back as itself");
        let again: AgentMessage =
            serde_json::from_str(&serde_json::to_string(&m).unwrap()).unwrap();
        assert_eq!(again, m, "the message's own JSON reads back as itself");
    }

    /// Messages of every shape, for the pinned identities below.
    fn pinned_messages() -> Vec<Value> {
        vec![
            json!({"role":"user","content":"hi\nthere","timestamp":5}),
            json!({"role":"user","content":[{"type":"text","text":"a"},{"type":"image","data":"AAA","mimeType":"image/png"}]}),
            json!({"role":"assistant","content":[{"type":"thinking","thinking":"hmm","thinkingSignature":"x"},{"type":"text","text":"ok"},{"type":"toolCall","id":"c1","name":"read","arguments":{"path":"a(b).rs","n":1.5}}],"api":"x","model":"m","usage":{"input":1,"output":2,"cacheRead":0,"cacheWrite":0,"totalTokens":3},"stopReason":"toolUse","timestamp":1.5}),
            json!({"role":"assistant","content":[{"type":"text","text":"done"}],"model":"m","timestamp":1_700_000_000_123_i64}),
            json!({"role":"toolResult","toolCallId":"c1","toolName":"read","content":[{"type":"text","text":""},{"type":"text","text":"x\ny"}],"isError":false,"timestamp":9}),
            json!({"role":"toolResult","toolCallId":"c2","toolName":"grep","content":[{"type":"text","text":"hit"}],"details":{"m":{"$t":-1}},"timestamp":10}),
            json!({"role":"bashExecution","command":"ls","output":"a\nb","exitCode":0}),
            json!({"role":"compactionSummary","summary":"s","tokensBefore":10}),
            json!({"role":"system","content":"sys","timestamp":3}),
            json!({"role":"custom","customType":"x","content":"c","display":true}),
        ]
    }

    /// The identity hash and both skeletons are what every stored message was keyed and
    /// written with: a change to how they are computed would store a message the host sends
    /// again a second time. Pinned as the versions before computed them.
    #[test]
    fn identities_and_skeletons_are_pinned() {
        let got: Vec<String> = pinned_messages()
            .into_iter()
            .map(|v| {
                let m: AgentMessage = serde_json::from_value(v).unwrap();
                let e = encode(&m).unwrap();
                format!(
                    "{:016x} {} {}",
                    e.hash,
                    e.skeleton.as_deref().unwrap_or("-"),
                    e.stored_skeleton.as_deref().unwrap_or("-")
                )
            })
            .collect();
        // Hash, skeleton, stored skeleton ("-": none).
        let want = [
            r#"e88b107e9a011b0c - -"#,
            r#"b59ccf4520ccdee7 {"content":[{"type":"text","text":{"$t":1}},{"type":"image","data":"AAA","mimeType":"image/png"}]} {"content":[{"type":"text","text":{"$t":-1}},{"type":"image","data":"AAA","mimeType":"image/png"}]}"#,
            r#"01b51e31c0099814 {"timestamp":1.5,"content":[{"type":"thinking","thinking":{"$t":3},"thinkingSignature":"x"},{"type":"text","text":{"$t":2}},{"type":"toolCall","id":"c1","name":"read","arguments":{"$c":32}}],"api":"x","model":"m","usage":{"input":1,"output":2,"cacheRead":0,"cacheWrite":0,"totalTokens":3},"stopReason":"toolUse"} {"timestamp":1.5,"content":[{"type":"thinking","thinking":{"$t":3},"thinkingSignature":"x"},{"type":"text","text":{"$t":2}},{"type":"toolCall","id":"c1","name":"read","arguments":{"$c":-1}}],"api":"x","model":"m","usage":{"input":1,"output":2,"cacheRead":0,"cacheWrite":0,"totalTokens":3},"stopReason":"toolUse"}"#,
            r#"377d5f957eb940c3 {"model":"m","content":[{"type":"text","text":{"$t":4}}]} {"model":"m","content":[{"type":"text","text":{"$t":-1}}]}"#,
            r#"6035eb75f510cefb {"isError":false,"toolCallId":"c1","toolName":"read","content":[{"type":"text","text":{"$t":0}},{"type":"text","text":{"$t":3}}]} {"isError":false,"toolCallId":"c1","toolName":"read","content":[{"type":"text","text":{"$t":0}},{"type":"text","text":{"$t":-1}}]}"#,
            r#"c71e3f8ac3e52269 {"details":{"m":{"$t":-1}},"toolCallId":"c2","toolName":"grep","content":[{"type":"text","text":{"$t":3}}]} {"details":{"m":{"$t":-1}},"toolCallId":"c2","toolName":"grep","content":[{"type":"text","text":{"$t":-1}}]}"#,
            r#"c6fb213aef033cdf {"role":"bashExecution","command":{"$t":2},"output":{"$t":3},"exitCode":0} {"role":"bashExecution","command":{"$t":2},"output":{"$t":-1},"exitCode":0}"#,
            r#"84ba62775c806530 {"role":"compactionSummary","summary":{"$t":1},"tokensBefore":10} {"role":"compactionSummary","summary":{"$t":-1},"tokensBefore":10}"#,
            r#"9c12c2131ef09aec {"role":"system","content":{"$t":3},"timestamp":3} {"role":"system","content":{"$t":-1},"timestamp":3}"#,
            r#"e9230233c849a2f7 {"role":"custom","customType":"x","content":{"$t":1},"display":true} {"role":"custom","customType":"x","content":{"$t":-1},"display":true}"#,
        ];
        assert_eq!(got, want);
    }

    #[test]
    fn plain_user_has_no_skeleton_and_hash_differs_by_timestamp() {
        let a = encode(&AgentMessage::user("hello").with_timestamp(1)).unwrap();
        let b = encode(&AgentMessage::user("hello").with_timestamp(2)).unwrap();
        assert!(a.skeleton.is_none());
        assert_ne!(a.hash, b.hash);
        assert_eq!(
            a.hash,
            encode(&AgentMessage::user("hello").with_timestamp(1))
                .unwrap()
                .hash
        );
    }
}
