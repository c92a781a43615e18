//! Ranked any-term search and prompt recall: old messages that answer the current prompt come
//! back verbatim, ranked by shared rare words, within the budget. Each test runs on both
//! backends (see [`on_both_backends!`]).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use clawctx_engine::ContextEngine;
use clawctx_lossless::*;
use clawctx_protocol::*;
use common::*;

fn key() -> ConvKey {
    ConvKey::from_host(Some(KEY), "s1")
}

/// A long chat about nothing in particular, with a few distinctive early facts.
async fn chat_with_early_facts(e: &LosslessEngine) -> Vec<AgentMessage> {
    let mut rng = Lcg(11);
    let mut history = vec![
        AgentMessage::user("My sister Marguerite adopted a greyhound called Biscuit last spring.")
            .with_timestamp(1_000),
        AgentMessage::assistant("That is lovely, greyhounds are gentle dogs.")
            .with_timestamp(1_001),
        AgentMessage::user("Biscuit").with_timestamp(1_002),
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
    history
}

on_both_backends! {
async fn any_term_search_ranks_rows_sharing_more_rare_words_first(store) {
    let e = store.engine(LosslessConfig::default()).await;
    chat_with_early_facts(&e).await;
    let mut q = GrepQuery::new(
        "What is the name of the greyhound Marguerite adopted?",
        Scope::Session(key()),
    );
    q.mode = GrepMode::AnyTerm;
    q.target = GrepTarget::Messages;
    let r = e.backend().grep(q.clone()).await.unwrap();
    assert_eq!(
        r.hits.first().map(|h| h.id.as_str()),
        Some("msg_1"),
        "the message with 'greyhound', 'Marguerite' and 'adopted' must rank first: {:?}",
        r.hits
    );
    assert!(r.hits.len() >= 2, "the greyhound reply shares a word too");
    let scores: Vec<f64> = r.hits.iter().filter_map(|h| h.score).collect();
    assert!(
        scores.windows(2).all(|w| w[0] <= w[1]),
        "scores must be in rank order (lower is better): {scores:?}"
    );
    assert!(scores[0] < scores[scores.len() - 1], "ranking must discriminate: {scores:?}");

    // The AND mode finds nothing for the whole question (no row has every word).
    q.mode = GrepMode::FullText;
    assert!(e.backend().grep(q).await.unwrap().hits.is_empty());
}
}

on_both_backends! {
async fn full_text_relevance_prefers_the_shorter_of_two_matching_rows(store) {
    // BM25 length normalization: with a broken bm25() every score is 0 and the newer, longer
    // row would come first (ties go newest first).
    let e = store.engine(LosslessConfig::default()).await;
    let mut rng = Lcg(5);
    let mut msgs = vec![AgentMessage::user("the quokka smiled").with_timestamp(1)];
    for t in 0..50 {
        msgs.push(AgentMessage::user(words(&mut rng, 20)).with_timestamp(10 + t));
    }
    msgs.push(
        AgentMessage::user(format!("a quokka appeared, {}", words(&mut rng, 200))).with_timestamp(100),
    );
    let b = IngestBatchParams {
        session_id: "s1".into(),
        session_key: Some(KEY.into()),
        messages: msgs,
        is_heartbeat: None,
    };
    e.ingest_batch(&b, &cx()).await.unwrap();
    let r = e
        .backend()
        .grep(GrepQuery::new("quokka", Scope::Session(key())))
        .await
        .unwrap();
    assert_eq!(r.hits.len(), 2);
    assert_eq!(r.hits[0].id, "msg_1", "{:?}", r.hits);
    assert!(r.hits[0].score.unwrap() < 0.0, "bm25 must not be zero: {:?}", r.hits);
}
}

on_both_backends! {
async fn assembly_quotes_old_matching_messages_before_the_prompt_within_budget(store) {
    let cfg = LosslessConfig {
        fresh_tail_count: 8,
        ..Default::default()
    };
    let e = store.engine(cfg).await;
    let history = chat_with_early_facts(&e).await;
    let budget = 2_000;
    let question = "What did Marguerite name her greyhound?";
    let mut msgs = history.clone();
    msgs.push(AgentMessage::user(question).with_timestamp(99_999));
    let mut p = assemble_params(msgs.clone(), budget);
    p.prompt = Some(question.into());
    let out = e.assemble(&p, &cx()).await.unwrap();
    assert!(out.estimated_tokens <= budget);
    assert_eq!(clawctx_tokens::messages_tokens(&out.messages), out.estimated_tokens);
    let n = out.messages.len();
    assert_eq!(out.messages[n - 1].plain_text(), question, "the prompt stays last");
    let block = out.messages[n - 2].plain_text();
    assert!(block.starts_with("<recalled"), "a recalled block right before the prompt: {block}");
    assert!(
        block.contains("My sister Marguerite adopted a greyhound called Biscuit last spring."),
        "the old fact must be quoted verbatim: {block}"
    );
    assert_eq!(quoted_ids(&block).first(), Some(&1), "msg_1 quoted first: {block}");
    assert!(block.contains("\n[msg_1 user "), "{block}");
    let whole: String = out.messages.iter().map(|m| m.plain_text()).collect();
    assert_eq!(
        whole.matches("greyhounds are gentle").count(),
        1,
        "each stored message appears once"
    );

    // Without recall the same budget shows nothing of it (it is 300 messages back).
    let other_store = store.another();
    let e2 = other_store
        .engine(LosslessConfig {
            fresh_tail_count: 8,
            prompt_recall_share: 0.0,
            ..Default::default()
        })
        .await;
    chat_with_early_facts(&e2).await;
    let out2 = e2.assemble(&p, &cx()).await.unwrap();
    let whole2: String = out2.messages.iter().map(|m| m.plain_text()).collect();
    assert!(!whole2.contains("Biscuit last spring"));

    // The context before the block is the same whatever the prompt asks (cache-stable prefix).
    let mut other = history.clone();
    other.push(AgentMessage::user("Anything about Zanzibar?").with_timestamp(99_999));
    let out3 = e.assemble(&assemble_params(other, budget), &cx()).await.unwrap();
    let prefix = |m: &[AgentMessage]| {
        m[..m.len() - 1]
            .iter()
            .map(|x| x.plain_text())
            .filter(|t| !t.starts_with("<recalled"))
            .collect::<Vec<_>>()
    };
    assert_eq!(prefix(&out.messages), prefix(&out3.messages));
}
}

on_both_backends! {
async fn no_recall_block_when_the_newest_message_is_not_a_user_prompt(store) {
    let e = store.engine(LosslessConfig::default()).await;
    let mut history = chat_with_early_facts(&e).await;
    history.push(
        AgentMessage::tool_call("c1", "read", serde_json::json!({"path": "greyhound.txt"}))
            .with_timestamp(99_000),
    );
    history.push(AgentMessage::tool_result("c1", "read", "Marguerite greyhound").with_timestamp(99_001));
    let out = e.assemble(&assemble_params(history, 4_000), &cx()).await.unwrap();
    assert!(
        !out.messages.iter().any(|m| m.plain_text().starts_with("<recalled")),
        "tool-loop continuations get no recall block"
    );
}
}

on_both_backends! {
async fn a_prompt_the_host_appends_after_the_context_gets_the_recalled_block_last(store) {
    // Durable turns (§1.7) assemble the history before the current turn: every host message is
    // stored and the prompt is only `params.prompt`; the host appends it after the context.
    let cfg = LosslessConfig {
        fresh_tail_count: 8,
        ..Default::default()
    };
    let e = store.engine(cfg).await;
    let history = chat_with_early_facts(&e).await;
    let budget = 2_000;
    let question = "What did Marguerite name her greyhound?";
    let mut p = assemble_params(history, budget);
    p.prompt = Some(question.into());
    let out = e.assemble(&p, &cx()).await.unwrap();
    assert!(out.estimated_tokens <= budget);
    let block = out.messages.last().unwrap().plain_text();
    assert!(block.starts_with("<recalled"), "the recalled block ends the context, right before where the prompt goes: {block}");
    assert!(block.contains("My sister Marguerite adopted a greyhound called Biscuit last spring."), "{block}");
    assert!(!out.messages.iter().any(|m| m.plain_text() == question), "the host appends the prompt, not the engine");
}
}

on_both_backends! {
async fn a_prompt_of_common_words_quotes_nothing(store) {
    // Every word of this prompt is in most stored messages: none tells which one the prompt is
    // after, so no block (which would fill its share with noise the provider never caches).
    let e = store.engine(LosslessConfig::default()).await;
    let mut history = chat_with_early_facts(&e).await;
    let prompt = "the build failed because the config parser rejected the value";
    history.push(AgentMessage::user(prompt).with_timestamp(99_999));
    let mut p = assemble_params(history.clone(), 2_000);
    p.prompt = Some(prompt.into());
    let out = e.assemble(&p, &cx()).await.unwrap();
    assert!(
        !out.messages.iter().any(|m| m.plain_text().starts_with("<recalled")),
        "common words only: no recalled block"
    );

    // One telling word among them (in 2 of ~300 stored messages) brings its messages.
    let prompt = "the build failed because the greyhound rejected the value";
    history.pop();
    history.push(AgentMessage::user(prompt).with_timestamp(99_999));
    let mut p = assemble_params(history, 2_000);
    p.prompt = Some(prompt.into());
    let out = e.assemble(&p, &cx()).await.unwrap();
    let block = out.messages[out.messages.len() - 2].plain_text();
    assert!(block.starts_with("<recalled"), "{block}");
    assert!(block.contains("greyhound called Biscuit"), "{block}");
    assert!(
        !block.contains("config"),
        "a message sharing only common words is not quoted: {block}"
    );
}
}

on_both_backends! {
async fn the_block_takes_the_room_the_history_leaves(store) {
    // Many stored messages name the prompt's rare word; the history is short (a fresh store
    // holding little else), so the block may use more than its reserve, up to the budget.
    let e = store.engine(LosslessConfig::default()).await;
    let mut history = Vec::new();
    for t in 0..40 {
        history.push(
            AgentMessage::user(format!("note {t}: the zeppelin hangar needs painting, item {t}"))
                .with_timestamp(1_000 + t * 10),
        );
        history.push(AgentMessage::assistant(format!("noted {t}")).with_timestamp(1_001 + t * 10));
    }
    for t in 0..400 {
        history.push(AgentMessage::user(format!("filler {t} about the weather")).with_timestamp(5_000 + t));
    }
    let b = IngestBatchParams {
        session_id: "s1".into(),
        session_key: Some(KEY.into()),
        messages: history.clone(),
        is_heartbeat: None,
    };
    e.ingest_batch(&b, &cx()).await.unwrap();
    // Compacted: the history left in context is small.
    e.compact(&compact_params(true, 4_000), &cx()).await.unwrap();
    let budget = 4_000;
    let reserve = LosslessConfig::default().prompt_recall_reserve(budget);
    let prompt = "What about the zeppelin hangar?";
    history.push(AgentMessage::user(prompt).with_timestamp(99_999));
    let mut p = assemble_params(history, budget);
    p.prompt = Some(prompt.into());
    let out = e.assemble(&p, &cx()).await.unwrap();
    assert!(out.estimated_tokens <= budget, "{}", out.estimated_tokens);
    let block = &out.messages[out.messages.len() - 2];
    assert!(block.plain_text().starts_with("<recalled"));
    let block_tokens = clawctx_tokens::message_tokens(block);
    assert!(
        block_tokens > reserve,
        "the block ({block_tokens} tokens) uses the room the history left, beyond its reserve of {reserve}"
    );
}
}

/// A chat in Chinese, Japanese and Korean (filler in each, a few facts early on).
fn cjk_chat() -> Vec<AgentMessage> {
    let mut history = vec![
        AgentMessage::user("请把账本七号放在三楼的保险柜里。").with_timestamp(1_000),
        AgentMessage::user("明日の会議は第二会議室で午後三時からです。").with_timestamp(1_001),
        AgentMessage::user("회의실 예약은 목요일 오후로 변경되었습니다.").with_timestamp(1_002),
        AgentMessage::user("猫").with_timestamp(1_003),
    ];
    let filler = [
        "今天天气很好，我们去公园散步吧。",
        "我觉得这个方案还需要再讨论一下。",
        "昨日は雨が降っていたので家にいました。",
        "このレポートを金曜日までに提出してください。",
        "오늘 점심은 김치찌개를 먹었어요.",
        "주말에 영화를 보러 갈 거예요.",
    ];
    for t in 0..120 {
        history.push(
            AgentMessage::user(filler[t % filler.len()]).with_timestamp(2_000 + t as i64 * 10),
        );
        history.push(
            AgentMessage::assistant(filler[(t + 3) % filler.len()])
                .with_timestamp(2_001 + t as i64 * 10),
        );
    }
    history
}

on_both_backends! {
async fn chinese_japanese_and_korean_words_are_found_inside_their_text(store) {
    let cfg = LosslessConfig {
        fresh_tail_count: 8,
        ..Default::default()
    };
    let e = store.engine(cfg).await;
    let history = cjk_chat();
    ingest_all(&e, &history).await;
    // A word inside a clause (no spaces around it), in each script, and one character alone.
    for (query, want) in [
        ("账本七号", "msg_1"),
        ("保险柜", "msg_1"),
        ("会議室", "msg_2"),
        ("午後三時", "msg_2"),
        ("회의실", "msg_3"),
        ("목요일", "msg_3"),
        ("猫", "msg_4"),
    ] {
        for mode in [GrepMode::FullText, GrepMode::AnyTerm] {
            let mut q = GrepQuery::new(query, Scope::Session(key()));
            q.mode = mode;
            q.target = GrepTarget::Messages;
            let r = e.backend().grep(q).await.unwrap();
            assert_eq!(
                r.hits.first().map(|h| h.id.as_str()),
                Some(want),
                "{query} ({mode:?}): {:?}",
                r.hits
            );
        }
    }
    // A phrase is all of its pairs: two words of the fact in the wrong order find nothing.
    let q = GrepQuery::new("七号账本", Scope::Session(key()));
    assert!(e.backend().grep(q).await.unwrap().hits.is_empty());

    // The per-turn recall quotes the fact when a question asks about it in other words.
    let question = "账本七号现在在哪里？";
    let mut p = assemble_params(history, 600);
    p.prompt = Some(question.into());
    let out = e.assemble(&p, &cx()).await.unwrap();
    let block = out.messages.last().unwrap().plain_text();
    assert!(block.starts_with("<recalled"), "{block}");
    assert!(block.contains("请把账本七号放在三楼的保险柜里。"), "{block}");
}
}

/// One message of operations chat: most of them name a job, a queue, an invoice run or a day.
fn ops_message(rng: &mut Lcg) -> String {
    const OPS: &[&str] = &[
        "the invoice job moved to another queue",
        "queue depth on the billing worker is back to normal",
        "Tuesday's deploy of the invoice service went out",
        "the nightly job for invoices retried twice",
        "we moved the export job off the shared queue",
        "alerts on queue latency cleared by Tuesday",
    ];
    format!(
        "{} ({})",
        OPS[rng.below(OPS.len() as u64) as usize],
        words(rng, 6)
    )
}

on_both_backends! {
async fn a_conversations_recall_does_not_depend_on_other_conversations_in_the_store(store) {
    // Issue #43: a fact planted in a small session is quoted when asked about, whether the
    // store is otherwise empty or holds 20 other sessions of 2,000 operations-chat messages
    // each, where every word of the question is common.
    let question = "Which queue did the invoice job move to?";
    let fact = "FYI the invoice job moved to queue Q-7731 on Tuesday.";
    for crowded in [false, true] {
        let s = store.another();
        let e = s
            .engine(LosslessConfig {
                fresh_tail_count: 8,
                ..Default::default()
            })
            .await;
        let mut rng = Lcg(3);
        if crowded {
            for i in 0..20 {
                let messages = (0..2_000)
                    .map(|t| AgentMessage::user(ops_message(&mut rng)).with_timestamp(t))
                    .collect();
                let b = IngestBatchParams {
                    session_id: format!("ops-{i}"),
                    session_key: Some(format!("agent:main:ops:direct:{i}")),
                    messages,
                    is_heartbeat: None,
                };
                e.ingest_batch(&b, &cx()).await.unwrap();
            }
        }
        let mut history = vec![AgentMessage::user(fact).with_timestamp(1_000)];
        for t in 0..60 {
            history.push(AgentMessage::user(words(&mut rng, 25)).with_timestamp(2_000 + t));
        }
        ingest_all(&e, &history).await;
        let mut p = assemble_params(history, 1_200);
        p.prompt = Some(question.into());
        let out = e.assemble(&p, &cx()).await.unwrap();
        let block = out.messages.last().unwrap().plain_text();
        assert!(
            block.starts_with("<recalled") && block.contains("Q-7731"),
            "crowded store: {crowded}; the fact must be quoted: {block}"
        );
        // `lcm_grep` ranks it first for the question too.
        let mut q = GrepQuery::new(question, Scope::Session(key()));
        q.mode = GrepMode::AnyTerm;
        q.target = GrepTarget::Messages;
        let r = e.backend().grep(q).await.unwrap();
        assert_eq!(r.hits.first().map(|h| h.id.as_str()), Some(if crowded { "msg_40001" } else { "msg_1" }), "crowded: {crowded}: {:?}", r.hits.first());
    }
}
}
