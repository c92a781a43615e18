//! A tiny sentence-transformers BERT model directory written by the tests themselves
//! (deterministic pseudo-random weights, a 40-word vocabulary), so the local embedder's
//! loading, batching, padding, truncation and pooling are tested on every machine, without the
//! real model. Its vectors mean nothing; what is tested is that the same text gives the same
//! vector however it is batched, and that truncation and pooling do what the files say.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::collections::HashMap;
use std::path::Path;

use candle_core::{Device, Tensor};
use serde_json::{json, Value};

pub const HIDDEN: usize = 16;
pub const LAYERS: usize = 2;
pub const INTERMEDIATE: usize = 32;
pub const MAX_POSITIONS: usize = 64;

/// The vocabulary: the special tokens at BERT's usual places, then plain words and pieces.
pub const WORDS: [&str; 35] = [
    "the", "a", "cat", "dog", "sat", "on", "mat", "we", "chose", "postgres", "for", "storage",
    "what", "did", "pick", "?", ".", ",", "hello", "world", "is", "red", "blue", "green", "one",
    "two", "three", "##s", "##ing", "run", "fast", "slow", "big", "small", "!",
];

fn vocab() -> serde_json::Map<String, Value> {
    let mut v = serde_json::Map::new();
    for (i, t) in ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
        .iter()
        .chain(WORDS.iter())
        .enumerate()
    {
        v.insert((*t).to_owned(), json!(i));
    }
    v
}

pub fn vocab_size() -> usize {
    5 + WORDS.len()
}

/// Options for [`write_tiny_model`].
pub struct Tiny {
    /// `1_Pooling/config.json`'s flags, as JSON.
    pub pooling: Value,
    /// `sentence_bert_config.json`'s max_seq_length; `None` writes no such file.
    pub max_seq_length: Option<usize>,
    /// Extra entries appended to modules.json.
    pub extra_modules: Vec<Value>,
    /// Seed of the weights.
    pub seed: u64,
    /// Write modules.json at all.
    pub modules: bool,
}

impl Default for Tiny {
    fn default() -> Self {
        Tiny {
            pooling: json!({
                "word_embedding_dimension": HIDDEN,
                "pooling_mode_cls_token": false,
                "pooling_mode_mean_tokens": true,
                "pooling_mode_max_tokens": false,
                "pooling_mode_mean_sqrt_len_tokens": false
            }),
            max_seq_length: Some(16),
            extra_modules: Vec::new(),
            seed: 7,
            modules: true,
        }
    }
}

pub fn mean_pooling() -> Value {
    Tiny::default().pooling
}

pub fn cls_pooling() -> Value {
    json!({
        "word_embedding_dimension": HIDDEN,
        "pooling_mode_cls_token": true,
        "pooling_mode_mean_tokens": false
    })
}

/// Writes a sentence-transformers directory at `dir`.
pub fn write_tiny_model(dir: &Path, opts: &Tiny) {
    std::fs::create_dir_all(dir.join("1_Pooling")).unwrap();
    let config = json!({
        "architectures": ["BertModel"],
        "attention_probs_dropout_prob": 0.1,
        "hidden_act": "gelu",
        "hidden_dropout_prob": 0.1,
        "hidden_size": HIDDEN,
        "initializer_range": 0.02,
        "intermediate_size": INTERMEDIATE,
        "layer_norm_eps": 1e-12,
        "max_position_embeddings": MAX_POSITIONS,
        "model_type": "bert",
        "num_attention_heads": 2,
        "num_hidden_layers": LAYERS,
        "pad_token_id": 0,
        "position_embedding_type": "absolute",
        "type_vocab_size": 2,
        "vocab_size": vocab_size()
    });
    write_json(&dir.join("config.json"), &config);
    write_json(&dir.join("tokenizer.json"), &tokenizer_json());
    if opts.modules {
        let mut modules = vec![
            json!({"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"}),
            json!({"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}),
            json!({"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}),
        ];
        modules.extend(opts.extra_modules.iter().cloned());
        write_json(&dir.join("modules.json"), &Value::Array(modules));
    }
    write_json(&dir.join("1_Pooling/config.json"), &opts.pooling);
    if let Some(n) = opts.max_seq_length {
        write_json(
            &dir.join("sentence_bert_config.json"),
            &json!({"max_seq_length": n, "do_lower_case": false}),
        );
    }
    write_weights(&dir.join("model.safetensors"), opts.seed);
}

pub fn write_json(path: &Path, value: &Value) {
    std::fs::write(path, serde_json::to_vec_pretty(value).unwrap()).unwrap();
}

/// A BERT WordPiece tokenizer.json of the same shape as MiniLM's, with the tiny vocabulary and
/// MiniLM's own fixed padding and truncation to 128 (which the embedder must override).
fn tokenizer_json() -> Value {
    let special = |id: usize, content: &str| {
        json!({"id": id, "special": true, "content": content, "single_word": false,
               "lstrip": false, "rstrip": false, "normalized": false})
    };
    json!({
        "version": "1.0",
        "truncation": {"max_length": 128, "strategy": "LongestFirst", "stride": 0},
        "padding": {"strategy": {"Fixed": 128}, "direction": "Right", "pad_to_multiple_of": null,
                    "pad_id": 0, "pad_type_id": 0, "pad_token": "[PAD]"},
        "added_tokens": [special(0, "[PAD]"), special(1, "[UNK]"), special(2, "[CLS]"),
                         special(3, "[SEP]"), special(4, "[MASK]")],
        "normalizer": {"type": "BertNormalizer", "clean_text": true, "handle_chinese_chars": true,
                       "strip_accents": null, "lowercase": true},
        "pre_tokenizer": {"type": "BertPreTokenizer"},
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}},
                       {"Sequence": {"id": "A", "type_id": 0}},
                       {"SpecialToken": {"id": "[SEP]", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}},
                     {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": "[SEP]", "type_id": 0}},
                     {"Sequence": {"id": "B", "type_id": 1}},
                     {"SpecialToken": {"id": "[SEP]", "type_id": 1}}],
            "special_tokens": {
                "[CLS]": {"id": "[CLS]", "ids": [2], "tokens": ["[CLS]"]},
                "[SEP]": {"id": "[SEP]", "ids": [3], "tokens": ["[SEP]"]}
            }
        },
        "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": true},
        "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
                  "max_input_chars_per_word": 100, "vocab": vocab()}
    })
}

