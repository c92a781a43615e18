//! The router: the route table, and the layers around it. The one module that names every
//! handler (`openai`, `engine_api`, `recall`, `ops`, `dashboard`, `mcp`, the trace's `api`):
//! handlers import the shared state ([`crate::state`]) and the helpers, never each other nor
//! this module, so the gateway's modules form no circle.
//!
//! Every route the gateway serves is one row of the table here ([`operations`]): its method,
//! path, handler and the Rust types of its body and answer. The router is built from this
//! table and `/openapi.json` ([`crate::openapi`]) is generated from the same rows, so a route
//! cannot be served without being documented. The dashboard's page and its own JSON routes
//! (`/`, `/v1/dashboard/*` but the trace's) and `/mcp` are merged in outside the table: they
//! are not part of the documented API.
//!
//! Layers, outside in: a request id (`x-request-id`, the client's kept, else a UUID; echoed on
//! the response and on every log line of the request's span), the trace span, the site check
//! (below), CORS (only when `gateway.http.allowedOrigins` lists origins: closed by default),
//! the per-request deadline, the bearer-token check (on every path but `/healthz` and
//! `/readyz`), the body limit, and errors as JSON (axum's own 405s and rejections included).
//!
//! The site check is what keeps a web page the user happens to open from driving the gateway
//! (which on loopback has no token by default). A `Host` that is not a loopback name
//! (`localhost`, `127.0.0.0/8`, `[::1]`), the bind address, an IP literal when bound to all
//! interfaces, or a name in `gateway.http.allowedHosts` is refused with 421: that is a page
//! that reached the gateway through DNS rebinding (its own name now resolving to 127.0.0.1),
//! and the browser would let it read the answers. An `Origin` other than the gateway's own
//! (`http(s)://` + the request's `Host`) and not in `gateway.http.allowedOrigins` is refused
//! with 403: a cross-site `fetch` or form, which browsers send without asking when it looks
//! like a form (`no-cors`, text or no content type). JSON routes also take only
//! `application/json` ([`crate::api_error::ApiJson`], 415), which no such request can carry.
//! The probes (`/healthz`, `/readyz`) skip the `Host` check, so an orchestrator probing the
//! pod's address needs no config; they answer nothing a page could use.

use axum::extract::{DefaultBodyLimit, MatchedPath, Request, State};
use axum::http::{header, HeaderName, HeaderValue, Method};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, MethodRouter};
use axum::{Extension, Router};
use clawctx_protocol::*;
use serde_json::Value;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use tower_http::cors::{AllowOrigin, CorsLayer};
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::trace::{DefaultOnResponse, TraceLayer};

use crate::api_error::{ApiError, BodyLimit};
use crate::config::{GatewayConfig, Token};
use crate::engine_api::{self as engine, EngineInfoResponse, SessionList};
use crate::metrics::RequestLabels;
use crate::openai;
use crate::openai_wire::{ChatCompletion, ChatCompletionRequest, ModelList};
use crate::openapi::{schema, OpDoc, SchemaFn};
use crate::ops;
use crate::recall::{self, RecallReport};
use crate::state::AppState;
use crate::trace::api as trace;
use crate::trace::store::TurnPage;
use crate::trace::views::{SessionRecord, TurnDiff, TurnView};

/// The request id header.
pub(crate) const REQUEST_ID: &str = "x-request-id";

// ---------------------------------------------------------------------------------------------
// The route table.

/// One route: a row of the table.
struct Op {
    /// `get` or `post`.
    method: &'static str,
    /// The path.
    path: &'static str,
    /// `operationId`.
    id: &'static str,
    /// One line for the document.
    summary: &'static str,
    /// Group.
    tag: &'static str,
    /// The JSON body's type.
    request: Option<SchemaFn>,
    /// The 200 answer's type (`None`: not JSON, see `produces`).
    response: Option<SchemaFn>,
    /// The 200 answer's media type.
    produces: &'static str,
    /// Whether the route needs the bearer token (when one is configured).
    auth: bool,
    /// What serves it.
    handler: MethodRouter<AppState>,
}

#[allow(clippy::too_many_arguments)]
fn op(
    method: &'static str,
    path: &'static str,
    id: &'static str,
    tag: &'static str,
    summary: &'static str,
    request: Option<SchemaFn>,
    response: Option<SchemaFn>,
    handler: MethodRouter<AppState>,
) -> Op {
    Op {
        method,
        path,
        id,
        summary,
        tag,
        request,
        response,
        produces: "application/json",
        auth: true,
        handler,
    }
}

