//! Prompt recall's methods beyond the ranked search itself (issue #30 item 1), each on a small
//! synthetic conversation and on both backends: a recalled question brings its answer along,
//! the room left after every hit goes to the message after each hit, and relative dates in a
//! recalled message are resolved against the day it was said.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use clawctx_engine::ContextEngine;
use clawctx_lossless::*;
use clawctx_protocol::*;
use common::*;

/// 8 May 2023, 13:56 UTC, in milliseconds.
const MAY_8_2023: i64 = 1_683_554_160_000;

/// `early` (oldest first, one minute apart from 8 May 2023), then 150 exchanges of filler
/// that share no word with the tests' prompts, stored; the whole history is returned.
async fn stored_history(e: &LosslessEngine, early: Vec<AgentMessage>) -> Vec<AgentMessage> {
    let mut rng = Lcg(7);
    let mut history: Vec<AgentMessage> = early
        .into_iter()
        .enumerate()
        .map(|(i, m)| m.with_timestamp(MAY_8_2023 + i as i64 * 60_000))
        .collect();
    let start = MAY_8_2023 + 86_400_000;
    for t in 0..150 {
        history.push(AgentMessage::user(words(&mut rng, 30)).with_timestamp(start + t * 10));
        history
            .push(AgentMessage::assistant(words(&mut rng, 40)).with_timestamp(start + t * 10 + 1));
    }
    let b = IngestBatchParams {
        session_id: "s1".into(),
        session_key: Some(KEY.into()),
        messages: history.clone(),
        is_heartbeat: None,
    };
    e.ingest_batch(&b, &cx()).await.unwrap();
    history
}

/// The `<recalled>` block assembled for `question` as the next prompt (budget 2,000, fresh
/// tail 8: the early messages are far outside the raw context).
async fn recalled_for(store: &TestStore, early: Vec<AgentMessage>, question: &str) -> String {
    recalled_with_hits(store, early, question).await.0
}

/// [`recalled_for`], with why the engine says it quoted each message.
async fn recalled_with_hits(
    store: &TestStore,
    early: Vec<AgentMessage>,
    question: &str,
) -> (String, Vec<RecallHit>) {
    let e = store
        .engine(LosslessConfig {
            fresh_tail_count: 8,
            ..Default::default()
        })
        .await;
    let mut msgs = stored_history(&e, early).await;
    msgs.push(AgentMessage::user(question).with_timestamp(MAY_8_2023 + 90 * 86_400_000));
    let mut p = assemble_params(msgs, 2_000);
    p.prompt = Some(question.into());
    let out = e.assemble(&p, &cx()).await.unwrap();
    assert!(out.estimated_tokens <= 2_000);
    let n = out.messages.len();
    assert_eq!(
        out.messages[n - 1].plain_text(),
        question,
        "the prompt stays last"
    );
    let block = out.messages[n - 2].plain_text();
    assert!(
        block.starts_with("<recalled"),
        "a recalled block before the prompt: {block}"
    );
    let hits = e
        .recall()
        .last_recall(&ConvKey::from_host(Some(KEY), "s1"))
        .expect("the engine remembers its last recall");
    (block, hits)
}

/// A question and its answer (which shares no word with the tests' prompt), then a kitten
/// message that asks nothing and its reply.
fn kitten_turns() -> Vec<AgentMessage> {
    vec![
        AgentMessage::user("What did you end up naming the kitten you adopted?"),
        AgentMessage::assistant("Pixel, after my old camera."),
        AgentMessage::user("The kitten sleeps on the radiator all day."),
        AgentMessage::assistant("Sounds like a warm spot for a nap."),
    ]
}

/// The block and hits for "What is the kitten called?" over [`kitten_turns`].
async fn kitten_recall(store: &TestStore) -> (String, Vec<RecallHit>) {
    recalled_with_hits(store, kitten_turns(), "What is the kitten called?").await
}

/// The text quoted under `msg_<id>` in `block`.
fn quoted_text(block: &str, id: i64) -> &str {
    let open = format!("\n[msg_{id} ");
    let at = block.find(&open).expect("the hit is quoted in the block") + 1;
    let body = &block[at..];
    let body = &body[body.find("] ").map_or(0, |i| i + 2)..];
    let end = [body.find("\n[msg_"), body.find("\n</recalled")]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(body.len());
    &body[..end]
}

on_both_backends! {
async fn a_recalled_question_brings_its_answer(store) {
    let (block, _) = kitten_recall(store).await;
    // Both kitten turns match the prompt; the answer shares no word with it and comes in
    // only as the reply to the question.
    assert!(block.contains("naming the kitten"), "{block}");
    assert!(block.contains("radiator"), "{block}");
    assert!(
        block.contains("Pixel, after my old camera."),
        "the answer to the recalled question must follow it: {block}"
    );
    // The answer comes right after its question.
    let (q, a) = (block.find("naming the kitten").unwrap(), block.find("Pixel").unwrap());
    assert!(q < a && a < block.find("radiator").unwrap(), "in conversation order: {block}");
    assert_eq!(block.matches("Pixel").count(), 1, "quoted once: {block}");
}
}

