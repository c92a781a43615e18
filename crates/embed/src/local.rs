//! [`LocalEmbedder`]: a BERT-family sentence-transformers model run in process on the CPU.
//!
//! Why in process: semantic recall should work on a laptop with no model server and no network,
//! and a MiniLM-sized model (22 M parameters, 384 dimensions) embeds a short message in a few
//! milliseconds on one core. It runs on Hugging Face's candle (pure Rust; no ONNX Runtime, no
//! libtorch, nothing fetched at build time) with the `tokenizers` crate reading the model's own
//! `tokenizer.json`, so the word pieces are those the model was trained on.
//!
//! A model directory is what sentence-transformers saves (and what the hub holds):
//!
//! - `modules.json`: the pipeline. Supported: a `Transformer` (BERT), then a `Pooling`, then
//!   optionally a `Normalize`; any other module (a `Dense` projection, say) is refused at load,
//!   since skipping it would give vectors unlike the reference ones. Without `modules.json` the
//!   directory is taken as a plain BERT with mean pooling, sentence-transformers' own default.
//! - `<pooling path>/config.json` (`1_Pooling/config.json`): mean or CLS pooling (others refused).
//! - `config.json` (the BERT config), `model.safetensors`, `tokenizer.json`.
//! - `sentence_bert_config.json`: `max_seq_length`, the word pieces a text is truncated to,
//!   special tokens included (256 for all-MiniLM-L6-v2); 512 when absent, and never more than the
//!   model's `max_position_embeddings`.
//!
//! Vectors are always L2-normalized (the [`Embedder`] contract), whether or not the pipeline has
//! a `Normalize` module. A batch is tokenized once, sorted by length and run in chunks of
//! [`CHUNK`] texts padded to the chunk's longest (with the attention mask), so a long text does
//! not make every short one pay for its padding; results come back in input order.
//!
//! The model identity ([`Embedder::model_id`]) is the directory's name and a hash of what decides
//! the vectors (weights, tokenizer, pooling, max length): a changed model changes the id, so
//! stored vectors get re-embedded, while the same files elsewhere keep it only if the directory
//! has the same name.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{BertModel, Config as BertConfig};
use serde::Deserialize;
use sha2::{Digest, Sha256};
use tokenizers::{Tokenizer, TruncationParams};

use crate::{l2_normalize, EmbedError, Embedder, LoadError};

/// Texts run through the model together (padded to the chunk's longest). 32 keeps the attention
/// scores of a chunk of 256-piece texts near 100 MB.
pub const CHUNK: usize = 32;

/// Truncation length when the directory has no `sentence_bert_config.json`.
pub const DEFAULT_MAX_LENGTH: usize = 512;

/// How token vectors become one text vector (`1_Pooling/config.json`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pooling {
    /// The mean of the token vectors under the attention mask (all-MiniLM-L6-v2).
    Mean,
    /// The first token's (`[CLS]`) vector (the BGE family).
    Cls,
}

impl fmt::Display for Pooling {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Pooling::Mean => "mean",
            Pooling::Cls => "cls",
        })
    }
}

/// A sentence-transformers BERT model loaded from a directory, run on the CPU.
///
/// Cheap to clone (the model is shared). [`Embedder::embed`] runs the model on tokio's blocking
/// pool; [`LocalEmbedder::embed_blocking`] runs it on the calling thread.
#[derive(Clone)]
pub struct LocalEmbedder {
    inner: Arc<Model>,
    model_id: String,
    dim: usize,
    max_length: usize,
    pooling: Pooling,
}

struct Model {
    bert: BertModel,
    tokenizer: Tokenizer,
    pooling: Pooling,
    pad_id: u32,
    device: Device,
}

impl fmt::Debug for LocalEmbedder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LocalEmbedder")
            .field("model_id", &self.model_id)
            .field("dim", &self.dim)
            .field("max_length", &self.max_length)
            .field("pooling", &self.pooling)
            .finish()
    }
}

