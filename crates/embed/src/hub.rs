//! Fetching a sentence-transformers model by hub id (`sentence-transformers/all-MiniLM-L6-v2`)
//! from the Hugging Face hub into a cache directory, with the `hf-hub` crate (feature `hub`).
//!
//! Why: naming a model by id is how people know models, and a state dir is where clawctx keeps
//! what it downloads. Only the files [`crate::LocalEmbedder`] reads are fetched (not the ONNX,
//! OpenVINO and PyTorch copies a repo also holds): the top-level `config.json`,
//! `tokenizer.json`, `model.safetensors`, `modules.json`, `sentence_bert_config.json`, and each
//! module's `<dir>/config.json`. A complete fetch leaves a marker in the snapshot, so the next
//! start finds the model offline without asking the hub. The hub's address is `HF_ENDPOINT`
//! when set (a mirror), else huggingface.co; `HF_TOKEN` is sent when set (gated models).
//!
//! Where no network reaches the hub, this fails within [`INFO_TIMEOUT`] with an error saying
//! so; the caller's error then says to give a directory instead (`scripts/fetch-embed-model`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use hf_hub::api::tokio::ApiBuilder;
use hf_hub::{Cache, Repo, RepoType};

use crate::{EnvLookup, LoadError};

/// How long the first request (the repo's file list) may take.
pub const INFO_TIMEOUT: Duration = Duration::from_secs(30);

/// How long the whole fetch may take (about 90 MB for MiniLM).
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(900);

/// Written into the snapshot once every file is there.
const COMPLETE_MARKER: &str = ".clawctx-complete";

/// The snapshot directory of `model` in `cache_dir` when an earlier fetch completed there.
pub fn cached(model: &str, cache_dir: &Path) -> Option<PathBuf> {
    let repo =
        Cache::new(cache_dir.to_path_buf()).repo(Repo::new(model.to_owned(), RepoType::Model));
    let marker = repo.get(COMPLETE_MARKER)?;
    marker.parent().map(Path::to_path_buf)
}

/// Fetches `model` into `cache_dir` (hf-hub's cache layout) unless an earlier fetch completed,
/// and returns the snapshot directory, a sentence-transformers model directory.
pub async fn fetch(
    model: &str,
    cache_dir: &Path,
    env: EnvLookup<'_>,
) -> Result<PathBuf, LoadError> {
    if let Some(dir) = cached(model, cache_dir) {
        return Ok(dir);
    }
    let endpoint = env("HF_ENDPOINT").filter(|e| !e.trim().is_empty());
    let token = env("HF_TOKEN").filter(|t| !t.trim().is_empty());
    match tokio::time::timeout(FETCH_TIMEOUT, download(model, cache_dir, endpoint, token)).await {
        Ok(result) => result,
        Err(_) => Err(hub_error(
            model,
            cache_dir,
            format!("not done after {} s", FETCH_TIMEOUT.as_secs()),
        )),
    }
}

async fn download(
    model: &str,
    cache_dir: &Path,
    endpoint: Option<String>,
    token: Option<String>,
) -> Result<PathBuf, LoadError> {
    let err = |message: String| hub_error(model, cache_dir, message);
    std::fs::create_dir_all(cache_dir).map_err(|e| err(format!("creating the cache: {e}")))?;
    let mut builder = ApiBuilder::from_cache(Cache::new(cache_dir.to_path_buf()))
        .with_progress(false)
        .with_token(token);
    if let Some(endpoint) = endpoint {
        builder = builder.with_endpoint(endpoint.trim_end_matches('/').to_owned());
    }
    let api = builder.build().map_err(|e| err(e.to_string()))?;
    let repo = api.model(model.to_owned());
    let info = tokio::time::timeout(INFO_TIMEOUT, repo.info())
        .await
        .map_err(|_| err(format!("no answer within {} s", INFO_TIMEOUT.as_secs())))?
        .map_err(|e| err(format!("listing the repo's files: {e}")))?;
    let files: Vec<&str> = info
        .siblings
        .iter()
        .map(|s| s.rfilename.as_str())
        .filter(|f| wanted(f))
        .collect();
    for required in ["config.json", "tokenizer.json", "model.safetensors"] {
        if !files.contains(&required) {
            return Err(err(format!(
                "the repo has no {required} (a sentence-transformers BERT model in safetensors \
                 format is needed)"
            )));
        }
    }
    let mut snapshot = None;
    for file in &files {
        let path = repo
            .get(file)
            .await
            .map_err(|e| err(format!("downloading {file}: {e}")))?;
        if *file == "config.json" {
            snapshot = path.parent().map(Path::to_path_buf);
        }
    }
    let snapshot = snapshot.ok_or_else(|| err("config.json has no directory".to_owned()))?;
    std::fs::write(snapshot.join(COMPLETE_MARKER), model.as_bytes())
        .map_err(|e| err(format!("marking the snapshot complete: {e}")))?;
    Ok(snapshot)
}

/// The files of a repo the local embedder reads.
fn wanted(file: &str) -> bool {
    const TOP: [&str; 5] = [
        "config.json",
        "tokenizer.json",
        "model.safetensors",
        "modules.json",
        "sentence_bert_config.json",
    ];
    if TOP.contains(&file) {
        return true;
    }
    // A module's config one level down: 1_Pooling/config.json, 2_Dense/config.json.
    matches!(file.split_once('/'), Some((dir, "config.json")) if !dir.contains('/') && !dir.is_empty())
}

fn hub_error(model: &str, cache_dir: &Path, message: String) -> LoadError {
    LoadError::Hub {
        model: model.to_owned(),
        cache: cache_dir.to_path_buf(),
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_files_the_embedder_reads_are_fetched() {
        for f in [
            "config.json",
            "model.safetensors",
            "1_Pooling/config.json",
            "2_Dense/config.json",
        ] {
            assert!(wanted(f), "{f}");
        }
        for f in [
            "onnx/model.onnx",
            "pytorch_model.bin",
            "openvino/openvino_model.xml",
            "a/b/config.json",
            "/config.json",
            "README.md",
        ] {
            assert!(!wanted(f), "{f}");
        }
    }
}
