//! Every HTTP error the gateway sends, in OpenAI's error shape:
//! `{"error": {"message", "type", "param", "code"}}`.
//!
//! OpenAI clients already know how to show that shape, so the engine API uses it too. Messages
//! name the field at fault (`messages[2].content`, `tokenBudget`) and never carry a secret: the
//! token is only ever compared, and provider errors are passed through the model crate, which
//! does not put API keys in its messages.
//!
//! [`ApiJson`] is the JSON body extractor every POST route uses: it takes only a body declared
//! `application/json` (415 otherwise: a page of another site can send a cross-origin POST
//! without a preflight only as `text/plain`, a form, or no type at all), reads it within the
//! configured limit (413 past it) and parses it with `serde_path_to_error`, so a wrong type or
//! a missing field is a 400 whose message and `param` name the path into the document (for a
//! missing field, the field itself), and anything after the document is a 400 naming where it
//! begins.
//!
//! [`json_errors`] turns the errors axum writes itself (405 with an empty body, a query string
//! that does not parse, as plain text) into this shape, so every error a client gets is JSON.

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

    /// 403: a request from a web page of another site (its `Origin` is neither the gateway's
    /// own nor in `gateway.http.allowedOrigins`).
    pub fn forbidden_origin(origin: &str) -> Self {
        ApiError {
            code: Some("origin_not_allowed"),
            param: Some("Origin".into()),
            ..Self::new(
                StatusCode::FORBIDDEN,
                "permission_error",
                format!(
                    "requests from the web page at \"{}\" are refused: the gateway answers its own origin and the \
                     origins listed in gateway.http.allowedOrigins, so that a page of another site cannot drive it",
                    shorten(origin)
                ),
            )
        }
    }

    /// 403: an engine-API call names a file it may not (see `crate::session_files`).
    pub fn path_not_allowed(param: &str, message: impl Into<String>) -> Self {
        ApiError {
            code: Some("path_not_allowed"),
            param: Some(param.to_owned()),
            ..Self::new(StatusCode::FORBIDDEN, "permission_error", message)
        }
    }

    /// 421: the `Host` header names a host this gateway does not serve (DNS rebinding).
    pub fn misdirected_host(host: &str) -> Self {
        ApiError {
            code: Some("host_not_allowed"),
            param: Some("Host".into()),
            ..Self::new(
                StatusCode::MISDIRECTED_REQUEST,
                "invalid_request_error",
                format!(
                    "the Host header names \"{}\", which this gateway does not serve: it answers to localhost, \
                     127.0.0.1 (127.0.0.0/8), [::1], its bind address, and the names listed in \
                     gateway.http.allowedHosts; add the name clients use there",
                    shorten(host)
                ),
            )
        }
    }

    /// 415: a JSON route got a body not declared `application/json`.
    pub fn unsupported_media_type(found: Option<&str>) -> Self {
        ApiError {
            code: Some("unsupported_media_type"),
            param: Some("Content-Type".into()),
            ..Self::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "invalid_request_error",
                match found {
                    Some(ct) => format!(
                        "the request body must be JSON sent as Content-Type: application/json; found \"{}\"",
                        shorten(ct)
                    ),
                    None => "the request body must be JSON sent as Content-Type: application/json; the request has no Content-Type".to_owned(),
                },
            )
        }
    }

    /// 405: the path exists, the method does not (`allow`: the methods it answers).
    pub fn method_not_allowed(method: &str, path: &str, allow: &str) -> Self {
        ApiError {
            code: Some("method_not_allowed"),
            ..Self::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "invalid_request_error",
                if allow.is_empty() {
                    format!("{method} is not allowed on {}", shorten(path))
                } else {
                    format!(
                        "{method} is not allowed on {}; it answers {allow}",
                        shorten(path)
                    )
                },
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
        check_json_content_type(req.headers())?;
        let bytes = Bytes::from_request(req, state)
            .await
            .map_err(|e| body_error(e, limit))?;
        parse(&bytes).map(ApiJson)
    }
}

/// A body is JSON when its `Content-Type` says so: `application/json` or a `+json` type, any
/// parameters (`; charset=utf-8`) aside. A missing type is not JSON: browsers send a
/// cross-site POST without a preflight only when it has no type or a form or text one.
pub fn check_json_content_type(headers: &axum::http::HeaderMap) -> Result<(), ApiError> {
    let Some(value) = headers.get(header::CONTENT_TYPE) else {
        return Err(ApiError::unsupported_media_type(None));
    };
    let text = String::from_utf8_lossy(value.as_bytes());
    let essence = text
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    let json = essence == "application/json"
        || essence
            .strip_prefix("application/")
            .is_some_and(|sub| sub.ends_with("+json") && sub.len() > "+json".len());
    if json {
        Ok(())
    } else {
        Err(ApiError::unsupported_media_type(Some(&text)))
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

/// Parses a JSON document, naming the path of the first problem (`messages[0].role`; for a
/// missing field, the field: `messages[0].content`). Only whitespace may follow the document.
pub fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::bad_request(
            "the request body is empty; send a JSON object",
        ));
    }
    let de = &mut serde_json::Deserializer::from_slice(bytes);
    let value = serde_path_to_error::deserialize(&mut *de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if inner.is_syntax() || inner.is_eof() {
            return malformed(&inner);
        }
        let message = strip_position(&inner.to_string()).to_owned();
        let param = match missing_field(&message) {
            Some(field) if path == "." => Some(field.to_owned()),
            Some(field) => Some(format!("{path}.{field}")),
            None if path == "." => None,
            None => Some(path),
        };
        match param {
            Some(param) => {
                ApiError::invalid(param.clone(), format!("invalid `{param}`: {message}"))
            }
            None => ApiError::bad_request(format!("invalid request body: {message}")),
        }
    })?;
    de.end().map_err(|e| malformed(&e))?;
    Ok(value)
}