/// Every route.
fn operations(shared: &AppState) -> Vec<Op> {
    let chat = if shared.config.chat_completions {
        post(openai::chat_completions)
    } else {
        post(openai::disabled)
    };
    let mut ops = vec![
        Op {
            produces: "application/json, text/event-stream",
            ..op(
                "post",
                "/v1/chat/completions",
                "createChatCompletion",
                "openai",
                "OpenAI-compatible chat completion: the last user message is the turn's prompt on the session \
                 named by the x-clawctx-session header (or `user`); `stream: true` streams chat.completion.chunk events",
                Some(schema::<ChatCompletionRequest>),
                Some(schema::<ChatCompletion>),
                chat,
            )
        },
        op("get", "/v1/models", "listModels", "openai", "The model turns run on", None, Some(schema::<ModelList>), get(openai::models)),
        op("post", "/v1/engine/bootstrap", "bootstrap", "engine", "engine/bootstrap", Some(schema::<BootstrapParams>), Some(schema::<BootstrapResult>), post(engine::bootstrap)),
        op("post", "/v1/engine/ingest", "ingest", "engine", "engine/ingest", Some(schema::<IngestParams>), Some(schema::<IngestResult>), post(engine::ingest)),
        op("post", "/v1/engine/ingestBatch", "ingestBatch", "engine", "engine/ingestBatch", Some(schema::<IngestBatchParams>), Some(schema::<IngestBatchResult>), post(engine::ingest_batch)),
        op("post", "/v1/engine/assemble", "assemble", "engine", "engine/assemble", Some(schema::<AssembleParams>), Some(schema::<AssembleResult>), post(engine::assemble)),
        op("post", "/v1/engine/compact", "compact", "engine", "engine/compact", Some(schema::<CompactParams>), Some(schema::<CompactResult>), post(engine::compact)),
        op("post", "/v1/engine/maintain", "maintain", "engine", "engine/maintain", Some(schema::<MaintainParams>), Some(schema::<TranscriptRewriteResult>), post(engine::maintain)),
        op("post", "/v1/engine/afterTurn", "afterTurn", "engine", "engine/afterTurn (answers null)", Some(schema::<AfterTurnParams>), Some(schema::<()>), post(engine::after_turn)),
        op("post", "/v1/engine/commitTurn", "commitTurn", "engine", "engine/commitTurn (durable turns)", Some(schema::<CommitTurnParams>), Some(schema::<CommitTurnResult>), post(engine::commit_turn)),
        op("post", "/v1/engine/onSubagentEnded", "onSubagentEnded", "engine", "engine/onSubagentEnded (answers null)", Some(schema::<SubagentEndedParams>), Some(schema::<()>), post(engine::on_subagent_ended)),
        op("post", "/v1/engine/prepareSubagentSpawn", "prepareSubagentSpawn", "engine", "engine/prepareSubagentSpawn: {hasRollback, rollbackId}; the rollback stays in the gateway", Some(schema::<PrepareSubagentSpawnParams>), Some(schema::<engine::SpawnPreparationResponse>), post(engine::prepare_subagent_spawn)),
        op("post", "/v1/engine/rollback", "rollback", "engine", "Runs a prepared spawn's rollback once (answers null)", Some(schema::<engine::RollbackRequest>), Some(schema::<()>), post(engine::rollback)),
        op("get", "/v1/engine/info", "engineInfo", "engine", "The engine in charge: info, implemented methods, quarantines", None, Some(schema::<EngineInfoResponse>), get(engine::info)),
        op("post", "/v1/engine/lcm_grep", "lcmGrep", "recall", "Search the lossless store (the lcm_grep tool)", Some(schema::<recall::GrepRequest>), Some(schema::<RecallReport>), post(recall::lcm_grep)),
        op("post", "/v1/engine/lcm_describe", "lcmDescribe", "recall", "Describe a summary or message (the lcm_describe tool)", Some(schema::<recall::DescribeRequest>), Some(schema::<RecallReport>), post(recall::lcm_describe)),
        op("post", "/v1/engine/lcm_expand", "lcmExpand", "recall", "Expand a summary (the lcm_expand tool)", Some(schema::<recall::ExpandRequest>), Some(schema::<RecallReport>), post(recall::lcm_expand)),
        op("get", "/v1/sessions", "listSessions", "engine", "The gateway's sessions (newest first) and the lossless store's conversations", None, Some(schema::<SessionList>), get(engine::sessions)),
        op("get", "/v1/dashboard/trace/turns", "traceTurns", "trace", "A session's stored turn traces, newest first: ?key=<session key>&before=<turn>&limit=<n> (default 50, at most 500); page on with nextBefore", None, Some(schema::<TurnPage>), get(trace::turns)),
        op("get", "/v1/dashboard/trace/turn", "traceTurn", "trace", "One stored turn: ?key=&turn=<n> (the newest without turn): the parts sent in order with tokens and references, what was left out and why, model latency and usage, compactions, warnings in words", None, Some(schema::<TurnView>), get(trace::turn)),
        op("get", "/v1/dashboard/trace/diff", "traceDiff", "trace", "What changed between turn N and the turn kept before it: ?key=&turn=<n>: parts that came in, went out, new summaries, recall changes", None, Some(schema::<TurnDiff>), get(trace::diff)),
        op("get", "/v1/dashboard/trace/session", "traceSession", "trace", "A session's record over its stored turns: ?key=: the engines that served it and its last assembly against its own budget", None, Some(schema::<SessionRecord>), get(trace::session)),
        op("get", "/openapi.json", "openapi", "operations", "This document", None, None, get(document_handler)),
        Op { produces: "application/openmetrics-text", ..op("get", "/metrics", "metrics", "operations", "Prometheus metrics", None, None, get(ops::metrics)) },
    ];
    for (path, id, summary, handler) in [
        (
            "/healthz",
            "healthz",
            "Liveness (no token needed)",
            get(ops::healthz),
        ),
        (
            "/readyz",
            "readyz",
            "Readiness: 503 while shutting down (no token needed)",
            get(ops::readyz),
        ),
    ] {
        ops.push(Op {
            auth: false,
            ..op("get", path, id, "operations", summary, None, None, handler)
        });
    }
    ops
}

