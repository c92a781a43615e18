//! The campaign's messages: every message carries one token `ck<id>k` naming it, so a store
//! can be counted by content identity (how many stored messages hold each token) whatever
//! became of its rows, ids or order.
//!
//! A message is a pure function of its id (text, role, timestamp), and a unit (one turn, one
//! batch, one imported file) is a pure function of its first id and its length, so a unit
//! whose answer a kill swallowed can be sent again, as a host's outbox does, byte for byte.

use clawctx_protocol::{AgentMessage, Content, ContentBlock};
use serde_json::json;

use crate::rng::Rng;

/// The token of message `id`.
pub fn token(id: u64) -> String {
    format!("ck{id}k")
}

/// Every token in `text`, as ids (a token is `ck`, decimal digits, `k`).
pub fn tokens_in(text: &str) -> Vec<u64> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i + 2 < bytes.len() {
        if bytes[i] == b'c' && bytes[i + 1] == b'k' {
            let start = i + 2;
            let mut end = start;
            while end < bytes.len() && bytes[end].is_ascii_digit() {
                end += 1;
            }
            if end > start && end < bytes.len() && bytes[end] == b'k' {
                if let Ok(id) = text[start..end].parse() {
                    out.push(id);
                }
                i = end + 1;
                continue;
            }
        }
        i += 1;
    }
    out
}

/// Words of the generated text (none contains `ck` followed by a digit).
const WORDS: &[&str] = &[
    "the",
    "build",
    "failed",
    "because",
    "config",
    "parser",
    "rejected",
    "value",
    "we",
    "fixed",
    "it",
    "by",
    "updating",
    "src/main.rs",
    "and",
    "rerunning",
    "tests",
    "deploy",
    "server",
    "latency",
    "improved",
    "after",
    "cache",
    "change",
    "user",
    "asked",
    "about",
    "migration",
    "schema",
    "version",
    "check",
    "logs",
    "error",
    "timeout",
    "retry",
    "policy",
    "release",
];

