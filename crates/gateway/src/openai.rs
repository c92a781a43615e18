//! The OpenAI-compatible endpoint: `POST /v1/chat/completions` (plain and streaming SSE) and
//! `GET /v1/models`, so any OpenAI client gets clawctx's context management by changing its
//! base URL.
//!
//! The gateway's stored session is the conversation, not the client's `messages`: the last
//! message is the user's, and its text is the turn's prompt, run through
//! [`AgentRuntime::run_turn`](clawctx_runtime::AgentRuntime::run_turn) (stored, assembled and
//! compacted by the selected engine, sent to the configured provider). Earlier messages are not
//! replayed, so a client that re-sends its whole history each time and one that sends only the
//! new message get the same turn. This is OpenClaw's own rule for its endpoint ("client history
//! is not replayed as structured turns"). What else a request carries (system messages,
//! sampling, images) is read by [`crate::chat_input`].
//!
//! Client tools pass through: the model is offered the client's `tools` next to the engine's
//! own (recall), which the gateway runs in its tool loop. A reply that calls a client tool ends
//! the turn and goes back to the client as OpenAI sends it (`tool_calls`, `finish_reason:
//! "tool_calls"`, plain or streamed); the client's next request, ending in its `tool` messages,
//! continues the turn. The session stores the call and each result once: results it already
//! holds (a client re-sending its history) are skipped.
//!
//! The session is the `x-clawctx-session` header (also `x-openclaw-session-key`), used
//! verbatim; else `agent:main:openai-user:<user>` from the request's `user` field; else a fresh
//! `agent:main:openai:<uuid>` (OpenClaw's key shapes). The response names it in the same header.
//!
//! A re-sent request is answered again, not run as a second turn: one with the
//! `Idempotency-Key` of the session's last answered request (kept 24 hours) gets that answer (a
//! different body under the same key is a 409), and so does a byte-identical request without a
//! key within 10 seconds of it (a client's retry of an answer it did not get). Streamed or not
//! does not make two requests differ: a streamed answer is kept once its stream has ended, and
//! a kept answer is given again as the re-send asks for it (a JSON body, or a stream of the
//! same reply). Such an answer carries `x-clawctx-replayed: true`. Only each session's last answer is kept, in
//! memory ([`crate::resend`]; a restart forgets it). A request that failed before its answer keeps nothing: its
//! retry runs, and the runtime continues the unanswered prompt instead of storing it twice.
//!
//! A turn runs in a task of its own that holds the session's lane until the turn has ended
//! and written the transcript. The HTTP side only watches it: when the client goes away (a
//! dropped connection, a closed stream) or the deadline passes, the turn is aborted through
//! its abort signal, never dropped mid-write, so the transcript stays a valid conversation and
//! the next request on the session starts from it.

use std::convert::Infallible;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use clawctx_engine::AbortController;
use clawctx_model::StreamEvent;
use clawctx_runtime::{RuntimeError, TurnOutcome, TurnRequest};
use futures::StreamExt;
use serde_json::{json, Value};

use crate::api_error::{ApiError, ApiJson};
use crate::chat_input::ChatInput;
use crate::lanes::LaneGuard;
use crate::openai_wire::{
    AssistantReply, ChatCompletion, ChatCompletionRequest, Choice, CompletionUsage, ModelCard,
    ModelList, ReplyFunction, ReplyToolCall,
};
use crate::resend::Replay;
use crate::state::AppState;
use crate::validate::check_session_key;

/// The session header.
pub const SESSION_HEADER: &str = "x-clawctx-session";
/// OpenClaw's session header, accepted as an alias.
pub const OPENCLAW_SESSION_HEADER: &str = "x-openclaw-session-key";
/// How often an idle stream sends an SSE comment: it keeps proxies from closing the stream and
/// is how a client that went away is noticed while the model is still thinking.
const STREAM_KEEP_ALIVE: Duration = Duration::from_millis(500);

