//! Integration tests of `clawctx-transcript` against real files in temp dirs. Test names carry
//! the contract section they check (`s10_...` = §10 and so on).

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests may panic on setup failures

use std::collections::HashSet;
use std::path::Path;
use std::time::Duration;

use clawctx_protocol::transcript::{
    BranchSummaryEntryData, CompactionEntryData, CustomMessageEntryData, EntryKind,
};
use clawctx_protocol::{
    AgentMessage, Content, JsonMap, TranscriptReplacement, TranscriptRewriteRequest,
    BRANCH_SUMMARY_PREFIX, BRANCH_SUMMARY_SUFFIX, COMPACTION_SUMMARY_PREFIX,
    COMPACTION_SUMMARY_SUFFIX,
};
use clawctx_transcript::*;
use serde_json::{json, Value};

/// A session file in OpenClaw's (Pi SessionManager) shape, written by hand from §10: header,
/// then `{type,id,parentId,timestamp,...}` entries of every kind, including a second branch
/// (`b1` hangs off `a2`, abandoned) and an entry type this crate does not know.
const FIXTURE: &str = r#"{"type":"session","version":3,"id":"6f1d1c0e-5a0b-4f3e-9d4e-0c8c2f0f9a11","timestamp":"2026-03-01T09:00:00.000Z","cwd":"/home/dev/project"}
{"type":"model_change","id":"a0000001","parentId":null,"timestamp":"2026-03-01T09:00:00.100Z","provider":"anthropic","modelId":"claude-sonnet-4"}
{"type":"thinking_level_change","id":"a0000002","parentId":"a0000001","timestamp":"2026-03-01T09:00:00.200Z","thinkingLevel":"low"}
{"type":"message","id":"a1","parentId":"a0000002","timestamp":"2026-03-01T09:00:01.000Z","message":{"role":"user","content":"list the files","timestamp":1772355601000}}
{"type":"message","id":"a2","parentId":"a1","timestamp":"2026-03-01T09:00:02.000Z","message":{"role":"assistant","content":[{"type":"thinking","thinking":"use ls","thinkingSignature":"sig"},{"type":"toolCall","id":"call_1","name":"bash","arguments":{"command":"ls"}}],"api":"anthropic-messages","provider":"anthropic","model":"claude-sonnet-4","usage":{"input":120,"output":30,"cacheRead":0,"cacheWrite":0,"totalTokens":150,"cost":{"input":0.1,"output":0.2,"cacheRead":0,"cacheWrite":0,"total":0.3}},"stopReason":"toolUse","timestamp":1772355602000,"responseId":"resp_9"}}
{"type":"message","id":"b1","parentId":"a2","timestamp":"2026-03-01T09:00:02.500Z","message":{"role":"toolResult","toolCallId":"call_1","toolName":"bash","content":[{"type":"text","text":"ABANDONED"}],"isError":false,"timestamp":1772355602500}}
{"type":"message","id":"a3","parentId":"a2","timestamp":"2026-03-01T09:00:03.000Z","message":{"role":"toolResult","toolCallId":"call_1","toolName":"bash","content":[{"type":"text","text":"Cargo.toml\nsrc"}],"details":{"exitCode":0},"isError":false,"timestamp":1772355603000}}
{"type":"custom","id":"a4","parentId":"a3","timestamp":"2026-03-01T09:00:03.500Z","customType":"ext-state","data":{"k":1}}
{"type":"custom_message","id":"a5","parentId":"a4","timestamp":"2026-03-01T09:00:04.000Z","customType":"reminder","content":"remember the tests","display":true}
{"type":"label","id":"a6","parentId":"a5","timestamp":"2026-03-01T09:00:04.500Z","targetId":"a3","label":"ls output"}
{"type":"session_info","id":"a7","parentId":"a6","timestamp":"2026-03-01T09:00:05.000Z","name":"file listing"}
{"type":"branch_summary","id":"a8","parentId":"a7","timestamp":"2026-03-01T09:00:06.000Z","fromId":"b1","summary":"tried something else","details":{"readFiles":[]}}
{"type":"future_entry_kind","id":"a9","parentId":"a8","timestamp":"2026-03-01T09:00:06.500Z","payload":{"x":[1,2]}}
{"type":"message","id":"a10","parentId":"a9","timestamp":"2026-03-01T09:00:07.000Z","message":{"role":"assistant","content":[{"type":"text","text":"Cargo.toml and src."}],"api":"anthropic-messages","provider":"anthropic","model":"claude-sonnet-4","usage":{"input":200,"output":10,"cacheRead":0,"cacheWrite":0,"totalTokens":210},"stopReason":"stop","timestamp":1772355607000}}
"#;

fn write_fixture(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("6f1d1c0e-5a0b-4f3e-9d4e-0c8c2f0f9a11.jsonl");
    std::fs::write(&path, FIXTURE).unwrap();
    path
}

fn lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn ids(path: &[&clawctx_protocol::transcript::TranscriptEntry]) -> Vec<String> {
    path.iter().map(|e| e.id.clone()).collect()
}

fn new_file(dir: &Path) -> SessionFile {
    let mut f = SessionFile::create(dir.join("s.jsonl"), "sess-1", "/srv/app").unwrap();
    f.set_sync_writes(false);
    f
}

fn text_of(m: &AgentMessage) -> String {
    match m {
        AgentMessage::User(u) => match &u.content {
            Content::Text(t) => t.clone(),
            Content::Blocks(_) => m.plain_text(),
        },
        other => other.plain_text(),
    }
}

// ---------------------------------------------------------------------------------------------
// §10 transcript JSONL: fixture round trip, header, ids, parent chain, leaf.

