//! Provider configuration in OpenClaw's shape (`models.providers.<id>`) and model refs.
//!
//! The config file itself is loaded elsewhere (`clawctx-config`); this module reads the
//! `models` part of the parsed JSON, resolves API keys from the environment variables it names
//! (through an injectable lookup, so tests never touch the process environment), and builds
//! providers. With no provider configured, the conventional `OPENAI_BASE_URL` /
//! `OPENAI_API_KEY` / `OPENAI_MODEL` variables define one OpenAI-compatible provider named
//! `openai`. Every error names the config key at fault.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use crate::anthropic::{AnthropicProvider, ANTHROPIC_API, DEFAULT_ANTHROPIC_BASE_URL};
use crate::http::{ApiKey, HttpSettings, RetryPolicy};
use crate::openai::{OpenAiProvider, DEFAULT_OPENAI_BASE_URL, OPENAI_API};
use crate::scripted::{Exhaustion, ScriptedProvider, SCRIPTED_API};
use crate::{ModelError, ModelProvider};

/// Looks up an environment variable. Production passes [`process_env`]; tests pass a map.
pub type EnvLookup<'a> = &'a dyn Fn(&str) -> Option<String>;

/// Reads the real process environment.
pub fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// Which wire format a provider speaks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ApiKind {
    /// `openai-completions`: OpenAI Chat Completions and compatible servers.
    OpenAiCompletions,
    /// `anthropic-messages`: Anthropic Messages.
    AnthropicMessages,
    /// `scripted`: replies read from a JSONL file (tests, demos, replay).
    Scripted,
}

impl ApiKind {
    /// The config string.
    pub fn as_str(&self) -> &'static str {
        match self {
            ApiKind::OpenAiCompletions => OPENAI_API,
            ApiKind::AnthropicMessages => ANTHROPIC_API,
            ApiKind::Scripted => SCRIPTED_API,
        }
    }
}

/// One entry of `models.providers.<id>.models`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelSpec {
    /// Model id at the provider.
    pub id: String,
    /// Context window in tokens, when configured.
    pub context_window: Option<u64>,
    /// Output limit in tokens, when configured.
    pub max_tokens: Option<u64>,
}

/// Where a provider's API key comes from. `Debug` never shows the key.
#[derive(Clone, Debug, PartialEq)]
pub enum KeySource {
    /// No key (local servers).
    None,
    /// A literal `apiKey` in the config (discouraged).
    Literal(ApiKey),
    /// The environment variable named by `apiKeyEnv`, and its value if it was set.
    Env {
        /// The variable's name.
        name: String,
        /// Its value, `None` when unset.
        value: Option<ApiKey>,
    },
}

/// `models.providers.<id>`.
#[derive(Clone, Debug, PartialEq)]
pub struct ProviderConfig {
    /// The provider id (the key under `models.providers`).
    pub id: String,
    /// Wire format (`api`).
    pub api: ApiKind,
    /// `baseUrl` (defaults per API).
    pub base_url: String,
    /// API key source (`apiKey` / `apiKeyEnv`).
    pub key: KeySource,
    /// Configured models (`models`). Empty means any model id is accepted.
    pub models: Vec<ModelSpec>,
    /// Timeouts and retries (`timeoutMs`, `connectTimeoutMs`, `maxRetries`, `retryBaseDelayMs`,
    /// `retryMaxDelayMs`, `retryAfterCapMs`, `retryJitter`).
    pub http: HttpSettings,
    /// OpenAI only: the name of the output-limit field (`maxTokensField`, default `max_tokens`).
    pub max_tokens_field: Option<String>,
    /// OpenAI only: whether requests carry `prompt_cache_key` (`promptCacheKey`, default true).
    pub prompt_cache_key: bool,
    /// Scripted only: the JSONL file (`script`).
    pub script: Option<PathBuf>,
    /// Scripted only: what happens when the script runs out (`onExhausted`: `error` | `cycle`).
    pub exhaustion: Exhaustion,
}

