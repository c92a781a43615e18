//! `LocalEmbedder` on the tests' tiny model (tests/common): loading and its errors, batching
//! and padding (a text's vector does not depend on its batch), truncation, pooling, the model
//! id. The real model against sentence-transformers is tests/reference.rs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common::{self, Tiny};

use clawctx_embed::local::CHUNK;
use clawctx_embed::{cosine, Embedder, LoadError, LocalEmbedder, Pooling};
use serde_json::json;

fn tiny(opts: &Tiny) -> (tempfile::TempDir, LocalEmbedder) {
    let dir = tempfile::tempdir().unwrap();
    let model_dir = dir.path().join("tiny-model");
    common::write_tiny_model(&model_dir, opts);
    let embedder = LocalEmbedder::load(&model_dir).expect("tiny model loads");
    (dir, embedder)
}

fn assert_same(a: &[f32], b: &[f32], what: &str) {
    assert_eq!(a.len(), b.len(), "{what}: lengths");
    let worst = a
        .iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0f32, f32::max);
    assert!(worst < 1e-4, "{what}: vectors differ by up to {worst}");
}

const TEXTS: [&str; 6] = [
    "the cat sat on the mat",
    "hello",
    "we chose postgres for storage . what did we pick ?",
    "",
    "Hello, World!",
    "big red dogs running fast , small blue cats sat slow",
];

#[test]
fn loads_the_directory_as_it_says() {
    let (_d, e) = tiny(&Tiny::default());
    assert_eq!(e.dim(), common::HIDDEN);
    assert_eq!(e.max_length(), 16);
    assert_eq!(e.pooling(), Pooling::Mean);
    assert!(e.model_id().starts_with("tiny-model@"), "{}", e.model_id());
}

#[test]
fn vectors_are_unit_length_and_distinct() {
    let (_d, e) = tiny(&Tiny::default());
    let v = e.embed_blocking(&TEXTS).unwrap();
    assert_eq!(v.len(), TEXTS.len());
    for (t, x) in TEXTS.iter().zip(&v) {
        assert_eq!(x.len(), common::HIDDEN);
        let norm = x.iter().map(|a| a * a).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-5, "{t:?}: norm {norm}");
    }
    // Different texts, different vectors (the model does look at the words).
    assert!(cosine(&v[0], &v[2]) < 0.999, "{}", cosine(&v[0], &v[2]));
    // The tokenizer lowercases: "Hello, World!" and "hello , world !" are the same pieces.
    let again = e.embed_blocking(&["hello , world !"]).unwrap();
    assert_same(&v[4], &again[0], "lowercased");
}

#[test]
fn a_texts_vector_does_not_depend_on_its_batch() {
    let (_d, e) = tiny(&Tiny::default());
    let alone: Vec<Vec<f32>> = TEXTS
        .iter()
        .map(|t| e.embed_blocking(&[*t]).unwrap().remove(0))
        .collect();
    let together = e.embed_blocking(&TEXTS).unwrap();
    for i in 0..TEXTS.len() {
        assert_same(&alone[i], &together[i], TEXTS[i]);
    }
    // More texts than a chunk, lengths mixed: sorted by length inside, returned in input order.
    let many: Vec<String> = (0..CHUNK * 2 + 5)
        .map(|i| TEXTS[i % TEXTS.len()].repeat(1 + i % 3))
        .collect();
    let out = e.embed_blocking(&many).unwrap();
    assert_eq!(out.len(), many.len());
    for (i, text) in many.iter().enumerate() {
        let single = e.embed_blocking(&[text.as_str()]).unwrap().remove(0);
        assert_same(&single, &out[i], &format!("text {i}"));
    }
}

#[test]
fn texts_are_truncated_to_max_seq_length() {
    let (_d, e) = tiny(&Tiny::default());
    // 14 words + [CLS] + [SEP] = 16 pieces, the tiny model's max_seq_length.
    let fits = "one two three one two three one two three one two three one two";
    let longer = format!("{fits} red blue green dog cat");
    let shorter = "one two three one two three one two three one two three one";
    let v = e.embed_blocking(&[fits, longer.as_str(), shorter]).unwrap();
    assert_same(&v[0], &v[1], "words past max_seq_length are cut");
    let diff = v[0]
        .iter()
        .zip(&v[2])
        .map(|(x, y)| (x - y).abs())
        .fold(0.0f32, f32::max);
    assert!(
        diff > 1e-4,
        "one word less within the limit changes the vector"
    );
}

#[test]
fn without_sentence_bert_config_the_limit_is_the_models_positions() {
    // 512 by default, but never more than max_position_embeddings (64 here): a longer text must
    // be cut, not run past the position table.
    let (_d, e) = tiny(&Tiny {
        max_seq_length: None,
        ..Tiny::default()
    });
    assert_eq!(e.max_length(), common::MAX_POSITIONS);
    let long = "the cat sat on the mat . ".repeat(40);
    let v = e.embed_blocking(&[long.as_str(), "hello"]).unwrap();
    assert_eq!(v.len(), 2);
}