#[test]
fn s10_openclaw_fixture_opens_and_every_line_round_trips() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_fixture(dir.path());
    let file = SessionFile::open(&path).unwrap();
    assert!(file.warnings().is_empty());
    assert_eq!(file.session_id(), "6f1d1c0e-5a0b-4f3e-9d4e-0c8c2f0f9a11");
    assert_eq!(file.header().cwd, "/home/dev/project");
    assert_eq!(file.entries().len(), 13);
    assert_eq!(file.leaf_id(), Some("a10"));
    // The active branch skips the abandoned `b1`.
    assert_eq!(
        ids(&file.active_path()),
        ["a0000001", "a0000002", "a1", "a2", "a3", "a4", "a5", "a6", "a7", "a8", "a9", "a10"]
    );
    // Every entry serializes back to exactly the JSON it was read from (unknown fields and
    // unknown entry types included).
    let original = lines(&path);
    assert_eq!(serde_json::to_value(file.header()).unwrap(), original[0]);
    for (entry, line) in file.entries().iter().zip(&original[1..]) {
        assert_eq!(
            &Value::Object(entry.to_json().unwrap()),
            line,
            "entry {}",
            entry.id
        );
    }
}

#[test]
fn s10_append_to_openclaw_file_keeps_every_earlier_byte() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_fixture(dir.path());
    let mut file = SessionFile::open(&path).unwrap();
    file.set_sync_writes(false);
    let id = file
        .append_message(AgentMessage::user("next").with_timestamp(5))
        .unwrap();
    let bytes = std::fs::read_to_string(&path).unwrap();
    assert!(bytes.starts_with(FIXTURE), "earlier bytes changed");
    let last: Value = serde_json::from_str(bytes.lines().last().unwrap()).unwrap();
    assert_eq!(last["type"], "message");
    assert_eq!(last["id"], id.as_str());
    assert_eq!(last["parentId"], "a10");
    assert_eq!(
        last["message"],
        json!({"role":"user","content":"next","timestamp":5})
    );
    let reopened = SessionFile::open(&path).unwrap();
    assert_eq!(reopened.leaf_id(), Some(id.as_str()));
    assert_eq!(reopened.entries().len(), 14);
}

#[test]
fn s10_create_writes_header_and_appends_chain_with_short_unique_ids() {
    let dir = tempfile::tempdir().unwrap();
    let mut file = new_file(dir.path());
    let header = &lines(file.path())[0];
    assert_eq!(header["type"], "session");
    assert_eq!(header["version"], SESSION_FORMAT_VERSION);
    assert_eq!(header["id"], "sess-1");
    assert_eq!(header["cwd"], "/srv/app");
    let ts = header["timestamp"].as_str().unwrap();
    assert!(
        chrono::DateTime::parse_from_rfc3339(ts).is_ok() && ts.ends_with('Z'),
        "{ts}"
    );

    let mut appended = Vec::new();
    for i in 0..50 {
        appended.push(
            file.append_message(AgentMessage::user(format!("m{i}")))
                .unwrap(),
        );
    }
    let mut fields = JsonMap::new();
    fields.insert("provider".into(), json!("openai"));
    fields.insert("modelId".into(), json!("gpt-5"));
    appended.push(file.append_other("model_change", fields).unwrap());
    let set: HashSet<_> = appended.iter().collect();
    assert_eq!(set.len(), appended.len(), "ids must be unique");
    for id in &appended {
        assert!(
            id.len() == 8
                && id
                    .chars()
                    .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()),
            "{id}"
        );
    }
    let on_disk = lines(file.path());
    assert_eq!(on_disk.len(), 52);
    assert_eq!(on_disk[1]["parentId"], Value::Null);
    for w in on_disk[1..].windows(2) {
        assert_eq!(w[1]["parentId"], w[0]["id"]);
        assert!(chrono::DateTime::parse_from_rfc3339(w[1]["timestamp"].as_str().unwrap()).is_ok());
    }
    assert_eq!(on_disk[51]["type"], "model_change");
    assert_eq!(on_disk[51]["modelId"], "gpt-5");
    assert_eq!(file.leaf_id(), Some(appended[50].as_str()));
    // Creating over an existing file is refused, the file is untouched.
    let before = std::fs::read(file.path()).unwrap();
    assert!(matches!(
        SessionFile::create(file.path(), "x", "/"),
        Err(TranscriptError::AlreadyExists { .. })
    ));
    assert_eq!(std::fs::read(file.path()).unwrap(), before);
}

#[test]
fn s10_branch_from_starts_new_branch_and_reopen_follows_last_entry() {
    let dir = tempfile::tempdir().unwrap();
    let mut file = new_file(dir.path());
    let a = file.append_message(AgentMessage::user("a")).unwrap();
    let b = file.append_message(AgentMessage::assistant("b")).unwrap();
    let _c = file.append_message(AgentMessage::user("c")).unwrap();
    file.branch_from(&b).unwrap();
    assert_eq!(file.leaf_id(), Some(b.as_str()));
    let d = file.append_message(AgentMessage::user("d")).unwrap();
    assert_eq!(
        file.entry(&d).unwrap().parent_id.as_deref(),
        Some(b.as_str())
    );
    assert_eq!(ids(&file.active_path()), [a.clone(), b.clone(), d.clone()]);
    let reopened = SessionFile::open(file.path()).unwrap();
    assert_eq!(ids(&reopened.active_path()), [a, b, d]);
    assert_eq!(
        reopened.entries().len(),
        4,
        "the abandoned entry stays in the file"
    );

    assert!(matches!(
        file.branch_from("nope"),
        Err(TranscriptError::EntryNotFound { .. })
    ));
    file.reset_leaf();
    let root = file.append_message(AgentMessage::user("new root")).unwrap();
    assert_eq!(file.entry(&root).unwrap().parent_id, None);
    assert_eq!(ids(&file.active_path()), [root]);
}

// ---------------------------------------------------------------------------------------------
// §7.4 "Rebuilt context".