impl LocalEmbedder {
    /// Loads the model directory `dir`, naming it after the directory. Reads about 100 MB for
    /// MiniLM and hashes it: call it off the async runtime (`spawn_blocking`).
    pub fn load(dir: &Path) -> Result<Self, LoadError> {
        let label = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "model".to_owned());
        Self::load_as(dir, &label)
    }

    /// Loads the model directory `dir` under `label` (a hub id, say) in its model id.
    pub fn load_as(dir: &Path, label: &str) -> Result<Self, LoadError> {
        let layout = Layout::read(dir)?;
        let config_path = layout.model_dir.join("config.json");
        let config_text = read_text(&config_path)?;
        check_architecture(&config_path, &config_text)?;
        let config: BertConfig = parse_json(&config_path, &config_text)?;
        if config.max_position_embeddings == 0 || config.hidden_size == 0 {
            return Err(LoadError::Unsupported {
                path: config_path,
                message: "hidden_size and max_position_embeddings must be positive".to_owned(),
            });
        }
        let max_length = layout.max_length.min(config.max_position_embeddings);

        let tokenizer_path = layout.model_dir.join("tokenizer.json");
        let tokenizer_bytes = read_bytes(&tokenizer_path)?;
        let mut tokenizer =
            Tokenizer::from_bytes(&tokenizer_bytes).map_err(|e| LoadError::Tokenizer {
                path: tokenizer_path.clone(),
                message: e.to_string(),
            })?;
        // tokenizer.json may carry its own padding and truncation (MiniLM's: fixed 128). Padding
        // is done here per chunk; truncation is sentence-transformers' max_seq_length.
        let pad_id = tokenizer
            .get_padding()
            .map(|p| p.pad_id)
            .unwrap_or(config.pad_token_id as u32);
        tokenizer.with_padding(None);
        tokenizer
            .with_truncation(Some(TruncationParams {
                max_length,
                ..TruncationParams::default()
            }))
            .map_err(|e| LoadError::Tokenizer {
                path: tokenizer_path.clone(),
                message: format!("truncation to {max_length}: {e}"),
            })?;

        let weights_path = layout.model_dir.join("model.safetensors");
        let weights = read_bytes(&weights_path)?;
        let mut hash = Sha256::new();
        hash.update(&weights);
        hash.update(&tokenizer_bytes);
        hash.update(format!("pooling={} max_length={max_length}", layout.pooling).as_bytes());
        let digest = hash.finalize();
        let short: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();

        let device = Device::Cpu;
        let weights_error = |e: candle_core::Error| LoadError::Weights {
            path: weights_path.clone(),
            message: e.to_string(),
        };
        let vb = VarBuilder::from_buffered_safetensors(weights, DType::F32, &device)
            .map_err(weights_error)?;
        let bert = BertModel::load(vb, &config).map_err(weights_error)?;

        Ok(LocalEmbedder {
            inner: Arc::new(Model {
                bert,
                tokenizer,
                pooling: layout.pooling,
                pad_id,
                device,
            }),
            model_id: format!("{label}@{short}"),
            dim: config.hidden_size,
            max_length,
            pooling: layout.pooling,
        })
    }

    /// The truncation length in word pieces, special tokens included.
    pub fn max_length(&self) -> usize {
        self.max_length
    }

    /// The pooling read from the directory.
    pub fn pooling(&self) -> Pooling {
        self.pooling
    }

    /// Embeds on the calling thread (CPU-bound: not on an async runtime's worker).
    pub fn embed_blocking<S: AsRef<str>>(&self, texts: &[S]) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.inner.embed(texts)
    }
}

#[async_trait]
impl Embedder for LocalEmbedder {
    fn model_id(&self) -> &str {
        &self.model_id
    }

    fn dim(&self) -> usize {
        self.dim
    }

    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let model = Arc::clone(&self.inner);
        let texts = texts.to_vec();
        tokio::task::spawn_blocking(move || model.embed(&texts))
            .await
            .map_err(|e| EmbedError::Task(e.to_string()))?
    }
}

impl Model {
    fn embed<S: AsRef<str>>(&self, texts: &[S]) -> Result<Vec<Vec<f32>>, EmbedError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let inputs: Vec<&str> = texts.iter().map(AsRef::as_ref).collect();
        let encodings = self
            .tokenizer
            .encode_batch(inputs, true)
            .map_err(|e| EmbedError::Tokenize(e.to_string()))?;
        // Longest first, so each chunk pads to about its own length.
        let mut order: Vec<usize> = (0..encodings.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(encodings[i].get_ids().len()));