/// The router of every [`Op`].
fn routes(shared: &AppState) -> Router<AppState> {
    operations(shared)
        .into_iter()
        .fold(Router::new(), |r, o| r.route(o.path, o.handler))
}

/// The document's view of every route.
fn docs(shared: &AppState) -> Vec<OpDoc> {
    operations(shared)
        .into_iter()
        .map(|o| OpDoc {
            method: o.method,
            path: o.path,
            id: o.id,
            summary: o.summary,
            tag: o.tag,
            request: o.request,
            response: o.response,
            produces: o.produces,
            auth: o.auth,
        })
        .collect()
}

/// `GET /openapi.json`.
async fn document_handler(
    axum::extract::State(shared): axum::extract::State<AppState>,
) -> axum::Json<Value> {
    axum::Json(crate::openapi::document(&docs(&shared)))
}

// ---------------------------------------------------------------------------------------------
// The router and its layers.

/// The application: every route of the table, the dashboard's and `/mcp`, with the layers (see
/// the module docs).
pub(crate) fn router(shared: AppState) -> Router {
    let mut app = routes(&shared)
        .merge(crate::dashboard::router())
        .merge(crate::mcp::router(&shared))
        .fallback(not_found)
        .route_layer(middleware::from_fn_with_state(
            shared.clone(),
            count_requests,
        ))
        .layer(middleware::from_fn(crate::api_error::json_errors))
        .layer(middleware::from_fn_with_state(shared.clone(), deadline))
        .layer(middleware::from_fn_with_state(shared.clone(), auth))
        .layer(DefaultBodyLimit::max(shared.config.max_body_bytes))
        .layer(Extension(BodyLimit(shared.config.max_body_bytes)));
    if let Some(cors) = cors(&shared.config) {
        app = app.layer(cors);
    }
    app = app.layer(middleware::from_fn_with_state(shared.clone(), same_site));
    let request_id = HeaderName::from_static(REQUEST_ID);
    app.layer(PropagateRequestIdLayer::new(request_id.clone()))
        .layer(
            TraceLayer::new_for_http()
                .make_span_with(|req: &Request| {
                    let id = req.headers().get(REQUEST_ID).and_then(|v| v.to_str().ok()).unwrap_or("-");
                    tracing::info_span!("request", request_id = %id, method = %req.method(), path = %req.uri().path())
                })
                .on_response(DefaultOnResponse::new().level(tracing::Level::INFO)),
        )
        .layer(SetRequestIdLayer::new(request_id, MakeRequestUuid))
        .with_state(shared)
}

fn cors(config: &GatewayConfig) -> Option<CorsLayer> {
    if config.allowed_origins.is_empty() {
        return None;
    }
    let origins: Vec<HeaderValue> = config
        .allowed_origins
        .iter()
        .filter_map(|o| HeaderValue::from_str(o).ok())
        .collect();
    Some(
        CorsLayer::new()
            .allow_origin(AllowOrigin::list(origins))
            .allow_methods([Method::GET, Method::POST])
            .allow_headers([
                header::AUTHORIZATION,
                header::CONTENT_TYPE,
                HeaderName::from_static("x-clawctx-session"),
            ]),
    )
}