#[test]
fn s7_4_context_without_compaction_maps_entry_kinds() {
    let dir = tempfile::tempdir().unwrap();
    let file = SessionFile::open(write_fixture(dir.path())).unwrap();
    let ctx = file.build_context();
    let roles: Vec<&str> = ctx.iter().map(AgentMessage::role).collect();
    // model_change, thinking_level_change, custom, label, session_info and the unknown type
    // are not in model context; custom_message → custom; branch_summary → user.
    assert_eq!(
        roles,
        [
            "user",
            "assistant",
            "toolResult",
            "custom",
            "user",
            "assistant"
        ]
    );
    match &ctx[3] {
        AgentMessage::Custom(c) => {
            assert_eq!(c.custom_type, "reminder");
            assert_eq!(c.content, Content::Text("remember the tests".into()));
            assert_eq!(c.extra.get("display"), Some(&json!(true)));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        text_of(&ctx[4]),
        format!("{BRANCH_SUMMARY_PREFIX}tried something else{BRANCH_SUMMARY_SUFFIX}")
    );
    // The abandoned branch's message is not there.
    assert!(ctx.iter().all(|m| !m.plain_text().contains("ABANDONED")));
}

#[test]
fn s7_4_context_after_compaction_is_summary_then_kept_entries() {
    let dir = tempfile::tempdir().unwrap();
    let mut file = new_file(dir.path());
    let mut ids = Vec::new();
    for i in 1..=5 {
        let m = if i % 2 == 1 {
            AgentMessage::user(format!("u{i}"))
        } else {
            AgentMessage::assistant(format!("a{i}"))
        };
        ids.push(file.append_message(m).unwrap());
    }
    file.append_label(&ids[0], "start").unwrap();
    file.append_compaction(CompactionEntryData {
        summary: "S1".into(),
        first_kept_entry_id: ids[2].clone(),
        tokens_before: 1234,
        ..Default::default()
    })
    .unwrap();
    file.append_message(AgentMessage::user("u6")).unwrap();

    let ctx = file.build_context();
    let texts: Vec<String> = ctx.iter().map(text_of).collect();
    assert_eq!(
        texts,
        [
            format!("{COMPACTION_SUMMARY_PREFIX}S1{COMPACTION_SUMMARY_SUFFIX}"),
            "u3".into(),
            "a4".into(),
            "u5".into(),
            "u6".into()
        ]
    );
    assert_eq!(
        ctx[0].role(),
        "user",
        "the summary reaches the model as a user message"
    );
    assert_eq!(
        texts[0],
        "The conversation history before this point was compacted into the following summary:\n\n<summary>\nS1\n</summary>"
    );

    // A second compaction supersedes the first; its firstKept is after the first compaction.
    let u7 = file.append_message(AgentMessage::user("u7")).unwrap();
    file.append_compaction(CompactionEntryData {
        summary: "S2".into(),
        first_kept_entry_id: u7,
        ..Default::default()
    })
    .unwrap();
    let texts: Vec<String> = file.build_context().iter().map(text_of).collect();
    assert_eq!(
        texts,
        [
            format!("{COMPACTION_SUMMARY_PREFIX}S2{COMPACTION_SUMMARY_SUFFIX}"),
            "u7".into()
        ]
    );

    // A compaction whose firstKeptEntryId is unknown keeps only what follows it.
    file.append_compaction(CompactionEntryData {
        summary: "S3".into(),
        first_kept_entry_id: "gone".into(),
        ..Default::default()
    })
    .unwrap();
    file.append_message(AgentMessage::assistant("a8")).unwrap();
    let texts: Vec<String> = file.build_context().iter().map(text_of).collect();
    assert_eq!(
        texts,
        [
            format!("{COMPACTION_SUMMARY_PREFIX}S3{COMPACTION_SUMMARY_SUFFIX}"),
            "a8".into()
        ]
    );
}

#[test]
fn s7_4_compaction_on_abandoned_branch_is_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let mut file = new_file(dir.path());
    let u1 = file.append_message(AgentMessage::user("u1")).unwrap();
    file.append_compaction(CompactionEntryData {
        summary: "old".into(),
        first_kept_entry_id: u1.clone(),
        ..Default::default()
    })
    .unwrap();
    file.branch_from(&u1).unwrap();
    file.append_branch_summary(BranchSummaryEntryData {
        from_id: u1.clone(),
        summary: "left".into(),
        ..Default::default()
    })
    .unwrap();
    file.append_custom_message(CustomMessageEntryData {
        custom_type: "note".into(),
        content: json!([{"type":"text","text":"hi"}]),
        ..Default::default()
    })
    .unwrap();
    let ctx = file.build_context();
    let texts: Vec<String> = ctx.iter().map(text_of).collect();
    assert_eq!(
        texts,
        [
            "u1".to_owned(),
            format!("{BRANCH_SUMMARY_PREFIX}left{BRANCH_SUMMARY_SUFFIX}"),
            "hi".into()
        ]
    );
    assert_eq!(ctx[2].role(), "custom");
}

// ---------------------------------------------------------------------------------------------
// Torn and malformed lines.

