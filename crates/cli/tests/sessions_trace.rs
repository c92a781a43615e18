//! `clawctx sessions trace KEY [--turn N] [--json]` over a turn trace in the state dir (written
//! here with the gateway's own store, as the gateway writes it): the turn table, one turn's
//! parts, left-out reasons, warnings and diff to the turn before, the same as JSON, and the
//! errors when there is nothing to show.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use clawctx_gateway::trace::store::TraceDb;
use clawctx_gateway::trace::{
    trace_path, EngineServed, LeftItem, LeftOut, ModelTrace, RecallHitTrace, TracePart,
    TraceSettings, TurnTrace,
};

const KEY: &str = "agent:main:cli-trace";

fn part(kind: &str, index: u32, id: Option<&str>, tokens: u64) -> TracePart {
    TracePart {
        kind: kind.into(),
        index: Some(index),
        id: id.map(str::to_owned),
        depth: (kind == "summary").then_some(1),
        role: Some("user".into()),
        tokens,
        digest: format!("{index:08x}"),
        span: (kind == "summary").then_some([0, 9]),
        quotes: if kind == "recalled" {
            vec!["msg_3".into()]
        } else {
            Vec::new()
        },
        // Why the recalled block quotes its message: the engine's score.
        hits: if kind == "recalled" {
            vec![RecallHitTrace {
                id: "msg_3".into(),
                score: Some(4.5),
                matched: 2,
            }]
        } else {
            Vec::new()
        },
    }
}

fn write_traces(state: &std::path::Path) {
    let mut db = TraceDb::open(&trace_path(state), TraceSettings::default()).unwrap();
    let engine = EngineServed {
        id: "lossless".into(),
        selected: None,
        reason: "lossless is the configured engine".into(),
    };
    let first = TurnTrace {
        session_key: KEY.into(),
        at_ms: 1_700_000_000_000,
        source: "turn".into(),
        session_id: "s1".into(),
        engine: engine.clone(),
        token_budget: Some(1000),
        parts: vec![
            part("raw", 0, Some("msg_10"), 300),
            part("raw", 1, Some("msg_11"), 300),
        ],
        gateway_tokens: 600,
        model: Some(ModelTrace {
            calls: 1,
            latency_ms: 12.5,
            input_tokens: 700,
            output_tokens: 20,
            cached_tokens: 0,
            outcome: "ok".into(),
            ..Default::default()
        }),
        ..Default::default()
    };
    db.insert(&first).unwrap();
    let second = TurnTrace {
        at_ms: 1_700_000_060_000,
        parts: vec![
            part("summary", 0, Some("sum_4"), 200),
            part("recalled", 1, None, 150),
            part("raw", 2, Some("msg_11"), 300),
            part("raw", 3, Some("msg_12"), 400),
        ],
        gateway_tokens: 1050,
        left_out: Some(LeftOut {
            known: true,
            items: 1,
            tokens: 300,
            messages: 1,
            listed: vec![LeftItem {
                id: "msg_10".into(),
                tokens: 300,
                first_seq: 10,
                last_seq: 10,
                quoted: false,
                reason: String::new(),
            }],
            unused: Some(0),
            stored_messages: Some(13),
            summarized_messages: 10,
            ..Default::default()
        }),
        model: Some(ModelTrace {
            calls: 1,
            latency_ms: 15.0,
            input_tokens: 1100,
            output_tokens: 30,
            cached_tokens: 640,
            outcome: "ok".into(),
            ..Default::default()
        }),
        ..first
    };
    db.insert(&second).unwrap();
}

#[test]
fn the_trace_of_a_session_is_shown_as_a_table_a_turn_and_json() {
    let state = tempfile::tempdir().unwrap();

    // No trace file yet: a clear error.
    let r = common::run(state.path(), &["sessions", "trace", KEY]);
    assert_ne!(r.code, 0, "{r}");
    assert!(r.stderr.contains("no turn trace"), "{r}");

    write_traces(state.path());
    let r = common::run(state.path(), &["sessions", "trace", KEY]);
    assert_eq!(r.code, 0, "{r}");
    assert!(r.stdout.contains("2 turns kept"), "{r}");
    assert!(r.stdout.contains("engine lossless: turns 1..2"), "{r}");
    assert!(
        r.stdout
            .contains("last assembly (turn 2): 1050 tokens of 1000 (105%)"),
        "{r}"
    );
    let rows: Vec<&str> = r
        .stdout
        .lines()
        .filter(|l| l.trim_start().starts_with(['1', '2']) && l.contains("lossless"))
        .collect();
    assert_eq!(rows.len(), 2, "{r}");
    assert!(rows[0].trim_start().starts_with('2'), "newest first: {r}");
    assert!(rows[0].contains("2023-11-14 22:14:20"), "{r}");
    assert!(rows[0].trim_end().ends_with("640"), "cached tokens: {r}");

    let r = common::run(state.path(), &["sessions", "trace", KEY, "--turn", "2"]);
    assert_eq!(r.code, 0, "{r}");
    for expected in [
        "turn 2 (turn, 2023-11-14 22:14:20 UTC)",
        "engine lossless: lossless is the configured engine",
        "sum_4",
        "depth 1, messages 0..9",
        "quotes msg_3 (score 4.50, 2 matched)",
        "msg_12",
        "left out: 1 items, 300 tokens",
        "msg_10",
        "over budget: 300 tokens",
        "warning: over budget by 50 tokens",
        "640 cached",
        "since turn 1:",
        "1 new summaries (sum_4) standing for 10 messages",
        "parts went out",
    ] {
        assert!(r.stdout.contains(expected), "{expected:?} in\n{r}");
    }

    let r = common::run(
        state.path(),
        &["sessions", "trace", KEY, "--turn", "2", "--json"],
    );
    assert_eq!(r.code, 0, "{r}");
    let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(v["turn"]["turn"], 2);
    assert_eq!(v["turn"]["leftOut"]["listed"][0]["id"], "msg_10");
    assert_eq!(v["diff"]["previous"], 1);
    assert_eq!(v["diff"]["wentOut"][0]["reference"], "msg_10");
    assert_eq!(v["diff"]["summarized"][0]["reference"], "sum_4");

    let r = common::run(state.path(), &["sessions", "trace", KEY, "--json"]);
    assert_eq!(r.code, 0, "{r}");
    let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(v["page"]["total"], 2);
    assert_eq!(v["session"]["engines"][0]["engine"], "lossless");

    let r = common::run(state.path(), &["sessions", "trace", KEY, "--turn", "9"]);
    assert_ne!(r.code, 0, "{r}");
    assert!(r.stderr.contains("no turn 9"), "{r}");
    let r = common::run(state.path(), &["sessions", "trace", "agent:main:other"]);
    assert_ne!(r.code, 0, "{r}");
    assert!(r.stderr.contains("no traced turns"), "{r}");
}
