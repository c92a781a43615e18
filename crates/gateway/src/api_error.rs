//! Every HTTP error the gateway sends, in OpenAI's error shape:
//! `{"error": {"message", "type", "param", "code"}}`.
//!
//! OpenAI clients already know how to show that shape, so the engine API uses it too. Messages
//! name the field at fault (`messages[2].content`, `tokenBudget`) and never carry a secret: the
//! token is only ever compared, and provider errors are passed through the model crate, which
//! does not put API keys in its messages.
//!
//! [`ApiJson`] is the JSON body extractor every POST route uses: it reads the body within the
//! configured limit (413 past it) and parses it with `serde_path_to_error`, so a wrong type or
//! a missing field is a 400 whose message and `param` name the path into the document.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{FromRequest, Request};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;
use serde::Serialize;

/// An error response.
#[derive(Clone, Debug)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// OpenAI `type`: `invalid_request_error`, `authentication_error`, `not_found_error`,
    /// `rate_limit_error`, `api_error`, `timeout_error`, `unavailable_error`.
    pub kind: &'static str,
    /// What went wrong, for a person.
    pub message: String,
    /// The request field at fault, when one is.
    pub param: Option<String>,
    /// A machine-readable code, when there is one.
    pub code: Option<&'static str>,
    /// Seconds after which a retry makes sense (`Retry-After`).
    pub retry_after: Option<u64>,
}

/// The JSON body of an error.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct ErrorBody {
    /// The error.
    pub error: ErrorDetail,
}

/// OpenAI's error object.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
pub struct ErrorDetail {
    /// What went wrong.
    pub message: String,
    /// Error class.
    #[serde(rename = "type")]
    pub kind: String,
    /// The request field at fault, or null.
    pub param: Option<String>,
    /// Machine-readable code, or null.
    pub code: Option<String>,
}

impl ApiError {
    fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            kind,
            message: message.into(),
            param: None,
            code: None,
            retry_after: None,
        }
    }

    /// 400 `invalid_request_error`, naming `param`.
    pub fn invalid(param: impl Into<String>, message: impl Into<String>) -> Self {
        ApiError {
            param: Some(param.into()),
            ..Self::new(StatusCode::BAD_REQUEST, "invalid_request_error", message)
        }
    }

    /// 400 without a specific field.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request_error", message)
    }

    /// 401: missing or wrong bearer token.
    pub fn unauthorized() -> Self {
        ApiError {
            code: Some("invalid_api_key"),
            ..Self::new(
                StatusCode::UNAUTHORIZED,
                "authentication_error",
                "missing or invalid bearer token: send `Authorization: Bearer <gateway.auth.token>`",
            )
        }
    }

    /// 404.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found_error", message)
    }

    /// 409: the request is fine but the gateway's state does not allow it (e.g. recall on an
    /// engine that has no store).
    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, "invalid_request_error", message)
    }

    /// 413: the body is larger than `gateway.http.maxBodyBytes`.
    pub fn too_large(limit: usize) -> Self {
        ApiError {
            code: Some("request_too_large"),
            ..Self::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "invalid_request_error",
                format!(
                    "the request body is larger than gateway.http.maxBodyBytes ({limit} bytes)"
                ),
            )
        }
    }

    /// 429: the session's queue is full.
    pub fn busy(message: impl Into<String>) -> Self {
        ApiError {
            code: Some("session_busy"),
            retry_after: Some(1),
            ..Self::new(StatusCode::TOO_MANY_REQUESTS, "rate_limit_error", message)
        }
    }

    /// 503: shutting down.
    pub fn unavailable(message: impl Into<String>) -> Self {
        ApiError {
            retry_after: Some(1),
            ..Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable_error",
                message,
            )
        }
    }

    /// 504: the request ran past `gateway.http.requestTimeoutMs`.
    pub fn timeout(limit_ms: u128) -> Self {
        ApiError {
            code: Some("timeout"),
            ..Self::new(
                StatusCode::GATEWAY_TIMEOUT,
                "timeout_error",
                format!("the request did not finish within gateway.http.requestTimeoutMs ({limit_ms} ms)"),
            )
        }
    }

    /// 500 `api_error`.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "api_error", message)
    }

    /// 502: the model provider failed.
    pub fn upstream(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_GATEWAY, "api_error", message)
    }

    /// With a machine-readable code.
    pub fn with_code(mut self, code: &'static str) -> Self {
        self.code = Some(code);
        self
    }

    /// The body as OpenAI shapes it.
    pub fn body(&self) -> ErrorBody {
        ErrorBody {
            error: ErrorDetail {
                message: self.message.clone(),
                kind: self.kind.to_owned(),
                param: self.param.clone(),
                code: self.code.map(str::to_owned),
            },
        }
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.status.as_u16(), self.message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, axum::Json(self.body())).into_response();
        if let Some(secs) = self.retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        if self.status == StatusCode::UNAUTHORIZED {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

/// The JSON body of a request: read within the body limit, parsed with the failing path named.
#[derive(Debug)]
pub struct ApiJson<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let limit = req.extensions().get::<BodyLimit>().map_or(0, |l| l.0);
        let content_type_ok = req
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_none_or(|ct| {
                ct.trim_start()
                    .to_ascii_lowercase()
                    .starts_with("application/json")
                    || ct.contains("+json")
            });
        let bytes = Bytes::from_request(req, state)
            .await
            .map_err(|e| body_error(e, limit))?;
        if !content_type_ok {
            return Err(ApiError::bad_request(
                "the request body must be JSON (Content-Type: application/json)",
            ));
        }
        parse(&bytes).map(ApiJson)
    }
}