/// The header naming a request's idempotency key.
pub const IDEMPOTENCY_HEADER: &str = "idempotency-key";
/// The header marking an answer given again to a re-sent request.
pub const REPLAYED_HEADER: &str = "x-clawctx-replayed";
/// Set to `waiting` on a non-streamed answer whose turn did not reach the context engine yet
/// (its store is down): the turn is kept and delivered in order once the store is back.
pub const COMMIT_HEADER: &str = "x-clawctx-commit";
/// An idempotency key's longest accepted length.
const MAX_IDEMPOTENCY_KEY: usize = 255;

/// The request's `Idempotency-Key`, checked.
fn idempotency_key(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let Some(value) = headers.get(IDEMPOTENCY_HEADER) else {
        return Ok(None);
    };
    let key = value.to_str().map(str::trim).unwrap_or("");
    if key.is_empty() || key.len() > MAX_IDEMPOTENCY_KEY || key.chars().any(char::is_control) {
        return Err(ApiError::invalid(
            "Idempotency-Key",
            format!("an Idempotency-Key is 1 to {MAX_IDEMPOTENCY_KEY} visible ASCII characters"),
        ));
    }
    Ok(Some(key.to_owned()))
}

/// A request as the gateway read it, hashed: equal for a byte-for-byte re-send, streamed or not
/// (a client may retry a broken stream as a plain request).
fn fingerprint(request: &ChatCompletionRequest) -> [u8; 32] {
    use sha2::Digest;
    let mut request = request.clone();
    request.stream = None;
    request.stream_options = None;
    let bytes = serde_json::to_vec(&request).unwrap_or_default();
    sha2::Sha256::digest(&bytes).into()
}

fn reply_tool_calls(o: &TurnOutcome) -> Vec<ReplyToolCall> {
    o.client_tool_calls
        .iter()
        .map(|c| ReplyToolCall {
            id: c.id.clone(),
            kind: "function".into(),
            function: ReplyFunction {
                name: c.name.clone(),
                arguments: match &c.arguments {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                },
            },
        })
        .collect()
}

fn finish_reason(o: &TurnOutcome) -> &'static str {
    if !o.client_tool_calls.is_empty() {
        "tool_calls"
    } else if o.tool_iterations_exhausted {
        "length"
    } else {
        "stop"
    }
}

pub(crate) async fn models(State(shared): State<AppState>) -> Json<ModelList> {
    Json(ModelList {
        object: "list".into(),
        // A gateway started without a model lists none.
        data: (!shared.model.is_empty())
            .then(|| ModelCard {
                id: shared.model.clone(),
                object: "model".into(),
                created: 0,
                owned_by: "clawctx".into(),
            })
            .into_iter()
            .collect(),
    })
}

pub(crate) async fn disabled() -> ApiError {
    ApiError::not_found(
        "the chat completions endpoint is disabled (gateway.http.endpoints.chatCompletions.enabled is false)",
    )
}

/// The session key of a request (see the module docs).
fn session_key(headers: &HeaderMap, user: Option<&str>) -> Result<String, ApiError> {
    let header = [SESSION_HEADER, OPENCLAW_SESSION_HEADER]
        .into_iter()
        .find_map(|name| headers.get(name).map(|v| (name, v.to_str().map(str::trim))));
    let key = match header {
        Some((name, Err(_))) => {
            return Err(ApiError::invalid(
                name,
                format!("the {name} header must be visible ASCII"),
            ))
        }
        Some((name, Ok(""))) => {
            return Err(ApiError::invalid(
                name,
                format!("the {name} header is empty"),
            ))
        }
        Some((_, Ok(k))) => k.to_owned(),
        None => match user.map(str::trim).filter(|u| !u.is_empty()) {
            Some(u) => format!("agent:main:openai-user:{u}"),
            None => format!("agent:main:openai:{}", uuid::Uuid::new_v4()),
        },
    };
    check_session_key(SESSION_HEADER, &key)?;
    Ok(key)
}

/// Aborts the turn when dropped before [`AbortOnDrop::disarm`]: the client went away (its
/// connection or stream was dropped) or the request's deadline dropped the handler.
struct AbortOnDrop {
    controller: AbortController,
    armed: bool,
}