/// A model ref resolved against the config.
#[derive(Clone, Debug, PartialEq)]
pub struct ResolvedModel {
    /// The provider's config.
    pub provider: ProviderConfig,
    /// The model's entry (synthesized with no limits when the provider lists no models).
    pub model: ModelSpec,
}

/// The `models` section: every configured provider.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ModelsConfig {
    /// Providers by id.
    pub providers: BTreeMap<String, ProviderConfig>,
    /// The model ref to use when none is chosen (`OPENAI_MODEL` in the environment fallback).
    pub default_model: Option<String>,
}

fn key_of(id: &str, field: &str) -> String {
    format!("models.providers.{id}.{field}")
}

fn number(value: Option<&Value>, key: impl FnOnce() -> String) -> Result<Option<u64>, ModelError> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .or_else(|| {
                v.as_f64()
                    .filter(|f| f.is_finite() && *f >= 0.0)
                    .map(|f| f as u64)
            })
            .map(Some)
            .ok_or_else(|| {
                ModelError::config(key(), format!("must be a non-negative number, got {v}"))
            }),
    }
}

fn opt_u64(
    obj: &serde_json::Map<String, Value>,
    id: &str,
    field: &str,
) -> Result<Option<u64>, ModelError> {
    number(obj.get(field), || key_of(id, field))
}

fn opt_str(
    obj: &serde_json::Map<String, Value>,
    id: &str,
    field: &str,
) -> Result<Option<String>, ModelError> {
    match obj.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.trim().is_empty() => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.trim().to_owned())),
        Some(v) => Err(ModelError::config(
            key_of(id, field),
            format!("must be a string, got {v}"),
        )),
    }
}