/// The configured body limit, put in each request's extensions so [`ApiJson`] can name it.
#[derive(Clone, Copy, Debug)]
pub struct BodyLimit(pub usize);

fn body_error(e: BytesRejection, limit: usize) -> ApiError {
    if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
        ApiError::too_large(limit)
    } else {
        ApiError::bad_request(format!("cannot read the request body: {}", e.body_text()))
    }
}

/// Parses a JSON document, naming the path of the first problem (`messages[0].role`).
pub fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::bad_request(
            "the request body is empty; send a JSON object",
        ));
    }
    let de = &mut serde_json::Deserializer::from_slice(bytes);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if inner.is_syntax() || inner.is_eof() {
            ApiError::bad_request(format!(
                "malformed JSON at line {} column {}: {inner}",
                inner.line(),
                inner.column()
            ))
            .with_code("invalid_json")
        } else if path == "." {
            ApiError::bad_request(format!(
                "invalid request body: {}",
                strip_position(&inner.to_string())
            ))
        } else {
            ApiError::invalid(
                path.clone(),
                format!("invalid `{path}`: {}", strip_position(&inner.to_string())),
            )
        }
    })
}

/// serde_json appends "at line L column C" to data errors; the path already says where.
fn strip_position(message: &str) -> &str {
    message
        .rfind(" at line ")
        .map_or(message, |i| &message[..i])
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    #[allow(dead_code)]
    struct Doc {
        token_budget: u64,
        messages: Vec<Item>,
    }

    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
    struct Item {
        role: String,
    }

    #[test]
    fn errors_name_the_path_of_the_problem() {
        let e = parse::<Doc>(br#"{"tokenBudget": "many", "messages": []}"#).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("tokenBudget"));
        assert!(
            e.message.contains("invalid `tokenBudget`") && e.message.contains("expected u64"),
            "{}",
            e.message
        );
        let e = parse::<Doc>(br#"{"tokenBudget": 1, "messages": [{"role": 7}]}"#).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("messages[0].role"));
        let e = parse::<Doc>(br#"{"messages": []}"#).unwrap_err();
        assert!(
            e.message.contains("missing field `tokenBudget`"),
            "{}",
            e.message
        );
        let e = parse::<Doc>(br#"{"tokenBudget": 1,"#).unwrap_err();
        assert!(
            e.message.starts_with("malformed JSON at line 1"),
            "{}",
            e.message
        );
        assert_eq!(e.status, StatusCode::BAD_REQUEST);
        let e = parse::<Doc>(b"  ").unwrap_err();
        assert!(e.message.contains("empty"), "{}", e.message);
    }
}