#[test]
fn torn_last_line_is_reported_skipped_and_cut_before_next_append() {
    let dir = tempfile::tempdir().unwrap();
    let mut file = new_file(dir.path());
    let a = file.append_message(AgentMessage::user("a")).unwrap();
    let b = file.append_message(AgentMessage::assistant("b")).unwrap();
    let path = file.path().to_path_buf();
    let intact = std::fs::read_to_string(&path).unwrap();
    // A crash mid-write: half a line, no newline.
    let torn = r#"{"type":"message","id":"deadbeef","parentId":"#;
    std::fs::write(&path, format!("{intact}{torn}")).unwrap();

    let mut reopened = SessionFile::open(&path).unwrap();
    assert_eq!(reopened.warnings().len(), 1);
    let warning = reopened.warnings()[0].to_string();
    assert!(warning.contains(":4: torn last line"), "{warning}");
    assert!(matches!(
        reopened.warnings()[0],
        TranscriptWarning::TornLastLine { line: 4, .. }
    ));
    assert_eq!(ids(&reopened.active_path()), [a.clone(), b.clone()]);
    // Opening alone changes nothing on disk.
    assert!(std::fs::read_to_string(&path).unwrap().ends_with(torn));

    reopened.set_sync_writes(false);
    let c = reopened.append_message(AgentMessage::user("c")).unwrap();
    let after = std::fs::read_to_string(&path).unwrap();
    assert!(after.starts_with(&intact), "nothing earlier may be lost");
    assert!(!after.contains("deadbeef"));
    let again = SessionFile::open(&path).unwrap();
    assert!(again.warnings().is_empty());
    assert_eq!(ids(&again.active_path()), [a, b.clone(), c.clone()]);
    assert_eq!(
        again.entry(&c).unwrap().parent_id.as_deref(),
        Some(b.as_str())
    );
}

#[test]
fn complete_last_line_without_newline_is_kept_and_next_append_starts_a_fresh_line() {
    let dir = tempfile::tempdir().unwrap();
    let mut file = new_file(dir.path());
    let a = file.append_message(AgentMessage::user("a")).unwrap();
    let path = file.path().to_path_buf();
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, text.trim_end_matches('\n')).unwrap();
    let mut reopened = SessionFile::open(&path).unwrap();
    assert!(reopened.warnings().is_empty());
    reopened.set_sync_writes(false);
    let b = reopened.append_message(AgentMessage::user("b")).unwrap();
    let again = SessionFile::open(&path).unwrap();
    assert_eq!(ids(&again.active_path()), [a, b]);
}

#[test]
fn malformed_middle_line_is_an_error_naming_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.jsonl");
    let mut text: Vec<&str> = FIXTURE.lines().collect();
    text[3] = r#"{"type":"message","id":"a1","parentId":"a0000002","timestamp":"x","message":{"role":"user""#;
    std::fs::write(&path, text.join("\n") + "\n").unwrap();
    let err = SessionFile::open(&path).unwrap_err();
    let shown = err.to_string();
    assert!(
        matches!(err, TranscriptError::Malformed { line: 4, .. }),
        "{shown}"
    );
    assert!(
        shown.starts_with(&format!("{}:4: expected a JSON object", path.display())),
        "{shown}"
    );

    // Valid JSON that is not an entry.
    text[3] = r#"{"type":"message","id":"a1","parentId":"a0000002","timestamp":"x"}"#;
    std::fs::write(&path, text.join("\n") + "\n").unwrap();
    let shown = SessionFile::open(&path).unwrap_err().to_string();
    assert!(
        shown.starts_with(&format!(
            "{}:4: expected a transcript entry",
            path.display()
        )),
        "{shown}"
    );

    // A JSON array line.
    text[3] = "[1,2]";
    std::fs::write(&path, text.join("\n") + "\n").unwrap();
    let shown = SessionFile::open(&path).unwrap_err().to_string();
    assert!(
        shown.contains(":4: expected a JSON object, found an array"),
        "{shown}"
    );

    // A missing header.
    std::fs::write(
        &path,
        FIXTURE.lines().skip(1).collect::<Vec<_>>().join("\n") + "\n",
    )
    .unwrap();
    let shown = SessionFile::open(&path).unwrap_err().to_string();
    assert!(shown.contains(":1: expected a session header"), "{shown}");

    // A duplicated id.
    let mut dup: Vec<&str> = FIXTURE.lines().collect();
    dup.push(dup[3]);
    std::fs::write(&path, dup.join("\n") + "\n").unwrap();
    let shown = SessionFile::open(&path).unwrap_err().to_string();
    assert!(shown.contains(":15: expected a unique entry id"), "{shown}");
}

// ---------------------------------------------------------------------------------------------
// §9 rewriteTranscriptEntries.

fn replace(entry_id: &str, text: &str) -> TranscriptReplacement {
    TranscriptReplacement {
        entry_id: entry_id.into(),
        message: AgentMessage::tool_result("call_1", "bash", text),
    }
}

fn request(replacements: Vec<TranscriptReplacement>) -> TranscriptRewriteRequest {
    TranscriptRewriteRequest {
        replacements,
        allowed_rewrite_suffix_entry_ids: None,
    }
}

#[test]
fn s9_rewrite_noop_reasons() {
    let dir = tempfile::tempdir().unwrap();
    let mut file = new_file(dir.path());

    let r = file.rewrite_transcript_entries(&request(vec![]));
    assert_eq!(
        (r.changed, r.reason.as_deref()),
        (false, Some("no replacements requested"))
    );
    let r = file.rewrite_transcript_entries(&request(vec![replace("  ", "x"), replace("", "y")]));
    assert_eq!(
        r.reason.as_deref(),
        Some("no replacements requested"),
        "blank ids are ignored"
    );

    let r = file.rewrite_transcript_entries(&request(vec![replace("abc", "x")]));
    assert_eq!(
        (r.changed, r.reason.as_deref()),
        (false, Some("empty session"))
    );

    let u = file.append_message(AgentMessage::user("u")).unwrap();
    let label = file.append_label(&u, "l").unwrap();
    let t = file
        .append_message(AgentMessage::tool_result("call_1", "bash", "out"))
        .unwrap();
    // An id on an abandoned branch does not match.
    file.branch_from(&label).unwrap();
    let other = file
        .append_message(AgentMessage::assistant("other"))
        .unwrap();
    let r =
        file.rewrite_transcript_entries(&request(vec![replace(&t, "x"), replace("missing", "y")]));
    assert_eq!(
        (r.changed, r.reason.as_deref()),
        (false, Some("no matching message entries"))
    );

    let r =
        file.rewrite_transcript_entries(&request(vec![replace(&label, "x"), replace(&other, "y")]));
    assert_eq!(
        (r.changed, r.reason.as_deref()),
        (false, Some("invalid first rewrite target"))
    );

    let allowed = TranscriptRewriteRequest {
        replacements: vec![replace(&u, "x")],
        allowed_rewrite_suffix_entry_ids: Some(vec![u.clone(), other.clone()]), // misses `label`
    };
    let before = std::fs::read(file.path()).unwrap();
    let r = file.rewrite_transcript_entries(&allowed);
    assert!(!r.changed);
    let reason = r.reason.unwrap();
    assert!(
        reason.starts_with(REASON_SUFFIX_NOT_ALLOWED) && reason.contains(&label),
        "{reason}"
    );
    assert_eq!((r.bytes_freed, r.rewritten_entries), (0, 0));
    assert_eq!(
        std::fs::read(file.path()).unwrap(),
        before,
        "a refused rewrite writes nothing"
    );
}

