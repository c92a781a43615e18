//! all-MiniLM-L6-v2 run by `LocalEmbedder` against sentence-transformers' own vectors of the
//! same sentences from the same model directory (tests/fixtures/minilm_reference.json, made by
//! tests/fixtures/make_reference.py): a cosine of at least 0.99 with each, a Chinese, a
//! Japanese and a past-256-word-pieces sentence among them.
//!
//! The model directory is `CLAWCTX_EMBED_MODEL` (`scripts/fetch-embed-model` prints one; .ci/run
//! exports it). Without it the test skips with a message, except under `CI=true`, where it fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use clawctx_embed::{cosine, Embedder, LocalEmbedder, Pooling};
use serde::Deserialize;

#[derive(Deserialize)]
struct Reference {
    max_seq_length: usize,
    cases: Vec<Case>,
}

#[derive(Deserialize)]
struct Case {
    text: String,
    word_pieces_untruncated: usize,
    embedding: Vec<f32>,
}

/// The model directory, or `None` (skip) outside CI: `CLAWCTX_TEST_EMBED_MODEL` (what .ci/run
/// exports), else `CLAWCTX_EMBED_MODEL`.
fn model_dir() -> Option<PathBuf> {
    let var = |name: &str| std::env::var(name).ok().filter(|d| Path::new(d).is_dir());
    match var("CLAWCTX_TEST_EMBED_MODEL").or_else(|| var("CLAWCTX_EMBED_MODEL")) {
        Some(dir) => Some(PathBuf::from(dir)),
        None => {
            if std::env::var("CI").is_ok_and(|v| v == "true") {
                panic!(
                    "CLAWCTX_TEST_EMBED_MODEL is not set but CI=true: CI must run the reference \
                     test (.ci/run exports it from scripts/fetch-embed-model)"
                );
            }
            eprintln!(
                "skipping: CLAWCTX_TEST_EMBED_MODEL is not set (export \
                 CLAWCTX_TEST_EMBED_MODEL=\"$(scripts/fetch-embed-model)\" to run this test)"
            );
            None
        }
    }
}

fn reference() -> Reference {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/minilm_reference.json"
    );
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[tokio::test]
async fn minilm_matches_sentence_transformers() {
    let Some(dir) = model_dir() else { return };
    let reference = reference();
    assert!(reference.cases.len() >= 5);
    assert!(
        reference
            .cases
            .iter()
            .any(|c| c.word_pieces_untruncated > reference.max_seq_length),
        "the fixture has a sentence past the truncation length"
    );

    let embedder = LocalEmbedder::load(&dir).expect("the model directory loads");
    assert_eq!(embedder.dim(), 384);
    assert_eq!(embedder.max_length(), reference.max_seq_length);
    assert_eq!(embedder.pooling(), Pooling::Mean);

    let texts: Vec<String> = reference.cases.iter().map(|c| c.text.clone()).collect();
    let batch = embedder.embed(&texts).await.unwrap();
    let mut worst = f32::MAX;
    for (case, got) in reference.cases.iter().zip(&batch) {
        assert_eq!(got.len(), case.embedding.len());
        let c = cosine(got, &case.embedding);
        eprintln!("cosine {c:.6}  {:.50}", case.text);
        assert!(c >= 0.99, "cosine {c} < 0.99 for {:?}", case.text);
        worst = worst.min(c);
        // One at a time: the same vector as in the batch (padding does not leak in).
        let alone = embedder
            .embed(std::slice::from_ref(&case.text))
            .await
            .unwrap()
            .remove(0);
        assert!(
            cosine(&alone, got) > 0.9999,
            "{:?} alone vs batched",
            case.text
        );
    }
    eprintln!("worst cosine with sentence-transformers: {worst:.6}");

    // And the point of it: a question is nearer its answer than an unrelated sentence.
    let find = |prefix: &str| {
        texts
            .iter()
            .position(|t| t.starts_with(prefix))
            .expect("fixture sentence")
    };
    let (answer, question, fox) = (
        find("We decided"),
        find("Which database"),
        find("The quick"),
    );
    assert!(cosine(&batch[answer], &batch[question]) > cosine(&batch[fox], &batch[question]) + 0.1);
}