on_both_backends! {
async fn the_engine_says_why_each_message_was_recalled(store) {
    let (block, hits) = kitten_recall(store).await;
    // One hit per quoted message, best first: the two kitten messages with their scores and
    // matched terms, the answer with no score right after its question.
    assert_eq!(hits.len(), quoted_ids(&block).len(), "{hits:?}");
    let answer = hits.iter().position(|h| h.score.is_none()).expect("the answer is a hit");
    assert!(quoted_text(&block, hits[answer].id).starts_with("Pixel"), "{hits:?}");
    assert_eq!(hits[answer].matched, 0);
    assert!(answer > 0 && quoted_text(&block, hits[answer - 1].id).contains("naming the kitten"));
    for h in hits.iter().filter(|h| h.score.is_some()) {
        assert!(h.score.unwrap() > 0.0 && h.matched >= 1, "{h:?}");
        assert!(quoted_text(&block, h.id).contains("kitten"), "{h:?}");
    }
    let scores: Vec<f64> = hits.iter().filter_map(|h| h.score).collect();
    assert_eq!(scores.len(), 2, "{hits:?}");
    assert!(scores[0] >= scores[1], "best first: {hits:?}");
}
}

on_both_backends! {
async fn room_left_after_every_hit_quotes_the_message_after_each(store) {
    let (block, hits) = kitten_recall(store).await;
    // The radiator message asks nothing, so its reply ("warm spot", no word of the prompt) is
    // not brought along as an answer; the block has room left once both hits are in, so it is
    // quoted then: after every scored hit, never in place of one.
    assert!(block.contains("Sounds like a warm spot for a nap."), "{block}");
    let reply = hits
        .iter()
        .position(|h| quoted_text(&block, h.id).contains("warm spot"))
        .expect("the reply is a hit");
    assert!(hits[reply].score.is_none(), "{hits:?}");
    let last_scored = hits.iter().rposition(|h| h.score.is_some()).unwrap();
    assert!(reply > last_scored, "filled only after every hit: {hits:?}");
    assert_eq!(block.matches("warm spot").count(), 1, "quoted once: {block}");
    // The filler of the conversation shares no word with the prompt and follows no hit.
    assert_eq!(quoted_ids(&block).len(), 4, "{block}");
}
}

on_both_backends! {
async fn relative_dates_in_a_recalled_message_are_resolved(store) {
    let block = recalled_for(
        store,
        vec![AgentMessage::user(
            "I went to the support group yesterday and I start pottery classes next week.",
        )],
        "When did I go to the support group?",
    )
    .await;
    assert!(block.contains("support group yesterday"), "{block}");
    assert!(
        block.contains(
            "[said on 8 May 2023: yesterday = 7 May 2023; next week = the week after 8 May 2023]"
        ),
        "the relative dates must be resolved against the message's own date: {block}"
    );
}
}

on_both_backends! {
async fn the_answer_is_the_next_message_of_the_same_conversation(store) {
    // Two sessions written in turns: the message stored right after the question belongs to
    // the other session and must not be quoted; the question's own answer must.
    let e = store
        .engine(LosslessConfig {
            fresh_tail_count: 8,
            ..Default::default()
        })
        .await;
    let other = "agent:main:test:direct:2";
    let ingest = |key: &'static str, session: &'static str, m: AgentMessage| {
        let e = &e;
        async move {
            let p = IngestParams {
                session_id: session.into(),
                session_key: Some(key.into()),
                message: m,
                is_heartbeat: None,
            };
            e.ingest(&p, &cx()).await.unwrap();
        }
    };
    let mut mine = vec![
        AgentMessage::user("What did you end up naming the kitten you adopted?").with_timestamp(1_000),
        AgentMessage::assistant("Pixel, after my old camera.").with_timestamp(1_002),
    ];
    ingest(KEY, "s1", mine[0].clone()).await;
    ingest(other, "s2", AgentMessage::assistant("Zebra crossings are striped.").with_timestamp(1_001)).await;
    ingest(KEY, "s1", mine[1].clone()).await;
    let mut rng = Lcg(3);
    let mut filler = Vec::new();
    for t in 0..100 {
        filler.push(AgentMessage::user(words(&mut rng, 30)).with_timestamp(2_000 + t * 10));
        filler.push(AgentMessage::assistant(words(&mut rng, 40)).with_timestamp(2_001 + t * 10));
    }
    let b = IngestBatchParams {
        session_id: "s1".into(),
        session_key: Some(KEY.into()),
        messages: filler.clone(),
        is_heartbeat: None,
    };
    e.ingest_batch(&b, &cx()).await.unwrap();
    mine.extend(filler);
    let question = "What is the kitten called?";
    mine.push(AgentMessage::user(question).with_timestamp(99_999));
    let mut p = assemble_params(mine, 2_000);
    p.prompt = Some(question.into());
    let out = e.assemble(&p, &cx()).await.unwrap();
    let block = out.messages[out.messages.len() - 2].plain_text();
    assert!(block.starts_with("<recalled"), "{block}");
    assert!(block.contains("Pixel, after my old camera."), "{block}");
    assert!(!block.contains("Zebra"), "another session's message is never quoted: {block}");
}
}
