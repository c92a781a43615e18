//! The web dashboard: what the model saw, the summary DAG, recall and engine health, served
//! by the gateway at `/`.
//!
//! The page is plain ES modules and CSS under `crates/gateway/assets/dashboard/`, embedded in
//! the binary (`include_str!`): no build step, no CDN, no network fonts; a Content Security
//! Policy keeps it to its own origin. It reads the JSON endpoints below plus the engine API's
//! recall routes (`/v1/engine/lcm_grep`, `lcm_expand`), and listens on `/v1/dashboard/events`
//! (SSE) for the open session's turns.
//!
//! - `GET /v1/dashboard/sessions`: every session with its counts, budget and last assembly.
//! - `GET /v1/dashboard/session?key=&timelineLimit=`: one session: its last assembled context
//!   split into parts (as the turn trace recorded it, `trace::assembled`), what was
//!   left out (`last_assembled`), the compaction timeline (one row per pass, newest 100 unless
//!   asked, each naming the first 32 summaries it wrote).
//! - `GET /v1/dashboard/transcript?key=&from=&limit=&around=`: a page of the stored messages.
//! - `GET /v1/dashboard/dag?key=`, `/dag/children?key=&id=`, `/dag/path?key=&id=`: the
//!   summary DAG a layer at a time (lossless).
//! - `GET /v1/dashboard/engines`: selection, engines, plugins, quarantines (the persisted
//!   mirror and this process), host, summarizer (with its circuit breaker when not closed), the
//!   config with secrets masked ([`secrets`]).
//! - `GET /v1/dashboard/events?key=`: live events (`live`, from the turn trace's bus).
//! - `GET /v1/dashboard/trace/*`: the per-turn trace ([`crate::trace`]).
//!
//! The page keeps what it shows in the URL's hash, so a reload or a shared link lands on it:
//! `#/session/<key>/tab=<tab>` with `turn=`, `node=` (the open DAG node), `q=` and `mode=` (the
//! recall search) and `around=` (the transcript's message).
//!
//! Under the lossless engine the sessions' counts, the session view's stats, timeline and
//! frontier, the transcript pages and the DAG come from the engine's own store (its
//! [`clawctx_lossless::Recall`] handle, never a second store) through
//! [`clawctx_lossless::inspect::Inspect`], which every lossless backend implements, so the
//! dashboard shows the same on SQLite and on PostgreSQL; a store that fails answers 503 (it
//! cannot be reached) or 500, naming the store. Other engines' sessions are read from their
//! transcripts.
//!
//! Auth is the API's: open on loopback without a token; with a token every route needs it. A
//! browser cannot send a bearer header when it follows a link, so the page a request without
//! credentials gets is a login form that posts the token to `/login` (the token never enters a
//! URL, so neither the address bar nor the browser's history holds it); `/?token=<token>`
//! still works for links and scripts. Both check the token and answer with a redirect to `/`
//! that sets an `HttpOnly; SameSite=Strict` cookie holding a hash of the token (never the
//! token), valid for [`COOKIE_MAX_AGE_SECS`]; the auth layer accepts that cookie as it accepts
//! the header.