impl ProviderConfig {
    /// Parses `models.providers.<id>` from its JSON value.
    pub fn from_value(id: &str, value: &Value, env: EnvLookup<'_>) -> Result<Self, ModelError> {
        let obj = value.as_object().ok_or_else(|| {
            ModelError::config(format!("models.providers.{id}"), "must be an object")
        })?;
        let api = match opt_str(obj, id, "api")?.as_deref() {
            Some(OPENAI_API) | None => ApiKind::OpenAiCompletions,
            Some(ANTHROPIC_API) => ApiKind::AnthropicMessages,
            Some(SCRIPTED_API) => ApiKind::Scripted,
            Some(other) => {
                return Err(ModelError::config(
                    key_of(id, "api"),
                    format!("unsupported api `{other}`; supported: {OPENAI_API}, {ANTHROPIC_API}, {SCRIPTED_API}"),
                ))
            }
        };
        let base_url = opt_str(obj, id, "baseUrl")?.unwrap_or_else(|| match api {
            ApiKind::AnthropicMessages => DEFAULT_ANTHROPIC_BASE_URL.to_owned(),
            _ => DEFAULT_OPENAI_BASE_URL.to_owned(),
        });
        if api != ApiKind::Scripted
            && !(base_url.starts_with("http://") || base_url.starts_with("https://"))
        {
            return Err(ModelError::config(
                key_of(id, "baseUrl"),
                "must start with http:// or https://",
            ));
        }
        let key = match (opt_str(obj, id, "apiKeyEnv")?, opt_str(obj, id, "apiKey")?) {
            (Some(name), _) => {
                let value = env(&name).filter(|v| !v.is_empty()).map(ApiKey::new);
                KeySource::Env { name, value }
            }
            (None, Some(literal)) => {
                tracing::warn!(
                    provider = id,
                    "models.providers.{id}.apiKey holds a literal key; prefer apiKeyEnv"
                );
                KeySource::Literal(ApiKey::new(literal))
            }
            (None, None) => KeySource::None,
        };
        let mut models = Vec::new();
        match obj.get("models") {
            None | Some(Value::Null) => {}
            Some(Value::Array(items)) => {
                for (i, item) in items.iter().enumerate() {
                    let field = format!("models[{i}]");
                    let m = item.as_object().ok_or_else(|| {
                        ModelError::config(key_of(id, &field), "must be an object")
                    })?;
                    let model_id = m
                        .get("id")
                        .and_then(Value::as_str)
                        .filter(|s| !s.trim().is_empty())
                        .ok_or_else(|| {
                            ModelError::config(
                                key_of(id, &format!("{field}.id")),
                                "must be a non-empty string",
                            )
                        })?;
                    models.push(ModelSpec {
                        id: model_id.trim().to_owned(),
                        context_window: number(m.get("contextWindow"), || {
                            key_of(id, &format!("{field}.contextWindow"))
                        })?,
                        max_tokens: number(m.get("maxTokens"), || {
                            key_of(id, &format!("{field}.maxTokens"))
                        })?,
                    });
                }
            }
            Some(v) => {
                return Err(ModelError::config(
                    key_of(id, "models"),
                    format!("must be an array, got {v}"),
                ))
            }
        }
        let defaults = HttpSettings::default();
        let ms = |field: &str, default: Duration| -> Result<Duration, ModelError> {
            Ok(opt_u64(obj, id, field)?
                .map(Duration::from_millis)
                .unwrap_or(default))
        };
        let retry = RetryPolicy {
            max_retries: opt_u64(obj, id, "maxRetries")?
                .map(|n| n.min(u64::from(u32::MAX)) as u32)
                .unwrap_or(defaults.retry.max_retries),
            base_delay: ms("retryBaseDelayMs", defaults.retry.base_delay)?,
            max_delay: ms("retryMaxDelayMs", defaults.retry.max_delay)?,
            max_retry_after: ms("retryAfterCapMs", defaults.retry.max_retry_after)?,
            jitter: match obj.get("retryJitter") {
                None | Some(Value::Null) => defaults.retry.jitter,
                Some(Value::Bool(b)) => *b,
                Some(v) => {
                    return Err(ModelError::config(
                        key_of(id, "retryJitter"),
                        format!("must be a boolean, got {v}"),
                    ))
                }
            },
        };
        let http = HttpSettings {
            connect_timeout: ms("connectTimeoutMs", defaults.connect_timeout)?,
            timeout: ms("timeoutMs", defaults.timeout)?,
            retry,
        };
        let exhaustion = match opt_str(obj, id, "onExhausted")?.as_deref() {
            None | Some("error") => Exhaustion::Error,
            Some("cycle") => Exhaustion::Cycle,
            Some(other) => {
                return Err(ModelError::config(
                    key_of(id, "onExhausted"),
                    format!("must be `error` or `cycle`, got `{other}`"),
                ))
            }
        };
        let script = opt_str(obj, id, "script")?.map(PathBuf::from);
        if api == ApiKind::Scripted && script.is_none() {
            return Err(ModelError::config(
                key_of(id, "script"),
                "a scripted provider needs the path of its JSONL script",
            ));
        }
        Ok(ProviderConfig {
            id: id.to_owned(),
            api,
            base_url,
            key,
            models,
            http,
            max_tokens_field: opt_str(obj, id, "maxTokensField")?,
            prompt_cache_key: match obj.get("promptCacheKey") {
                None | Some(Value::Null) => true,
                Some(Value::Bool(b)) => *b,
                Some(v) => {
                    return Err(ModelError::config(
                        key_of(id, "promptCacheKey"),
                        format!("must be a boolean, got {v}"),
                    ))
                }
            },
            script,
            exhaustion,
        })
    }

    /// The API key to send, or an error naming the unset variable.
    pub fn api_key(&self) -> Result<Option<ApiKey>, ModelError> {
        match &self.key {
            KeySource::None => Ok(None),
            KeySource::Literal(k) => Ok(Some(k.clone())),
            KeySource::Env { value: Some(k), .. } => Ok(Some(k.clone())),
            KeySource::Env { name, value: None } => Err(ModelError::config(
                key_of(&self.id, "apiKeyEnv"),
                format!("environment variable {name} is not set"),
            )),
        }
    }

