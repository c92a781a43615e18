//! A long-running runtime keeps the transcripts and prepared histories of at most
//! `WARM_SESSIONS` sessions between turns (the soak found them kept for every session ever
//! served). A session dropped from that set loses nothing: its next turn reads its history
//! again from its transcript.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::sync::Arc;

use clawctx_engine::LegacyEngine;
use clawctx_runtime::warm::WARM_SESSIONS;
use clawctx_runtime::*;
use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_pushed_out_of_the_warm_set_still_has_its_whole_history() {
    let dir = tempfile::tempdir().unwrap();
    let llm = MockLlm::start().await;
    let rt = AgentRuntime::builder(
        dir.path(),
        Arc::new(LegacyEngine),
        llm.backend(100_000, 256),
    )
    .build();
    let others = WARM_SESSIONS + 2;
    llm.push((0..others + 3).map(|i| text(&format!("answer {i}"))));
    rt.run_turn(TurnRequest::new(
        "agent:main:first",
        "remember the word zebra-0417",
    ))
    .await
    .unwrap();
    rt.run_turn(TurnRequest::new("agent:main:first", "and the number 9931"))
        .await
        .unwrap();
    // More sessions than the runtime keeps warm, each served after the first: it is the least
    // recently used, so it is dropped.
    for i in 0..others {
        rt.run_turn(TurnRequest::new(
            format!("agent:main:other-{i}"),
            format!("hello {i}"),
        ))
        .await
        .unwrap();
    }
    rt.run_turn(TurnRequest::new(
        "agent:main:first",
        "what word and number did I give you?",
    ))
    .await
    .unwrap();
    let bodies = llm.bodies().await;
    let last = bodies.last().unwrap().to_string();
    for said in ["zebra-0417", "9931", "answer 0", "answer 1"] {
        assert!(
            last.contains(said),
            "the returning session's request lacks {said:?} of its history: {last}"
        );
    }
    assert!(
        !last.contains("hello 0"),
        "no other session's history leaks in: {last}"
    );
}