mod last_assembled;
mod live;
pub mod secrets;

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::{Path, Query, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use clawctx_lossless::inspect::{DagNode, DagOverview, MessagePage, PageAt};
use clawctx_lossless::{Backend, ConvKey, Recall};
use clawctx_protocol::AgentMessage;
use serde::Deserialize;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::api_error::ApiError;
use crate::engine_store::is_lossless;
use crate::state::{AppState, Shared};

/// The cookie the dashboard's login sets.
pub const COOKIE: &str = "clawctx_gateway";

/// How long the login cookie lasts (`Max-Age`): seven days, then the browser asks again.
pub const COOKIE_MAX_AGE_SECS: u64 = 7 * 24 * 3600;

/// Where the login form posts the token.
pub const LOGIN_PATH: &str = "/login";

/// The longest login form body read (a token is far shorter).
const LOGIN_BODY_MAX: usize = 8 * 1024;

/// Transcript page size when none is asked for.
const DEFAULT_PAGE: usize = 100;
/// Frontier items listed by name in "left out".
const LEFT_OUT_LISTED: usize = 50;

// ---------------------------------------------------------------------------------------------
// Auth: the token cookie.

/// The cookie value for `token`: a hash, so the cookie jar never holds the token itself.
fn cookie_value(token: &str) -> String {
    let digest = Sha256::digest(format!("clawctx-dashboard:{token}").as_bytes());
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// The dashboard cookie's value in `headers`, if any.
fn cookie_in(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|c| c.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value.trim().to_owned())
}

/// Whether `headers` carry the dashboard cookie of `token` (compared in constant time).
pub(crate) fn cookie_matches(headers: &HeaderMap, token: &str) -> bool {
    use subtle::ConstantTimeEq;
    let Some(presented) = cookie_in(headers) else {
        return false;
    };
    let expected = cookie_value(token);
    presented.len() == expected.len() && bool::from(presented.as_bytes().ct_eq(expected.as_bytes()))
}

/// Paths that are pages (HTML for a person) rather than API routes.
pub(crate) fn is_page(path: &str) -> bool {
    path == "/" || path == "/index.html"
}

/// `GET /?token=…`: a matching token gets a redirect to `/` with the cookie set; a wrong one
/// the login page with 401. Other requests: `None` (the auth layer goes on).
pub(crate) fn login(
    req: &Request,
    token: &str,
    matches: &dyn Fn(&str) -> bool,
) -> Option<Response> {
    if !is_page(req.uri().path()) {
        return None;
    }
    let presented = form_value(req.uri().query()?, "token")?;
    Some(login_answer(&presented, token, matches))
}

/// Whether `req` is the login form's `POST /login`.
pub(crate) fn is_login_form(req: &Request) -> bool {
    req.uri().path() == LOGIN_PATH && req.method() == axum::http::Method::POST
}

/// `POST /login` with the form's `token` (`application/x-www-form-urlencoded`): as
/// [`login`], with the token in the body instead of the URL.
pub(crate) async fn login_form(
    req: Request,
    token: &str,
    matches: &(dyn Fn(&str) -> bool + Sync),
) -> Response {
    let Ok(body) = axum::body::to_bytes(req.into_body(), LOGIN_BODY_MAX).await else {
        // The rest of the body is left unread, so the connection cannot carry another
        // request: saying so keeps a client from reusing it (it would see the next answer cut).
        return (
            StatusCode::PAYLOAD_TOO_LARGE,
            [(axum::http::header::CONNECTION, "close")],
            format!("the login form's body is over {LOGIN_BODY_MAX} bytes"),
        )
            .into_response();
    };
    let presented = std::str::from_utf8(&body)
        .ok()
        .and_then(|b| form_value(b, "token"))
        .unwrap_or_default();
    login_answer(&presented, token, matches)
}

/// The value of `key` in a `k=v&…` form or query, percent-decoded.
fn form_value(form: &str, key: &str) -> Option<String> {
    form.split('&')
        .filter_map(|p| p.split_once('='))
        .find(|(k, _)| *k == key)
        .map(|(_, v)| percent_decode(v))
}

/// A presented token's answer: the redirect to `/` with the cookie, or the login page (401).
fn login_answer(presented: &str, token: &str, matches: &dyn Fn(&str) -> bool) -> Response {
    if !matches(presented) {
        tracing::info!("dashboard login refused: wrong token");
        return login_page(true);
    }
    let cookie = format!(
        "{COOKIE}={}; HttpOnly; SameSite=Strict; Path=/; Max-Age={COOKIE_MAX_AGE_SECS}",
        cookie_value(token)
    );
    let mut r = (StatusCode::SEE_OTHER, [(header::LOCATION, "/")]).into_response();
    if let Ok(v) = HeaderValue::from_str(&cookie) {
        r.headers_mut().insert(header::SET_COOKIE, v);
    }
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'+', _) => out.push(b' '),
            (b'%', Some(b)) => {
                out.push(b);
                i += 2;
            }
            (b, _) => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The page a browser gets without credentials.
pub(crate) fn login_page(wrong: bool) -> Response {
    let why = if wrong {
        "<p class=\"error\">That token is not the gateway's.</p>"
    } else {
        ""
    };
    let body = format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width\">\
         <title>clawctx gateway</title></head><body style=\"font-family: system-ui, sans-serif; max-width: 40em; margin: 3em auto; padding: 0 1em\">\
         <h1>clawctx gateway</h1>{why}<p>This gateway needs its token.</p>\
         <form method=\"post\" action=\"{LOGIN_PATH}\"><label>Gateway token <input type=\"password\" name=\"token\" \
         autocomplete=\"current-password\" required autofocus></label> <button type=\"submit\">Open the dashboard</button></form>\
         <p>The gateway sets a cookie (HttpOnly, SameSite=Strict, for seven days) and sends you to the dashboard. \
         <code>/?token=&lt;gateway token&gt;</code> works too, but leaves the token in the browser's history.</p></body></html>"
    );
    (
        StatusCode::UNAUTHORIZED,
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        body,
    )
        .into_response()
}

