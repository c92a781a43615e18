//! Which embedder, if any: the configured [`EmbedSpec`], else `CLAWCTX_EMBED_MODEL`, else the
//! directory `scripts/fetch-embed-model` fills by default, else none (lexical recall only).
//!
//! Why this order: a config that names a model (or `"provider": "off"`) is the user's explicit
//! choice for that state dir, so it wins; the variable is how a machine (CI exports it for the
//! whole test suite), a developer or a one-off run points at a model without writing config,
//! and `CLAWCTX_EMBED_MODEL=off` turns a found model off; the default directory makes "run the
//! fetch script once" enough. Nothing found is not an error: callers then rank lexically. A
//! value that names something unusable is an error, never a silent fallback, since the person
//! who set it expects semantic recall.
//!
//! A model value is a directory path (`~/` expanded) when such a directory exists, else a
//! Hugging Face hub id (`sentence-transformers/all-MiniLM-L6-v2`), fetched into
//! `<state dir>/embed/hub` (feature `hub`; see the `hub` module).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;

use crate::{Embedder, EnvLookup, LocalEmbedder, RemoteConfig, RemoteEmbedder, ResolveError};

/// The environment variable naming the model: a directory, a hub id, or `off`.
pub const MODEL_ENV: &str = "CLAWCTX_EMBED_MODEL";

/// Where `scripts/fetch-embed-model` puts all-MiniLM-L6-v2 by default, under `$HOME`.
pub const DEFAULT_MODEL_DIR: &str = ".cache/clawctx/embed/all-MiniLM-L6-v2";

/// The embeddings part of a config, `{"provider": "local", "model": "<dir or hub id>"}`,
/// `{"provider": "openai", "baseUrl": …, "model": …, "apiKeyEnv": …}` or `{"provider": "off"}`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(tag = "provider", rename_all = "lowercase", deny_unknown_fields)]
pub enum EmbedSpec {
    /// No embeddings, whatever the environment says.
    Off,
    /// A sentence-transformers model run in process.
    Local {
        /// A model directory, or a hub id.
        model: String,
    },
    /// An OpenAI-compatible `/embeddings` endpoint.
    #[serde(rename = "openai")]
    Remote(RemoteConfig),
}

/// Where the model value came from, for messages and `doctor`-style reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// The configured spec.
    Config,
    /// `CLAWCTX_EMBED_MODEL`.
    Env,
    /// The fetch script's default directory, found on disk.
    DefaultDir,
}

impl Origin {
    fn describe(self) -> String {
        match self {
            Origin::Config => "the config".to_owned(),
            Origin::Env => MODEL_ENV.to_owned(),
            Origin::DefaultDir => format!("the default directory ~/{DEFAULT_MODEL_DIR}"),
        }
    }
}

/// What [`choose`] picked, before anything is loaded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Chosen {
    /// A local model: a directory or a hub id.
    Model {
        /// The value, `~/` expanded.
        value: String,
        /// Where it was named.
        origin: Origin,
    },
    /// A remote endpoint (from the config).
    Remote(RemoteConfig),
}

/// Picks the embedder's source without loading anything: `configured`, else `MODEL_ENV`, else
/// `$HOME/<DEFAULT_MODEL_DIR>` if it holds a `config.json`; `None` for off or nothing found.
pub fn choose(configured: Option<&EmbedSpec>, env: EnvLookup<'_>) -> Option<Chosen> {
    let home = env("HOME").filter(|h| !h.is_empty());
    match configured {
        Some(EmbedSpec::Off) => return None,
        Some(EmbedSpec::Local { model }) => {
            return Some(Chosen::Model {
                value: expand_home(model.trim(), home.as_deref()),
                origin: Origin::Config,
            })
        }
        Some(EmbedSpec::Remote(remote)) => return Some(Chosen::Remote(remote.clone())),
        None => {}
    }
    if let Some(value) = env(MODEL_ENV) {
        let value = value.trim();
        if matches!(value.to_ascii_lowercase().as_str(), "off" | "none") {
            return None;
        }
        if !value.is_empty() {
            return Some(Chosen::Model {
                value: expand_home(value, home.as_deref()),
                origin: Origin::Env,
            });
        }
    }
    let default_dir = PathBuf::from(home?).join(DEFAULT_MODEL_DIR);
    default_dir
        .join("config.json")
        .is_file()
        .then(|| Chosen::Model {
            value: default_dir.to_string_lossy().into_owned(),
            origin: Origin::DefaultDir,
        })
}