fn words(rng: &mut Rng, n: u64) -> String {
    (0..n)
        .map(|_| *rng.pick(WORDS))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The timestamp of message `id` (distinct per id, so identities never collide).
fn ts(id: u64) -> i64 {
    1_700_000_000_000 + (id as i64) * 1_000
}

/// One turn of `n >= 4` messages (ids `first..first + n`), shaped as a host records one: a
/// user prompt, then (odd `n`) an assistant message calling two tools and their two results,
/// then tool call/result pairs, then the assistant's answer. Never two assistant messages in
/// a row, so a replay of the turn runs the same calls.
fn turn(first: u64, n: u64) -> Vec<AgentMessage> {
    let last = first + n.max(4) - 1;
    let mut out = Vec::with_capacity(n as usize);
    let mut rng = Rng::new(first);
    out.push(
        AgentMessage::user(format!(
            "{} {}",
            token(first),
            words(&mut rng, 12 + first % 20)
        ))
        .with_timestamp(ts(first)),
    );
    let mut id = first + 1;
    let result = |rng: &mut Rng, call: &str, id: u64| {
        AgentMessage::tool_result(
            call,
            "read",
            format!("{} {}", token(id), words(rng, 40 + id % 60)),
        )
        .with_timestamp(ts(id))
    };
    if (last - id) % 2 == 1 {
        let calls = [format!("call_{id}a"), format!("call_{id}b")];
        let mut m =
            AgentMessage::tool_call(&calls[0], "read", json!({"path": format!("src/m{id}a.rs")}));
        if let AgentMessage::Assistant(a) = &mut m {
            if let Content::Blocks(blocks) = &mut a.content {
                let second = AgentMessage::tool_call(
                    &calls[1],
                    "read",
                    json!({"path": format!("src/m{id}b.rs")}),
                );
                if let Some(call) = second.tool_calls().next() {
                    blocks.push(ContentBlock::ToolCall(call.clone()));
                }
                blocks.insert(
                    0,
                    ContentBlock::text(format!("{} reading two files", token(id))),
                );
            }
        }
        out.push(m.with_timestamp(ts(id)));
        out.push(result(&mut rng, &calls[0], id + 1));
        out.push(result(&mut rng, &calls[1], id + 2));
        id += 3;
    }
    while id < last {
        let call = format!("call_{id}");
        let mut m =
            AgentMessage::tool_call(&call, "read", json!({"path": format!("src/m{id}.rs")}));
        if let AgentMessage::Assistant(a) = &mut m {
            if let Content::Blocks(blocks) = &mut a.content {
                blocks.insert(
                    0,
                    ContentBlock::text(format!("{} reading the file", token(id))),
                );
            }
        }
        out.push(m.with_timestamp(ts(id)));
        out.push(result(&mut rng, &call, id + 1));
        id += 2;
    }
    out.push(
        AgentMessage::assistant(format!(
            "{} {}",
            token(last),
            words(&mut rng, 20 + last % 30)
        ))
        .with_timestamp(ts(last)),
    );
    out
}

/// The turns of the unit of `count` messages (at least 4) from id `first`, as (first id,
/// messages): turns of four messages, the last turn taking the remainder (four to seven).
pub fn turn_ranges(first: u64, count: u64) -> Vec<(u64, u64)> {
    let end = first + count.max(4);
    let mut out = Vec::new();
    let mut id = first;
    while id < end {
        let n = if end - id >= 8 { 4 } else { end - id };
        out.push((id, n));
        id += n;
    }
    out
}

/// The unit of `count` messages (at least 4) from id `first`: its [`turn_ranges`]' turns.
pub fn unit(first: u64, count: u64) -> Vec<AgentMessage> {
    turn_ranges(first, count)
        .into_iter()
        .flat_map(|(id, n)| turn(id, n))
        .collect()
}

/// The unit as an OpenClaw session file (header, then `message` entries chained by
/// `parentId`), the format `lcm import` and `bootstrap` read.
pub fn session_jsonl(session_id: &str, first: u64, count: u64) -> String {
    let mut out = json!({"type": "session", "version": 3, "id": session_id, "timestamp": "2023-11-14T22:13:20.000Z", "cwd": "/"})
        .to_string();
    out.push('\n');
    let mut parent: Option<String> = None;
    for (i, m) in unit(first, count).into_iter().enumerate() {
        let id = format!("e{first}x{i}");
        let entry = json!({
            "type": "message",
            "id": id,
            "parentId": parent,
            "timestamp": "2023-11-14T22:13:20.000Z",
            "message": m,
        });
        out.push_str(&entry.to_string());
        out.push('\n');
        parent = Some(id);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_message_of_a_unit_carries_its_own_token_once() {
        for (first, count) in [
            (1u64, 4u64),
            (10, 5),
            (20, 6),
            (100, 7),
            (200, 150),
            (1_000, 1_501),
        ] {
            let msgs = unit(first, count);
            assert_eq!(msgs.len() as u64, count, "unit({first}, {count})");
            for (i, m) in msgs.iter().enumerate() {
                let text = serde_json::to_string(m).unwrap_or_default();
                assert_eq!(
                    tokens_in(&text),
                    vec![first + i as u64],
                    "message {i} of unit({first}, {count}): {text}"
                );
            }
        }
    }

    #[test]
    fn no_two_assistant_messages_follow_each_other_and_every_call_has_its_result() {
        let msgs = unit(7, 1_503);
        for pair in msgs.windows(2) {
            let both = pair.iter().all(|m| matches!(m, AgentMessage::Assistant(_)));
            assert!(!both, "two assistant messages in a row: {pair:?}");
        }
        let calls: Vec<String> = msgs
            .iter()
            .flat_map(|m| m.tool_calls().map(|c| c.id.clone()))
            .collect();
        let results: Vec<String> = msgs
            .iter()
            .filter_map(|m| m.tool_result_id().map(str::to_owned))
            .collect();
        assert_eq!(calls, results);
    }

    #[test]
    fn units_are_reproducible() {
        assert_eq!(
            serde_json::to_string(&unit(42, 9)).unwrap_or_default(),
            serde_json::to_string(&unit(42, 9)).unwrap_or_default()
        );
    }

    #[test]
    fn tokens_are_found_among_other_text() {
        assert_eq!(tokens_in("check ck12k and ck7 and ckk ck3k"), vec![12, 3]);
        assert_eq!(tokens_in("ck"), Vec::<u64>::new());
    }
}