// ---------------------------------------------------------------------------------------------
// Assets.

const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; \
                   font-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/// Every embedded asset: (name, content type, bytes).
const ASSETS: &[(&str, &str, &str)] = &[
    (
        "app.js",
        "text/javascript; charset=utf-8",
        include_str!("../../assets/dashboard/app.js"),
    ),
    (
        "api.js",
        "text/javascript; charset=utf-8",
        include_str!("../../assets/dashboard/api.js"),
    ),
    (
        "ui.js",
        "text/javascript; charset=utf-8",
        include_str!("../../assets/dashboard/ui.js"),
    ),
    (
        "sessions.js",
        "text/javascript; charset=utf-8",
        include_str!("../../assets/dashboard/sessions.js"),
    ),
    (
        "session.js",
        "text/javascript; charset=utf-8",
        include_str!("../../assets/dashboard/session.js"),
    ),
    (
        "dag.js",
        "text/javascript; charset=utf-8",
        include_str!("../../assets/dashboard/dag.js"),
    ),
    (
        "turns.js",
        "text/javascript; charset=utf-8",
        include_str!("../../assets/dashboard/turns.js"),
    ),
    (
        "search.js",
        "text/javascript; charset=utf-8",
        include_str!("../../assets/dashboard/search.js"),
    ),
    (
        "engines.js",
        "text/javascript; charset=utf-8",
        include_str!("../../assets/dashboard/engines.js"),
    ),
    (
        "style.css",
        "text/css; charset=utf-8",
        include_str!("../../assets/dashboard/style.css"),
    ),
    (
        "favicon.svg",
        "image/svg+xml",
        include_str!("../../assets/dashboard/favicon.svg"),
    ),
];

const INDEX: &str = include_str!("../../assets/dashboard/index.html");

fn page_headers(content_type: &'static str) -> [(header::HeaderName, &'static str); 4] {
    [
        (header::CONTENT_TYPE, content_type),
        (header::CACHE_CONTROL, "no-cache"),
        (header::CONTENT_SECURITY_POLICY, CSP),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
    ]
}

async fn index() -> Response {
    (page_headers("text/html; charset=utf-8"), INDEX).into_response()
}

async fn asset(Path(name): Path<String>) -> Response {
    match ASSETS.iter().find(|(n, _, _)| *n == name) {
        Some((_, content_type, body)) => (page_headers(content_type), *body).into_response(),
        None => ApiError::not_found(format!("no dashboard asset {name}")).into_response(),
    }
}

/// The dashboard's routes (the auth layer of the whole router applies).
pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route("/", get(index))
        .route("/index.html", get(index))
        .route("/dashboard/{name}", get(asset))
        .route("/v1/dashboard/sessions", get(sessions))
        .route("/v1/dashboard/session", get(session))
        .route("/v1/dashboard/transcript", get(transcript))
        .route("/v1/dashboard/dag", get(dag))
        .route("/v1/dashboard/dag/children", get(dag_children))
        .route("/v1/dashboard/dag/path", get(dag_path))
        .route("/v1/dashboard/engines", get(engines))
        .route("/v1/dashboard/events", get(live::events))
}

// ---------------------------------------------------------------------------------------------
// JSON endpoints.

/// The lossless engine's own store (with the handle that names it in errors); `None` under
/// another engine.
async fn lossless_store(s: &Shared) -> Result<Option<Store>, ApiError> {
    Ok(crate::engine_store::lossless(s).map(Store))
}

/// The engine's store, through its recall handle.
struct Store(Recall);