    /// Builds the provider this config describes.
    pub fn build(&self) -> Result<Arc<dyn ModelProvider>, ModelError> {
        self.build_for(None)
    }

    /// Builds the provider for calls to `model`: its configured `maxTokens` becomes the output
    /// limit of requests that give none (Anthropic requires one).
    pub fn build_for(
        &self,
        model: Option<&ModelSpec>,
    ) -> Result<Arc<dyn ModelProvider>, ModelError> {
        Ok(match self.api {
            ApiKind::OpenAiCompletions => {
                let mut p = OpenAiProvider::new(
                    &self.id,
                    &self.base_url,
                    self.api_key()?,
                    self.http.clone(),
                )?;
                if let Some(field) = &self.max_tokens_field {
                    p = p.with_max_tokens_field(field);
                }
                Arc::new(p.with_prompt_cache_key(self.prompt_cache_key))
            }
            ApiKind::AnthropicMessages => {
                let mut p = AnthropicProvider::new(
                    &self.id,
                    &self.base_url,
                    self.api_key()?,
                    self.http.clone(),
                )?;
                if let Some(max) = model.and_then(|m| m.max_tokens) {
                    p = p.with_default_max_tokens(max);
                }
                Arc::new(p)
            }
            ApiKind::Scripted => {
                let path = self
                    .script
                    .as_ref()
                    .ok_or_else(|| ModelError::config(key_of(&self.id, "script"), "missing"))?;
                Arc::new(ScriptedProvider::from_file(path, self.exhaustion).map_err(
                    |e| match e {
                        ModelError::Config { message, .. } => {
                            ModelError::config(key_of(&self.id, "script"), message)
                        }
                        other => other,
                    },
                )?)
            }
        })
    }
}

impl ModelsConfig {
    /// Reads `models.providers` from the whole parsed config. With no provider configured,
    /// falls back to `OPENAI_BASE_URL` / `OPENAI_API_KEY` / `OPENAI_MODEL` from `env`.
    pub fn from_config(root: &Value, env: EnvLookup<'_>) -> Result<Self, ModelError> {
        let providers_value = root.pointer("/models/providers");
        let mut providers = BTreeMap::new();
        match providers_value {
            None | Some(Value::Null) => {}
            Some(Value::Object(map)) => {
                for (id, value) in map {
                    providers.insert(id.clone(), ProviderConfig::from_value(id, value, env)?);
                }
            }
            Some(v) => {
                return Err(ModelError::config(
                    "models.providers",
                    format!("must be an object, got {v}"),
                ))
            }
        }
        if !providers.is_empty() {
            return Ok(ModelsConfig {
                providers,
                default_model: None,
            });
        }
        Ok(Self::from_env(env))
    }

    /// The environment fallback alone: an `openai` provider when `OPENAI_BASE_URL`,
    /// `OPENAI_API_KEY` or `OPENAI_MODEL` is set, otherwise nothing.
    pub fn from_env(env: EnvLookup<'_>) -> Self {
        let get = |n: &str| {
            env(n)
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
        };
        let (base, key, model) = (
            get("OPENAI_BASE_URL"),
            get("OPENAI_API_KEY"),
            get("OPENAI_MODEL"),
        );
        if base.is_none() && key.is_none() && model.is_none() {
            return ModelsConfig::default();
        }
        let provider = ProviderConfig {
            id: "openai".into(),
            api: ApiKind::OpenAiCompletions,
            base_url: base.unwrap_or_else(|| DEFAULT_OPENAI_BASE_URL.to_owned()),
            key: KeySource::Env {
                name: "OPENAI_API_KEY".into(),
                value: key.map(ApiKey::new),
            },
            models: model
                .iter()
                .map(|id| ModelSpec {
                    id: id.clone(),
                    context_window: None,
                    max_tokens: None,
                })
                .collect(),
            http: HttpSettings::default(),
            max_tokens_field: None,
            prompt_cache_key: true,
            script: None,
            exhaustion: Exhaustion::Error,
        };
        let mut providers = BTreeMap::new();
        // A local server needs no key: only insist on one when OPENAI_API_KEY is named but empty.
        let provider = if matches!(&provider.key, KeySource::Env { value: None, .. }) {
            ProviderConfig {
                key: KeySource::None,
                ..provider
            }
        } else {
            provider
        };
        providers.insert("openai".to_owned(), provider);
        ModelsConfig {
            providers,
            default_model: model.map(|m| format!("openai/{m}")),
        }
    }

