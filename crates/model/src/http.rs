//! What the HTTP providers share: the redacted API key, timeouts, the retry loop with
//! exponential backoff, and reading an SSE or JSON body into an error or a value.
//!
//! Both wire formats retry the same way (429 and 5xx, bounded, `Retry-After` honored up to a
//! cap) and time out the same way (connect + whole attempt), so that policy lives here once.

use std::fmt;
use std::future::Future;
use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

use futures::StreamExt;
use tokio_util::sync::CancellationToken;

use crate::error::{classify_http_error, excerpt, parse_retry_after};
use crate::types::Sink;
use crate::{ModelError, StreamEvent};

/// An API key. Its `Debug` and `Display` never show the secret.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(String);

impl ApiKey {
    /// Wraps a secret.
    pub fn new(secret: impl Into<String>) -> Self {
        ApiKey(secret.into())
    }

    /// The secret, for building a request header. Never log it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey(<redacted>)")
    }
}

impl fmt::Display for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// How transient failures (429, 5xx, connect errors, timeouts) are retried.
#[derive(Clone, Debug, PartialEq)]
pub struct RetryPolicy {
    /// Retries after the first attempt (0 = never retry).
    pub max_retries: u32,
    /// Delay before the first retry; doubles each time.
    pub base_delay: Duration,
    /// Upper bound on a computed backoff delay.
    pub max_delay: Duration,
    /// The longest `Retry-After` honored. A provider asking for longer is not retried: the
    /// error goes back to the caller with the provider's `retry_after` so it can decide.
    pub max_retry_after: Duration,
    /// Randomize each delay between half and all of its value. Off gives deterministic delays
    /// (tests, reproducible replays).
    pub jitter: bool,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_retries: 2,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(8),
            max_retry_after: Duration::from_secs(30),
            jitter: true,
        }
    }
}

impl RetryPolicy {
    /// No retries at all.
    pub fn none() -> Self {
        Self {
            max_retries: 0,
            ..Self::default()
        }
    }

    /// The delay before retry number `retry` (1-based) after `error`, or `None` when the error
    /// must not be retried.
    pub fn delay_for(&self, retry: u32, error: &ModelError) -> Option<Duration> {
        if retry > self.max_retries || !error.is_transient() {
            return None;
        }
        if let ModelError::RateLimited {
            retry_after: Some(after),
            ..
        } = error
        {
            return (*after <= self.max_retry_after).then_some(*after);
        }
        let factor = 2u32.saturating_pow(retry.saturating_sub(1));
        let delay = self.base_delay.saturating_mul(factor).min(self.max_delay);
        Some(if self.jitter { jittered(delay) } else { delay })
    }
}

/// `delay` scaled by a random factor in [0.5, 1.0]. The randomness is std's per-process hash
/// seed, which is enough to spread clients apart without another dependency.
fn jittered(delay: Duration) -> Duration {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(delay.as_nanos());
    let unit = (h.finish() % 1_000) as f64 / 1_000.0;
    delay.mul_f64(0.5 + unit / 2.0)
}

/// Per-provider HTTP settings.
#[derive(Clone, Debug, PartialEq)]
pub struct HttpSettings {
    /// Time allowed to open the connection.
    pub connect_timeout: Duration,
    /// Time allowed for one whole attempt, body or stream included.
    pub timeout: Duration,
    /// Retry policy.
    pub retry: RetryPolicy,
}

impl Default for HttpSettings {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(10),
            timeout: Duration::from_secs(600),
            retry: RetryPolicy::default(),
        }
    }
}

/// Builds the reqwest client for a provider.
pub(crate) fn build_client(
    settings: &HttpSettings,
    provider: &str,
) -> Result<reqwest::Client, ModelError> {
    reqwest::Client::builder()
        .connect_timeout(settings.connect_timeout)
        .build()
        .map_err(|e| {
            ModelError::config(
                format!("models.providers.{provider}"),
                format!("cannot build HTTP client: {e}"),
            )
        })
}

/// Runs `attempt` under the retry policy, the per-attempt timeout and cancellation.
///
/// A failed attempt is retried only when the error is transient and nothing has been streamed
/// to the caller yet (a retry would print the reply twice).
pub(crate) async fn run_with_retry<T, F, Fut>(
    provider: &str,
    settings: &HttpSettings,
    sink: &Sink<'_>,
    cancel: &CancellationToken,
    mut attempt: F,
) -> Result<T, ModelError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, ModelError>>,
{
    let mut number = 1u32;
    loop {
        let outcome = tokio::select! {
            biased;
            _ = cancel.cancelled() => return Err(ModelError::Aborted),
            r = tokio::time::timeout(settings.timeout, attempt()) => r,
        };
        let error = match outcome {
            Ok(Ok(value)) => return Ok(value),
            Ok(Err(e)) => e,
            Err(_) => ModelError::Unavailable {
                provider: provider.to_owned(),
                message: format!(
                    "no complete response within {} ms",
                    settings.timeout.as_millis()
                ),
                status: None,
                timeout: true,
            },
        };
        let delay = if sink.has_sent() {
            None
        } else {
            settings.retry.delay_for(number, &error)
        };
        let Some(delay) = delay else {
            return Err(error);
        };
        tracing::warn!(provider, attempt = number, delay_ms = delay.as_millis() as u64, error = %error, "model call failed; retrying");
        sink.emit(StreamEvent::Retry {
            attempt: number,
            delay_ms: delay.as_millis() as u64,
            reason: error.to_string(),
        });
        tokio::select! {
            biased;
            _ = cancel.cancelled() => return Err(ModelError::Aborted),
            _ = tokio::time::sleep(delay) => {}
        }
        number += 1;
    }
}