impl std::ops::Deref for Store {
    type Target = Arc<dyn Backend>;
    fn deref(&self) -> &Self::Target {
        self.0.store()
    }
}

impl Store {
    /// The error of a failed read `what`: 404/400 for the caller's mistakes, 503 or 500 naming
    /// the store for the store's failures (see [`crate::engine_store::store_error`]).
    fn error(&self, what: &str) -> impl Fn(clawctx_lossless::LosslessError) -> ApiError + '_ {
        let what = what.to_owned();
        move |e| crate::engine_store::store_error(&self.0, &what, e)
    }
}

fn key_param(key: Option<String>) -> Result<String, ApiError> {
    match key.map(|k| k.trim().to_owned()) {
        Some(k) if !k.is_empty() => Ok(k),
        _ => Err(ApiError::invalid(
            "key",
            "`key` (the session key) is required",
        )),
    }
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError::internal(format!("a dashboard task failed: {e}")))
}

/// `GET /v1/dashboard/sessions`.
async fn sessions(State(s): State<AppState>) -> Result<Json<Value>, ApiError> {
    let engine = s.runtime.engine_id();
    let budget = s.runtime.limits().prompt_budget;
    let rt = s.runtime.clone();
    let listed = blocking(move || rt.store().list("main"))
        .await?
        .map_err(|e| ApiError::internal(format!("cannot list the sessions: {e}")))?;
    // Which engine holds each session and its compactions: `crate::holding`, the rule
    // `clawctx sessions list` and `GET /v1/sessions` show too (not the engine this gateway
    // runs, which the page's header says).
    let mut rows: BTreeMap<String, Value> = BTreeMap::new();
    for (key, entry) in &listed {
        rows.insert(
            key.clone(),
            json!({"sessionKey": key, "sessionId": entry.session_id, "updatedAt": entry.updated_at,
                   "engine": crate::holding::engine(Some(entry), false),
                   "compactions": crate::holding::compactions(Some(entry), None)}),
        );
    }
    if let Some(store) = lossless_store(&s).await? {
        let convs = store
            .conversation_stats()
            .await
            .map_err(store.error("listing the lossless conversations"))?;
        for stats in convs.into_iter().filter(|c| c.conversation.active) {
            let c = stats.conversation;
            let entry = listed
                .iter()
                .find(|(k, _)| *k == c.session_key)
                .map(|(_, e)| e);
            let row = rows.entry(c.session_key.clone()).or_insert_with(|| {
                json!({"sessionKey": c.session_key, "sessionId": Value::Null, "updatedAt": Value::Null})
            });
            row["messages"] = json!(c.msg_count);
            row["storedTokens"] = json!(c.msg_tokens);
            row["contextTokens"] = json!(c.frontier_tokens);
            row["engine"] = json!(crate::holding::engine(entry, true));
            row["compactions"] = json!(crate::holding::compactions(entry, Some(stats.compactions)));
        }
    } else {
        for (key, _) in &listed {
            let rt = s.runtime.clone();
            let k = key.clone();
            if let Ok(Ok(status)) = blocking(move || rt.status(&k)).await {
                if let Some(row) = rows.get_mut(key) {
                    row["messages"] = json!(status.context_messages);
                    row["storedTokens"] = json!(status.context_tokens);
                    row["contextTokens"] = json!(status.context_tokens);
                }
            }
        }
    }
    for (key, at) in s.recorder.keys() {
        // Assembled through the engine API only: no entry, and no conversation in a store.
        let row = rows.entry(key.clone()).or_insert_with(|| {
            json!({"sessionKey": key, "sessionId": Value::Null, "updatedAt": Value::Null,
                   "engine": engine, "compactions": 0})
        });
        if let Some(r) = s.recorder.last(&key) {
            row["assembledTokens"] = json!(r.breakdown().total_tokens);
            row["assembledAt"] = json!(at);
            row["assembledBudget"] = json!(r.token_budget);
        }
    }
    let mut sessions: Vec<Value> = rows.into_values().collect();
    for row in &mut sessions {
        let updated = row["updatedAt"]
            .as_i64()
            .unwrap_or(0)
            .max(row["assembledAt"].as_i64().unwrap_or(0));
        row["lastActivity"] = if updated > 0 {
            json!(updated)
        } else {
            Value::Null
        };
        row["budget"] = json!(budget);
    }
    sessions.sort_by_key(|r| std::cmp::Reverse(r["lastActivity"].as_i64().unwrap_or(0)));
    Ok(Json(
        json!({"engine": engine, "budget": budget, "sessions": sessions}),
    ))
}

