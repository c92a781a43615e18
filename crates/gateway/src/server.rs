//! The HTTP server: shared state, the router with its layers, and the serve loop with graceful
//! shutdown.
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
//!
//! Shutdown (SIGTERM, Ctrl-C, or the embedder's future): the listener stops accepting,
//! `/readyz` turns 503, new turns are refused with 503, and in-flight requests get
//! `gateway.shutdownTimeoutMs` to finish. Past that, the turns still running are aborted
//! through their abort signals (their transcripts stay valid) and get a few more seconds to
//! write. Then the runtime stops its maintenance and disposes the engine, so stores flush
//! before the process exits.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{DefaultBodyLimit, MatchedPath, Request, State};
use axum::http::{header, HeaderName, HeaderValue, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json, Router};
use clawctx_engine::ContextEngineRegistry;
use clawctx_runtime::AgentRuntime;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower_http::cors::{AllowOrigin, CorsLayer};
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::trace::{DefaultOnResponse, TraceLayer};

use crate::api_error::{ApiError, BodyLimit};
use crate::config::{GatewayConfig, Token};
use crate::error::{GatewayError, Result};
use crate::lanes::Lanes;
use crate::metrics::{Metrics, RequestLabels, CONTENT_TYPE};

/// How long aborted turns get to finish writing after the shutdown deadline.
const ABORT_GRACE: Duration = Duration::from_secs(10);

/// The request id header.
pub const REQUEST_ID: &str = "x-request-id";

/// What the gateway serves from: a runtime built from config and the registry behind it.
pub struct GatewayParts {
    /// The agent runtime (engine, stores, model) every turn and engine call goes through.
    pub runtime: AgentRuntime,
    /// The registry the runtime's engine came from (quarantines for `/metrics` and `/readyz`).
    pub registry: Option<Arc<ContextEngineRegistry>>,
    /// The whole OpenClaw-shaped config (the lossless store's path for recall).
    pub host_config: Arc<Value>,
    /// The model turns run on (`provider/model`), listed by `/v1/models`.
    pub model: String,
    /// Resolved gateway settings.
    pub config: GatewayConfig,
}

/// State every handler shares.
pub(crate) struct Shared {
    pub(crate) runtime: AgentRuntime,
    pub(crate) registry: Option<Arc<ContextEngineRegistry>>,
    pub(crate) host_config: Arc<Value>,
    pub(crate) model: String,
    pub(crate) config: GatewayConfig,
    pub(crate) metrics: Metrics,
    pub(crate) lanes: Arc<Lanes>,
    /// Set when shutdown begins: readiness fails and new turns are refused.
    pub(crate) stopping: AtomicBool,
    /// Cancelled at the shutdown deadline: turns still running abort.
    pub(crate) abort_all: CancellationToken,
    /// Turn tasks, waited for before the runtime shuts down.
    pub(crate) tasks: TaskTracker,
    /// Rollbacks of subagent spawns prepared through the engine API.
    pub(crate) spawns: crate::engine_api::Rollbacks,
    pub(crate) started: Instant,
    /// Each session's last assembly (the turn trace's record; the dashboard reads it).
    pub(crate) recorder: crate::trace::assembled::Recorder,
    /// The live bus the turn watcher publishes to and `/v1/dashboard/events` streams.
    pub(crate) live: crate::trace::bus::Live,
    /// Each session's last plain chat answer, for re-sent requests.
    pub(crate) recent: crate::openai::RecentAnswers,
    /// The per-turn trace's writer (and reader) in the state dir.
    pub(crate) tracer: crate::trace::Tracer,
}

pub(crate) type AppState = Arc<Shared>;

/// A gateway ready to serve.
pub struct Gateway {
    shared: Arc<Shared>,
}

impl Gateway {
    /// Wraps the runtime and settings.
    pub fn new(parts: GatewayParts) -> Self {
        let mut metrics = Metrics::new(parts.registry.clone());
        // The lossless engine's own store file (none on PostgreSQL).
        if let Some(path) = clawctx_lossless::Recall::of(parts.runtime.engine().as_ref())
            .and_then(|r| r.store().as_sqlite().map(|s| s.path().to_path_buf()))
        {
            metrics.watch_store("lossless_db", path);
        }
        if let Ok(dir) = parts.runtime.store().sessions_dir("main") {
            metrics.watch_store("transcripts", dir);
        }
        let tracer = crate::trace::Tracer::start(
            crate::trace::trace_path(parts.runtime.state_dir()),
            parts.config.trace.clone(),
        );
        metrics.watch_trace(&tracer);
        let lanes = Lanes::new(
            parts.config.max_queued_per_session,
            metrics.requests_waiting.clone(),
        );
        Gateway {
            shared: Arc::new(Shared {
                runtime: parts.runtime,
                registry: parts.registry,
                host_config: parts.host_config,
                model: parts.model,
                config: parts.config,
                metrics,
                lanes,
                stopping: AtomicBool::new(false),
                abort_all: CancellationToken::new(),
                tasks: TaskTracker::new(),
                spawns: Default::default(),
                started: Instant::now(),
                recorder: Default::default(),
                live: Default::default(),
                recent: Default::default(),
                tracer,
            }),
        }
    }