/// Deterministic values in about [-0.5, 0.5) (a 64-bit LCG).
fn values(n: usize, state: &mut u64) -> Vec<f32> {
    (0..n)
        .map(|_| {
            *state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((*state >> 40) as f32 / (1u64 << 24) as f32) - 0.5
        })
        .collect()
}

fn write_weights(path: &Path, seed: u64) {
    let mut state = seed;
    let mut tensors: HashMap<String, Tensor> = HashMap::new();
    let mut put = |name: String, shape: &[usize], state: &mut u64, fill: Option<f32>| {
        let n: usize = shape.iter().product();
        let data = match fill {
            Some(x) => vec![x; n],
            None => values(n, state),
        };
        tensors.insert(
            name,
            Tensor::from_vec(data, shape, &Device::Cpu).expect("tensor"),
        );
    };
    let h = HIDDEN;
    put(
        "embeddings.word_embeddings.weight".into(),
        &[vocab_size(), h],
        &mut state,
        None,
    );
    put(
        "embeddings.position_embeddings.weight".into(),
        &[MAX_POSITIONS, h],
        &mut state,
        None,
    );
    put(
        "embeddings.token_type_embeddings.weight".into(),
        &[2, h],
        &mut state,
        None,
    );
    put(
        "embeddings.LayerNorm.weight".into(),
        &[h],
        &mut state,
        Some(1.0),
    );
    put(
        "embeddings.LayerNorm.bias".into(),
        &[h],
        &mut state,
        Some(0.0),
    );
    for l in 0..LAYERS {
        let p = format!("encoder.layer.{l}");
        for m in ["query", "key", "value"] {
            put(
                format!("{p}.attention.self.{m}.weight"),
                &[h, h],
                &mut state,
                None,
            );
            put(
                format!("{p}.attention.self.{m}.bias"),
                &[h],
                &mut state,
                None,
            );
        }
        put(
            format!("{p}.attention.output.dense.weight"),
            &[h, h],
            &mut state,
            None,
        );
        put(
            format!("{p}.attention.output.dense.bias"),
            &[h],
            &mut state,
            None,
        );
        put(
            format!("{p}.attention.output.LayerNorm.weight"),
            &[h],
            &mut state,
            Some(1.0),
        );
        put(
            format!("{p}.attention.output.LayerNorm.bias"),
            &[h],
            &mut state,
            Some(0.0),
        );
        put(
            format!("{p}.intermediate.dense.weight"),
            &[INTERMEDIATE, h],
            &mut state,
            None,
        );
        put(
            format!("{p}.intermediate.dense.bias"),
            &[INTERMEDIATE],
            &mut state,
            None,
        );
        put(
            format!("{p}.output.dense.weight"),
            &[h, INTERMEDIATE],
            &mut state,
            None,
        );
        put(format!("{p}.output.dense.bias"), &[h], &mut state, None);
        put(
            format!("{p}.output.LayerNorm.weight"),
            &[h],
            &mut state,
            Some(1.0),
        );
        put(
            format!("{p}.output.LayerNorm.bias"),
            &[h],
            &mut state,
            Some(0.0),
        );
    }
    candle_core::safetensors::save(&tensors, path).expect("save safetensors");
}
