//! `ModelError`: every way a model call fails, classified so the caller knows what to do.
//!
//! Providers word their failures differently (OpenAI's `context_length_exceeded`, Anthropic's
//! "prompt is too long", llama.cpp's "exceeds the available context size", a bare 413...). The
//! runtime must react to the *kind* of failure (compact and retry, wait, fall back, give up), so
//! [`classify_http_error`] turns a status code and body into one variant here, keeping the
//! provider's own words in the message for logs and users.

use std::time::Duration;

use clawctx_protocol::ReasonCode;
use serde_json::Value;

/// Why a model call failed. Each variant says what the caller should do.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ModelError {
    /// The prompt does not fit the model's context window. Compact the context and retry;
    /// retrying unchanged will fail again.
    #[error("{provider}: context overflow: {message}")]
    ContextOverflow {
        /// Provider id.
        provider: String,
        /// The provider's words.
        message: String,
        /// Prompt size the provider reported, when it said (e.g. "prompt is too long: 210000 tokens").
        observed_tokens: Option<u64>,
    },
    /// The provider throttled us (429). Wait `retry_after` (when given) and retry, or fall back.
    #[error("{provider}: rate limited{}: {message}", retry_after.map(|d| format!(" (retry after {}s)", d.as_secs_f64())).unwrap_or_default())]
    RateLimited {
        /// Provider id.
        provider: String,
        /// The provider's words.
        message: String,
        /// The provider's `Retry-After`, when it sent one.
        retry_after: Option<Duration>,
    },
    /// Credentials were rejected (401/403). Do not retry: fix the API key (the config names the
    /// environment variable it comes from).
    #[error("{provider}: authentication failed (HTTP {status}): {message}")]
    Auth {
        /// Provider id.
        provider: String,
        /// HTTP status (401 or 403).
        status: u16,
        /// The provider's words.
        message: String,
    },
    /// The provider could not be reached or is failing (5xx, connect error, timeout). Retry
    /// later or fall back to another model.
    #[error("{provider}: provider unavailable{}: {message}", if *timeout { " (timeout)" } else { "" })]
    Unavailable {
        /// Provider id.
        provider: String,
        /// What happened, including the provider's words when it sent any.
        message: String,
        /// HTTP status, when a response arrived.
        status: Option<u16>,
        /// Whether a timeout (rather than a refusal or a 5xx) ended the call.
        timeout: bool,
    },
    /// The provider refused this request as invalid (a 4xx other than the above). Retrying the
    /// same request will fail again: report it.
    #[error("{provider}: request rejected (HTTP {status}): {message}")]
    Rejected {
        /// Provider id.
        provider: String,
        /// HTTP status.
        status: u16,
        /// The provider's words.
        message: String,
    },
    /// The provider answered with something we cannot use (not JSON, a stream cut before it
    /// finished). May be retried once; the message keeps what the provider sent.
    #[error("{provider}: bad response: {message}")]
    BadResponse {
        /// Provider id.
        provider: String,
        /// What was wrong, with an excerpt of what the provider sent.
        message: String,
    },
    /// The caller cancelled the call. Nothing to do.
    #[error("model call aborted")]
    Aborted,
    /// The configuration is wrong. Fix the named key.
    #[error("config error at `{key}`: {message}")]
    Config {
        /// The config key at fault, e.g. `models.providers.foo.baseUrl`.
        key: String,
        /// What is wrong with it.
        message: String,
    },
}

impl ModelError {
    /// The runtimeSettings reason code (contract §6) for a fallback or degradation caused by this
    /// error.
    pub fn reason_code(&self) -> ReasonCode {
        match self {
            ModelError::ContextOverflow { .. } => ReasonCode::ContextOverflow,
            ModelError::RateLimited { .. } => ReasonCode::RateLimited,
            ModelError::Unavailable { timeout: true, .. } => ReasonCode::ProviderTimeout,
            ModelError::Unavailable { .. } | ModelError::Auth { .. } => {
                ReasonCode::ProviderUnavailable
            }
            ModelError::Rejected { .. }
            | ModelError::BadResponse { .. }
            | ModelError::Aborted
            | ModelError::Config { .. } => ReasonCode::Unknown,
        }
    }

    /// Whether the retry loop may try again (rate limits and unavailability).
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            ModelError::RateLimited { .. } | ModelError::Unavailable { .. }
        )
    }

    /// A config error.
    pub fn config(key: impl Into<String>, message: impl Into<String>) -> Self {
        ModelError::Config {
            key: key.into(),
            message: message.into(),
        }
    }
}

/// Longest excerpt of a provider's body kept in an error message.
const EXCERPT_CHARS: usize = 600;