    /// The state every handler shares (also what [`crate::trace::LocalTrace`] traces with).
    pub(crate) fn shared(&self) -> &AppState {
        &self.shared
    }

    /// The settings in effect.
    pub fn config(&self) -> &GatewayConfig {
        &self.shared.config
    }

    /// Binds the configured address.
    pub async fn bind(&self) -> Result<TcpListener> {
        let addr = self.shared.config.addr;
        TcpListener::bind(addr)
            .await
            .map_err(|source| GatewayError::Bind {
                addr: addr.to_string(),
                source,
            })
    }

    /// The application: every route with its layers.
    pub fn router(&self) -> Router {
        router(self.shared.clone())
    }

    /// Serves on `listener` until `shutdown` completes, then drains (see the module docs) and
    /// shuts the runtime down.
    pub async fn serve(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<()> {
        let shared = self.shared.clone();
        // Turns accepted before a restart whose engine was down reach it now (the outbox).
        let recovering = shared.clone();
        tokio::spawn(async move {
            recovering.runtime.deliver_pending_commits().await;
        });
        let app = router(shared.clone());
        let stop = CancellationToken::new();
        let trigger = stop.clone();
        tokio::spawn(async move {
            shutdown.await;
            trigger.cancel();
        });
        let on_stop = shared.clone();
        let graceful = stop.clone();
        let server = axum::serve(listener, app).with_graceful_shutdown(async move {
            graceful.cancelled().await;
            on_stop.stopping.store(true, Ordering::SeqCst);
            tracing::info!("shutting down: no new connections; waiting for in-flight requests");
        });
        let server = std::future::IntoFuture::into_future(server);
        tokio::pin!(server);
        let deadline = shared.config.shutdown_timeout;
        let result = tokio::select! {
            r = &mut server => r,
            () = async { stop.cancelled().await; tokio::time::sleep(deadline).await } => {
                tracing::warn!(
                    "in-flight requests did not finish within gateway.shutdownTimeoutMs ({} ms); aborting their turns",
                    deadline.as_millis()
                );
                shared.abort_all.cancel();
                match tokio::time::timeout(ABORT_GRACE, &mut server).await {
                    Ok(r) => r,
                    Err(_) => Ok(()),
                }
            }
        };
        shared.tasks.close();
        if tokio::time::timeout(ABORT_GRACE, shared.tasks.wait())
            .await
            .is_err()
        {
            shared.abort_all.cancel();
            tracing::warn!("turns still running after the shutdown grace period; they are aborted");
            let _ = tokio::time::timeout(ABORT_GRACE, shared.tasks.wait()).await;
        }
        shared.runtime.shutdown().await;
        // The last turns' traces are in the file before the process exits.
        let _ = tokio::time::timeout(ABORT_GRACE, shared.tracer.flush()).await;
        tracing::info!("gateway stopped");
        result.map_err(GatewayError::Serve)
    }
}

fn router(shared: AppState) -> Router {
    let mut app = crate::openapi::router(&shared)
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

pub(crate) async fn healthz(State(shared): State<AppState>) -> Json<Value> {
    Json(json!({
        "status": "ok",
        "pid": std::process::id(),
        "version": env!("CARGO_PKG_VERSION"),
        "uptimeSeconds": shared.started.elapsed().as_secs(),
    }))
}

pub(crate) async fn readyz(State(shared): State<AppState>) -> Response {
    let quarantined: Vec<String> = shared
        .registry
        .as_ref()
        .map(|r| r.quarantines().into_iter().map(|q| q.engine_id).collect())
        .unwrap_or_default();
    let stopping = shared.stopping.load(Ordering::SeqCst);
    // The configured engine not serving (its store down, turns waiting for it): 503 with why.
    let problem =
        crate::status::readiness_problem(&shared.runtime, shared.registry.as_deref()).await;
    let body = json!({
        "status": if stopping { "stopping" } else if problem.is_some() { "degraded" } else { "ready" },
        "engine": shared.runtime.engine_id(),
        "quarantined": quarantined,
        "sessionsBusy": shared.lanes.active(),
        "problem": problem,
    });
    let status = if stopping || problem.is_some() {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::OK
    };
    (status, Json(body)).into_response()
}

pub(crate) async fn metrics(State(shared): State<AppState>) -> Response {
    (
        [(header::CONTENT_TYPE, CONTENT_TYPE)],
        shared.metrics.render(),
    )
        .into_response()
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
