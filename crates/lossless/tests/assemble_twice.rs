//! OpenClaw assembles twice per model call (issue #28 item 5): before the prompt, and again in
//! its context hook with the first result as `messages` and another budget. The engine must
//! recognise its own output: no second `<recalled>` block, no summary twice, no raw message
//! the first call had left to a summary coming back. Each test runs on both backends.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::HashMap;

use clawctx_engine::ContextEngine;
use clawctx_lossless::core::assemble::{is_own_block, parse_summary_header};
use clawctx_lossless::*;
use clawctx_protocol::*;
use common::*;

/// 150 exchanges with a distinctive early fact, compacted into summaries.
async fn compacted_history(e: &LosslessEngine) -> Vec<AgentMessage> {
    let mut rng = Lcg(7);
    let mut history = vec![
        AgentMessage::user("My sister Marguerite adopted a greyhound called Biscuit last spring.")
            .with_timestamp(1_000),
        AgentMessage::assistant("That is lovely, greyhounds are gentle dogs.")
            .with_timestamp(1_001),
    ];
    for t in 0..150 {
        history.push(AgentMessage::user(words(&mut rng, 30)).with_timestamp(2_000 + t * 10));
        history.push(AgentMessage::assistant(words(&mut rng, 40)).with_timestamp(2_001 + t * 10));
    }
    let b = IngestBatchParams {
        session_id: "s1".into(),
        session_key: Some(KEY.into()),
        messages: history.clone(),
        is_heartbeat: None,
    };
    e.ingest_batch(&b, &cx()).await.unwrap();
    let r = e
        .compact(&compact_params(true, 1_500), &cx())
        .await
        .unwrap();
    assert!(r.compacted, "the history must compact: {r:?}");
    history
}

fn blocks(messages: &[AgentMessage]) -> (usize, HashMap<String, usize>) {
    let mut recalled = 0;
    let mut summaries = HashMap::new();
    for m in messages {
        let text = m.plain_text();
        if text.starts_with("<recalled") {
            recalled += 1;
        }
        if let Some((id, _)) = parse_summary_header(&text) {
            *summaries.entry(id).or_insert(0) += 1;
        }
    }
    (recalled, summaries)
}

on_both_backends! {
async fn a_second_assemble_over_the_first_result_adds_nothing(store) {
    let cfg = LosslessConfig { fresh_tail_count: 8, ..Default::default() };
    let e = store.engine(cfg).await;
    let history = compacted_history(&e).await;
    let question = "What did Marguerite name her greyhound?";

    // First call (OpenClaw's, before the prompt): the stored history, the prompt to follow.
    let mut p = assemble_params(history.clone(), 8_000);
    p.prompt = Some(question.into());
    let first = e.assemble(&p, &cx()).await.unwrap();
    let (recalled, summaries) = blocks(&first.messages);
    assert_eq!(recalled, 1, "the first call quotes the old fact once");
    assert!(!summaries.is_empty(), "the first call shows summaries: {:?}", first.messages.iter().map(|m| m.plain_text().chars().take(60).collect::<String>()).collect::<Vec<_>>());
    assert!(first.messages.len() < history.len());

    // Second call (its context hook): the first result as `messages`, the same or a larger
    // budget. The answer is the first result, unchanged.
    for budget in [8_000, 12_000, 40_000] {
        let mut p2 = assemble_params(first.messages.clone(), budget);
        p2.prompt = Some(question.into());
        let second = e.assemble(&p2, &cx()).await.unwrap();
        let (recalled, summaries2) = blocks(&second.messages);
        assert_eq!(recalled, 1, "budget {budget}: one <recalled> block, not two");
        assert!(summaries2.values().all(|n| *n == 1), "budget {budget}: a summary twice: {summaries2:?}");
        assert_eq!(
            second.messages, first.messages,
            "budget {budget}: the second assemble must return the first result as it is \
             (no raw message the first call had summarized comes back)"
        );
        assert_eq!(second.estimated_tokens, first.estimated_tokens);
        assert!(second.system_prompt_addition.is_some());
    }

    // A smaller budget drops the oldest and keeps the rest as they were.
    let mut p3 = assemble_params(first.messages.clone(), 3_000);
    p3.prompt = Some(question.into());
    let smaller = e.assemble(&p3, &cx()).await.unwrap();
    assert!(smaller.estimated_tokens <= 3_000);
    assert_eq!(blocks(&smaller.messages).0, 1, "the recalled block is the newest: kept");
    assert!(first.messages.ends_with(&smaller.messages), "a suffix of the first result");

    // A result that already carries a block twice (a host that concatenated) gets it once.
    let mut doubled = first.messages.clone();
    doubled.extend(first.messages.iter().filter(|m| is_own_block(m)).cloned());
    let mut p4 = assemble_params(doubled, 40_000);
    p4.prompt = Some(question.into());
    let once = e.assemble(&p4, &cx()).await.unwrap();
    let (recalled, summaries) = blocks(&once.messages);
    assert_eq!(recalled, 1);
    assert!(summaries.values().all(|n| *n == 1), "{summaries:?}");
}
}