#[test]
fn cls_pooling_is_the_first_tokens_vector() {
    let (_d, mean) = tiny(&Tiny::default());
    let (_d2, cls) = tiny(&Tiny {
        pooling: common::cls_pooling(),
        ..Tiny::default()
    });
    assert_eq!(cls.pooling(), Pooling::Cls);
    assert_ne!(mean.model_id(), cls.model_id(), "pooling is part of the id");
    let m = mean.embed_blocking(&TEXTS).unwrap();
    let c = cls.embed_blocking(&TEXTS).unwrap();
    assert!(cosine(&m[0], &c[0]) < 0.999, "CLS and mean differ");
    // CLS is padding-independent too.
    let alone = cls.embed_blocking(&[TEXTS[2]]).unwrap().remove(0);
    assert_same(&alone, &c[2], "cls alone vs batch");
}

#[test]
fn without_modules_json_pooling_is_mean() {
    let (_d, with) = tiny(&Tiny::default());
    let (_d2, without) = tiny(&Tiny {
        modules: false,
        ..Tiny::default()
    });
    assert_eq!(without.pooling(), Pooling::Mean);
    let a = with.embed_blocking(&TEXTS).unwrap();
    let b = without.embed_blocking(&TEXTS).unwrap();
    for i in 0..TEXTS.len() {
        assert_same(&a[i], &b[i], TEXTS[i]);
    }
}

#[test]
fn the_model_id_follows_the_weights() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("m");
    let b = dir.path().join("other").join("m");
    common::write_tiny_model(&a, &Tiny::default());
    common::write_tiny_model(&b, &Tiny::default());
    let ea = LocalEmbedder::load(&a).unwrap();
    let eb = LocalEmbedder::load(&b).unwrap();
    assert_eq!(
        ea.model_id(),
        eb.model_id(),
        "same files, same name: same id"
    );
    common::write_tiny_model(
        &b,
        &Tiny {
            seed: 8,
            ..Tiny::default()
        },
    );
    let changed = LocalEmbedder::load(&b).unwrap();
    assert_ne!(ea.model_id(), changed.model_id(), "new weights, new id");
    let labelled = LocalEmbedder::load_as(&a, "org/name").unwrap();
    assert!(labelled.model_id().starts_with("org/name@"));
}

#[tokio::test]
async fn the_trait_runs_on_the_blocking_pool() {
    let (_d, e) = tiny(&Tiny::default());
    let shared: std::sync::Arc<dyn Embedder> = std::sync::Arc::new(e.clone());
    let texts: Vec<String> = TEXTS.iter().map(|t| (*t).to_owned()).collect();
    let got = shared.embed(&texts).await.unwrap();
    let want = e.embed_blocking(&TEXTS).unwrap();
    for i in 0..TEXTS.len() {
        assert_same(&got[i], &want[i], TEXTS[i]);
    }
    assert!(shared.embed(&[]).await.unwrap().is_empty());
}

fn load_err(dir: &std::path::Path) -> LoadError {
    LocalEmbedder::load(dir).expect_err("load must fail")
}

#[test]
fn unusable_directories_are_refused_with_the_file_named() {
    let root = tempfile::tempdir().unwrap();

    let missing = root.path().join("nothing-here");
    let e = load_err(&missing);
    assert!(matches!(e, LoadError::Missing { .. }), "{e}");

    let no_weights = root.path().join("no-weights");
    common::write_tiny_model(&no_weights, &Tiny::default());
    std::fs::remove_file(no_weights.join("model.safetensors")).unwrap();
    let e = load_err(&no_weights);
    assert!(
        matches!(&e, LoadError::Missing { path } if path.ends_with("model.safetensors")),
        "{e}"
    );
    assert!(e.to_string().contains("model.safetensors"), "{e}");

    let dense = root.path().join("dense");
    common::write_tiny_model(
        &dense,
        &Tiny {
            extra_modules: vec![json!({"idx": 3, "name": "3", "path": "3_Dense",
                                    "type": "sentence_transformers.models.Dense"})],
            ..Tiny::default()
        },
    );
    let e = load_err(&dense);
    assert!(
        matches!(&e, LoadError::Unsupported { message, .. } if message.contains("Dense")),
        "{e}"
    );

    let max_pooling = root.path().join("max");
    common::write_tiny_model(
        &max_pooling,
        &Tiny {
            pooling: json!({"pooling_mode_max_tokens": true}),
            ..Tiny::default()
        },
    );
    let e = load_err(&max_pooling);
    assert!(
        matches!(&e, LoadError::Unsupported { path, .. } if path.ends_with("1_Pooling/config.json")),
        "{e}"
    );

    let roberta = root.path().join("roberta");
    common::write_tiny_model(&roberta, &Tiny::default());
    let cfg = roberta.join("config.json");
    let text = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(&cfg, text.replace("\"bert\"", "\"xlm-roberta\"")).unwrap();
    let e = load_err(&roberta);
    assert!(e.to_string().contains("xlm-roberta"), "{e}");

    let broken = root.path().join("broken");
    common::write_tiny_model(&broken, &Tiny::default());
    std::fs::write(broken.join("config.json"), "{ not json").unwrap();
    let e = load_err(&broken);
    assert!(matches!(e, LoadError::Parse { .. }), "{e}");

    let bad_weights = root.path().join("bad-weights");
    common::write_tiny_model(&bad_weights, &Tiny::default());
    std::fs::write(bad_weights.join("model.safetensors"), b"not safetensors").unwrap();
    let e = load_err(&bad_weights);
    assert!(matches!(e, LoadError::Weights { .. }), "{e}");
}