#[derive(Debug, Deserialize)]
struct KeyQuery {
    key: Option<String>,
}

/// Compaction events the session view sends by default: the newest ones. A long session has
/// thousands (4,335 rows, 682 KB, were re-sent on every live event); the page asks for all of
/// them only when the user does.
const TIMELINE_NEWEST: usize = 100;

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct SessionQuery {
    key: Option<String>,
    /// Newest compaction events to send (default [`TIMELINE_NEWEST`]; `0`: all of them).
    timeline_limit: Option<usize>,
}

/// Keeps the newest `limit` events of `timeline` (an array, oldest first; `0`: all) and says in
/// `out["timelineTotal"]` how many there were.
fn newest_events(out: &mut Value, timeline: Value, limit: usize) {
    let mut events = match timeline {
        Value::Array(a) => a,
        other => {
            out["timeline"] = other;
            return;
        }
    };
    out["timelineTotal"] = json!(events.len());
    if limit > 0 && events.len() > limit {
        events.drain(..events.len() - limit);
    }
    out["timeline"] = Value::Array(events);
}

/// `GET /v1/dashboard/session?key=[&timelineLimit=N]`.
async fn session(
    State(s): State<AppState>,
    Query(q): Query<SessionQuery>,
) -> Result<Json<Value>, ApiError> {
    let key = key_param(q.key)?;
    let timeline_limit = q.timeline_limit.unwrap_or(TIMELINE_NEWEST);
    let limits = s.runtime.limits();
    let last = s.recorder.last(&key);
    let split = last.as_ref().map(|r| r.breakdown());
    let mut out = json!({
        "sessionKey": key,
        "engine": s.runtime.engine_id(),
        "lossless": is_lossless(&s),
        "limits": {"contextWindow": limits.context_window, "maxOutputTokens": limits.max_output_tokens,
                   "reserveTokens": limits.reserve_tokens, "promptBudget": limits.prompt_budget},
        "lastAssembled": last.as_ref().zip(split.as_ref()).map(|(r, b)| json!({
            "at": r.at_ms, "source": r.source, "sessionId": r.session_id, "tokenBudget": r.token_budget,
            "historyMessages": r.history_messages, "breakdown": b,
        })),
        // The provider's prompt cache over this session's model calls (see `metrics`).
        "cache": s.metrics.session_cache(&key).map(|c| json!({
            "promptTokens": c.prompt_tokens, "cachedTokens": c.cached_tokens, "hitRatio": c.hit_ratio(),
        })),
    });
    if let Some(store) = lossless_store(&s).await? {
        let conv_key = ConvKey::from_host(Some(&key), &key);
        let found = store
            .session_view(&conv_key)
            .await
            .map_err(store.error("reading the session"))?;
        if let Some(view) = found {
            let (timeline, frontier, conv) = (view.timeline, view.frontier, view.conversation);
            out["stats"] = json!({"messages": conv.msg_count, "storedTokens": conv.msg_tokens,
                                  "frontierTokens": conv.frontier_tokens, "frontierItems": conv.frontier_items,
                                  "epoch": conv.epoch});
            newest_events(&mut out, json!(timeline), timeline_limit);
            let stale = last
                .as_ref()
                .and_then(|r| r.epoch)
                .filter(|e| *e != conv.epoch);
            if let Some(then) = stale {
                out["leftOut"] = json!({"stale": true, "epochThen": then, "epochNow": conv.epoch});
            } else if let Some(b) = &split {
                // What the parts do not hold (not a suffix: see `last_assembled::left_out`).
                let stored_before = last
                    .as_ref()
                    .filter(|r| r.source == "turn")
                    .map(|r| r.history_messages as i64);
                let left = last_assembled::left_out(&frontier, b, stored_before);
                let tokens: i64 = left.iter().map(|i| i.tokens).sum();
                let messages: i64 = left
                    .iter()
                    .map(|i| (i.last_seq - i.first_seq + 1).max(0))
                    .sum();
                out["leftOut"] = json!({
                    "items": left.len(), "tokens": tokens, "messages": messages,
                    "firstSeq": left.first().map(|i| i.first_seq), "lastSeq": left.last().map(|i| i.last_seq),
                    "listed": left.iter().rev().take(LEFT_OUT_LISTED).collect::<Vec<_>>(),
                });
            }
        }
    } else {
        let rt = s.runtime.clone();
        let k = key.clone();
        let known = blocking(move || rt.knows(&k)).await?.unwrap_or(false);
        let rt = s.runtime.clone();
        let k = key.clone();
        let status = if known {
            blocking(move || rt.status(&k))
                .await
                .ok()
                .and_then(Result::ok)
        } else {
            None
        };
        if let Some(status) = status {
            out["stats"] = json!({"messages": status.context_messages, "storedTokens": status.context_tokens,
                                  "compactions": status.compactions});
            if let Some(b) = &split {
                out["leftOut"] =
                    json!({"messages": status.context_messages.saturating_sub(b.totals.raw_count)});
            }
        }
        let rt = s.runtime.clone();
        let k = key.clone();
        let summarizer = s
            .registry
            .as_ref()
            .and_then(|r| r.host_summarizer())
            .map(|x| x.name().to_owned());
        let timeline = if known {
            blocking(move || transcript_compactions(&rt, &k, summarizer.as_deref()))
                .await?
                .map_err(|e| ApiError::internal(format!("reading the compactions of {key}: {e}")))?
        } else {
            json!([])
        };
        newest_events(&mut out, timeline, timeline_limit);
    }
    // The engine that holds the session (`crate::holding`), which may not be this gateway's.
    let rt = s.runtime.clone();
    let k = key.clone();
    let entry = blocking(move || rt.store().get(&k)).await?.ok().flatten();
    let in_lossless = out["lossless"] == true && out.get("stats").is_some();
    out["heldBy"] = json!(crate::holding::engine(entry.as_ref(), in_lossless));
    Ok(Json(out))
}