#[test]
fn s9_rewrite_branches_and_reappends_with_remapped_references() {
    let dir = tempfile::tempdir().unwrap();
    let mut file = new_file(dir.path());
    let u1 = file.append_message(AgentMessage::user("run ls")).unwrap();
    let call = file
        .append_message(AgentMessage::tool_call(
            "call_1",
            "bash",
            json!({"command":"ls"}),
        ))
        .unwrap();
    let big = "x".repeat(5000);
    let t1 = file
        .append_message(AgentMessage::tool_result("call_1", "bash", big.clone()))
        .unwrap();
    let label = file.append_label(&t1, "big output").unwrap();
    let bs = file
        .append_branch_summary(BranchSummaryEntryData {
            from_id: t1.clone(),
            summary: "went back".into(),
            ..Default::default()
        })
        .unwrap();
    let t2 = file
        .append_message(AgentMessage::tool_result("call_2", "bash", "y".repeat(300)))
        .unwrap();
    let a = file
        .append_message(AgentMessage::assistant("done"))
        .unwrap();
    let old_path = ids(&file.active_path());
    let entries_before = file.entries().len();

    let new1 = AgentMessage::tool_result("call_1", "bash", "[trimmed]");
    // Replacement larger than the original frees nothing for that entry.
    let new2 = AgentMessage::tool_result("call_2", "bash", "z".repeat(400));
    let orig1 = serde_json::to_vec(file.entry(&t1).unwrap().message().unwrap())
        .unwrap()
        .len() as u64;
    let repl1 = serde_json::to_vec(&new1).unwrap().len() as u64;
    let mut allowed: Vec<String> = old_path[2..].to_vec();
    allowed.push("unrelated".into());
    let req = TranscriptRewriteRequest {
        replacements: vec![
            TranscriptReplacement {
                entry_id: t2.clone(),
                message: new2.clone(),
            },
            TranscriptReplacement {
                entry_id: t1.clone(),
                message: new1.clone(),
            },
            TranscriptReplacement {
                entry_id: "".into(),
                message: AgentMessage::user("ignored"),
            },
        ],
        allowed_rewrite_suffix_entry_ids: Some(allowed),
    };
    let r = file.rewrite_transcript_entries(&req);
    assert!(r.changed, "{r:?}");
    assert_eq!(r.reason, None);
    assert_eq!(r.rewritten_entries, 2);
    assert_eq!(r.bytes_freed, orig1 - repl1);

    // New branch: u1, call (unchanged, same ids), then 5 re-appended entries with new ids.
    let path = file.active_path();
    assert_eq!(path.len(), 7);
    assert_eq!(path[0].id, u1);
    assert_eq!(path[1].id, call);
    assert_eq!(
        path[2].parent_id.as_deref(),
        Some(call.as_str()),
        "leaf moved to the first match's parent"
    );
    for (new, old) in path[2..].iter().zip(&old_path[2..]) {
        assert_ne!(&new.id, old, "re-appended entries get fresh ids");
        assert_eq!(new.type_name(), file.entry(old).unwrap().type_name());
    }
    assert_eq!(path[2].message(), Some(&new1));
    assert_eq!(path[5].message(), Some(&new2));
    assert_eq!(path[6].message(), Some(&AgentMessage::assistant("done")));
    match &path[3].kind {
        EntryKind::Other { kind, fields } => {
            assert_eq!(kind, "label");
            assert_eq!(
                fields["targetId"],
                json!(path[2].id),
                "label points at the new id"
            );
        }
        other => panic!("{other:?}"),
    }
    match &path[4].kind {
        EntryKind::BranchSummary(b) => {
            assert_eq!(b.from_id, path[2].id, "branch summary points at the new id")
        }
        other => panic!("{other:?}"),
    }

    // Nothing deleted: the old entries are still in the file, on an abandoned branch.
    let reopened = SessionFile::open(file.path()).unwrap();
    assert_eq!(reopened.entries().len(), entries_before + 5);
    for old in [&t1, &label, &bs, &t2, &a] {
        assert!(reopened.entry(old).is_some());
    }
    assert_eq!(ids(&reopened.active_path()), ids(&file.active_path()));
    let ctx: Vec<String> = reopened
        .build_context()
        .iter()
        .map(AgentMessage::plain_text)
        .collect();
    assert!(ctx.contains(&"[trimmed]".to_owned()));
    assert!(!ctx.iter().any(|t| t.contains(&big)));
}

