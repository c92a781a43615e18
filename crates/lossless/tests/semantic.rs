//! Semantic recall with the real sentence model (issue #43): a fact asked about in words it
//! does not use is found by meaning, in the `<recalled>` block and by `lcm_grep`, on both
//! backends; the background embedder embeds without being asked; a different model embeds
//! from the start instead of mixing its vectors with the first one's.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use crate::common;

use clawctx_embed::{EmbedError, Embedder, LocalEmbedder};
use clawctx_engine::ContextEngine;
use clawctx_lossless::*;
use clawctx_protocol::*;
use common::*;

fn key() -> ConvKey {
    ConvKey::from_host(Some(KEY), "s1")
}

/// The real model (shared by the tests of this binary), or `None` to skip.
fn model() -> Option<Arc<dyn Embedder>> {
    static MODEL: std::sync::OnceLock<Option<Arc<dyn Embedder>>> = std::sync::OnceLock::new();
    MODEL
        .get_or_init(|| {
            let dir = clawctx_test_support::embed_model::model_dir()?;
            let m = LocalEmbedder::load(&dir).expect("the test model loads");
            Some(Arc::new(m) as Arc<dyn Embedder>)
        })
        .clone()
}

/// The same model under another name: a different model as far as the store can tell.
#[derive(Debug)]
struct Renamed(Arc<dyn Embedder>);

#[async_trait::async_trait]
impl Embedder for Renamed {
    fn model_id(&self) -> &str {
        "renamed-test-model"
    }
    fn dim(&self) -> usize {
        self.0.dim()
    }
    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.0.embed(texts).await
    }
}

const FACT: &str = "After a long debate the team settled on PostgreSQL to keep all the records.";
const QUESTION: &str = "Which database did we pick?";

/// A fact, then 80 messages of the tests' filler vocabulary.
fn history() -> Vec<AgentMessage> {
    let mut rng = Lcg(5);
    let mut h = vec![AgentMessage::user(FACT).with_timestamp(1_000)];
    for t in 0..80 {
        h.push(AgentMessage::user(words(&mut rng, 25)).with_timestamp(2_000 + t));
    }
    h
}

on_both_backends! {
async fn a_fact_asked_in_other_words_is_recalled_by_meaning(store) {
    let Some(model) = model() else { return };
    let e = store
        .engine(LosslessConfig { fresh_tail_count: 8, ..Default::default() })
        .await
        .with_embedder(model);
    let history = history();
    ingest_all(&e, &history).await;
    let s = e.semantic().unwrap().clone();
    // The background embedder gets there on its own (woken by the ingest).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        let (done, total) = s.progress(&**e.backend()).await.unwrap();
        if done == total && total == history.len() as u64 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "embedded {done} of {total}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    // No word of the question is in the fact: lexical search finds nothing...
    let mut q = GrepQuery::new(QUESTION, Scope::Session(key()));
    q.mode = GrepMode::AnyTerm;
    let lexical = e.recall().grep(q.clone()).await.unwrap();
    assert!(lexical.hits.iter().all(|h| h.id != "msg_1"), "{:?}", lexical.hits);
    // ...by meaning, it is the first hit, alone or fused.
    for mode in [GrepMode::Semantic, GrepMode::Hybrid, GrepMode::Auto] {
        q.mode = mode;
        let r = e.recall().grep(q.clone()).await.unwrap();
        assert_eq!(r.hits.first().map(|h| h.id.as_str()), Some("msg_1"), "{mode:?}: {:?}", r.hits);
        assert!(r.hits[0].snippet.contains("PostgreSQL"), "{:?}", r.hits[0]);
    }
    // The `<recalled>` block quotes it for the question.
    let mut p = assemble_params(history.clone(), 1_200);
    p.prompt = Some(QUESTION.into());
    let out = e.assemble(&p, &cx()).await.unwrap();
    let block = out.messages.last().unwrap().plain_text();
    assert!(block.starts_with("<recalled") && block.contains("PostgreSQL"), "{block}");
    // A prompt about nothing said before quotes nothing by meaning.
    p.prompt = Some("Tell me a joke about penguins and ice cream.".into());
    let out = e.assemble(&p, &cx()).await.unwrap();
    let last = out.messages.last().unwrap().plain_text();
    assert!(!last.contains("PostgreSQL"), "{last}");
}
}

on_both_backends! {
async fn another_model_embeds_from_the_start(store) {
    let Some(model) = model() else { return };
    let e = store.engine(LosslessConfig::default()).await;
    ingest_all(&e, &history()[..10]).await;
    let first = semantic::Semantic::new(model.clone());
    let n = first.embed_all(&**e.backend(), |_, _| {}).await.unwrap();
    assert_eq!(n, 10);
    assert_eq!(first.progress(&**e.backend()).await.unwrap(), (10, 10));
    // The renamed model has embedded nothing, and its search sees none of the first's vectors.
    let second = semantic::Semantic::new(Arc::new(Renamed(model.clone())));
    assert_eq!(second.progress(&**e.backend()).await.unwrap(), (0, 10));
    let q = second.embed_query(FACT).await.unwrap();
    let conv = e.backend().conversation(&key()).await.unwrap().unwrap().id;
    assert!(second.search(&**e.backend(), &[conv], &q, 5, 0.0, |_| true).await.unwrap().is_empty());
    assert_eq!(second.embed_all(&**e.backend(), |_, _| {}).await.unwrap(), 10);
    let hits = second.search(&**e.backend(), &[conv], &q, 1, 0.0, |_| true).await.unwrap();
    assert_eq!(hits[0].item_id, 1);
    assert!(hits[0].score > 0.95, "{hits:?}");
    // The first model's vectors were not touched: each model holds ten.
    assert_eq!(store.count(&e, "SELECT count(*) FROM vectors").await, 20);
}
}

on_both_backends! {
async fn tool_results_are_not_embedded_but_count_as_done(store) {
    let Some(model) = model() else { return };
    let e = store.engine(LosslessConfig::default()).await;
    let mut rng = Lcg(9);
    let msgs: Vec<AgentMessage> = (0..3).flat_map(|t| turn(&mut rng, t, true, 12)).collect();
    assert_eq!(msgs.len(), 12);
    ingest_all(&e, &msgs).await;
    let s = semantic::Semantic::new(model);
    s.embed_all(&**e.backend(), |_, _| {}).await.unwrap();
    assert_eq!(s.progress(&**e.backend()).await.unwrap(), (12, 12));
    // The user's and the assistant's messages (the tool call among them), not the tool's
    // output.
    assert_eq!(store.count(&e, "SELECT count(*) FROM vectors").await, 9);
    assert_eq!(
        store
            .count(&e, "SELECT count(*) FROM vectors v JOIN messages m ON m.id = v.item_id WHERE m.role = 2")
            .await,
        0
    );
}
}