        let mut out: Vec<Vec<f32>> = vec![Vec::new(); encodings.len()];
        for chunk in order.chunks(CHUNK) {
            let batch: Vec<&tokenizers::Encoding> = chunk.iter().map(|&i| &encodings[i]).collect();
            let vectors = self
                .forward(&batch)
                .map_err(|e| EmbedError::Inference(e.to_string()))?;
            for (&i, mut v) in chunk.iter().zip(vectors) {
                l2_normalize(&mut v);
                out[i] = v;
            }
        }
        Ok(out)
    }

    /// Pooled (not yet normalized) vectors of one padded chunk.
    fn forward(&self, batch: &[&tokenizers::Encoding]) -> candle_core::Result<Vec<Vec<f32>>> {
        let rows = batch.len();
        let width = batch.iter().map(|e| e.get_ids().len()).max().unwrap_or(0);
        let mut ids = vec![self.pad_id; rows * width];
        let mut types = vec![0u32; rows * width];
        let mut mask = vec![0u32; rows * width];
        for (r, enc) in batch.iter().enumerate() {
            let start = r * width;
            let n = enc.get_ids().len();
            ids[start..start + n].copy_from_slice(enc.get_ids());
            types[start..start + n].copy_from_slice(enc.get_type_ids());
            mask[start..start + n].copy_from_slice(enc.get_attention_mask());
        }
        let ids = Tensor::from_vec(ids, (rows, width), &self.device)?;
        let types = Tensor::from_vec(types, (rows, width), &self.device)?;
        let mask = Tensor::from_vec(mask, (rows, width), &self.device)?;
        let hidden = self.bert.forward(&ids, &types, Some(&mask))?; // (rows, width, dim)
        let pooled = match self.pooling {
            Pooling::Cls => hidden.narrow(1, 0, 1)?.squeeze(1)?,
            Pooling::Mean => {
                let mask = mask.to_dtype(DType::F32)?.unsqueeze(2)?; // (rows, width, 1)
                let sum = hidden.broadcast_mul(&mask)?.sum(1)?; // (rows, dim)
                let count = mask.sum(1)?.clamp(1e-9f32, f32::MAX)?; // (rows, 1)
                sum.broadcast_div(&count)?
            }
        };
        pooled.to_vec2::<f32>()
    }
}

/// Where the parts of a sentence-transformers directory are, read from `modules.json`.
struct Layout {
    /// The Transformer module's directory (config, weights, tokenizer).
    model_dir: PathBuf,
    pooling: Pooling,
    max_length: usize,
}

#[derive(Deserialize)]
struct ModuleEntry {
    #[serde(default)]
    path: String,
    #[serde(rename = "type")]
    kind: String,
}

#[derive(Deserialize)]
struct PoolingConfig {
    #[serde(default)]
    pooling_mode_cls_token: bool,
    #[serde(default)]
    pooling_mode_mean_tokens: bool,
    #[serde(default)]
    pooling_mode_max_tokens: bool,
    #[serde(default)]
    pooling_mode_mean_sqrt_len_tokens: bool,
    #[serde(default)]
    pooling_mode_weightedmean_tokens: bool,
    #[serde(default)]
    pooling_mode_lasttoken: bool,
    #[serde(default = "yes")]
    include_prompt: bool,
}

fn yes() -> bool {
    true
}

#[derive(Deserialize)]
struct SentenceBertConfig {
    max_seq_length: Option<usize>,
}

