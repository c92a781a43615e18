//! [`RemoteEmbedder`]: any OpenAI-compatible embeddings endpoint (`POST <baseUrl>/embeddings`).
//!
//! Why: a deployment that already runs a model server (OpenAI, vLLM, llama.cpp server, Ollama,
//! text-embeddings-inference) can use a larger model than the in-process one, without loading
//! weights into every clawctx process. The base URL follows the model providers' convention
//! (`https://api.openai.com/v1`, `http://127.0.0.1:8080/v1`): `/embeddings` is appended. The API
//! key is read from the environment variable the config names (never from the config itself);
//! with no variable named, no `Authorization` header is sent (local servers need none).
//!
//! Each request has a timeout; a failure names the endpoint and, for an error status, the start
//! of the body (the server's own explanation). Texts go in requests of at most [`MAX_INPUTS`];
//! the answers are put back in input order by their `index` and L2-normalized (OpenAI's already
//! are, other servers' may not be). Not retried here: the caller decides (recall falls back to
//! lexical ranking).

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::json;

use crate::{l2_normalize, EmbedError, Embedder, EnvLookup, ResolveError};

/// Inputs sent in one request (OpenAI accepts up to 2048; smaller requests fail smaller).
pub const MAX_INPUTS: usize = 256;

/// The default per-request timeout.
pub const DEFAULT_TIMEOUT_MS: u64 = 30_000;

/// Characters of an error body kept in [`EmbedError::Status`].
const BODY_EXCERPT: usize = 500;

/// An OpenAI-compatible embeddings endpoint, as configured.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RemoteConfig {
    /// The API root, `/embeddings` is appended: `https://api.openai.com/v1`.
    pub base_url: String,
    /// The model name sent in each request (`text-embedding-3-small`).
    pub model: String,
    /// The environment variable holding the API key (`OPENAI_API_KEY`); none: no key sent.
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// The vectors' dimension. When set it is sent as `dimensions` (OpenAI's text-embedding-3
    /// models shorten their vectors to it) and answers of another length are refused; when not,
    /// [`RemoteEmbedder::connect`] learns it from one probe request.
    #[serde(default)]
    pub dimensions: Option<usize>,
    /// Per-request timeout in milliseconds (default 30 s).
    #[serde(default)]
    pub timeout_ms: Option<u64>,
}

/// A client of an OpenAI-compatible embeddings endpoint.
#[derive(Clone)]
pub struct RemoteEmbedder {
    client: reqwest::Client,
    url: String,
    model: String,
    api_key: Option<String>,
    send_dimensions: bool,
    dim: usize,
    model_id: String,
}

impl fmt::Debug for RemoteEmbedder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the key.
        f.debug_struct("RemoteEmbedder")
            .field("url", &self.url)
            .field("model", &self.model)
            .field("dim", &self.dim)
            .finish()
    }
}