impl AbortOnDrop {
    fn disarm(&mut self) {
        self.armed = false;
    }
}

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        if self.armed {
            tracing::info!("client went away; aborting its turn");
            self.controller.abort("the client disconnected");
        }
    }
}

/// A turn counted in `turns_in_flight` until dropped.
struct InFlight(prometheus_client::metrics::gauge::Gauge);

impl InFlight {
    fn new(gauge: prometheus_client::metrics::gauge::Gauge) -> Self {
        gauge.inc();
        InFlight(gauge)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// Runs the turn in a task of its own (tracked for shutdown), holding the session's lane until
/// it has ended. The deadline and a gateway shutdown abort it through its signal.
fn spawn_turn(
    shared: AppState,
    lane: LaneGuard,
    request: TurnRequest,
    controller: AbortController,
    ended: Option<tokio::sync::oneshot::Sender<crate::trace::TurnEnd>>,
) -> tokio::task::JoinHandle<Result<TurnOutcome, RuntimeError>> {
    let tasks = shared.tasks.clone();
    // The task runs in the request's span, so its log lines ("turn done", "turn failed") carry
    // the request id as every other line of the request does.
    let span = tracing::Span::current();
    tasks.spawn(tracing::Instrument::instrument(
        async move {
            let _lane = lane;
            // Decremented when the task ends, however it ends (a panic in the turn included).
            let in_flight = InFlight::new(shared.metrics.turns_in_flight.clone());
            let started = Instant::now();
            let signal = controller.signal();
            let turn = shared.runtime.run_turn(request);
            tokio::pin!(turn);
            let deadline = tokio::time::sleep(shared.config.request_timeout);
            tokio::pin!(deadline);
            let mut deadline_passed = false;
            let mut stopping = false;
            let result = loop {
                tokio::select! {
                    r = &mut turn => break r,
                    () = &mut deadline, if !deadline_passed => {
                        deadline_passed = true;
                        controller.abort(format!(
                            "the request ran past gateway.http.requestTimeoutMs ({} ms)",
                            shared.config.request_timeout.as_millis()
                        ));
                    }
                    () = shared.abort_all.cancelled(), if !stopping => {
                        stopping = true;
                        controller.abort("the gateway is shutting down");
                    }
                }
            };
            drop(in_flight);
            let outcome = match &result {
                Ok(_) => "ok",
                Err(_) if signal.is_aborted() => "aborted",
                Err(e) if is_client_mistake(e) => "rejected",
                Err(_) => "error",
            };
            let (model, engine) = result
                .as_ref()
                .map_or((0, 0), |o| (o.model_micros, o.engine_micros));
            shared
                .metrics
                .turn(outcome, started.elapsed(), model, engine);
            if let Ok(o) = &result {
                shared.metrics.turn_details(o);
            }
            // The turn's trace is finished by its watcher (the dashboard's), off this task.
            if let Some(ended) = ended {
                let _ = ended.send(crate::trace::TurnEnd::of(&result, started.elapsed()));
            }
            match &result {
                Ok(o) => tracing::info!(
                    session = %o.session_key,
                    engine = %o.engine,
                    model_calls = o.model_calls,
                    ms = started.elapsed().as_millis() as u64,
                    "turn done"
                ),
                Err(e) if outcome == "aborted" => tracing::info!("turn aborted: {e}"),
                Err(e) if outcome == "rejected" => {
                    tracing::info!("turn refused (the request's mistake, answered 400): {e}")
                }
                Err(e) => {
                    shared.metrics.error("turn");
                    tracing::warn!("turn failed: {e}");
                }
            }
            result
        },
        span,
    ))
}

/// A turn error that is the request's own mistake (answered 400 by [`turn_error`]), not a
/// failure of the gateway, the engine or the model: it is not counted or logged as one.
fn is_client_mistake(e: &RuntimeError) -> bool {
    matches!(e, RuntimeError::ToolResults { .. })
}

/// OpenAI refuses an output limit above the model's: so does the gateway, naming the limit
/// (the model's configured `maxTokens`; the context budget leaves room for that much only).
fn check_output_limit(
    request: &ChatCompletionRequest,
    asked: Option<u64>,
    limit: u64,
) -> Result<(), ApiError> {
    match asked {
        Some(n) if n > limit => {
            let param = if request.max_completion_tokens.is_some() {
                "max_completion_tokens"
            } else {
                "max_tokens"
            };
            Err(ApiError::invalid(
                param,
                format!(
                    "`{param}` is too large: {n}. This model supports at most {limit} completion tokens \
                     (its configured maxTokens), whereas you provided {n}."
                ),
            )
            .with_code("invalid_value"))
        }
        _ => Ok(()),
    }
}

/// The HTTP error for a failed turn (`input`: what the request asked, to name its fields).
fn turn_error(e: &RuntimeError, shared: &AppState, input: &ChatInput) -> ApiError {
    match e {
        RuntimeError::Aborted(reason) if shared.abort_all.is_cancelled() => ApiError::unavailable(
            format!("the gateway is shutting down; the turn was aborted ({reason})"),
        ),
        RuntimeError::Aborted(reason) if reason.contains("requestTimeoutMs") => {
            ApiError::timeout(shared.config.request_timeout.as_millis())
        }
        RuntimeError::Aborted(reason) => {
            ApiError::internal(format!("the turn was aborted: {reason}"))
        }
        RuntimeError::Provider(m) => ApiError::upstream(format!("the model provider failed: {m}"))
            .with_code("upstream_error"),
        RuntimeError::ToolResults { index, message } => {
            let param = index.and_then(|i| input.tool_results.get(i)).map_or_else(
                || "messages".to_owned(),
                |(m, _)| format!("messages[{m}].tool_call_id"),
            );
            ApiError::invalid(param, message.clone())
        }
        other => ApiError::internal(format!("the turn failed: {other}")),
    }
}

fn usage_of(o: &TurnOutcome) -> CompletionUsage {
    let total = if o.usage.total_tokens > 0 {
        o.usage.total_tokens
    } else {
        o.usage.input + o.usage.output
    };
    CompletionUsage {
        prompt_tokens: o.usage.input,
        completion_tokens: o.usage.output,
        total_tokens: total,
    }
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

pub(crate) async fn chat_completions(
    State(shared): State<AppState>,
    headers: HeaderMap,
    ApiJson(request): ApiJson<ChatCompletionRequest>,
) -> Result<Response, ApiError> {
    if shared.stopping.load(Ordering::SeqCst) {
        return Err(ApiError::unavailable(
            "the gateway is shutting down; retry on another gateway or after its restart",
        ));
    }
    if shared.model.is_empty() {
        // Started without a model (a bridge user's gateway): the engine API works, turns cannot.
        return Err(ApiError {
            retry_after: None,
            ..ApiError::unavailable(
                "no model is configured for this gateway, so it answers no chat completions (its engine API \
                 /v1/engine/* works without one): set agents.defaults.model.primary (providers under \
                 models.providers.<id>), or OPENAI_BASE_URL and OPENAI_MODEL, and restart it",
            )
        }
        .with_code("model_not_configured"));
    }
    let key = session_key(&headers, request.user.as_deref())?;
    let idempotency = idempotency_key(&headers)?;
    let mut input = crate::chat_input::read(&request, &shared.runtime.tool_names())?;
    check_output_limit(
        &request,
        input.options.max_output_tokens,
        shared.runtime.limits().max_output_tokens,
    )?;
    if !input.tool_results.is_empty() && matches!(shared.runtime.store().get(&key), Ok(None)) {
        return Err(ApiError {
            status: StatusCode::NOT_FOUND,
            ..ApiError::invalid(
                SESSION_HEADER,
                format!("tool results continue a session's turn, and there is no session \"{key}\"; name it with the {SESSION_HEADER} header (or `user`)"),
            )
        });
    }
    let model = request
        .model
        .clone()
        .filter(|m| !m.trim().is_empty())
        .unwrap_or_else(|| shared.model.clone());
    let lane = shared
        .lanes
        .acquire(&key)
        .await
        .inspect_err(|_| shared.metrics.error("busy"))?;
    if shared.stopping.load(Ordering::SeqCst) {
        // It waited for the session's lane while the gateway began to stop: not run, not stored.
        return Err(ApiError::unavailable(
            "the gateway is shutting down; the request was not run; retry after its restart",
        ));
    }
    let session_header = HeaderValue::from_str(&key)
        .map_err(|_| ApiError::invalid(SESSION_HEADER, "invalid session key"))?;
    // A re-send of the session's last answered request (waited for on the lane above, so one
    // still running has answered by now) gets that answer again.
    let request_print = fingerprint(&request);
    let include_usage = request
        .stream_options
        .as_ref()
        .is_some_and(|o| o.include_usage);
    {
        match shared
            .recent
            .check(&key, idempotency.as_deref(), &request_print)
        {
            Replay::Run => {}
            Replay::Conflict => {
                return Err(ApiError {
                    param: Some("Idempotency-Key".into()),
                    ..ApiError::conflict(
                        "this Idempotency-Key was used for a different request on this session",
                    )
                })
            }
            Replay::Answer(body) => {
                tracing::info!(session = %key, "a re-sent request is answered again, not run as a new turn");
                let mut response = if request.stream == Some(true) {
                    let events = replay_stream(&body, include_usage);
                    Sse::new(futures::stream::iter(
                        events
                            .into_iter()
                            .map(|item| Ok::<Event, Infallible>(item.into_event())),
                    ))
                    .into_response()
                } else {
                    (StatusCode::OK, Json(*body)).into_response()
                };
                let headers = response.headers_mut();
                headers.insert(SESSION_HEADER, session_header);
                headers.insert(REPLAYED_HEADER, HeaderValue::from_static("true"));
                return Ok(response);
            }
        }
    }
    let controller = AbortController::new();
    let mut turn = TurnRequest::new(key.clone(), std::mem::take(&mut input.prompt));
    turn.abort = Some(controller.signal());
    let (assembled, ended, _watcher) = crate::trace::watch::watch_turn(&shared, &key);
    turn.assembled = Some(assembled);
    turn.client_tools = std::mem::take(&mut input.tools);
    turn.tool_results = input.tool_results.iter().map(|(_, r)| r.clone()).collect();
    turn.system_extra = input.system_extra.take();
    turn.images = std::mem::take(&mut input.images);
    turn.model_options = std::mem::take(&mut input.options);
    let id = format!("chatcmpl-{}", uuid::Uuid::new_v4().simple());

    if request.stream == Some(true) {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        turn.events = Some(tx);
        let handle = spawn_turn(shared.clone(), lane, turn, controller.clone(), ended);
        let events = stream_events(
            shared,
            handle,
            rx,
            StreamMeta {
                id,
                model,
                created: unix_now(),
                include_usage,
                input,
                session: key.clone(),
                idempotency,
                request_print,
            },
        );
        let guard = AbortOnDrop {
            controller,
            armed: true,
        };
        let body = events.scan(guard, |guard, item| {
            if matches!(item, Streamed::Done) {
                guard.disarm();
            }
            futures::future::ready(Some(Ok::<Event, Infallible>(item.into_event())))
        });
        let mut response = Sse::new(body)
            .keep_alive(KeepAlive::new().interval(STREAM_KEEP_ALIVE))
            .into_response();
        response
            .headers_mut()
            .insert(SESSION_HEADER, session_header);
        return Ok(response);
    }

    // Answered once the reply is in the transcript and the engine has the turn: the session's
    // counters and maintenance finish on the session's lane after the response.
    let (answered_tx, mut answered) = tokio::sync::mpsc::unbounded_channel();
    turn.answered = Some(answered_tx);
    let mut handle = spawn_turn(shared.clone(), lane, turn, controller.clone(), ended);
    let mut guard = AbortOnDrop {
        controller,
        armed: true,
    };
    let result = tokio::select! {
        Some(early) = answered.recv() => Ok(Ok(early)),
        r = &mut handle => r,
    };
    guard.disarm();
    let outcome = match result {
        Ok(Ok(o)) => o,
        Ok(Err(e)) => return Err(turn_error(&e, &shared, &input)),
        Err(e) => return Err(ApiError::internal(format!("the turn task failed: {e}"))),
    };
    let body = completion(id, model, unix_now(), &outcome);
    shared
        .recent
        .remember(&key, idempotency, request_print, &body);
    let mut response = (StatusCode::OK, Json(body)).into_response();
    response
        .headers_mut()
        .insert(SESSION_HEADER, session_header);
    if outcome.commit_waiting.is_some() {
        // The engine's store is down: the turn is kept (transcript, outbox) and reaches the
        // engine when it is back; until then it is not in the shared store.
        response
            .headers_mut()
            .insert(COMMIT_HEADER, HeaderValue::from_static("waiting"));
    }
    Ok(response)
}

/// The answer to a turn, as a plain response carries it (and as it is kept for re-sends).
fn completion(id: String, model: String, created: u64, outcome: &TurnOutcome) -> ChatCompletion {
    ChatCompletion {
        id,
        object: "chat.completion".into(),
        created,
        model,
        usage: usage_of(outcome),
        choices: vec![Choice {
            index: 0,
            message: AssistantReply {
                role: "assistant".into(),
                content: Some(outcome.reply.clone())
                    .filter(|r| !r.is_empty() || outcome.client_tool_calls.is_empty()),
                tool_calls: reply_tool_calls(outcome),
            },
            finish_reason: finish_reason(outcome).into(),
        }],
    }
}

/// A kept answer given again as a stream: the role, the whole reply in one delta, the client's
/// tool calls, the finish reason, the usage when asked for, `[DONE]`.
fn replay_stream(body: &ChatCompletion, include_usage: bool) -> Vec<Streamed> {
    let chunk = |choices: Value| json!({"id": body.id, "object": "chat.completion.chunk", "created": body.created, "model": body.model, "choices": choices});
    let mut out = vec![Streamed::Chunk(chunk(
        json!([{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": null}]),
    ))];
    if let Some(choice) = body.choices.first() {
        if let Some(text) = choice.message.content.as_deref().filter(|t| !t.is_empty()) {
            out.push(Streamed::Chunk(chunk(
                json!([{"index": 0, "delta": {"content": text}, "finish_reason": null}]),
            )));
        }
        let calls: Vec<Value> = choice
            .message
            .tool_calls
            .iter()
            .enumerate()
            .map(|(i, c)| json!({"index": i, "id": c.id, "type": c.kind, "function": c.function}))
            .collect();
        if !calls.is_empty() {
            out.push(Streamed::Chunk(chunk(
                json!([{"index": 0, "delta": {"tool_calls": calls}, "finish_reason": null}]),
            )));
        }
        out.push(Streamed::Chunk(chunk(
            json!([{"index": 0, "delta": {}, "finish_reason": choice.finish_reason}]),
        )));
    }
    if include_usage {
        let mut last = chunk(json!([]));
        last["usage"] = serde_json::to_value(&body.usage).unwrap_or(Value::Null);
        out.push(Streamed::Chunk(last));
    }
    out.push(Streamed::Done);
    out
}

struct StreamMeta {
    id: String,
    model: String,
    created: u64,
    include_usage: bool,
    input: ChatInput,
    /// Where the answer is kept for a re-send, once the stream has ended.
    session: String,
    idempotency: Option<String>,
    request_print: [u8; 32],
}

/// One SSE event of a streamed reply.
enum Streamed {
    Chunk(Value),
    Error(Value),
    Done,
}

impl Streamed {
    fn into_event(self) -> Event {
        match self {
            Streamed::Chunk(v) | Streamed::Error(v) => Event::default().data(v.to_string()),
            Streamed::Done => Event::default().data("[DONE]"),
        }
    }
}

/// The chunks of a streamed reply: a role delta, a content delta per text delta of the model,
/// the client tool calls the turn ended on (one delta with each call whole), the finish chunk
/// (and a usage chunk when asked), `[DONE]`. A turn that fails after the
/// stream began ends with an `{"error": …}` event and `[DONE]`.
fn stream_events(
    shared: AppState,
    handle: tokio::task::JoinHandle<Result<TurnOutcome, RuntimeError>>,
    rx: tokio::sync::mpsc::UnboundedReceiver<StreamEvent>,
    meta: StreamMeta,
) -> impl futures::Stream<Item = Streamed> + Send {
    let chunk = {
        let (id, model, created) = (meta.id.clone(), meta.model.clone(), meta.created);
        move |choices: Value, usage: Option<Value>| {
            let mut c = json!({"id": id, "object": "chat.completion.chunk", "created": created, "model": model, "choices": choices});
            if let Some(u) = usage {
                c["usage"] = u;
            }
            Streamed::Chunk(c)
        }
    };
    let first = chunk(
        json!([{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": null}]),
        None,
    );
    let deltas = {
        let chunk = chunk.clone();
        futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|e| (e, rx)) })
            .filter_map(move |e| {
                let out = match e {
                    StreamEvent::TextDelta(t) if !t.is_empty() => Some(chunk(
                        json!([{"index": 0, "delta": {"content": t}, "finish_reason": null}]),
                        None,
                    )),
                    _ => None,
                };
                futures::future::ready(out)
            })
    };
    let tail = futures::stream::once(async move {
        let mut out = Vec::new();
        match handle.await {
            Ok(Ok(o)) => {
                let calls: Vec<Value> = reply_tool_calls(&o)
                    .into_iter()
                    .enumerate()
                    .map(|(i, c)| json!({"index": i, "id": c.id, "type": c.kind, "function": c.function}))
                    .collect();
                if !calls.is_empty() {
                    out.push(chunk(json!([{"index": 0, "delta": {"tool_calls": calls}, "finish_reason": null}]), None));
                }
                out.push(chunk(json!([{"index": 0, "delta": {}, "finish_reason": finish_reason(&o)}]), None));
                if meta.include_usage {
                    out.push(chunk(json!([]), serde_json::to_value(usage_of(&o)).ok()));
                }
                let body = completion(meta.id.clone(), meta.model.clone(), meta.created, &o);
                shared
                    .recent
                    .remember(&meta.session, meta.idempotency.clone(), meta.request_print, &body);
            }
            Ok(Err(e)) => out.push(Streamed::Error(json!(turn_error(&e, &shared, &meta.input).body()))),
            Err(e) => out.push(Streamed::Error(json!(ApiError::internal(format!("the turn task failed: {e}")).body()))),
        }
        out.push(Streamed::Done);
        futures::stream::iter(out)
    })
    .flatten();
    futures::stream::once(futures::future::ready(first))
        .chain(deltas)
        .chain(tail)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn session_keys_follow_openclaws_shapes() {
        let mut h = HeaderMap::new();
        assert_eq!(
            session_key(&h, Some("ann")).unwrap(),
            "agent:main:openai-user:ann"
        );
        assert!(session_key(&h, None)
            .unwrap()
            .starts_with("agent:main:openai:"));
        h.insert(
            OPENCLAW_SESSION_HEADER,
            HeaderValue::from_static("agent:main:x"),
        );
        assert_eq!(session_key(&h, Some("ann")).unwrap(), "agent:main:x");
        h.insert(SESSION_HEADER, HeaderValue::from_static("agent:main:mine"));
        assert_eq!(session_key(&h, Some("ann")).unwrap(), "agent:main:mine");
        h.insert(SESSION_HEADER, HeaderValue::from_static(""));
        assert_eq!(
            session_key(&h, None).unwrap_err().param.as_deref(),
            Some(SESSION_HEADER)
        );
    }
}
