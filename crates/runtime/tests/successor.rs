//! §1.3 / §7.2: a compaction that reports a successor session (`result.sessionTarget`) moves the
//! session key to it; the next turn is written to the successor's transcript, not the old one.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use clawctx_engine::*;
use clawctx_model::{Exhaustion, ScriptedProvider, ScriptedReply};
use clawctx_runtime::*;
use clawctx_test_support::test_engine::TestEngine;
use clawctx_transcript::SessionFile;

const KEY: &str = "agent:main:main";

fn user_texts(path: &std::path::Path) -> Vec<String> {
    let f = SessionFile::open(path).unwrap();
    f.build_context()
        .iter()
        .filter(|m| m.role() == "user")
        .map(|m| m.plain_text())
        .collect()
}

#[tokio::test]
async fn the_next_turn_follows_a_compaction_successor() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Arc::new(TestEngine::new("rotating").with_successor("successor-session-1"));
    let provider = Arc::new(ScriptedProvider::new(
        vec![ScriptedReply::text("ok")],
        Exhaustion::Cycle,
    ));
    let backend = Backend::Model(ModelBinding::new(provider.clone(), "m", 16_000, 256));
    let rt = AgentRuntime::builder(dir.path(), engine.clone(), backend).build();

    for i in 0..3 {
        rt.run_turn(TurnRequest::new(KEY, format!("before compaction {i}")))
            .await
            .unwrap();
    }
    let before = rt.session(KEY).unwrap();
    assert_ne!(before.entry.session_id, "successor-session-1");

    let result = rt.compact(KEY, None).await.unwrap();
    assert!(result.compacted, "{result:?}");
    let after = rt.session(KEY).unwrap();
    assert_eq!(
        after.entry.session_id, "successor-session-1",
        "the key now points at the successor"
    );
    assert_ne!(after.transcript_path, before.transcript_path);

    rt.run_turn(TurnRequest::new(KEY, "after compaction"))
        .await
        .unwrap();
    rt.shutdown().await;
    assert!(
        user_texts(&after.transcript_path)
            .iter()
            .any(|t| t.contains("after compaction")),
        "the next turn goes to the successor"
    );
    assert!(
        !user_texts(&before.transcript_path)
            .iter()
            .any(|t| t.contains("after compaction")),
        "the old transcript is left as it was"
    );
    let compact_calls: Vec<_> = engine
        .calls()
        .into_iter()
        .filter(|(m, _)| *m == Method::Compact)
        .collect();
    assert_eq!(
        compact_calls[0].1["sessionId"],
        before.entry.session_id.as_str(),
        "compact ran on the caller's session"
    );
    let last_assemble = engine
        .calls()
        .into_iter()
        .filter(|(m, _)| *m == Method::Assemble)
        .last()
        .unwrap();
    assert_eq!(
        last_assemble.1["sessionId"], "successor-session-1",
        "the engine is asked about the successor afterwards"
    );
}