#[test]
fn s9_rewrite_of_root_message_resets_to_root_and_remaps_compaction() {
    let dir = tempfile::tempdir().unwrap();
    let mut file = new_file(dir.path());
    let u1 = file
        .append_message(AgentMessage::user("long question ".repeat(50)))
        .unwrap();
    let a1 = file
        .append_message(AgentMessage::assistant("answer"))
        .unwrap();
    file.append_compaction(CompactionEntryData {
        summary: "S".into(),
        first_kept_entry_id: a1.clone(),
        ..Default::default()
    })
    .unwrap();
    let r = file.rewrite_transcript_entries(&request(vec![TranscriptReplacement {
        entry_id: u1.clone(),
        message: AgentMessage::user("short"),
    }]));
    assert!(
        r.changed && r.rewritten_entries == 1 && r.bytes_freed > 0,
        "{r:?}"
    );
    let path = file.active_path();
    assert_eq!(
        path[0].parent_id, None,
        "first match had no parent: reset to root"
    );
    match &path[2].kind {
        EntryKind::Compaction(c) => assert_eq!(c.first_kept_entry_id, path[1].id),
        other => panic!("{other:?}"),
    }
    let texts: Vec<String> = file.build_context().iter().map(text_of).collect();
    assert_eq!(
        texts,
        [
            format!("{COMPACTION_SUMMARY_PREFIX}S{COMPACTION_SUMMARY_SUFFIX}"),
            "answer".into()
        ]
    );
}

// ---------------------------------------------------------------------------------------------
// §1.7 visible delta, §8 fork, §10 write lock.

#[test]
fn s1_7_visible_delta_after_cursor_and_stale_cursor() {
    let dir = tempfile::tempdir().unwrap();
    let mut file = new_file(dir.path());
    let u1 = file.append_message(AgentMessage::user("u1")).unwrap();
    file.append_other("custom", JsonMap::new()).unwrap();
    let a1 = file.append_message(AgentMessage::assistant("a1")).unwrap();
    let u2 = file.append_message(AgentMessage::user("u2")).unwrap();

    let all = file.visible_messages_after(None).unwrap();
    assert_eq!(
        all.iter().map(|v| v.entry_id.clone()).collect::<Vec<_>>(),
        [u1.clone(), a1.clone(), u2.clone()]
    );
    let delta = file.visible_messages_after(Some(&u1)).unwrap();
    assert_eq!(
        delta
            .iter()
            .map(|v| v.message.plain_text())
            .collect::<Vec<_>>(),
        ["a1", "u2"]
    );
    assert!(file.visible_messages_after(Some(&u2)).unwrap().is_empty());

    // After a rewrite the old ids are off the active branch: the cursor is stale.
    let r = file.rewrite_transcript_entries(&request(vec![TranscriptReplacement {
        entry_id: a1.clone(),
        message: AgentMessage::assistant("A1"),
    }]));
    assert!(r.changed);
    assert!(matches!(
        file.visible_messages_after(Some(&u2)),
        Err(TranscriptError::CursorNotOnActiveBranch { .. })
    ));
    assert_eq!(file.visible_messages_after(Some(&u1)).unwrap().len(), 2);
}

#[test]
fn s8_fork_copies_only_the_active_branch_with_parent_session() {
    let dir = tempfile::tempdir().unwrap();
    let mut parent = new_file(dir.path());
    let u1 = parent.append_message(AgentMessage::user("u1")).unwrap();
    let _abandoned = parent
        .append_message(AgentMessage::assistant("abandoned"))
        .unwrap();
    parent.branch_from(&u1).unwrap();
    let a1 = parent
        .append_message(AgentMessage::assistant("a1"))
        .unwrap();
    let child_path = dir.path().join("child.jsonl");
    let child = parent.fork_to(&child_path, "child-1").unwrap();
    assert_eq!(child.session_id(), "child-1");
    assert_eq!(ids(&child.active_path()), [u1, a1.clone()]);

    let on_disk = lines(&child_path);
    assert_eq!(on_disk.len(), 3);
    assert_eq!(on_disk[0]["type"], "session");
    assert_eq!(
        on_disk[0]["parentSession"],
        json!(parent.path().to_string_lossy())
    );
    let reopened = SessionFile::open(&child_path).unwrap();
    assert_eq!(reopened.leaf_id(), Some(a1.as_str()));
    assert_eq!(reopened.build_context(), parent.build_context());
    assert!(matches!(
        parent.fork_to(&child_path, "again"),
        Err(TranscriptError::AlreadyExists { .. })
    ));
}

#[test]
fn s10_write_lock_blocks_second_writer_with_bounded_wait() {
    let dir = tempfile::tempdir().unwrap();
    let mut file = new_file(dir.path());
    file.append_message(AgentMessage::user("a")).unwrap();
    let held = WriteLock::acquire(file.path(), Duration::from_secs(1)).unwrap();
    file.set_lock_timeout(Duration::from_millis(100));
    let err = file.append_message(AgentMessage::user("b")).unwrap_err();
    assert!(matches!(err, TranscriptError::LockTimeout { .. }), "{err}");
    drop(held);
    file.append_message(AgentMessage::user("b")).unwrap();
    assert_eq!(file.active_path().len(), 2);
}

#[test]
fn s10_two_handles_append_in_turn_and_see_each_other() {
    let dir = tempfile::tempdir().unwrap();
    let mut one = new_file(dir.path());
    let mut two = SessionFile::open(one.path()).unwrap();
    two.set_sync_writes(false);
    let a = one.append_message(AgentMessage::user("a")).unwrap();
    let b = two.append_message(AgentMessage::assistant("b")).unwrap(); // must attach to `a`
    let c = one.append_message(AgentMessage::user("c")).unwrap(); // must attach to `b`
    let reread = SessionFile::open(one.path()).unwrap();
    assert_eq!(ids(&reread.active_path()), [a, b, c]);
}