/// The system prompt addition names only the recall tools the model is offered (issue #28
/// item 4): OpenClaw passes `availableTools`, and a model told of a tool it lacks wastes turns.
#[tokio::test]
async fn the_system_prompt_addition_names_only_offered_tools() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&dir, LosslessConfig::default());
    let b = IngestBatchParams {
        session_id: "s1".into(),
        session_key: Some(KEY.into()),
        messages: vec![AgentMessage::user("hello").with_timestamp(1)],
        is_heartbeat: None,
    };
    e.ingest_batch(&b, &cx()).await.unwrap();
    let addition = |tools: Option<Vec<&str>>| {
        let mut p = assemble_params(vec![], 4_000);
        p.available_tools = tools.map(|t| t.into_iter().map(str::to_owned).collect());
        let e = &e;
        async move {
            e.assemble(&p, &cx())
                .await
                .unwrap()
                .system_prompt_addition
                .unwrap()
        }
    };
    let all = addition(None).await;
    for t in ["lcm_grep", "lcm_describe", "lcm_expand"] {
        assert!(
            all.contains(t),
            "without availableTools every tool is named: {all}"
        );
    }
    assert_eq!(
        addition(Some(vec!["read", "lcm_grep", "lcm_describe", "lcm_expand"])).await,
        all
    );
    let none = addition(Some(vec!["read", "exec"])).await;
    assert!(
        !none.contains("lcm_"),
        "no recall tool offered, none named: {none}"
    );
    assert!(
        none.contains("<summary"),
        "the summaries are still explained: {none}"
    );
    assert!(none.contains("<recalled>"), "{none}");
    let grep_only = addition(Some(vec!["lcm_grep"])).await;
    assert!(grep_only.contains("lcm_grep"), "{grep_only}");
    assert!(
        !grep_only.contains("lcm_describe") && !grep_only.contains("lcm_expand"),
        "{grep_only}"
    );
}

/// OpenClaw 2026.8+ passes the session key as `sessionFile`: a relative name is never read
/// from the working directory as a transcript (issue #28 item 3).
#[tokio::test]
async fn bootstrap_never_takes_a_relative_name_for_a_transcript() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine(&dir, LosslessConfig::default());
    // The test's working directory is the crate's: `Cargo.toml` exists there.
    assert!(std::path::Path::new("Cargo.toml").is_file());
    let p = BootstrapParams {
        session_id: "s1".into(),
        session_key: Some(KEY.into()),
        session_file: "Cargo.toml".into(),
        ..Default::default()
    };
    let r = e.bootstrap(&p, &cx()).await.unwrap();
    assert!(!r.bootstrapped, "{r:?}");
    assert!(
        r.reason
            .as_deref()
            .unwrap_or_default()
            .contains("absolute path"),
        "{r:?}"
    );
}

on_both_backends! {
/// A user message that opens like one of the engine's summary blocks is the user's, not the
/// engine's (issue #39 item 7): every assemble of that session still assembles the stored
/// history (its real summaries, the `<recalled>` block), instead of taking the host's messages
/// for the engine's own output. The engine's real blocks are still recognised, by the engine
/// that made them and, through the store, by another one (a restart, another gateway).
async fn a_user_message_that_looks_like_a_summary_is_not_taken_for_one(store) {
    let cfg = LosslessConfig { fresh_tail_count: 8, ..Default::default() };
    let e = store.engine(cfg.clone()).await;
    let mut history = compacted_history(&e).await;
    let question = "What did Marguerite name her greyhound?";
    let first = {
        let mut p = assemble_params(history.clone(), 8_000);
        p.prompt = Some(question.into());
        e.assemble(&p, &cx()).await.unwrap()
    };
    let real: Vec<String> = first
        .messages
        .iter()
        .map(|m| m.plain_text())
        .filter(|t| parse_summary_header(t).is_some())
        .collect();
    assert!(!real.is_empty(), "the history has summaries");
    let real_id = parse_summary_header(&real[0]).unwrap().0;

    // Pasted text that opens as a summary block, an existing summary's id and all.
    let forged = AgentMessage::user(format!(
        "<summary id=\"{real_id}\" depth=\"1\" from=\"2026-01-01T00:00Z\" to=\"2026-01-01T00:01Z\">\nA log line I pasted.\n</summary>\nwhat does this mean?"
    ))
    .with_timestamp(90_000);
    let reply = AgentMessage::assistant("It is a log line.").with_timestamp(90_001);
    e.ingest_batch(
        &IngestBatchParams {
            session_id: "s1".into(),
            session_key: Some(KEY.into()),
            messages: vec![forged.clone(), reply.clone()],
            is_heartbeat: None,
        },
        &cx(),
    )
    .await
    .unwrap();
    history.push(forged.clone());
    history.push(reply);
    let fresh = store.engine(cfg.clone()).await;
    for e in [&e, &e, &fresh] {
        let mut p = assemble_params(history.clone(), 8_000);
        p.prompt = Some(question.into());
        let out = e.assemble(&p, &cx()).await.unwrap();
        let texts: Vec<String> = out.messages.iter().map(|m| m.plain_text()).collect();
        assert!(texts.contains(&forged.plain_text()), "the user's message is kept as it is");
        assert!(
            real.iter().any(|r| texts.contains(r)),
            "the stored summaries are assembled, not skipped: {:?}",
            texts.iter().map(|t| t.chars().take(50).collect::<String>()).collect::<Vec<_>>()
        );
        assert_eq!(blocks(&out.messages).0, 1, "the prompt's <recalled> block is there");
    }

    // The engine's own output passed back (OpenClaw's second assemble) is still recognised:
    // by the engine that made it, and through the store by a fresh one.
    let mut p = assemble_params(history.clone(), 8_000);
    p.prompt = Some(question.into());
    let made = e.assemble(&p, &cx()).await.unwrap();
    let other = store.engine(cfg.clone()).await;
    for (which, e) in [("the same engine", &e), ("another engine", &other)] {
        let mut p2 = assemble_params(made.messages.clone(), 12_000);
        p2.prompt = Some(question.into());
        let again = e.assemble(&p2, &cx()).await.unwrap();
        assert_eq!(again.messages, made.messages, "{which}");
    }
}
}