/// The embedder for `configured` and the environment ([`choose`]), loaded: `Ok(None)` when
/// nothing is configured and no model is found, an error when what is named does not work.
/// Loading a local model reads ~100 MB (on the blocking pool); a hub id may download it into
/// `<state_dir>/embed/hub`; a remote endpoint without `dimensions` gets one probe request.
pub async fn resolve(
    configured: Option<&EmbedSpec>,
    state_dir: &Path,
    env: EnvLookup<'_>,
) -> Result<Option<Arc<dyn Embedder>>, ResolveError> {
    match choose(configured, env) {
        None => Ok(None),
        Some(Chosen::Remote(remote)) => {
            let embedder = RemoteEmbedder::connect(&remote, env).await?;
            Ok(Some(Arc::new(embedder)))
        }
        Some(Chosen::Model { value, origin }) => {
            let embedder = open_model(&value, origin, state_dir, env).await?;
            tracing::info!(
                model_id = embedder.model_id(),
                dim = embedder.dim(),
                from = %origin.describe(),
                "embeddings model loaded"
            );
            Ok(Some(Arc::new(embedder)))
        }
    }
}

async fn open_model(
    value: &str,
    origin: Origin,
    state_dir: &Path,
    env: EnvLookup<'_>,
) -> Result<LocalEmbedder, ResolveError> {
    let source_name = origin.describe();
    let path = Path::new(value);
    if path.is_dir() {
        return load_blocking(path.to_path_buf(), None, &source_name).await;
    }
    if path.exists() {
        return Err(ResolveError::NotFound {
            source_name,
            message: format!("{value} is a file, not a model directory"),
        });
    }
    if !looks_like_hub_id(value) {
        return Err(ResolveError::NotFound {
            source_name,
            message: format!(
                "no model directory at {value} (scripts/fetch-embed-model prints one to use)"
            ),
        });
    }
    open_hub(value, source_name, state_dir, env).await
}

#[cfg(feature = "hub")]
async fn open_hub(
    value: &str,
    source_name: String,
    state_dir: &Path,
    env: EnvLookup<'_>,
) -> Result<LocalEmbedder, ResolveError> {
    let cache = state_dir.join("embed").join("hub");
    match crate::hub::fetch(value, &cache, env).await {
        Ok(dir) => load_blocking(dir, Some(value.to_owned()), &source_name).await,
        Err(e) => Err(ResolveError::NotFound {
            source_name,
            message: format!(
                "{value} is no directory, and as a hub id: {e}. Give a model directory instead \
                 (scripts/fetch-embed-model prints one)"
            ),
        }),
    }
}

#[cfg(not(feature = "hub"))]
async fn open_hub(
    value: &str,
    source_name: String,
    _state_dir: &Path,
    _env: EnvLookup<'_>,
) -> Result<LocalEmbedder, ResolveError> {
    Err(ResolveError::NotFound {
        source_name,
        message: format!(
            "{value} is no directory, and this build cannot fetch hub ids (feature `hub` is \
             off). Give a model directory instead (scripts/fetch-embed-model prints one)"
        ),
    })
}

async fn load_blocking(
    dir: PathBuf,
    label: Option<String>,
    source_name: &str,
) -> Result<LocalEmbedder, ResolveError> {
    let loaded = tokio::task::spawn_blocking(move || match label {
        Some(label) => LocalEmbedder::load_as(&dir, &label),
        None => LocalEmbedder::load(&dir),
    })
    .await
    .map_err(|e| ResolveError::Task(e.to_string()))?;
    loaded.map_err(|error| ResolveError::Load {
        source_name: source_name.to_owned(),
        error,
    })
}

/// Whether `value` has the shape of a hub id: `name` or `owner/name`, of letters, digits and
/// `-_.`, not starting with `.` or `-` (so no relative path like `./model` or `../m`).
pub fn looks_like_hub_id(value: &str) -> bool {
    let parts: Vec<&str> = value.split('/').collect();
    if parts.is_empty() || parts.len() > 2 {
        return false;
    }
    parts.iter().all(|p| {
        !p.is_empty()
            && !p.starts_with('.')
            && !p.starts_with('-')
            && p.len() <= 96
            && p.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    })
}