    fn known_providers(&self) -> String {
        if self.providers.is_empty() {
            "none (set models.providers or OPENAI_BASE_URL / OPENAI_MODEL)".into()
        } else {
            self.providers
                .keys()
                .cloned()
                .collect::<Vec<_>>()
                .join(", ")
        }
    }

    /// Resolves a model ref `provider/model` (the model id may itself contain `/`). A bare
    /// model id is looked up across providers and must match exactly one.
    pub fn resolve(&self, model_ref: &str) -> Result<ResolvedModel, ModelError> {
        let model_ref = model_ref.trim();
        let (provider, model_id) = match model_ref.split_once('/') {
            Some((p, m)) if self.providers.contains_key(p) => (&self.providers[p], m),
            Some((p, _))
                if !p.is_empty()
                    && !self
                        .providers
                        .values()
                        .any(|c| c.models.iter().any(|m| m.id == model_ref)) =>
            {
                return Err(ModelError::config(
                    format!("models.providers.{p}"),
                    format!(
                        "provider `{p}` not found; known: {}",
                        self.known_providers()
                    ),
                ))
            }
            _ => {
                let matches: Vec<&ProviderConfig> = self
                    .providers
                    .values()
                    .filter(|c| c.models.iter().any(|m| m.id == model_ref))
                    .collect();
                match matches.as_slice() {
                    [one] => (*one, model_ref),
                    [] => {
                        return Err(ModelError::config(
                            "models.providers",
                            format!("no provider lists model `{model_ref}`; use `provider/model` (known providers: {})", self.known_providers()),
                        ))
                    }
                    many => {
                        return Err(ModelError::config(
                            "models.providers",
                            format!(
                                "model `{model_ref}` is listed by several providers ({}); use `provider/model`",
                                many.iter().map(|c| c.id.as_str()).collect::<Vec<_>>().join(", ")
                            ),
                        ))
                    }
                }
            }
        };
        if model_id.is_empty() {
            return Err(ModelError::config(
                format!("models.providers.{}.models", provider.id),
                "the model ref has no model id",
            ));
        }
        let model = if provider.models.is_empty() {
            ModelSpec {
                id: model_id.to_owned(),
                context_window: None,
                max_tokens: None,
            }
        } else {
            provider
                .models
                .iter()
                .find(|m| m.id == model_id)
                .cloned()
                .ok_or_else(|| {
                    ModelError::config(
                        format!("models.providers.{}.models", provider.id),
                        format!(
                            "model `{model_id}` not found; known: {}",
                            provider
                                .models
                                .iter()
                                .map(|m| m.id.as_str())
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    )
                })?
        };
        Ok(ResolvedModel {
            provider: provider.clone(),
            model,
        })
    }

    /// Resolves `model_ref` and builds its provider.
    pub fn provider_for(
        &self,
        model_ref: &str,
    ) -> Result<(Arc<dyn ModelProvider>, ModelSpec), ModelError> {
        let resolved = self.resolve(model_ref)?;
        Ok((
            resolved.provider.build_for(Some(&resolved.model))?,
            resolved.model,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn env_of(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |n| {
            pairs
                .iter()
                .find(|(k, _)| *k == n)
                .map(|(_, v)| (*v).to_owned())
        }
    }

    #[test]
    fn parses_openclaw_shape_and_resolves_refs() {
        let cfg = json!({"models": {"providers": {
            "local": {"api": "openai-completions", "baseUrl": "http://127.0.0.1:8000/v1", "models": [{"id": "qwen/qwen3-8b", "contextWindow": 32768, "maxTokens": 4096}], "timeoutMs": 1500, "maxRetries": 5},
            "claude": {"api": "anthropic-messages", "apiKeyEnv": "MY_ANTHROPIC_KEY", "models": [{"id": "claude-x"}]}
        }}});
        let env = env_of(&[("MY_ANTHROPIC_KEY", "sk-ant-secret")]);
        let m = ModelsConfig::from_config(&cfg, &env).unwrap();
        let r = m.resolve("local/qwen/qwen3-8b").unwrap();
        assert_eq!(r.model.context_window, Some(32768));
        assert_eq!(r.provider.http.timeout, Duration::from_millis(1500));
        assert_eq!(r.provider.http.retry.max_retries, 5);
        let c = m.resolve("claude-x").unwrap();
        assert_eq!(c.provider.base_url, DEFAULT_ANTHROPIC_BASE_URL);
        assert_eq!(
            c.provider.api_key().unwrap().unwrap().expose(),
            "sk-ant-secret"
        );
        assert!(!format!("{m:?}").contains("sk-ant-secret"));
    }

    #[test]
    fn unknown_provider_and_model_name_the_key() {
        let cfg = json!({"models": {"providers": {"a": {"models": [{"id": "m1"}]}, "b": {"models": [{"id": "m2"}]}}}});
        let m = ModelsConfig::from_config(&cfg, &|_| None).unwrap();
        let e = m.resolve("foo/bar").unwrap_err().to_string();
        assert!(
            e.contains("models.providers.foo") && e.contains("known: a, b"),
            "{e}"
        );
        let e = m.resolve("a/nope").unwrap_err().to_string();
        assert!(
            e.contains("models.providers.a.models") && e.contains("known: m1"),
            "{e}"
        );
        let e = ModelsConfig::from_config(
            &json!({"models": {"providers": {"x": {"api": "grpc"}}}}),
            &|_| None,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("models.providers.x.api"), "{e}");
    }

    #[test]
    fn missing_env_key_is_a_config_error_naming_the_variable() {
        let cfg = json!({"models": {"providers": {"p": {"apiKeyEnv": "NOPE_KEY", "models": [{"id": "m"}]}}}});
        let m = ModelsConfig::from_config(&cfg, &|_| None).unwrap();
        let e = m.provider_for("p/m").err().unwrap().to_string();
        assert!(
            e.contains("models.providers.p.apiKeyEnv") && e.contains("NOPE_KEY"),
            "{e}"
        );
    }

    #[test]
    fn env_fallback_without_providers() {
        let env = env_of(&[
            ("OPENAI_BASE_URL", "http://127.0.0.1:9/v1"),
            ("OPENAI_API_KEY", "sk-env"),
            ("OPENAI_MODEL", "llama"),
        ]);
        let m = ModelsConfig::from_config(&json!({}), &env).unwrap();
        assert_eq!(m.default_model.as_deref(), Some("openai/llama"));
        let r = m.resolve("openai/llama").unwrap();
        assert_eq!(r.provider.base_url, "http://127.0.0.1:9/v1");
        assert_eq!(r.provider.api_key().unwrap().unwrap().expose(), "sk-env");
        assert!(ModelsConfig::from_config(&json!({}), &|_| None)
            .unwrap()
            .providers
            .is_empty());
        let e = ModelsConfig::default()
            .resolve("gpt")
            .unwrap_err()
            .to_string();
        assert!(e.contains("OPENAI_BASE_URL"), "{e}");
    }
}