#[test]
fn s10_concurrent_threads_appending_never_interleave_lines() {
    let dir = tempfile::tempdir().unwrap();
    let path = new_file(dir.path()).path().to_path_buf();
    let handles: Vec<_> = (0..4)
        .map(|t| {
            let path = path.clone();
            std::thread::spawn(move || {
                let mut f = SessionFile::open(&path).unwrap();
                f.set_sync_writes(false);
                for i in 0..25 {
                    f.append_message(AgentMessage::user(format!("t{t}-{i} {}", "p".repeat(2000))))
                        .unwrap();
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let f = SessionFile::open(&path).unwrap();
    assert!(f.warnings().is_empty());
    assert_eq!(f.entries().len(), 100);
    // Every append attached to the then-last entry: the whole file is one chain.
    assert_eq!(f.active_path().len(), 100);
}

// ---------------------------------------------------------------------------------------------
// §10 sessions.json and the session store.

#[test]
fn s10_store_resolves_creates_and_rotates_sessions() {
    let dir = tempfile::tempdir().unwrap();
    let store = SessionStore::new(dir.path()).with_cwd("/srv");
    let key = main_session_key("ops").unwrap();
    let first = store.resolve(&key).unwrap();
    assert!(first.created);
    assert_eq!(first.agent_id, "ops");
    let sessions_dir = dir.path().join("agents").join("ops").join("sessions");
    assert_eq!(
        first.transcript_path,
        sessions_dir.join(format!("{}.jsonl", first.entry.session_id))
    );
    let t = first.open_transcript().unwrap();
    assert_eq!(t.session_id(), first.entry.session_id);
    assert_eq!(t.header().cwd, "/srv");

    let again = store.resolve(&key).unwrap();
    assert!(!again.created);
    assert_eq!(again.entry.session_id, first.entry.session_id);

    store
        .update(&key, |e| e.thinking_level = Some("high".into()))
        .unwrap();
    let rotated = store.new_session(&key).unwrap();
    assert!(rotated.created);
    assert_ne!(rotated.entry.session_id, first.entry.session_id);
    assert_eq!(
        rotated.entry.thinking_level.as_deref(),
        Some("high"),
        "settings survive /new"
    );
    assert!(first.transcript_path.exists(), "the old transcript stays");
    assert_eq!(
        store.get(&key).unwrap().unwrap().session_id,
        rotated.entry.session_id
    );

    // Keys without an agent id live under the default agent.
    let cron = store.resolve("cron:nightly").unwrap();
    assert_eq!(cron.agent_id, DEFAULT_AGENT_ID);
    assert!(dir
        .path()
        .join("agents/main/sessions/sessions.json")
        .exists());

    let listed = store.list("ops").unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].0, key);
}

#[test]
fn s10_sessions_json_keeps_unknown_fields_and_records_counters() {
    let dir = tempfile::tempdir().unwrap();
    let store = SessionStore::new(dir.path());
    let json_path = store.sessions_json_path("main").unwrap();
    std::fs::create_dir_all(json_path.parent().unwrap()).unwrap();
    let key = "agent:main:main";
    std::fs::write(
        &json_path,
        serde_json::to_string_pretty(&json!({
            key: {
                "sessionId": "s-old", "updatedAt": 5, "sessionStartedAt": 1, "lastInteractionAt": 4,
                "chatType": "direct", "compactionCount": 2, "origin": {"channel": "telegram"},
                "deliveryContext": "x"
            }
        }))
        .unwrap(),
    )
    .unwrap();
    let resolved = store.resolve(key).unwrap();
    assert!(!resolved.created);
    assert_eq!(resolved.entry.session_id, "s-old");
    assert!(
        resolved.transcript_path.exists(),
        "missing transcript is created"
    );

    let updated = store
        .record_tokens(
            key,
            TokenCounters {
                input: Some(100),
                output: Some(20),
                total: Some(120),
                context: None,
            },
        )
        .unwrap();
    assert_eq!(updated.total_tokens, Some(120));
    assert!(updated.updated_at > 5);
    store.record_compaction(key).unwrap();

    let raw: Value = serde_json::from_str(&std::fs::read_to_string(&json_path).unwrap()).unwrap();
    let e = &raw[key];
    assert_eq!(
        e["origin"],
        json!({"channel": "telegram"}),
        "unknown fields kept"
    );
    assert_eq!(e["deliveryContext"], "x");
    assert_eq!(e["inputTokens"], 100);
    assert_eq!(e["outputTokens"], 20);
    assert_eq!(e["compactionCount"], 3);
    assert_eq!(e["chatType"], "direct");
    assert!(e.get("contextTokens").is_none());

    assert!(matches!(
        store.record_tokens("agent:main:nope", TokenCounters::default()),
        Err(TranscriptError::UnknownSessionKey { .. })
    ));
}

#[test]
fn s10_sessions_json_updates_are_atomic_and_never_lost() {
    let dir = tempfile::tempdir().unwrap();
    let store = SessionStore::new(dir.path());
    let threads: Vec<_> = (0..6)
        .map(|t| {
            let store = store.clone();
            std::thread::spawn(move || {
                for i in 0..5 {
                    store.resolve(&format!("agent:main:t{t}-{i}")).unwrap();
                }
            })
        })
        .collect();
    // Meanwhile a reader must always see a complete, parseable file.
    let json_path = store.sessions_json_path("main").unwrap();
    for _ in 0..200 {
        if let Ok(text) = std::fs::read_to_string(&json_path) {
            serde_json::from_str::<Value>(&text).unwrap();
        }
    }
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(
        store.load("main").unwrap().len(),
        30,
        "no update may be lost"
    );
    let leftovers: Vec<_> = std::fs::read_dir(json_path.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn s10_malformed_sessions_json_is_an_error_with_path_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let store = SessionStore::new(dir.path());
    let json_path = store.sessions_json_path("main").unwrap();
    std::fs::create_dir_all(json_path.parent().unwrap()).unwrap();
    std::fs::write(
        &json_path,
        "{\n  \"agent:main:main\": {\"sessionId\": \"a\",\n",
    )
    .unwrap();
    let err = store.resolve("agent:main:main").unwrap_err().to_string();
    assert!(
        err.starts_with(&format!("{}:", json_path.display())),
        "{err}"
    );
    assert!(matches!(
        store.load("main"),
        Err(TranscriptError::Malformed { line: 3, .. })
    ));
    // A well-formed file whose entry has the wrong shape names the entry's line.
    std::fs::write(&json_path, "{\n  \"agent:main:a\": {\"sessionId\": \"a\"},\n  \"agent:main:b\": {\"sessionId\": 7}\n}\n").unwrap();
    let err = store.load("main").unwrap_err();
    assert!(
        matches!(err, TranscriptError::Malformed { line: 3, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("agent:main:b"), "{err}");
}

#[test]
fn s8_store_fork_records_forked_from_parent() {
    let dir = tempfile::tempdir().unwrap();
    let store = SessionStore::new(dir.path());
    let parent_key = "agent:main:main";
    let parent = store.resolve(parent_key).unwrap();
    let mut t = parent.open_transcript().unwrap();
    t.append_message(AgentMessage::user("hello")).unwrap();
    t.append_message(AgentMessage::assistant("hi")).unwrap();

    let child_key = new_subagent_session_key("helper").unwrap();
    let child = store.fork_session(parent_key, &child_key).unwrap();
    assert_eq!(child.agent_id, "helper");
    assert_eq!(child.entry.forked_from_parent, Some(true));
    assert_eq!(
        child.entry.session_file.as_deref(),
        Some(child.transcript_path.to_string_lossy().as_ref())
    );
    let saved = store.get(&child_key).unwrap().unwrap();
    assert_eq!(saved, child.entry);
    let raw: Value = serde_json::from_str(
        &std::fs::read_to_string(store.sessions_json_path("helper").unwrap()).unwrap(),
    )
    .unwrap();
    assert_eq!(raw[&child_key]["forkedFromParent"], true);
    let child_t = child.open_transcript().unwrap();
    assert_eq!(child_t.build_context(), t.build_context());
    assert_eq!(
        child_t.header().parent_session.as_deref(),
        Some(parent.transcript_path.to_string_lossy().as_ref())
    );

    assert!(matches!(
        store.fork_session("agent:main:none", "agent:x:subagent:1"),
        Err(TranscriptError::UnknownSessionKey { .. })
    ));
}

#[test]
fn s10_session_key_parsing() {
    assert_eq!(agent_id_of("agent:main:main"), Some("main"));
    assert_eq!(agent_id_of("agent:work:telegram:group:-1001"), Some("work"));
    assert_eq!(agent_id_of("cron:daily"), None);
    assert_eq!(
        agent_id_of("hook:2b7f0f7e-7d8e-4c38-9f55-1f0cf1d7d3c2"),
        None
    );
    assert_eq!(
        SessionKey::parse("agent:main:subagent:abc").kind(),
        SessionKeyKind::Subagent
    );
    let store = SessionStore::new("state");
    assert_eq!(store.agent_id_for("agent:ops:main"), "ops");
    assert_eq!(store.agent_id_for("hook:x"), DEFAULT_AGENT_ID);
    assert!(store.sessions_dir("../escape").is_err());
    assert!(store.resolve("agent:..:main").is_err());
}

/// Found by the `transcript_jsonl` fuzz target: an entry that is its own parent, or two that
/// name each other, made the active path repeat entries until it was one longer than the file,
/// so the model context held the same messages over and over. Each entry is on the path once.
#[test]
fn a_parent_cycle_in_a_file_ends_the_active_path_instead_of_repeating_entries() {
    let header = r#"{"type":"session","version":3,"id":"s","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/w"}"#;
    let entry = |id: &str, parent: &str, text: &str| {
        json!({"type": "message", "id": id, "parentId": parent, "timestamp": "2026-01-01T00:00:01.000Z",
            "message": {"role": "user", "content": text}})
        .to_string()
    };
    let own_parent = [
        header.to_owned(),
        entry("a", "a", "one"),
        entry("b", "a", "two"),
    ]
    .join("\n")
        + "\n";
    let file = SessionFile::from_bytes("self.jsonl", own_parent.as_bytes()).unwrap();
    assert_eq!(
        ids(&file.active_path()),
        ["a", "b"],
        "an entry that is its own parent is the root"
    );
    let texts: Vec<String> = file.build_context().iter().map(text_of).collect();
    assert_eq!(texts, ["one", "two"], "each message once");

    let each_other = [
        header.to_owned(),
        entry("a", "c", "one"),
        entry("b", "a", "two"),
        entry("c", "b", "three"),
    ]
    .join("\n")
        + "\n";
    let file = SessionFile::from_bytes("loop.jsonl", each_other.as_bytes()).unwrap();
    assert_eq!(
        ids(&file.active_path()),
        ["a", "b", "c"],
        "the walk stops where it would come back"
    );
}

/// Found by the `transcript_jsonl` fuzz target: a number with a long mantissa in an entry was
/// parsed one unit off, so the entry written back as a line read as a different entry. Parsing
/// is correctly rounded now (serde_json's `float_roundtrip`).
#[test]
fn an_entry_with_a_long_float_reads_back_as_itself_after_a_write() {
    let long = format!("1.76725{}e103", "5".repeat(12));
    let line = format!(
        r#"{{"type":"message","id":"e3","parentId":null,"timestamp":"2026-01-01T00:00:01.000Z","message":{{"role":"ootlResult","t.imestamp":{long}}}}}"#
    );
    let map: serde_json::Map<String, Value> = serde_json::from_str(&line).unwrap();
    let entry = clawctx_protocol::transcript::TranscriptEntry::from_json(map).unwrap();
    let written = serde_json::to_string(&entry.to_json().unwrap()).unwrap();
    let again = clawctx_protocol::transcript::TranscriptEntry::from_json(
        serde_json::from_str(&written).unwrap(),
    )
    .unwrap();
    assert_eq!(again, entry, "written as {written}");
}