fn expand_home(value: &str, home: Option<&str>) -> String {
    match (value.strip_prefix("~/"), home) {
        (Some(rest), Some(home)) => Path::new(home).join(rest).to_string_lossy().into_owned(),
        _ => value.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> + Sync {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn config_wins_then_the_variable_then_the_default_directory() {
        let home = tempfile::tempdir().expect("tempdir");
        let home_s = home.path().to_string_lossy().into_owned();
        let local = EmbedSpec::Local {
            model: "~/models/m".to_owned(),
        };
        let env = env_of(&[("HOME", &home_s), (MODEL_ENV, "/from/env")]);
        assert_eq!(
            choose(Some(&local), &env),
            Some(Chosen::Model {
                value: format!("{home_s}/models/m"),
                origin: Origin::Config
            })
        );
        assert_eq!(choose(Some(&EmbedSpec::Off), &env), None);
        assert_eq!(
            choose(None, &env),
            Some(Chosen::Model {
                value: "/from/env".to_owned(),
                origin: Origin::Env
            })
        );
        for off in ["off", "OFF", " none "] {
            let env = env_of(&[("HOME", &home_s), (MODEL_ENV, off)]);
            assert_eq!(choose(None, &env), None, "{off}");
        }
        // Nothing configured, nothing in the default directory.
        let env = env_of(&[("HOME", &home_s), (MODEL_ENV, "  ")]);
        assert_eq!(choose(None, &env), None);
        // The default directory once it holds a model.
        let dir = home.path().join(DEFAULT_MODEL_DIR);
        std::fs::create_dir_all(&dir).expect("mkdir");
        std::fs::write(dir.join("config.json"), "{}").expect("write");
        assert_eq!(
            choose(None, &env),
            Some(Chosen::Model {
                value: dir.to_string_lossy().into_owned(),
                origin: Origin::DefaultDir
            })
        );
        assert_eq!(choose(None, &env_of(&[])), None, "no HOME, no default");
    }

    #[test]
    fn hub_ids_and_paths_are_told_apart() {
        for id in [
            "sentence-transformers/all-MiniLM-L6-v2",
            "BAAI/bge-small-en-v1.5",
            "bert-base-uncased",
        ] {
            assert!(looks_like_hub_id(id), "{id}");
        }
        for not_id in [
            "./model",
            "../m",
            "/abs/path",
            "a/b/c",
            "~/models/x",
            "",
            "a//b",
            "-x",
            "with space/x",
        ] {
            assert!(!looks_like_hub_id(not_id), "{not_id}");
        }
    }

    #[test]
    fn specs_parse_from_config_json() {
        let off: EmbedSpec = serde_json::from_str(r#"{"provider":"off"}"#).expect("off");
        assert_eq!(off, EmbedSpec::Off);
        let local: EmbedSpec =
            serde_json::from_str(r#"{"provider":"local","model":"/m"}"#).expect("local");
        assert_eq!(
            local,
            EmbedSpec::Local {
                model: "/m".to_owned()
            }
        );
        let remote: EmbedSpec = serde_json::from_str(
            r#"{"provider":"openai","baseUrl":"http://127.0.0.1:1/v1","model":"e","apiKeyEnv":"K","dimensions":8,"timeoutMs":500}"#,
        )
        .expect("remote");
        assert_eq!(
            remote,
            EmbedSpec::Remote(RemoteConfig {
                base_url: "http://127.0.0.1:1/v1".to_owned(),
                model: "e".to_owned(),
                api_key_env: Some("K".to_owned()),
                dimensions: Some(8),
                timeout_ms: Some(500),
            })
        );
        let typo = serde_json::from_str::<EmbedSpec>(
            r#"{"provider":"openai","baseUrl":"http://h/v1","model":"e","apiKey":"secret"}"#,
        );
        assert!(typo.is_err(), "an unknown field is refused, not ignored");
        let typo = serde_json::from_str::<EmbedSpec>(r#"{"provider":"local","modle":"/m"}"#);
        assert!(typo.is_err(), "a misspelt field is refused");
        assert!(serde_json::from_str::<EmbedSpec>(r#"{"provider":"onnx"}"#).is_err());
    }
}