/// The compaction entries on a session transcript's active branch, oldest first, in the
/// timeline's shape (`at` is the entry's ISO timestamp).
fn transcript_compactions(
    rt: &clawctx_runtime::AgentRuntime,
    key: &str,
    summarizer: Option<&str>,
) -> Result<Value, String> {
    let session = rt.session(key).map_err(|e| e.to_string())?;
    if !session.transcript_path.exists() {
        return Ok(json!([]));
    }
    let file = clawctx_transcript::SessionFile::open(&session.transcript_path)
        .map_err(|e| e.to_string())?;
    let rows: Vec<Value> = file
        .active_path()
        .into_iter()
        .filter_map(|e| match &e.kind {
            clawctx_protocol::transcript::EntryKind::Compaction(c) => Some(json!({
                "at": e.timestamp, "kind": "compaction", "depth": Value::Null, "summaries": 1,
                "tokensBefore": c.tokens_before, "tokensAfter": clawctx_tokens::text_tokens(&c.summary),
                "firstSeq": Value::Null, "lastSeq": Value::Null,
                "summarizer": if c.from_hook == Some(true) { "a plugin hook" } else { summarizer.unwrap_or("runtime") },
            })),
            _ => None,
        })
        .collect();
    Ok(Value::Array(rows))
}

#[derive(Debug, Deserialize)]
struct TranscriptQuery {
    key: Option<String>,
    from: Option<i64>,
    limit: Option<usize>,
    around: Option<String>,
}