fn malformed(e: &serde_json::Error) -> ApiError {
    ApiError::bad_request(format!(
        "malformed JSON at line {} column {}: {}",
        e.line(),
        e.column(),
        strip_position(&e.to_string())
    ))
    .with_code("invalid_json")
}

/// The field of serde's "missing field `name`".
pub(crate) fn missing_field(message: &str) -> Option<&str> {
    message
        .strip_prefix("missing field `")
        .and_then(|rest| rest.split_once('`'))
        .map(|(field, _)| field)
}

/// At most 200 characters of a client-supplied value quoted in a message.
fn shorten(s: &str) -> String {
    if s.chars().count() <= 200 {
        s.to_owned()
    } else {
        let head: String = s.chars().take(200).collect();
        format!("{head}…")
    }
}

/// Every error response as JSON in OpenAI's shape: an error answered with no body or a plain
/// text one (axum's 405 and extractor rejections, such as a dashboard query string that does
/// not parse) gets the shape, its status and headers (`Allow`) kept. Answers that are JSON
/// already, pages (HTML) and streams pass through.
pub async fn json_errors(req: Request, next: axum::middleware::Next) -> Response {
    let method = req.method().to_string();
    let path = req.uri().path().to_owned();
    let response = next.run(req).await;
    let status = response.status();
    if !(status.is_client_error() || status.is_server_error()) {
        return response;
    }
    let typed = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|ct| ct.to_ascii_lowercase());
    if typed
        .as_deref()
        .is_some_and(|ct| !ct.starts_with("text/plain"))
    {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let text = axum::body::to_bytes(body, 64 * 1024)
        .await
        .map(|b| String::from_utf8_lossy(&b).trim().to_owned())
        .unwrap_or_default();
    let error = if status == StatusCode::METHOD_NOT_ALLOWED {
        let allow = parts
            .headers
            .get(header::ALLOW)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        ApiError::method_not_allowed(&method, &path, allow)
    } else {
        let message = if text.is_empty() {
            status
                .canonical_reason()
                .unwrap_or("request failed")
                .to_owned()
        } else {
            text
        };
        let kind = match status.as_u16() {
            401 => "authentication_error",
            403 => "permission_error",
            404 => "not_found_error",
            429 => "rate_limit_error",
            s if s >= 500 => "api_error",
            _ => "invalid_request_error",
        };
        let param = message
            .rsplit(": ")
            .next()
            .and_then(missing_field)
            .map(str::to_owned);
        ApiError {
            param,
            ..ApiError::new(status, kind, message)
        }
    };
    let mut fixed = error.into_response();
    parts.headers.remove(header::CONTENT_TYPE);
    parts.headers.remove(header::CONTENT_LENGTH);
    for (name, value) in &parts.headers {
        fixed.headers_mut().insert(name.clone(), value.clone());
    }
    fixed
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
        assert_eq!(
            e.param.as_deref(),
            Some("tokenBudget"),
            "a missing field is the param"
        );
        let e = parse::<Doc>(br#"{"tokenBudget": 1, "messages": [{}]}"#).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("messages[0].role"));
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

    #[test]
    fn only_whitespace_may_follow_the_document() {
        let ok = parse::<Doc>(b"{\"tokenBudget\": 1, \"messages\": []}\n \t").unwrap();
        assert_eq!(ok.token_budget, 1);
        let e = parse::<Doc>(br#"{"tokenBudget": 1, "messages": []} trailing"#).unwrap_err();
        assert_eq!(e.status, StatusCode::BAD_REQUEST);
        assert_eq!(e.code, Some("invalid_json"));
        assert!(
            e.message
                .starts_with("malformed JSON at line 1 column 36: trailing characters"),
            "{}",
            e.message
        );
        let e = parse::<Doc>(b"{\"tokenBudget\": 1, \"messages\": []}\n{}").unwrap_err();
        assert!(e.message.contains("line 2 column 1"), "{}", e.message);
    }

    #[test]
    fn only_json_content_types_are_json() {
        use axum::http::HeaderMap;
        let with = |ct: &str| {
            let mut h = HeaderMap::new();
            h.insert(header::CONTENT_TYPE, HeaderValue::from_str(ct).unwrap());
            check_json_content_type(&h)
        };
        for ok in [
            "application/json",
            "Application/JSON; charset=utf-8",
            "application/merge-patch+json",
        ] {
            assert!(with(ok).is_ok(), "{ok}");
        }
        for bad in [
            "text/plain",
            "text/plain;charset=UTF-8",
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
            "application/jsonx",
            "text/json+json",
            "application/+json",
        ] {
            let e = with(bad).unwrap_err();
            assert_eq!(e.status, StatusCode::UNSUPPORTED_MEDIA_TYPE, "{bad}");
        }
        let e = check_json_content_type(&HeaderMap::new()).unwrap_err();
        assert_eq!(e.status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
        assert!(e.message.contains("no Content-Type"), "{}", e.message);
    }
}
