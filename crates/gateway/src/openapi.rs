//! The route table and the OpenAPI 3.1 document generated from it.
//!
//! Every route the gateway serves is one [`Op`] here: its method, path, handler and the Rust
//! types of its body and answer. The router is built from this table and `/openapi.json` is
//! generated from the same table with `schemars` (the protocol's wire types through
//! `clawctx-protocol`'s `schema` feature), so a route cannot be served without being
//! documented and a documented schema is the type the handler parses. The schemas are JSON
//! Schema 2020-12, which OpenAPI 3.1 uses as is; shared ones live in `components.schemas`.

use axum::routing::{get, post, MethodRouter};
use axum::Router;
use schemars::generate::SchemaSettings;
use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde_json::{json, Map, Value};

use crate::api_error::ErrorBody;
use crate::engine_api::{self as engine, EngineInfoResponse, SessionList};
use crate::openai::{self, ChatCompletion, ChatCompletionRequest, ModelList};
use crate::recall::{self, RecallReport};
use crate::server::{self, AppState};
use crate::trace::api as trace;
use crate::trace::store::TurnPage;
use crate::trace::views::{SessionRecord, TurnDiff, TurnView};
use clawctx_protocol::*;

type SchemaFn = fn(&mut SchemaGenerator) -> Schema;

fn schema<T: JsonSchema>(g: &mut SchemaGenerator) -> Schema {
    g.subschema_for::<T>()
}

/// One route.
pub(crate) struct Op {
    /// `get` or `post`.
    pub method: &'static str,
    /// The path.
    pub path: &'static str,
    /// `operationId`.
    pub id: &'static str,
    /// One line for the document.
    pub summary: &'static str,
    /// Group.
    pub tag: &'static str,
    /// The JSON body's type.
    pub request: Option<SchemaFn>,
    /// The 200 answer's type (`None`: not JSON, see `produces`).
    pub response: Option<SchemaFn>,
    /// The 200 answer's media type.
    pub produces: &'static str,
    /// Whether the route needs the bearer token (when one is configured).
    pub auth: bool,
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
pub(crate) fn operations(shared: &AppState) -> Vec<Op> {
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
        Op { produces: "application/openmetrics-text", ..op("get", "/metrics", "metrics", "operations", "Prometheus metrics", None, None, get(server::metrics)) },
    ];
    for (path, id, summary, handler) in [
        (
            "/healthz",
            "healthz",
            "Liveness (no token needed)",
            get(server::healthz),
        ),
        (
            "/readyz",
            "readyz",
            "Readiness: 503 while shutting down (no token needed)",
            get(server::readyz),
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
pub(crate) fn router(shared: &AppState) -> Router<AppState> {
    operations(shared)
        .into_iter()
        .fold(Router::new(), |r, o| r.route(o.path, o.handler))
}

/// The OpenAPI document.
pub fn document(ops_of: &[OpDoc]) -> Value {
    let mut settings = SchemaSettings::draft2020_12();
    settings.definitions_path = "/components/schemas".into();
    let mut generator = SchemaGenerator::new(settings);
    let error = generator.subschema_for::<ErrorBody>();
    let mut paths = Map::new();
    for o in ops_of {
        let mut responses = Map::new();
        let ok = match (o.response, o.produces) {
            (Some(f), media) => {
                let s = f(&mut generator);
                let content: Map<String, Value> = media
                    .split(", ")
                    .map(|m| (m.to_owned(), json!({"schema": s})))
                    .collect();
                json!({"description": "OK", "content": content})
            }
            (None, media) => json!({"description": "OK", "content": {media: {}}}),
        };
        responses.insert("200".into(), ok);
        let error_of = |description: &str| json!({"description": description, "content": {"application/json": {"schema": error}}});
        if o.request.is_some() {
            responses.insert(
                "415".into(),
                error_of("The body is not declared Content-Type: application/json"),
            );
        }
        let forbidden = if o.path == "/v1/engine/bootstrap" {
            "The request comes from a web page of another origin (its Origin is neither the gateway's own nor in gateway.http.allowedOrigins), \
             or (code path_not_allowed) it names a file the engine API may not read: only the session's own transcript in the state dir \
             or files under gateway.engineApi.transcriptRoots"
        } else {
            "The request comes from a web page of another origin (its Origin is neither the gateway's own nor in gateway.http.allowedOrigins)"
        };
        responses.insert("403".into(), error_of(forbidden));
        if o.auth {
            responses.insert(
                "421".into(),
                error_of("The Host header names a host the gateway does not serve (not a loopback name, its bind address, nor in gateway.http.allowedHosts)"),
            );
        }
        responses.insert(
            "default".into(),
            json!({"description": "An error in OpenAI's shape", "content": {"application/json": {"schema": error}}}),
        );
        let mut operation = json!({
            "operationId": o.id,
            "summary": o.summary,
            "tags": [o.tag],
            "responses": responses,
        });
        if let Some(f) = o.request {
            operation["requestBody"] = json!({"required": true, "content": {"application/json": {"schema": f(&mut generator)}}});
        }
        if !o.auth {
            operation["security"] = json!([]);
        }
        let entry = paths.entry(o.path.to_owned()).or_insert_with(|| json!({}));
        entry[o.method] = operation;
    }
    let schemas: Map<String, Value> = generator.take_definitions(true).into_iter().collect();
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "clawctx gateway",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "The context engine as a service: an OpenAI-compatible chat endpoint, the engine lifecycle \
                            with the plugin protocol's method names and wire types, recall, health and metrics. \
                            Every error is JSON in OpenAI's shape. Request bodies must be sent as \
                            Content-Type: application/json (415 otherwise); a request whose Origin is another \
                            site's (403) or whose Host is not a loopback name or listed in \
                            gateway.http.allowedHosts (421) is refused, so a web page cannot drive the gateway."
        },
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}
        },
        "security": [{"bearer": []}]
    })
}

/// What the document needs of an [`Op`] (the handler aside).
pub struct OpDoc {
    method: &'static str,
    path: &'static str,
    id: &'static str,
    summary: &'static str,
    tag: &'static str,
    request: Option<SchemaFn>,
    response: Option<SchemaFn>,
    produces: &'static str,
    auth: bool,
}

pub(crate) fn docs(shared: &AppState) -> Vec<OpDoc> {
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

async fn document_handler(
    axum::extract::State(shared): axum::extract::State<AppState>,
) -> axum::Json<Value> {
    axum::Json(document(&docs(&shared)))
}