/// `GET /v1/dashboard/transcript`: lossless pages by sequence from the store; other engines
/// page the session's context from the transcript.
async fn transcript(
    State(s): State<AppState>,
    Query(q): Query<TranscriptQuery>,
) -> Result<Json<Value>, ApiError> {
    let key = key_param(q.key)?;
    let limit = q.limit.unwrap_or(DEFAULT_PAGE).clamp(1, 500);
    if let Some(store) = lossless_store(&s).await? {
        let conv_key = ConvKey::from_host(Some(&key), &key);
        let at = match (q.around, q.from) {
            (Some(id), _) => PageAt::Around(id),
            (None, Some(f)) => PageAt::From(f),
            (None, None) => PageAt::Newest,
        };
        let page: MessagePage = store
            .message_page(&conv_key, at, limit)
            .await
            .map_err(store.error("reading the transcript"))?;
        let mut v = serde_json::to_value(&page)
            .map_err(|e| ApiError::internal(format!("encoding the page: {e}")))?;
        v["limit"] = json!(limit);
        return Ok(Json(v));
    }
    if q.around.is_some() {
        return Err(ApiError::invalid(
            "around",
            "`around` needs the lossless engine (message ids are its ids)",
        ));
    }
    // Looking never creates: an unknown key is a 404, not a new session file.
    let rt = s.runtime.clone();
    let k = key.clone();
    let messages: Vec<AgentMessage> = blocking(move || match rt.knows(&k) {
        Ok(true) => rt.context(&k).map(Some),
        Ok(false) => Ok(None),
        Err(e) => Err(e),
    })
    .await?
    .map_err(|e| ApiError::not_found(format!("session {key}: {e}")))?
    .ok_or_else(|| ApiError::not_found(format!("no session {key}")))?;
    let total = messages.len() as i64;
    let from = q.from.unwrap_or(total - limit as i64).clamp(0, total);
    let end = (from + limit as i64).min(total);
    let page: Vec<Value> = messages[from as usize..end as usize]
        .iter()
        .enumerate()
        .map(|(i, m)| {
            json!({"id": format!("ctx_{}", from as usize + i), "seq": from as usize + i,
                   "tokens": clawctx_tokens::message_tokens(m), "inFrontier": true, "message": m})
        })
        .collect();
    Ok(Json(
        json!({"total": total, "fromSeq": from, "messages": page,
                   "nextSeq": if end < total { json!(end) } else { Value::Null }, "limit": limit}),
    ))
}

/// The lossless store for a DAG view, or a conflict naming the engine in charge.
async fn dag_store(s: &Shared) -> Result<Store, ApiError> {
    lossless_store(s).await?.ok_or_else(|| {
        ApiError::conflict(format!(
            "the summary DAG needs the lossless engine; the engine in charge is \"{}\"",
            s.runtime.engine_id()
        ))
    })
}

/// `GET /v1/dashboard/dag?key=`.
async fn dag(
    State(s): State<AppState>,
    Query(q): Query<KeyQuery>,
) -> Result<Json<DagOverview>, ApiError> {
    let key = key_param(q.key)?;
    let store = dag_store(&s).await?;
    store
        .dag_overview(&ConvKey::from_host(Some(&key), &key))
        .await
        .map(Json)
        .map_err(store.error("reading the DAG"))
}

#[derive(Debug, Deserialize)]
struct NodeQuery {
    key: Option<String>,
    id: Option<String>,
}

fn id_param(id: Option<String>) -> Result<String, ApiError> {
    match id.map(|k| k.trim().to_owned()) {
        Some(k) if !k.is_empty() => Ok(k),
        _ => Err(ApiError::invalid(
            "id",
            "`id` (sum_<n> or msg_<n>) is required",
        )),
    }
}

/// `GET /v1/dashboard/dag/children?key=&id=`.
async fn dag_children(
    State(s): State<AppState>,
    Query(q): Query<NodeQuery>,
) -> Result<Json<Value>, ApiError> {
    let (key, id) = (key_param(q.key)?, id_param(q.id)?);
    let store = dag_store(&s).await?;
    let children: Vec<DagNode> = store
        .dag_children(&ConvKey::from_host(Some(&key), &key), &id)
        .await
        .map_err(store.error("reading a node's children"))?;
    Ok(Json(json!({"id": id, "children": children})))
}

/// `GET /v1/dashboard/dag/path?key=&id=`.
async fn dag_path(
    State(s): State<AppState>,
    Query(q): Query<NodeQuery>,
) -> Result<Json<Value>, ApiError> {
    let (key, id) = (key_param(q.key)?, id_param(q.id)?);
    let store = dag_store(&s).await?;
    let path: Vec<String> = store
        .dag_path(&ConvKey::from_host(Some(&key), &key), &id)
        .await
        .map_err(store.error("finding a node's path"))?;
    Ok(Json(json!({"id": id, "path": path})))
}