impl Layout {
    fn read(dir: &Path) -> Result<Layout, LoadError> {
        if !dir.is_dir() {
            return Err(LoadError::Missing {
                path: dir.to_path_buf(),
            });
        }
        let modules_path = dir.join("modules.json");
        let (model_dir, pooling) = if modules_path.is_file() {
            let modules: Vec<ModuleEntry> = parse_json(&modules_path, &read_text(&modules_path)?)?;
            let mut model_dir = None;
            let mut pooling = None;
            for m in &modules {
                // "sentence_transformers.models.Pooling", or the short name newer versions write.
                let kind = m.kind.rsplit('.').next().unwrap_or(&m.kind);
                let sub = dir.join(&m.path);
                match kind {
                    "Transformer" if model_dir.is_none() => model_dir = Some(sub),
                    "Pooling" if pooling.is_none() => pooling = Some(read_pooling(&sub)?),
                    "Normalize" => {}
                    _ => {
                        return Err(LoadError::Unsupported {
                            path: modules_path.clone(),
                            message: format!(
                                "module {} ({}): only Transformer, Pooling and Normalize are run",
                                m.path, m.kind
                            ),
                        })
                    }
                }
            }
            let model_dir = model_dir.ok_or_else(|| LoadError::Unsupported {
                path: modules_path.clone(),
                message: "no Transformer module".to_owned(),
            })?;
            (model_dir, pooling.unwrap_or(Pooling::Mean))
        } else {
            (dir.to_path_buf(), Pooling::Mean)
        };
        let sbert_path = model_dir.join("sentence_bert_config.json");
        let max_length = if sbert_path.is_file() {
            let c: SentenceBertConfig = parse_json(&sbert_path, &read_text(&sbert_path)?)?;
            c.max_seq_length.unwrap_or(DEFAULT_MAX_LENGTH)
        } else {
            DEFAULT_MAX_LENGTH
        };
        if max_length < 3 {
            return Err(LoadError::Unsupported {
                path: sbert_path,
                message: format!("max_seq_length {max_length} leaves no room for text"),
            });
        }
        Ok(Layout {
            model_dir,
            pooling,
            max_length,
        })
    }
}

fn read_pooling(dir: &Path) -> Result<Pooling, LoadError> {
    let path = dir.join("config.json");
    let c: PoolingConfig = parse_json(&path, &read_text(&path)?)?;
    let others = c.pooling_mode_max_tokens
        || c.pooling_mode_mean_sqrt_len_tokens
        || c.pooling_mode_weightedmean_tokens
        || c.pooling_mode_lasttoken;
    let unsupported = |message: &str| LoadError::Unsupported {
        path: path.clone(),
        message: message.to_owned(),
    };
    if !c.include_prompt {
        return Err(unsupported("include_prompt=false is not supported"));
    }
    match (c.pooling_mode_mean_tokens, c.pooling_mode_cls_token, others) {
        (true, false, false) => Ok(Pooling::Mean),
        (false, true, false) => Ok(Pooling::Cls),
        _ => Err(unsupported(
            "exactly one of pooling_mode_mean_tokens and pooling_mode_cls_token must be set \
             (max, mean-sqrt-len, weighted-mean and last-token pooling are not supported)",
        )),
    }
}

/// Refuses configs of another architecture before their weights fail in a less clear way.
fn check_architecture(path: &Path, text: &str) -> Result<(), LoadError> {
    #[derive(Deserialize)]
    struct Kind {
        model_type: Option<String>,
    }
    let kind: Kind = parse_json(path, text)?;
    match kind.model_type.as_deref() {
        None | Some("bert") => Ok(()),
        Some(other) => Err(LoadError::Unsupported {
            path: path.to_path_buf(),
            message: format!("model_type {other:?}: only BERT models (model_type \"bert\") run"),
        }),
    }
}

fn read_bytes(path: &Path) -> Result<Vec<u8>, LoadError> {
    std::fs::read(path).map_err(|source| {
        if source.kind() == std::io::ErrorKind::NotFound {
            LoadError::Missing {
                path: path.to_path_buf(),
            }
        } else {
            LoadError::Read {
                path: path.to_path_buf(),
                source,
            }
        }
    })
}

fn read_text(path: &Path) -> Result<String, LoadError> {
    let bytes = read_bytes(path)?;
    String::from_utf8(bytes).map_err(|e| LoadError::Parse {
        path: path.to_path_buf(),
        message: format!("not UTF-8: {e}"),
    })
}

fn parse_json<T: serde::de::DeserializeOwned>(path: &Path, text: &str) -> Result<T, LoadError> {
    serde_json::from_str(text).map_err(|e| LoadError::Parse {
        path: path.to_path_buf(),
        message: e.to_string(),
    })
}