impl RemoteEmbedder {
    /// Builds the client from `config`, reading the API key through `env`. When the config gives
    /// no `dimensions`, sends one probe request (`"dimension probe"`) to learn it.
    pub async fn connect(
        config: &RemoteConfig,
        env: EnvLookup<'_>,
    ) -> Result<RemoteEmbedder, ResolveError> {
        let remote_error = |message: String| ResolveError::Remote {
            base_url: config.base_url.clone(),
            message,
        };
        let base = config.base_url.trim_end_matches('/');
        let parsed =
            reqwest::Url::parse(base).map_err(|e| remote_error(format!("baseUrl: {e}")))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(remote_error("baseUrl must be http or https".to_owned()));
        }
        if config.model.trim().is_empty() {
            return Err(remote_error("model is empty".to_owned()));
        }
        let api_key = match &config.api_key_env {
            None => None,
            Some(var) => match env(var).filter(|v| !v.trim().is_empty()) {
                Some(key) => Some(key),
                None => {
                    return Err(remote_error(format!(
                        "apiKeyEnv names {var}, which is not set"
                    )))
                }
            },
        };
        let timeout = Duration::from_millis(config.timeout_ms.unwrap_or(DEFAULT_TIMEOUT_MS));
        let client = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout.min(Duration::from_secs(10)))
            .build()
            .map_err(|e| remote_error(format!("building the HTTP client: {e}")))?;
        let mut embedder = RemoteEmbedder {
            client,
            url: format!("{base}/embeddings"),
            model: config.model.clone(),
            api_key,
            send_dimensions: config.dimensions.is_some(),
            dim: config.dimensions.unwrap_or(0),
            model_id: match config.dimensions {
                Some(d) => format!("openai:{}@{base}#{d}", config.model),
                None => format!("openai:{}@{base}", config.model),
            },
        };
        if config.dimensions.is_none() {
            let probe = embedder
                .request(&["dimension probe".to_owned()])
                .await
                .map_err(ResolveError::Probe)?;
            embedder.dim = probe.first().map(Vec::len).unwrap_or(0);
        }
        Ok(embedder)
    }

    /// The full URL requests go to.
    pub fn url(&self) -> &str {
        &self.url
    }

    async fn request(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let mut body = json!({ "model": self.model, "input": texts, "encoding_format": "float" });
        if self.send_dimensions {
            body["dimensions"] = json!(self.dim);
        }
        let mut req = self.client.post(&self.url).json(&body);
        if let Some(key) = &self.api_key {
            req = req.bearer_auth(key);
        }
        let transport = |e: reqwest::Error| EmbedError::Transport {
            url: self.url.clone(),
            message: if e.is_timeout() {
                format!("timed out: {e}")
            } else {
                e.to_string()
            },
        };
        let resp = req.send().await.map_err(transport)?;
        let status = resp.status();
        let text = resp.text().await.map_err(transport)?;
        if !status.is_success() {
            return Err(EmbedError::Status {
                url: self.url.clone(),
                status: status.as_u16(),
                body: excerpt(&text),
            });
        }
        self.parse(&text, texts.len())
    }

    fn parse(&self, text: &str, expected: usize) -> Result<Vec<Vec<f32>>, EmbedError> {
        #[derive(Deserialize)]
        struct Reply {
            data: Vec<Item>,
        }
        #[derive(Deserialize)]
        struct Item {
            embedding: Vec<f32>,
            index: usize,
        }
        let bad = |message: String| EmbedError::BadResponse {
            url: self.url.clone(),
            message,
        };
        let reply: Reply =
            serde_json::from_str(text).map_err(|e| bad(format!("{e} in {}", excerpt(text))))?;
        if reply.data.len() != expected {
            return Err(bad(format!(
                "{} embeddings for {expected} inputs",
                reply.data.len()
            )));
        }
        let mut out: Vec<Option<Vec<f32>>> = vec![None; expected];
        for item in reply.data {
            let slot = out
                .get_mut(item.index)
                .ok_or_else(|| bad(format!("index {} out of range", item.index)))?;
            if slot.is_some() {
                return Err(bad(format!("index {} twice", item.index)));
            }
            if item.embedding.is_empty() {
                return Err(bad(format!("empty embedding at index {}", item.index)));
            }
            if self.dim != 0 && item.embedding.len() != self.dim {
                return Err(bad(format!(
                    "embedding of {} dimensions at index {}, expected {}",
                    item.embedding.len(),
                    item.index,
                    self.dim
                )));
            }
            if item.embedding.iter().any(|x| !x.is_finite()) {
                return Err(bad(format!("non-finite value at index {}", item.index)));
            }
            *slot = Some(item.embedding);
        }
        Ok(out
            .into_iter()
            .map(|v| {
                let mut v = v.unwrap_or_default();
                l2_normalize(&mut v);
                v
            })
            .collect())
    }
}

#[async_trait]
impl Embedder for RemoteEmbedder {
    fn model_id(&self) -> &str {
        &self.model_id
    }

    fn dim(&self) -> usize {
        self.dim
    }

    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let mut out = Vec::with_capacity(texts.len());
        for chunk in texts.chunks(MAX_INPUTS) {
            out.extend(self.request(chunk).await?);
        }
        Ok(out)
    }
}

/// The start of a body, on one line, for an error message.
fn excerpt(body: &str) -> String {
    let flat: String = body
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let flat = flat.trim();
    match flat.char_indices().nth(BODY_EXCERPT) {
        Some((cut, _)) => format!("{}…", &flat[..cut]),
        None => flat.to_owned(),
    }
}