/// The first [`EXCERPT_CHARS`] characters of `s`, marked when cut.
pub(crate) fn excerpt(s: &str) -> String {
    let s = s.trim();
    match s.char_indices().nth(EXCERPT_CHARS) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_owned(),
    }
}

/// The provider's own error text from an error body: `error.message`, `message`, `error` as a
/// string, `detail`, or the raw body.
pub(crate) fn provider_message(body: &str) -> (String, Option<String>) {
    let parsed: Option<Value> = serde_json::from_str(body).ok();
    let Some(v) = parsed else {
        return (excerpt(body), None);
    };
    let err = v.get("error").unwrap_or(&v);
    let code = ["code", "type"]
        .iter()
        .filter_map(|k| err.get(*k).and_then(Value::as_str))
        .map(str::to_owned)
        .collect::<Vec<_>>()
        .join(" ");
    let message = err
        .get("message")
        .and_then(Value::as_str)
        .or_else(|| err.as_str())
        .or_else(|| v.get("message").and_then(Value::as_str))
        .or_else(|| v.get("detail").and_then(Value::as_str))
        .map(str::to_owned)
        .unwrap_or_else(|| excerpt(body));
    (
        excerpt(&message),
        if code.is_empty() { None } else { Some(code) },
    )
}

/// Whether a provider's error text (message and code) means the prompt was too large.
pub(crate) fn is_overflow_text(text: &str) -> bool {
    let t = text.to_ascii_lowercase();
    [
        "context_length_exceeded",
        "maximum context length",
        "context length exceeded",
        "prompt is too long",
        "request_too_large",
        "exceeds the available context size",
        "exceed_context_size",
        "exceeds the context window",
        "input is too long",
        "too many tokens",
    ]
    .iter()
    .any(|needle| t.contains(needle))
}

/// Pulls the prompt size out of an overflow message ("prompt is too long: 210000 tokens > ...",
/// "maximum context length is 8192 tokens. However, you requested 9000 tokens"): the largest
/// number followed by "tokens", since the observed size is by definition above the limit.
pub(crate) fn observed_tokens(message: &str) -> Option<u64> {
    let words: Vec<&str> = message.split(|c: char| c.is_whitespace()).collect();
    words
        .windows(2)
        .filter_map(|w| {
            if w[1]
                .trim_matches(|c: char| !c.is_alphanumeric())
                .eq_ignore_ascii_case("tokens")
            {
                w[0].trim_matches(|c: char| !c.is_ascii_digit())
                    .parse()
                    .ok()
            } else {
                None
            }
        })
        .max()
}

/// Classifies a non-success HTTP response.
pub(crate) fn classify_http_error(
    provider: &str,
    status: u16,
    retry_after: Option<Duration>,
    body: &str,
) -> ModelError {
    let (message, code) = provider_message(body);
    let provider = provider.to_owned();
    let combined = format!("{} {}", code.as_deref().unwrap_or(""), message);
    if status == 413 || is_overflow_text(&combined) {
        return ModelError::ContextOverflow {
            observed_tokens: observed_tokens(&message),
            provider,
            message,
        };
    }
    match status {
        429 => ModelError::RateLimited {
            provider,
            message,
            retry_after,
        },
        401 | 403 => ModelError::Auth {
            provider,
            status,
            message,
        },
        408 => ModelError::Unavailable {
            provider,
            message,
            status: Some(status),
            timeout: true,
        },
        s if s >= 500 => ModelError::Unavailable {
            provider,
            message,
            status: Some(status),
            timeout: false,
        },
        _ => ModelError::Rejected {
            provider,
            status,
            message,
        },
    }
}

/// Classifies an error object that arrived inside a 200 response (a streamed `error` event).
pub(crate) fn classify_stream_error(provider: &str, error_json: &str) -> ModelError {
    let (message, code) = provider_message(error_json);
    let code_l = code.clone().unwrap_or_default().to_ascii_lowercase();
    let combined = format!("{code_l} {message}");
    let provider = provider.to_owned();
    if is_overflow_text(&combined) {
        ModelError::ContextOverflow {
            observed_tokens: observed_tokens(&message),
            provider,
            message,
        }
    } else if code_l.contains("rate_limit") {
        ModelError::RateLimited {
            provider,
            message,
            retry_after: None,
        }
    } else if code_l.contains("overloaded")
        || code_l.contains("api_error")
        || code_l.contains("server_error")
    {
        ModelError::Unavailable {
            provider,
            message,
            status: None,
            timeout: false,
        }
    } else if code_l.contains("authentication") || code_l.contains("permission") {
        ModelError::Auth {
            provider,
            status: 401,
            message,
        }
    } else {
        ModelError::BadResponse {
            provider,
            message: format!("provider sent an error mid-stream: {message}"),
        }
    }
}

