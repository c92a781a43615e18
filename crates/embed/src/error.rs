//! One error enum per boundary: [`LoadError`] when a local model directory is opened (or fetched
//! from the hub), [`EmbedError`] when texts are embedded, [`ResolveError`] when the configured
//! spec and `CLAWCTX_EMBED_MODEL` are turned into an embedder. Each message names what to fix
//! (the file, the variable, the endpoint), since these surface at startup to a person who
//! configured something.

use std::path::PathBuf;

/// Opening a sentence-transformers model directory failed.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// A file the model needs is not there.
    #[error("{}: missing (a sentence-transformers model directory needs config.json, model.safetensors and tokenizer.json)", path.display())]
    Missing {
        /// The file looked for.
        path: PathBuf,
    },
    /// A file is there but could not be read.
    #[error("{}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A JSON file of the model does not parse, or not into the shape expected.
    #[error("{}: {message}", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// The parser's message.
        message: String,
    },
    /// The directory holds a model this crate does not run (another architecture, another
    /// pooling, an extra module).
    #[error("{}: unsupported model: {message}", path.display())]
    Unsupported {
        /// The file that says so.
        path: PathBuf,
        /// What is not supported.
        message: String,
    },
    /// The weights do not load into a BERT model.
    #[error("{}: the weights do not load as a BERT model: {message}", path.display())]
    Weights {
        /// The weights file.
        path: PathBuf,
        /// candle's message.
        message: String,
    },
    /// `tokenizer.json` does not load.
    #[error("{}: {message}", path.display())]
    Tokenizer {
        /// The tokenizer file.
        path: PathBuf,
        /// The tokenizers crate's message.
        message: String,
    },
    /// Fetching the model from the Hugging Face hub failed.
    #[error("fetching {model} from the Hugging Face hub into {}: {message}", cache.display())]
    Hub {
        /// The hub id.
        model: String,
        /// The cache directory it was to go into.
        cache: PathBuf,
        /// What failed.
        message: String,
    },
}

/// Embedding a batch of texts failed.
#[derive(Debug, thiserror::Error)]
pub enum EmbedError {
    /// The local tokenizer rejected a text.
    #[error("tokenizing: {0}")]
    Tokenize(String),
    /// The local model's forward pass failed.
    #[error("running the model: {0}")]
    Inference(String),
    /// The blocking task that runs the local model died (a panic in the model code).
    #[error("the embedding task failed: {0}")]
    Task(String),
    /// The endpoint could not be reached, or did not answer in time.
    #[error("{url}: {message}")]
    Transport {
        /// The endpoint.
        url: String,
        /// reqwest's message (it says when it was a timeout).
        message: String,
    },
    /// The endpoint answered with an error status.
    #[error("{url}: HTTP {status}: {body}")]
    Status {
        /// The endpoint.
        url: String,
        /// The HTTP status.
        status: u16,
        /// The start of the response body (at most 500 characters).
        body: String,
    },
    /// The endpoint answered 2xx with a body that is not the embeddings expected.
    #[error("{url}: unexpected response: {message}")]
    BadResponse {
        /// The endpoint.
        url: String,
        /// What is wrong with it.
        message: String,
    },
}

/// Turning the configured spec and `CLAWCTX_EMBED_MODEL` into an embedder failed.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    /// The model named by `source` did not load.
    #[error("embeddings model from {source_name}: {error}")]
    Load {
        /// Where the model was named: `CLAWCTX_EMBED_MODEL`, the config, the default cache.
        source_name: String,
        /// Why it did not load.
        error: LoadError,
    },
    /// The value names no directory, and is no hub id this build can fetch.
    #[error("embeddings model from {source_name}: {message}")]
    NotFound {
        /// Where the model was named.
        source_name: String,
        /// What was tried.
        message: String,
    },
    /// The remote endpoint's config is unusable (its API key variable is unset, its URL bad).
    #[error("embeddings endpoint {base_url}: {message}")]
    Remote {
        /// The configured base URL.
        base_url: String,
        /// What is wrong.
        message: String,
    },
    /// The remote endpoint did not answer the probe that learns its vectors' dimension.
    #[error("embeddings endpoint: probing the dimension: {0}")]
    Probe(#[source] EmbedError),
    /// The blocking task that loads the model died.
    #[error("loading the embeddings model: {0}")]
    Task(String),
}