/// Sends a request and turns transport failures and non-2xx statuses into [`ModelError`]s.
pub(crate) async fn send(
    provider: &str,
    request: reqwest::RequestBuilder,
) -> Result<reqwest::Response, ModelError> {
    let response = request
        .send()
        .await
        .map_err(|e| transport_error(provider, &e))?;
    let status = response.status();
    if status.is_success() {
        return Ok(response);
    }
    let retry_after = parse_retry_after(
        response
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok()),
    );
    let body = response.text().await.unwrap_or_default();
    Err(classify_http_error(
        provider,
        status.as_u16(),
        retry_after,
        &body,
    ))
}

/// A transport-level failure: connect errors and timeouts are `Unavailable`; a body that broke
/// off is a `BadResponse`.
pub(crate) fn transport_error(provider: &str, e: &reqwest::Error) -> ModelError {
    let provider = provider.to_owned();
    if e.is_timeout() {
        ModelError::Unavailable {
            provider,
            message: e.to_string(),
            status: None,
            timeout: true,
        }
    } else if e.is_connect() || e.is_request() {
        ModelError::Unavailable {
            provider,
            message: format!("cannot reach the provider: {e}"),
            status: None,
            timeout: false,
        }
    } else {
        ModelError::BadResponse {
            provider,
            message: format!("response broke off: {e}"),
        }
    }
}

/// Reads a whole JSON body.
pub(crate) async fn read_json(
    provider: &str,
    response: reqwest::Response,
) -> Result<serde_json::Value, ModelError> {
    let body = response
        .text()
        .await
        .map_err(|e| transport_error(provider, &e))?;
    serde_json::from_str(&body).map_err(|e| ModelError::BadResponse {
        provider: provider.to_owned(),
        message: format!("response is not JSON ({e}): {}", excerpt(&body)),
    })
}

/// One server-sent event.
pub(crate) struct SseEvent {
    /// The `event:` name (empty when absent).
    pub event: String,
    /// The `data:` payload.
    pub data: String,
}

/// Reads an SSE body, handing each event to `on_event` until it returns `Ok(true)` (done) or the
/// stream ends. Returns whether `on_event` declared the stream done.
pub(crate) async fn read_sse<F>(
    provider: &str,
    response: reqwest::Response,
    mut on_event: F,
) -> Result<bool, ModelError>
where
    F: FnMut(SseEvent) -> Result<bool, ModelError>,
{
    use eventsource_stream::Eventsource;
    let mut stream = response.bytes_stream().eventsource();
    while let Some(item) = stream.next().await {
        let ev = item.map_err(|e| ModelError::BadResponse {
            provider: provider.to_owned(),
            message: format!("event stream broke off: {e}"),
        })?;
        if on_event(SseEvent {
            event: ev.event,
            data: ev.data,
        })? {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Parses one SSE data payload as JSON, keeping the payload in the error.
pub(crate) fn parse_event_json(
    provider: &str,
    data: &str,
) -> Result<serde_json::Value, ModelError> {
    serde_json::from_str(data).map_err(|e| ModelError::BadResponse {
        provider: provider.to_owned(),
        message: format!("stream event is not JSON ({e}): {}", excerpt(data)),
    })
}

/// Joins a base URL and a path without doubling or dropping the slash.
pub(crate) fn join_url(base: &str, path: &str) -> String {
    format!(
        "{}/{}",
        base.trim_end_matches('/'),
        path.trim_start_matches('/')
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unavailable() -> ModelError {
        ModelError::Unavailable {
            provider: "p".into(),
            message: "503".into(),
            status: Some(503),
            timeout: false,
        }
    }

    #[test]
    fn backoff_doubles_and_is_bounded() {
        let p = RetryPolicy {
            jitter: false,
            max_retries: 4,
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_millis(250),
            ..RetryPolicy::default()
        };
        assert_eq!(
            p.delay_for(1, &unavailable()),
            Some(Duration::from_millis(100))
        );
        assert_eq!(
            p.delay_for(2, &unavailable()),
            Some(Duration::from_millis(200))
        );
        assert_eq!(
            p.delay_for(3, &unavailable()),
            Some(Duration::from_millis(250))
        );
        assert_eq!(p.delay_for(5, &unavailable()), None);
        assert_eq!(p.delay_for(1, &ModelError::Aborted), None);
    }

    #[test]
    fn retry_after_is_honored_up_to_the_cap() {
        let p = RetryPolicy {
            jitter: false,
            max_retry_after: Duration::from_secs(5),
            ..RetryPolicy::default()
        };
        let rl = |s| ModelError::RateLimited {
            provider: "p".into(),
            message: "slow".into(),
            retry_after: Some(Duration::from_secs(s)),
        };
        assert_eq!(p.delay_for(1, &rl(3)), Some(Duration::from_secs(3)));
        assert_eq!(p.delay_for(1, &rl(60)), None);
    }

    #[test]
    fn jitter_stays_within_half_and_full() {
        for _ in 0..50 {
            let d = jittered(Duration::from_millis(1000));
            assert!(
                d >= Duration::from_millis(500) && d <= Duration::from_millis(1000),
                "{d:?}"
            );
        }
    }

    #[test]
    fn api_key_debug_is_redacted() {
        let k = ApiKey::new("sk-secret-123");
        assert!(!format!("{k:?} {k}").contains("sk-secret"));
        assert_eq!(k.expose(), "sk-secret-123");
    }

    #[test]
    fn urls_join_cleanly() {
        assert_eq!(
            join_url("http://h/v1/", "/chat/completions"),
            "http://h/v1/chat/completions"
        );
        assert_eq!(
            join_url("http://h/v1", "chat/completions"),
            "http://h/v1/chat/completions"
        );
    }
}