/// `GET /v1/dashboard/engines`.
async fn engines(State(s): State<AppState>) -> Result<Json<Value>, ApiError> {
    let engine = s.runtime.engine();
    let settings = s.runtime.runtime_settings();
    let in_memory = s
        .registry
        .as_ref()
        .map(|r| r.quarantines())
        .unwrap_or_default();
    let mirror = s
        .registry
        .as_ref()
        .and_then(|r| r.health_mirror())
        .unwrap_or_else(|| {
            std::sync::Arc::new(clawctx_engine::HealthMirror::in_state_dir(
                s.runtime.state_dir(),
            ))
        });
    let (quarantines, mirror_error) = {
        let m = mirror.clone();
        let mem = in_memory.clone();
        match blocking(move || m.list(&mem)).await? {
            Ok(list) => (serde_json::to_value(list).unwrap_or_default(), Value::Null),
            Err(e) => (
                serde_json::to_value(&in_memory).unwrap_or_default(),
                json!(e.to_string()),
            ),
        }
    };
    let registered: Vec<Value> = s
        .registry
        .as_ref()
        .map(|r| {
            r.ids()
                .into_iter()
                .map(|id| {
                    let reg = r.get(&id);
                    json!({
                        "id": id,
                        "owner": reg.as_ref().map(|g| g.owner.clone()),
                        "lifecycle": reg.as_ref().map(|g| format!("{:?}", g.lifecycle)),
                        "quarantined": r.is_quarantined(&id),
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    let plugins = s
        .host_config
        .get("plugins")
        .map(secrets::mask)
        .unwrap_or(Value::Null);
    let summarizer = s
        .registry
        .as_ref()
        .and_then(|r| r.host_summarizer())
        .map(|x| x.name().to_owned());
    // The LLM summarizer's circuit breaker when it is not closed (while open, compaction
    // summarizes extractively).
    let breaker = summarizer
        .as_ref()
        .and_then(|_| crate::trace::BreakerTrace::read(s.runtime.state_dir()));
    let mut stored_summarizers = Value::Null;
    if let Some(store) = lossless_store(&s).await? {
        if let Ok(names) = store.summarizers_used().await {
            stored_summarizers = json!(names);
        }
    }
    let cfg = &s.config;
    Ok(Json(json!({
        "engine": {"info": engine.info(), "methods": engine.methods().iter().map(|m| m.name()).collect::<Vec<_>>()},
        "selection": settings.context_engine_selection,
        "diagnostics": settings.diagnostics,
        "runtimeSettings": settings,
        "registered": registered,
        "plugins": plugins,
        "quarantines": quarantines,
        "quarantineMirror": {"path": mirror.path().display().to_string(), "error": mirror_error},
        "host": s.runtime.host(),
        "summarizer": {"host": summarizer, "stored": stored_summarizers, "breaker": breaker},
        "model": s.model,
        "gateway": {
            "address": cfg.addr.to_string(), "bind": cfg.bind_mode, "auth": if cfg.token.is_some() { "token" } else { "none" },
            "maxBodyBytes": cfg.max_body_bytes, "requestTimeoutMs": cfg.request_timeout.as_millis() as u64,
            "maxQueuedPerSession": cfg.max_queued_per_session, "chatCompletions": cfg.chat_completions,
        },
        "config": secrets::mask(&s.host_config),
    })))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn the_cookie_holds_a_hash_of_the_token_and_is_found_among_others() {
        let v = cookie_value("s3cret");
        assert_eq!(v.len(), 64);
        assert!(!v.contains("s3cret"));
        let mut h = HeaderMap::new();
        h.insert(
            header::COOKIE,
            HeaderValue::from_str(&format!("a=b; {COOKIE}={v}; c=d")).unwrap(),
        );
        assert!(cookie_matches(&h, "s3cret"));
        assert!(!cookie_matches(&h, "other"));
        assert!(!cookie_matches(&HeaderMap::new(), "s3cret"));
    }

    #[test]
    fn query_tokens_are_percent_decoded() {
        assert_eq!(percent_decode("a%20b+c%2Fd"), "a b c/d");
        assert_eq!(percent_decode("100%"), "100%");
        assert_eq!(percent_decode("%zz"), "%zz");
    }
}