/// The longest `Retry-After` kept: a provider's value above it (`1e20`, `u64::MAX`) is read as
/// this, so the duration can be added to an instant, formatted and compared without overflow.
/// Any value this long is far past [`crate::RetryPolicy::max_retry_after`], so it is never
/// waited for; the error just carries "retry after a day".
pub(crate) const MAX_RETRY_AFTER: Duration = Duration::from_secs(24 * 60 * 60);

/// Parses a `Retry-After` header value (seconds; HTTP dates are not honored and read as absent).
/// Values past [`MAX_RETRY_AFTER`] are clamped to it: a provider's `1e20` must not panic the
/// turn (`Duration::from_secs_f64` panics on values it cannot hold).
pub(crate) fn parse_retry_after(value: Option<&str>) -> Option<Duration> {
    let v = value?.trim();
    if let Ok(secs) = v.parse::<u64>() {
        return Some(Duration::from_secs(secs).min(MAX_RETRY_AFTER));
    }
    v.parse::<f64>()
        .ok()
        .filter(|f| !f.is_nan() && *f >= 0.0)
        .map(|f| {
            Duration::try_from_secs_f64(f)
                .unwrap_or(MAX_RETRY_AFTER)
                .min(MAX_RETRY_AFTER)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_by_status_and_words() {
        let e = classify_http_error(
            "openai",
            400,
            None,
            r#"{"error":{"message":"This model's maximum context length is 8192 tokens. However, you requested 9000 tokens","type":"invalid_request_error","code":"context_length_exceeded"}}"#,
        );
        assert!(
            matches!(
                e,
                ModelError::ContextOverflow {
                    observed_tokens: Some(9000),
                    ..
                }
            ),
            "{e:?}"
        );
        assert_eq!(e.reason_code(), ReasonCode::ContextOverflow);
        let e = classify_http_error(
            "a",
            400,
            None,
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210000 tokens > 200000 maximum"}}"#,
        );
        assert!(
            matches!(
                e,
                ModelError::ContextOverflow {
                    observed_tokens: Some(210000),
                    ..
                }
            ),
            "{e:?}"
        );
        assert!(matches!(
            classify_http_error("a", 413, None, "too big"),
            ModelError::ContextOverflow { .. }
        ));
        assert!(matches!(
            classify_http_error("a", 429, None, "{}"),
            ModelError::RateLimited { .. }
        ));
        assert!(matches!(
            classify_http_error("a", 403, None, "{}"),
            ModelError::Auth { status: 403, .. }
        ));
        assert!(matches!(
            classify_http_error("a", 503, None, "{}"),
            ModelError::Unavailable {
                status: Some(503),
                ..
            }
        ));
        assert!(matches!(
            classify_http_error("a", 400, None, "{\"error\":\"bad field\"}"),
            ModelError::Rejected { .. }
        ));
    }

    #[test]
    fn reason_codes_follow_runtime_settings() {
        let timeout = ModelError::Unavailable {
            provider: "p".into(),
            message: "m".into(),
            status: None,
            timeout: true,
        };
        assert_eq!(timeout.reason_code(), ReasonCode::ProviderTimeout);
        assert_eq!(ModelError::Aborted.reason_code(), ReasonCode::Unknown);
    }

    #[test]
    fn retry_after_seconds() {
        assert_eq!(parse_retry_after(Some("3")), Some(Duration::from_secs(3)));
        assert_eq!(
            parse_retry_after(Some("0.5")),
            Some(Duration::from_millis(500))
        );
        assert_eq!(
            parse_retry_after(Some("Wed, 21 Oct 2015 07:28:00 GMT")),
            None
        );
    }

    #[test]
    fn huge_retry_after_values_are_clamped_not_a_panic() {
        for huge in [
            "1e20",
            "1.8e19",
            "inf",
            "18446744073709551615",
            "99999999999",
        ] {
            assert_eq!(
                parse_retry_after(Some(huge)),
                Some(MAX_RETRY_AFTER),
                "{huge}"
            );
        }
        for bad in ["-1", "NaN", "-inf"] {
            assert_eq!(parse_retry_after(Some(bad)), None, "{bad}");
        }
        // The clamped value still formats and adds to an instant.
        let e = ModelError::RateLimited {
            provider: "p".into(),
            message: "m".into(),
            retry_after: parse_retry_after(Some("1e20")),
        };
        assert!(e.to_string().contains("retry after 86400s"), "{e}");
        let _ = std::time::Instant::now() + MAX_RETRY_AFTER;
    }
}
