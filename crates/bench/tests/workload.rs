//! Generator determinism: same seed → identical bytes; every message unique; sizes exact;
//! the file reads back as the same turns; the documented shape holds.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashSet;

use clawctx_bench::workload::{
    write_jsonl, write_to, JsonlTurns, Workload, WorkloadKind, WorkloadSpec,
};
use clawctx_protocol::AgentMessage;

fn bytes(spec: WorkloadSpec) -> Vec<u8> {
    let mut v = Vec::new();
    write_to(spec, &mut v).expect("write");
    v
}

#[test]
fn same_seed_same_bytes_other_seed_other_bytes() {
    for kind in [WorkloadKind::Chat, WorkloadKind::Tools, WorkloadKind::Mixed] {
        let spec = WorkloadSpec {
            kind,
            messages: 1_000,
            seed: 7,
        };
        let a = bytes(spec);
        assert_eq!(a, bytes(spec), "{kind}: two runs with the same seed differ");
        assert_ne!(
            a,
            bytes(WorkloadSpec { seed: 8, ..spec }),
            "{kind}: the seed changes nothing"
        );
    }
}

#[test]
fn exact_sizes_unique_messages_and_documented_shape() {
    for (kind, n) in [
        (WorkloadKind::Chat, 1_000u64),
        (WorkloadKind::Tools, 1_001),
        (WorkloadKind::Mixed, 1_003),
    ] {
        let spec = WorkloadSpec {
            kind,
            messages: n,
            seed: 42,
        };
        let mut seen = HashSet::new();
        let mut count = 0u64;
        let mut tool_turns = 0;
        for turn in Workload::new(spec) {
            assert!(
                matches!(turn.messages[0], AgentMessage::User(_)),
                "{kind}: a turn must start with a user message"
            );
            if turn.messages.len() == 4 {
                tool_turns += 1;
                assert!(
                    turn.messages[1].tool_calls().next().is_some(),
                    "{kind}: the second message must call a tool"
                );
                let result = turn.messages[2].plain_text();
                assert!(
                    (2_000..=6_000).contains(&result.len()),
                    "{kind}: tool result of {} chars",
                    result.len()
                );
            }
            for m in &turn.messages {
                count += 1;
                let text = m.plain_text();
                let key = serde_json::to_string(m).expect("json");
                assert!(seen.insert(key), "{kind}: duplicate message {text:?}");
                match m {
                    AgentMessage::User(_) => assert!(
                        (150..=450).contains(&text.len()),
                        "{kind}: user message of {} chars",
                        text.len()
                    ),
                    AgentMessage::Assistant(_) if m.tool_calls().next().is_none() => {
                        assert!(
                            (300..=1_500).contains(&text.len()),
                            "{kind}: assistant message of {} chars",
                            text.len()
                        )
                    }
                    _ => {}
                }
            }
        }
        assert_eq!(count, n, "{kind}: wrong number of messages");
        match kind {
            WorkloadKind::Chat => assert_eq!(tool_turns, 0),
            WorkloadKind::Tools => {
                assert!(tool_turns >= 249, "tools: only {tool_turns} tool turns")
            }
            WorkloadKind::Mixed => assert!(
                tool_turns > 50 && tool_turns < 250,
                "mixed: {tool_turns} tool turns"
            ),
        }
    }
}

#[test]
fn file_round_trip_and_header() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("w.jsonl");
    let spec = WorkloadSpec {
        kind: WorkloadKind::Mixed,
        messages: 500,
        seed: 3,
    };
    let report = write_jsonl(spec, &path).expect("write");
    assert_eq!(report.messages, 500);
    let text = std::fs::read_to_string(&path).expect("read");
    assert_eq!(report.bytes, text.len() as u64);
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect();
    assert_eq!(lines.len(), 501, "header + one line per message");
    assert_eq!(lines[0]["type"], "session");
    assert_eq!(lines[0]["workload"]["messages"], 500);
    let mut parent = serde_json::Value::Null;
    let mut ids = HashSet::new();
    for l in &lines[1..] {
        assert_eq!(l["type"], "message");
        assert_eq!(
            l["parentId"], parent,
            "parentId must chain to the previous entry"
        );
        assert!(l["timestamp"].as_str().is_some_and(|t| t.ends_with('Z')));
        assert!(
            ids.insert(l["id"].as_str().expect("id").to_owned()),
            "duplicate entry id"
        );
        parent = l["id"].clone();
    }
    let back: Vec<_> = JsonlTurns::open(&path)
        .expect("open")
        .map(|t| t.expect("turn"))
        .collect();
    let gen: Vec<_> = Workload::new(spec).collect();
    assert_eq!(back, gen, "the file must read back as the generated turns");
}