/// Refuses what a page of another site could send (see the module docs): a foreign `Host`
/// (421) or a foreign `Origin` (403).
async fn same_site(State(shared): State<AppState>, req: Request, next: Next) -> Response {
    let host = req
        .headers()
        .get(header::HOST)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .or_else(|| req.uri().authority().map(|a| a.as_str().to_owned()));
    if let Some(host) = &host {
        if !PUBLIC_PATHS.contains(&req.uri().path()) && !host_allowed(&shared.config, host) {
            shared.metrics.refused("host");
            tracing::info!(
                host = %host.chars().take(200).collect::<String>(),
                "request refused: the Host header names a host this gateway does not serve"
            );
            return ApiError::misdirected_host(host).into_response();
        }
    }
    if let Some(origin) = req.headers().get(header::ORIGIN) {
        let origin = String::from_utf8_lossy(origin.as_bytes()).into_owned();
        if !origin_allowed(&shared.config, &origin, host.as_deref()) {
            shared.metrics.refused("origin");
            tracing::info!(
                origin = %origin.chars().take(200).collect::<String>(),
                "request refused: it comes from a web page of another origin"
            );
            return ApiError::forbidden_origin(&origin).into_response();
        }
    }
    next.run(req).await
}

/// The name of a `Host` value, lowercase, without its port and brackets (`[::1]:80` → `::1`).
fn host_name(host: &str) -> String {
    let host = host.trim();
    let name = if let Some(rest) = host.strip_prefix('[') {
        rest.split_once(']').map_or(rest, |(name, _)| name)
    } else {
        match host.rsplit_once(':') {
            Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
            _ => host,
        }
    };
    name.trim_end_matches('.').to_ascii_lowercase()
}

/// Whether the gateway serves a request naming `host`.
fn host_allowed(config: &GatewayConfig, host: &str) -> bool {
    let name = host_name(host);
    if name == "localhost" {
        return true;
    }
    let whole = host.trim().to_ascii_lowercase();
    if config
        .allowed_hosts
        .iter()
        .any(|h| h == "*" || *h == name || *h == whole)
    {
        return true;
    }
    match name.parse::<std::net::IpAddr>() {
        // An IP literal is never a rebound name; the ones that reach this gateway are its own.
        Ok(ip) => {
            let bound = config.addr.ip();
            ip.is_loopback() || ip == bound || bound.is_unspecified()
        }
        Err(_) => false,
    }
}

/// Whether a request with `Origin: origin` may be served: the gateway's own origin (`http://` or
/// `https://` + the request's `Host`), or one listed in `gateway.http.allowedOrigins`. `null`
/// (a sandboxed page, a local file) is another origin.
fn origin_allowed(config: &GatewayConfig, origin: &str, host: Option<&str>) -> bool {
    let origin = origin.trim().trim_end_matches('/').to_ascii_lowercase();
    if let Some(host) = host {
        let host = host.trim().to_ascii_lowercase();
        if origin == format!("http://{host}") || origin == format!("https://{host}") {
            return true;
        }
    }
    config
        .allowed_origins
        .iter()
        .any(|o| o.eq_ignore_ascii_case(&origin))
}

/// The bearer check: both sides hashed to 32 bytes and compared in constant time, so neither
/// the content nor the length of the token leaks through timing.
fn token_matches(expected: &Token, presented: &str) -> bool {
    let a = Sha256::digest(expected.expose().as_bytes());
    let b = Sha256::digest(presented.as_bytes());
    a.ct_eq(&b).into()
}

/// Paths served without a token: liveness and readiness probes carry no credentials.
const PUBLIC_PATHS: [&str; 2] = ["/healthz", "/readyz"];

/// Every path but [`PUBLIC_PATHS`] needs the token, unknown ones included (no route probing).
async fn auth(State(shared): State<AppState>, req: Request, next: Next) -> Response {
    if let Some(token) = shared
        .config
        .token
        .as_ref()
        .filter(|_| !PUBLIC_PATHS.contains(&req.uri().path()))
    {
        if let Some(r) = crate::dashboard::login(&req, token.expose(), &|p| token_matches(token, p))
        {
            return r;
        }
        if crate::dashboard::is_login_form(&req) {
            return crate::dashboard::login_form(req, token.expose(), &|p| token_matches(token, p))
                .await;
        }
        let presented = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| {
                v.strip_prefix("Bearer ")
                    .or_else(|| v.strip_prefix("bearer "))
            })
            .map(str::trim);
        if !presented.is_some_and(|p| token_matches(token, p))
            && !crate::dashboard::cookie_matches(req.headers(), token.expose())
        {
            if crate::dashboard::is_page(req.uri().path()) {
                return crate::dashboard::login_page(false);
            }
            tracing::info!("request refused: missing or invalid bearer token");
            return ApiError::unauthorized().into_response();
        }
    }
    next.run(req).await
}

/// The per-request deadline. A streamed reply is past this point once its headers are out;
/// its turn has the same deadline inside (see `openai`).
async fn deadline(State(shared): State<AppState>, req: Request, next: Next) -> Response {
    let limit = shared.config.request_timeout;
    match tokio::time::timeout(limit, next.run(req)).await {
        Ok(response) => response,
        Err(_) => {
            shared.metrics.error("timeout");
            ApiError::timeout(limit.as_millis()).into_response()
        }
    }
}

async fn count_requests(State(shared): State<AppState>, req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |p| p.as_str().to_owned());
    let method = req.method().to_string();
    let response = next.run(req).await;
    let status = response.status();
    shared
        .metrics
        .requests
        .get_or_create(&RequestLabels {
            route,
            method,
            status: status.as_u16(),
        })
        .inc();
    if status.is_server_error() {
        shared.metrics.error("http_5xx");
    }
    response
}

async fn not_found(req: Request) -> ApiError {
    ApiError::not_found(format!(
        "no route for {} {}",
        req.method(),
        req.uri().path()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_names_the_bind_address_and_listed_hosts_are_served() {
        let mut c = GatewayConfig::loopback(18789);
        for ok in [
            "localhost",
            "localhost:18789",
            "LOCALHOST.:1",
            "127.0.0.1:18789",
            "127.8.9.10",
            "[::1]:18789",
            "[::1]",
        ] {
            assert!(host_allowed(&c, ok), "{ok}");
        }
        for bad in [
            "evil.example:18789",
            "localhost.evil.example",
            "127.0.0.1.nip.io:18789",
            "192.168.1.5:18789",
            "[::2]:18789",
            "",
        ] {
            assert!(!host_allowed(&c, bad), "{bad}");
        }
        c.allowed_hosts = vec!["gw.example".into(), "other.example:8443".into()];
        assert!(host_allowed(&c, "GW.example:18789"));
        assert!(host_allowed(&c, "other.example:8443"));
        assert!(!host_allowed(&c, "other.example:9000"));
        c.addr = "192.168.1.5:18789".parse().unwrap();
        assert!(host_allowed(&c, "192.168.1.5:18789"));
        assert!(!host_allowed(&c, "10.0.0.1:18789"));
        c.addr = "0.0.0.0:18789".parse().unwrap();
        assert!(
            host_allowed(&c, "10.0.0.1:18789"),
            "bound to all: any IP literal"
        );
        assert!(!host_allowed(&c, "evil.example:18789"));
        c.allowed_hosts = vec!["*".into()];
        assert!(host_allowed(&c, "evil.example:18789"));
    }

    #[test]
    fn only_the_own_origin_and_listed_ones_are_served() {
        let mut c = GatewayConfig::loopback(18789);
        let host = Some("127.0.0.1:18789");
        assert!(origin_allowed(&c, "http://127.0.0.1:18789", host));
        assert!(origin_allowed(&c, "https://127.0.0.1:18789/", host));
        assert!(origin_allowed(
            &c,
            "http://localhost:18789",
            Some("localhost:18789")
        ));
        for bad in [
            "http://127.0.0.1:3000",
            "http://localhost:18789",
            "null",
            "http://evil.example",
            "",
        ] {
            assert!(!origin_allowed(&c, bad, host), "{bad}");
        }
        assert!(!origin_allowed(&c, "http://127.0.0.1:18789", None));
        c.allowed_origins = vec!["http://127.0.0.1:3000".into()];
        assert!(origin_allowed(&c, "HTTP://127.0.0.1:3000", host));
        assert!(!origin_allowed(&c, "http://127.0.0.1:3001", host));
    }

    #[test]
    fn the_token_check_accepts_only_the_exact_token() {
        let t = Token::new("correct horse");
        assert!(token_matches(&t, "correct horse"));
        for wrong in [
            "",
            "correct hors",
            "correct horse ",
            "Correct horse",
            "correct horsf",
        ] {
            assert!(!token_matches(&t, wrong), "{wrong:?}");
        }
    }
}
