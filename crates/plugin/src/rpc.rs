//! The JSON-RPC 2.0 client side of the plugin protocol (see `docs/plugin-protocol.md`).
//!
//! One JSON message per line over the child's stdio: requests and responses go both ways
//! (the plugin calls back into the host for `host/log`, `host/llm.complete`,
//! `host/rewriteTranscriptEntries` and `host/transcript.readVisibleMessageDelta`). A
//! [`Connection`] owns the process; a reader task routes responses to pending calls and serves
//! plugin→host requests. Anything that breaks the framing — a line that is not a JSON object,
//! a line over the size cap, EOF — fails every pending call with a message saying what
//! happened (EOF: `plugin process exited (code …): <stderr tail>`) and marks the connection
//! dead; a timed-out call kills the process, since a plugin that stopped answering is in an
//! unknown state.
//!
//! Nothing here waits on the plugin without a bound. A plugin stuck in synchronous code stops
//! reading its stdin, and once the pipe is full (64 KiB on Linux) every write to it blocks;
//! since writers share the pipe's lock, one blocked write would hold up every call, `shutdown`
//! included. So a call has one deadline (its timeout) over waiting for the pipe, writing its
//! line and waiting for the answer; the notice that an aborted call is no longer wanted
//! (`$/cancelRequest`) and answers to plugin→host requests get [`WRITE_GRACE`]. A write that
//! misses its limit means the plugin stopped reading: it is killed with its process group and
//! the call fails with [`PluginError::StoppedReading`], naming the plugin, the method and the
//! limit. An abort never cuts a line short (the next line would be glued to the torn one):
//! the line is finished within the grace, and a write whose future is dropped mid-line kills
//! the process.
//!
//! Plugin→host callbacks act for a session, so they are served with the runtime services of
//! the host request their `callId` names, and of no other: a callback that names no call in
//! progress is refused (`host/log` needs no session and is always served). The time the host
//! spends serving a call's `host/llm.complete` is the host's, not the plugin's: the call's
//! deadline for its answer stops while one is served and moves on by that time (a compaction
//! that summarizes through the host for longer than the timeout is not killed for it).
//!
//! Cost matters here: every lifecycle call crosses this code twice with the whole history in
//! it. Requests are written from bytes the caller serialized straight from its typed params
//! ([`Connection::call_encoded`]), never through a `serde_json::Value` tree. Replies are read
//! by a dedicated thread blocked in `read(2)` on the plugin's stdout (woken by the kernel
//! directly, no reactor round trip) and split into envelope fields without parsing the
//! result: the caller gets the result's raw JSON ([`Reply`]) and decodes it into the type it
//! wants, once. The common reply shape our runners write,
//! `{"jsonrpc":"2.0","id":N,"result":…}`, is split by position: the result's end is found by
//! matching brackets outside strings, and only the envelope's `}` may follow it. The result is
//! then validated by whoever decodes it (any decode parses it in full), so a malformed result
//! is still reported as an invalid result of that call. Everything else, members beside
//! `result` included (`"error":null`, extensions), goes through the envelope parser, where a
//! non-null `error` makes the reply an error whatever `result` says. Plugin→host requests are
//! served on the async runtime.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use clawctx_engine::{AbortSignal, CallContext, LlmCompleteRequest, RuntimeServices};
use clawctx_protocol::transcript::TranscriptDeltaRequest;
use clawctx_protocol::{TranscriptRewriteRequest, TranscriptRewriteResult};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;
use tokio::process::{ChildStdin, ChildStdout};
use tokio::runtime::Handle;
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::error::PluginError;
use crate::message_refs::{Limits as MessageRefLimits, MessageRefs};
use crate::process::{BoundedLineReader, LineError, PluginProcess, ProcessInfo, SpawnSpec};

/// The protocol version this host speaks.
pub const PROTOCOL_VERSION: u32 = 1;
/// Default cap on one message (one line): 16 MiB.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;

/// JSON-RPC "method not found".
pub const METHOD_NOT_FOUND: i64 = -32601;
/// JSON-RPC "invalid params".
pub const INVALID_PARAMS: i64 = -32602;
/// Application error (the engine threw).
pub const ENGINE_ERROR: i64 = -32000;
/// The runner does not hold a message a request referenced (see [`crate::message_refs`]).
pub const UNKNOWN_MESSAGE_REF: i64 = -32010;

/// How long the host waits to write what it sends outside a call's own request: the notice
/// that a call was given up (`$/cancelRequest`, after an abort; never past the call's
/// deadline) and the answers to plugin→host requests. A plugin that does not take them in
/// that time keeps its input pipe full: it has stopped reading and is killed.
pub const WRITE_GRACE: Duration = Duration::from_secs(2);

/// The calls every new process gets before it does any work (the handshake and instance
/// creation): answering them does not show that the process works (see
/// [`Connection::served_calls`]).
pub const SETUP_METHODS: [&str; 2] = ["initialize", "engine/create"];

/// An engine a plugin registered, as the handshake reports it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EngineDecl {
    /// The registered engine id (the slot value).
    pub id: String,
    /// `info`, when known without running the factory (object-form registrations).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub info: Option<Value>,
    /// Method names, when known without running the factory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub methods: Option<Vec<String>>,
}

/// A tool a plugin registered.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolDecl {
    /// Tool name.
    pub name: String,
    /// Description for the model.
    #[serde(default)]
    pub description: String,
    /// JSON Schema of the arguments.
    #[serde(default)]
    pub parameters: Value,
}

/// A hook handler a plugin registered (`api.on(name, handler, {priority})`), as the handshake
/// reports it; [`crate::hooks`] runs it with `hook/run`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HookDecl {
    /// The handler's id in the runner (`hook/run`'s `handlers`).
    pub id: u64,
    /// The hook name (`before_tool_call`, ...).
    pub name: String,
    /// Higher runs first; ties keep registration order.
    #[serde(default)]
    pub priority: f64,
}

/// The `initialize` result.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InitializeResult {
    /// The runner's protocol version.
    #[serde(default)]
    pub protocol_version: Option<u32>,
    /// Registered engines.
    #[serde(default)]
    pub engines: Vec<EngineDecl>,
    /// Registered tools.
    #[serde(default)]
    pub tools: Vec<ToolDecl>,
    /// Registered hook handlers, in registration order.
    #[serde(default)]
    pub hooks: Vec<HookDecl>,
    /// Runner name/version, free-form.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runner: Option<Value>,
    /// Optional protocol features the runner offers (`{"messageRefs": true}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capabilities: Option<Value>,
}

impl InitializeResult {
    /// Whether the runner takes message references ([`crate::message_refs`]).
    pub fn offers_message_refs(&self) -> bool {
        self.capabilities
            .as_ref()
            .and_then(|c| c.get("messageRefs"))
            .and_then(Value::as_bool)
            .unwrap_or(false)
    }
}

/// A call's result as the plugin wrote it: JSON text, `None` for `null` or an absent
/// `result`. The text is only known to be JSON once decoded: every accessor that interprets it
/// parses it in full and reports what is wrong.
#[derive(Debug, Default)]
pub struct Reply(Option<(String, std::ops::Range<usize>)>);

impl Reply {
    /// A reply from raw result JSON (`None` for `null`).
    pub fn from_raw(raw: Option<Box<RawValue>>) -> Self {
        match raw {
            Some(r) if r.get() != "null" => {
                let text = r.get().to_owned();
                let len = text.len();
                Reply(Some((text, 0..len)))
            }
            _ => Reply(None),
        }
    }

    /// `line[range]` is the result (a slice of the received line, not copied).
    pub(crate) fn in_line(line: String, range: std::ops::Range<usize>) -> Self {
        if line.get(range.clone()).is_none_or(|t| t.trim() == "null") {
            return Reply(None);
        }
        Reply(Some((line, range)))
    }

    /// The result JSON text, `None` when it is `null`.
    pub fn raw(&self) -> Option<&str> {
        self.0
            .as_ref()
            .and_then(|(text, range)| text.get(range.clone()))
    }

    /// Whether the result is `null` (or absent).
    pub fn is_null(&self) -> bool {
        self.raw().is_none()
    }

    /// The result as a JSON tree.
    pub fn into_value(self) -> Result<Value, serde_json::Error> {
        match self.raw() {
            None => Ok(Value::Null),
            Some(raw) => serde_json::from_str(raw),
        }
    }

    /// The result decoded into `T` (`null` decodes as `T` decodes `null`).
    pub fn decode<T: serde::de::DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_str(self.raw().unwrap_or("null"))
    }
}

struct Pending {
    tx: oneshot::Sender<Result<Reply, PluginError>>,
    services: Option<Arc<dyn RuntimeServices>>,
    /// The time the host spends serving this call's `host/llm.complete` callbacks, which
    /// does not count against the call's deadline.
    clock: Arc<CallClock>,
}

/// How long the host has been busy serving callbacks of one call: its deadline stops while
/// the host summarizes for it (a compaction that summarizes through the host for longer than
/// the plugin's timeout is the host's time, not the plugin's).
#[derive(Default)]
struct CallClock {
    /// Callbacks being served, the time spent on finished stretches, and when the current
    /// stretch began.
    state: std::sync::Mutex<(usize, Duration, Option<Instant>)>,
    /// Told whenever a callback finishes.
    finished: tokio::sync::Notify,
}

impl CallClock {
    /// Marks a callback served until the returned guard drops.
    fn serving(self: &Arc<Self>) -> ServingCallback {
        if let Ok(mut st) = self.state.lock() {
            if st.0 == 0 {
                st.2 = Some(Instant::now());
            }
            st.0 += 1;
        }
        ServingCallback(self.clone())
    }

    /// Callbacks being served now, and the host's time so far.
    fn snapshot(&self) -> (usize, Duration) {
        match self.state.lock() {
            Ok(st) => (st.0, st.1 + st.2.map_or(Duration::ZERO, |t| t.elapsed())),
            Err(_) => (0, Duration::ZERO),
        }
    }
}

/// A callback being served (see [`CallClock::serving`]).
struct ServingCallback(Arc<CallClock>);

impl Drop for ServingCallback {
    fn drop(&mut self) {
        if let Ok(mut st) = self.0.state.lock() {
            st.0 = st.0.saturating_sub(1);
            if st.0 == 0 {
                if let Some(since) = st.2.take() {
                    st.1 += since.elapsed();
                }
            }
        }
        self.0.finished.notify_waiters();
    }
}

/// `rx`'s answer by `deadline` plus the time the host spent serving the call's callbacks
/// (none while one is being served); `None` when that passes first.
async fn answer_by<T>(
    rx: oneshot::Receiver<T>,
    deadline: Instant,
    clock: &CallClock,
) -> Option<Result<T, oneshot::error::RecvError>> {
    tokio::pin!(rx);
    loop {
        let finished = clock.finished.notified();
        tokio::pin!(finished);
        finished.as_mut().enable();
        let (serving, host_time) = clock.snapshot();
        let until = deadline + host_time;
        if serving == 0 && until <= Instant::now() {
            return None;
        }
        tokio::select! {
            answer = &mut rx => return Some(answer),
            () = tokio::time::sleep_until(until), if serving == 0 => {}
            () = &mut finished, if serving > 0 => {}
        }
    }
}

/// Services used for plugin→host calls that cannot be tied to an in-flight call.
pub type SharedServices = Arc<RwLock<Option<Arc<dyn RuntimeServices>>>>;

struct Shared {
    plugin_id: String,
    stdin: tokio::sync::Mutex<ChildStdin>,
    pending: Mutex<HashMap<u64, Pending>>,
    /// Why and when the connection died (the first reason wins).
    dead: Mutex<Option<(String, std::time::Instant)>>,
    process: ProcessInfo,
    default_services: SharedServices,
}

/// What the host writes to a plugin, for the message when it cannot.
#[derive(Clone, Copy)]
enum Line {
    /// A call's request.
    Request,
    /// `$/cancelRequest` for a call the caller gave up.
    Notice,
    /// An answer to a plugin→host request.
    Answer,
    /// A notification.
    Notification,
}

/// A write that did not finish.
enum WriteError {
    /// The pipe stayed busy or full until the limit (the plugin is not reading).
    Stalled,
    /// The pipe broke (the process is going away; the reader says why).
    Io(std::io::Error),
}

impl Shared {
    fn dead_reason(&self) -> Option<String> {
        self.dead
            .lock()
            .ok()
            .and_then(|d| d.as_ref().map(|(reason, _)| reason.clone()))
    }

    fn died_at(&self) -> Option<std::time::Instant> {
        self.dead
            .lock()
            .ok()
            .and_then(|d| d.as_ref().map(|(_, at)| *at))
    }

    /// Marks the connection dead (first reason wins) and fails every pending call.
    fn fail(&self, reason: String) {
        if let Ok(mut d) = self.dead.lock() {
            if d.is_none() {
                *d = Some((reason, std::time::Instant::now()));
            }
        }
        let reason = self.dead_reason().unwrap_or_default();
        let drained: Vec<Pending> = match self.pending.lock() {
            Ok(mut p) => p.drain().map(|(_, v)| v).collect(),
            Err(_) => Vec::new(),
        };
        for p in drained {
            let _ = p.tx.send(Err(PluginError::Dead(reason.clone())));
        }
    }

    /// Fails every pending call with `reason` and kills the process group.
    fn kill(&self, reason: String) {
        self.fail(reason);
        self.process.kill();
    }

    /// The plugin did not take `line` (of `method`) within `waited`: killed.
    fn stopped_reading(&self, method: &str, line: Line, waited: Duration) -> PluginError {
        let what = match line {
            Line::Request => format!("the `{method}` request"),
            Line::Notice => format!("the notice that `{method}` is no longer wanted"),
            Line::Answer => format!("its answer to `{method}`"),
            Line::Notification => format!("the `{method}` notification"),
        };
        let err = PluginError::StoppedReading {
            plugin_id: self.plugin_id.clone(),
            method: method.to_owned(),
            what,
            limit_ms: millis(waited),
        };
        self.kill(err.to_string());
        err
    }

    /// `method` got no answer within `timeout`: killed (its state is unknown).
    fn timed_out(&self, method: &str, timeout: Duration) -> PluginError {
        let err = PluginError::Timeout {
            plugin_id: self.plugin_id.clone(),
            method: method.to_owned(),
            timeout_ms: millis(timeout),
        };
        self.kill(err.to_string());
        err
    }

    /// Writes one complete, `\n`-terminated line, waiting for the pipe (and for other writers)
    /// no later than `limit`. `method` names the line in the message of a line left torn.
    async fn write_line_until(
        &self,
        method: &str,
        line: &[u8],
        limit: Instant,
    ) -> Result<(), WriteError> {
        let Ok(mut stdin) = tokio::time::timeout_at(limit, self.stdin.lock()).await else {
            return Err(WriteError::Stalled);
        };
        let mut in_flight = LineInFlight::new(self, method);
        let written = tokio::time::timeout_at(limit, write_line(&mut stdin, line)).await;
        in_flight.done();
        match written {
            Err(_) => Err(WriteError::Stalled),
            Ok(Err(e)) => Err(WriteError::Io(e)),
            Ok(Ok(())) => Ok(()),
        }
    }

    /// Answers a plugin→host request (`method` is what it asked for). A plugin that does not
    /// take the answer within [`WRITE_GRACE`] has stopped reading: it is killed.
    async fn reply(&self, method: &str, msg: &Value) {
        let Ok(mut line) = serde_json::to_vec(msg) else {
            return;
        };
        line.push(b'\n');
        let limit = Instant::now() + WRITE_GRACE;
        if let Err(WriteError::Stalled) = self.write_line_until(method, &line, limit).await {
            let err = self.stopped_reading(method, Line::Answer, WRITE_GRACE);
            tracing::warn!(plugin = %self.plugin_id, "{err}");
        }
    }

    /// The services a plugin→host `method` is served with: those of the host request its
    /// `callId` names, and only those. A callback never borrows the services of another call
    /// in flight (another session's): without a `callId` it gets the host's default services
    /// (set for callbacks made outside any call), or an error; with an id that is not a
    /// request in progress, an error. `Ok(None)`: the call has no services (and the host no
    /// defaults).
    /// The clock of the call a callback's `callId` names, when it names one in progress.
    fn clock_for(&self, params: &Value) -> Option<Arc<CallClock>> {
        let id = params.get("callId")?.as_u64()?;
        let pending = self.pending.lock().ok()?;
        pending.get(&id).map(|call| call.clock.clone())
    }

    fn services_for(
        &self,
        method: &str,
        params: &Value,
    ) -> Result<Option<Arc<dyn RuntimeServices>>, String> {
        let defaults = || self.default_services.read().ok().and_then(|s| s.clone());
        let Some(call_id) = params.get("callId").filter(|v| !v.is_null()) else {
            return defaults().map(Some).ok_or_else(|| {
                format!(
                    "{method} needs the callId of the host request it serves (callId missing): a callback is only served with that call's runtime services"
                )
            });
        };
        let pending = self
            .pending
            .lock()
            .map_err(|_| format!("{method}: the host's call table is unavailable"))?;
        match call_id.as_u64().and_then(|id| pending.get(&id)) {
            Some(call) => Ok(call.services.clone().or_else(defaults)),
            None => Err(format!(
                "{method} names callId {call_id}, which is not a host request in progress (callId unknown)"
            )),
        }
    }
}

/// Writes `line` and flushes.
async fn write_line(stdin: &mut ChildStdin, line: &[u8]) -> std::io::Result<()> {
    stdin.write_all(line).await?;
    stdin.flush().await
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Kills the process when dropped while a line is being written: the write's future was
/// dropped (its caller went away) with the line possibly half-written, and whatever is
/// written next would be glued to the torn line.
struct LineInFlight<'a> {
    shared: &'a Shared,
    method: &'a str,
    armed: bool,
}

impl<'a> LineInFlight<'a> {
    fn new(shared: &'a Shared, method: &'a str) -> Self {
        Self {
            shared,
            method,
            armed: true,
        }
    }

    fn arm(&mut self) {
        self.armed = true;
    }

    /// The write finished (or failed, or timed out and the caller handles it).
    fn done(&mut self) {
        self.armed = false;
    }
}

impl Drop for LineInFlight<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.shared.kill(format!(
                "plugin \"{}\": `{}` was left half-written when its caller went away; the process was killed",
                self.shared.plugin_id, self.method
            ));
        }
    }
}

/// Removes a call's pending entry however the call ends (answered, failed, or dropped by its
/// caller), so a late callback naming it is not served.
struct PendingEntry<'a> {
    shared: &'a Shared,
    id: u64,
}

impl Drop for PendingEntry<'_> {
    fn drop(&mut self) {
        if let Ok(mut p) = self.shared.pending.lock() {
            p.remove(&self.id);
        }
    }
}

/// A live connection to one plugin process. Dropping it kills the process.
pub struct Connection {
    shared: Arc<Shared>,
    process: PluginProcess,
    next_id: AtomicU64,
    /// Messages the process holds, when the runner supports references.
    refs: Mutex<Option<MessageRefs>>,
    /// Calls answered with a result, the setup calls ([`SETUP_METHODS`]) not counted.
    served: AtomicU64,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("plugin", &self.shared.plugin_id)
            .field("pid", &self.process.pid())
            .finish()
    }
}

impl Connection {
    /// Spawns the process and starts the reader (no handshake yet).
    pub fn spawn(
        spec: &SpawnSpec,
        max_message_bytes: usize,
        default_services: SharedServices,
    ) -> Result<Arc<Self>, PluginError> {
        let (process, stdin, stdout) = PluginProcess::spawn(spec)?;
        let stdout = blocking_stdout(stdout).map_err(|e| PluginError::Spawn {
            plugin_id: spec.plugin_id.clone(),
            message: format!("cannot take over the plugin's stdout: {e}"),
        })?;
        let shared = Arc::new(Shared {
            plugin_id: spec.plugin_id.clone(),
            stdin: tokio::sync::Mutex::new(stdin),
            pending: Mutex::new(HashMap::new()),
            dead: Mutex::new(None),
            process: process.info().clone(),
            default_services,
        });
        let reader_shared = shared.clone();
        let rt = Handle::current();
        std::thread::Builder::new()
            .name(format!("plugin-{}-stdout", spec.plugin_id))
            .spawn(move || read_loop(reader_shared, stdout, max_message_bytes, rt))
            .map_err(|e| PluginError::Spawn {
                plugin_id: spec.plugin_id.clone(),
                message: format!("cannot start the reader thread: {e}"),
            })?;
        Ok(Arc::new(Connection {
            shared,
            process,
            next_id: AtomicU64::new(1),
            refs: Mutex::new(None),
            served: AtomicU64::new(0),
        }))
    }

    /// The child's pid.
    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// Why the connection is dead, if it is.
    pub fn dead_reason(&self) -> Option<String> {
        self.shared.dead_reason()
    }

    /// Whether calls can still be made.
    pub fn is_alive(&self) -> bool {
        self.dead_reason().is_none()
    }

    /// When the connection died (the first failure), if it did.
    pub fn died_at(&self) -> Option<std::time::Instant> {
        self.shared.died_at()
    }

    /// How many calls were answered with a result, the setup calls ([`SETUP_METHODS`]) not
    /// counted: a process that served one had worked (see [`crate::host`]'s backoff).
    pub fn served_calls(&self) -> u64 {
        self.served.load(Ordering::Relaxed)
    }

    /// Kills the process and fails pending calls with `reason`.
    pub fn kill(&self, reason: String) {
        self.shared.kill(reason);
    }

    /// Sends a request and waits for its response, at most `timeout` in all (waiting for the
    /// pipe and writing included). The call context's services serve the plugin's callbacks
    /// that name this call; its abort signal gives the call up (`$/cancelRequest` is sent to
    /// the plugin).
    pub async fn call(
        &self,
        method: &str,
        params: Value,
        cx: Option<&CallContext>,
        timeout: Duration,
    ) -> Result<Value, PluginError> {
        let params = serde_json::to_vec(&params).map_err(|e| PluginError::Encode {
            method: method.to_owned(),
            message: e.to_string(),
        })?;
        let reply = self.call_encoded(method, &params, cx, timeout).await?;
        reply.into_value().map_err(|e| {
            PluginError::Contract(format!(
                "contract violation: {method} returned a result that cannot be read: {e}"
            ))
        })
    }

    /// [`Self::call`] with `params` already encoded as JSON (the caller serialized its typed
    /// params straight to bytes), answering the result's raw JSON for the caller to decode.
    /// `params` must be one valid JSON value: it is written into the request line as is.
    pub async fn call_encoded(
        &self,
        method: &str,
        params: &[u8],
        cx: Option<&CallContext>,
        timeout: Duration,
    ) -> Result<Reply, PluginError> {
        self.call_built(method, |_| Ok(params), cx, timeout)
            .await
            .map(|(_, reply)| reply)
    }

    /// [`Self::call_encoded`] with the params built while this request holds the pipe: `build`
    /// gets the connection's message-reference table (when the runner supports references,
    /// see [`crate::message_refs`]) and answers the params JSON, which is also handed back
    /// with the reply. Building under the write lock is what makes "every referenced message
    /// was defined by an earlier line" hold when calls run concurrently.
    pub async fn call_built<T: AsRef<[u8]>>(
        &self,
        method: &str,
        build: impl FnOnce(Option<&mut MessageRefs>) -> Result<T, serde_json::Error>,
        cx: Option<&CallContext>,
        timeout: Duration,
    ) -> Result<(T, Reply), PluginError> {
        if let Some(reason) = self.shared.dead_reason() {
            return Err(PluginError::Dead(reason));
        }
        let start = Instant::now();
        let deadline = start + timeout;
        let abort = cx.and_then(|c| c.abort.as_ref());
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        let clock = Arc::new(CallClock::default());
        if let Ok(mut p) = self.shared.pending.lock() {
            p.insert(
                id,
                Pending {
                    tx,
                    services: cx.and_then(|c| c.services.clone()),
                    clock: clock.clone(),
                },
            );
        }
        let _entry = PendingEntry {
            shared: &self.shared,
            id,
        };
        if let Some(reason) = self.shared.dead_reason() {
            return Err(PluginError::Dead(reason));
        }

        // The pipe. Waiting for it counts against the deadline (another writer may be stuck
        // on a plugin that stopped reading); an abort meanwhile gives up at once, as nothing
        // was written.
        let mut stdin = tokio::select! {
            biased;
            _ = aborted(abort) => return Err(aborted_error(abort)),
            locked = tokio::time::timeout_at(deadline, self.shared.stdin.lock()) => match locked {
                Ok(stdin) => stdin,
                Err(_) => {
                    let err = self.shared.stopped_reading(method, Line::Request, timeout);
                    return Err(err);
                }
            },
        };
        let built = match self.refs.lock() {
            Ok(mut refs) => build(refs.as_mut()),
            Err(_) => build(None),
        };
        let params = match built {
            Ok(p) => p,
            Err(e) => {
                return Err(PluginError::Encode {
                    method: method.to_owned(),
                    message: e.to_string(),
                });
            }
        };
        let line = request_line(id, method, params.as_ref());

        // The request line, by the deadline. An abort does not cut it short (the next line
        // would be glued to the torn one): the line is finished, and the notice that the call
        // is given up written after it, within WRITE_GRACE of the abort.
        let mut limit = deadline;
        let mut aborted_at = None;
        let mut in_flight = LineInFlight::new(&self.shared, method);
        let written = {
            let write = write_line(&mut stdin, &line);
            tokio::pin!(write);
            loop {
                tokio::select! {
                    r = tokio::time::timeout_at(limit, &mut write) => break r,
                    _ = aborted(abort), if aborted_at.is_none() => {
                        let now = Instant::now();
                        aborted_at = Some(now);
                        limit = limit.min(now + WRITE_GRACE);
                    }
                }
            }
        };
        in_flight.done();
        let waited = |limit: Instant| limit.saturating_duration_since(aborted_at.unwrap_or(start));
        match written {
            Err(_) => {
                return Err(self
                    .shared
                    .stopped_reading(method, Line::Request, waited(limit)))
            }
            // The process is going away: the reader reports why.
            Ok(Err(e)) => {
                tracing::debug!(plugin = %self.shared.plugin_id, "write failed: {e}");
                if aborted_at.is_some() {
                    return Err(aborted_error(abort));
                }
            }
            Ok(Ok(())) => {}
        }
        if aborted_at.is_some() {
            in_flight.arm();
            let notice = cancel_line(id);
            let sent = tokio::time::timeout_at(limit, write_line(&mut stdin, &notice)).await;
            in_flight.done();
            return match sent {
                Err(_) => Err(self
                    .shared
                    .stopped_reading(method, Line::Notice, waited(limit))),
                Ok(_) => Err(aborted_error(abort)),
            };
        }
        drop(stdin);

        // The answer, by the deadline. On an abort the plugin is told (best effort, bounded).
        let outcome = tokio::select! {
            answer = answer_by(rx, deadline, &clock) => match answer {
                Some(Ok(outcome)) => outcome,
                Some(Err(_)) => Err(PluginError::Dead(
                    self.shared
                        .dead_reason()
                        .unwrap_or_else(|| "plugin connection closed".into()),
                )),
                None => Err(self.shared.timed_out(method, timeout)),
            },
            _ = aborted(abort) => {
                self.remove_pending(id);
                let now = Instant::now();
                let limit = deadline.min(now + WRITE_GRACE);
                let notice = cancel_line(id);
                match self.shared.write_line_until(method, &notice, limit).await {
                    Err(WriteError::Stalled) => {
                        Err(self.shared.stopped_reading(method, Line::Notice, limit - now))
                    }
                    Ok(()) | Err(WriteError::Io(_)) => Err(aborted_error(abort)),
                }
            }
        };
        if outcome.is_ok() && !SETUP_METHODS.contains(&method) {
            self.served.fetch_add(1, Ordering::Relaxed);
        }
        outcome.map(|reply| (params, reply))
    }

    /// Switches message references on for this connection (the runner offered them in its
    /// `initialize` answer).
    pub fn enable_message_refs(&self, limits: MessageRefLimits) {
        if let Ok(mut refs) = self.refs.lock() {
            *refs = Some(MessageRefs::new(limits));
        }
    }

    /// Whether requests on this connection may reference messages.
    pub fn message_refs_enabled(&self) -> bool {
        self.refs.lock().is_ok_and(|r| r.is_some())
    }

    /// Clears the reference table (the runner reported an id it does not hold); the next
    /// request tells the runner to clear its own.
    pub fn reset_message_refs(&self) {
        if let Ok(mut refs) = self.refs.lock() {
            if let Some(r) = refs.as_mut() {
                r.reset();
            }
        }
    }

    /// Sends a notification (no response), within [`WRITE_GRACE`]; a plugin that does not
    /// take it in time has stopped reading and is killed.
    pub async fn notify(&self, method: &str, params: Value) -> Result<(), PluginError> {
        let mut line =
            serde_json::to_vec(&json!({ "jsonrpc": "2.0", "method": method, "params": params }))
                .map_err(|e| PluginError::Encode {
                    method: method.to_owned(),
                    message: e.to_string(),
                })?;
        line.push(b'\n');
        let limit = Instant::now() + WRITE_GRACE;
        match self.shared.write_line_until(method, &line, limit).await {
            Ok(()) => Ok(()),
            Err(WriteError::Stalled) => {
                Err(self
                    .shared
                    .stopped_reading(method, Line::Notification, WRITE_GRACE))
            }
            Err(WriteError::Io(e)) => Err(PluginError::Dead(format!(
                "cannot write `{method}` to plugin \"{}\": {e}",
                self.shared.plugin_id
            ))),
        }
    }

    fn remove_pending(&self, id: u64) {
        if let Ok(mut p) = self.shared.pending.lock() {
            p.remove(&id);
        }
    }
}

/// Resolves when `abort` is aborted (never without one).
async fn aborted(abort: Option<&AbortSignal>) {
    match abort {
        Some(a) => a.aborted().await,
        None => futures::future::pending::<()>().await,
    }
}

fn aborted_error(abort: Option<&AbortSignal>) -> PluginError {
    PluginError::Aborted(abort.map(AbortSignal::reason).unwrap_or_default())
}

/// `$/cancelRequest` for request `id`.
fn cancel_line(id: u64) -> Vec<u8> {
    format!("{{\"jsonrpc\":\"2.0\",\"method\":\"$/cancelRequest\",\"params\":{{\"id\":{id}}}}}\n")
        .into_bytes()
}

/// `{"jsonrpc":"2.0","id":<id>,"method":<method>,"params":<params>}\n`, with `params` copied
/// in as given.
fn request_line(id: u64, method: &str, params: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut line = Vec::with_capacity(params.len() + method.len() + 64);
    let _ = write!(line, r#"{{"jsonrpc":"2.0","id":{id},"method":"#);
    // A `&str` always encodes.
    let _ = serde_json::to_writer(&mut line, method);
    line.extend_from_slice(br#","params":"#);
    line.extend_from_slice(params);
    line.extend_from_slice(b"}\n");
    line
}

/// One message from the plugin, split into the fields the host reads. `params` and `result`
/// stay raw JSON: the reader never builds a tree of a (possibly large) result it only hands on.
#[derive(Default)]
pub(crate) struct Incoming {
    pub(crate) id: Option<Value>,
    pub(crate) method: Option<Value>,
    pub(crate) params: Option<Box<RawValue>>,
    pub(crate) result: Option<Box<RawValue>>,
    pub(crate) error: Option<Value>,
}

/// The borrowed face of [`Incoming`], parsed straight from the line.
#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(default)]
    id: Option<Value>,
    #[serde(default)]
    method: Option<Value>,
    #[serde(default, borrow)]
    params: Option<&'a RawValue>,
    #[serde(default, borrow)]
    result: Option<&'a RawValue>,
    #[serde(default)]
    error: Option<Value>,
}

/// Parses one line; `None` when it is not a JSON object. A JSON object the envelope type
/// rejects (duplicate keys) is read again as a tree, so the framing rules stay "any JSON
/// object" as documented.
pub(crate) fn parse_incoming(line: &[u8]) -> Option<Incoming> {
    let first = line.iter().find(|b| !b.is_ascii_whitespace())?;
    if *first != b'{' {
        return None;
    }
    if let Ok(env) = serde_json::from_slice::<Envelope>(line) {
        return Some(Incoming {
            id: env.id.filter(|v| !v.is_null()),
            method: env.method,
            params: env.params.map(RawValue::to_owned),
            result: env.result.map(RawValue::to_owned),
            error: env.error.filter(|v| !v.is_null()),
        });
    }
    let Ok(Value::Object(mut map)) = serde_json::from_slice::<Value>(line) else {
        return None;
    };
    let raw = |v: Option<Value>| {
        v.filter(|v| !v.is_null())
            .and_then(|v| serde_json::value::to_raw_value(&v).ok())
    };
    Some(Incoming {
        id: map.remove("id").filter(|v| !v.is_null()),
        method: map.remove("method"),
        params: raw(map.remove("params")),
        result: raw(map.remove("result")),
        error: map.remove("error").filter(|v| !v.is_null()),
    })
}

fn snippet(line: &[u8]) -> String {
    let text = String::from_utf8_lossy(&line[..line.len().min(120)]).into_owned();
    if line.len() > 120 {
        format!("{text}…")
    } else {
        text
    }
}

/// The child's stdout as a blocking file for the reader thread (tokio hands it over in
/// non-blocking mode).
fn blocking_stdout(stdout: ChildStdout) -> std::io::Result<std::fs::File> {
    use nix::fcntl::{fcntl, FcntlArg, OFlag};
    use std::os::fd::AsRawFd;
    let fd = stdout.into_owned_fd()?;
    let raw = fd.as_raw_fd();
    let flags = fcntl(raw, FcntlArg::F_GETFL).map_err(std::io::Error::from)?;
    let flags = OFlag::from_bits_truncate(flags) & !OFlag::O_NONBLOCK;
    fcntl(raw, FcntlArg::F_SETFL(flags)).map_err(std::io::Error::from)?;
    Ok(std::fs::File::from(fd))
}

/// Splits the reply shape our runners write, `{"jsonrpc":"2.0","id":N,"result":R}`, by
/// position: `(N, range of R)`. `None` for any other shape, members after `result` included
/// (`"error":null`, extensions): those go through the envelope parser. `R`'s end is found by
/// matching brackets outside strings ([`value_end`]); `R` is not validated here (see the
/// module header), so a malformed `R` is reported by its decoder as an invalid result.
pub(crate) fn plain_result(line: &str) -> Option<(u64, std::ops::Range<usize>)> {
    const HEAD: &str = r#"{"jsonrpc":"2.0","id":"#;
    const RESULT: &str = r#","result":"#;
    let rest = line.strip_prefix(HEAD)?;
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    let id: u64 = rest.get(..digits)?.parse().ok()?;
    let body = rest.get(digits..)?.strip_prefix(RESULT)?;
    let start = line.len() - body.len();
    let end = value_end(line.as_bytes(), start)?;
    let after = line
        .get(end..)?
        .trim_matches(|c| matches!(c, ' ' | '\t' | '\r' | '\n'));
    (after == "}" && end > start).then_some((id, start..end))
}

/// Where the JSON value starting at `bytes[start]` ends: the index just past it, found by
/// matching brackets and skipping strings (escapes included). Nothing is validated. A value
/// that does not start right at `start` (whitespace) or is not closed gives `None`.
fn value_end(bytes: &[u8], start: usize) -> Option<usize> {
    let mut depth = 0usize;
    let mut i = start;
    while let Some(&b) = bytes.get(i) {
        match b {
            b'"' => {
                // To the closing quote: most of a result is string content.
                let mut j = i + 1;
                loop {
                    let k = bytes
                        .get(j..)?
                        .iter()
                        .position(|c| *c == b'"' || *c == b'\\')?;
                    j += k;
                    if bytes.get(j) == Some(&b'\\') {
                        j += 2;
                    } else {
                        break;
                    }
                }
                if depth == 0 {
                    return Some(j + 1);
                }
                i = j;
            }
            b'{' | b'[' => depth += 1,
            b'}' | b']' if depth > 0 => {
                depth -= 1;
                if depth == 0 {
                    return Some(i + 1);
                }
            }
            // The end of a bare value (number, literal).
            b'}' | b']' | b',' | b' ' | b'\t' | b'\r' | b'\n' if depth == 0 => {
                return (i > start).then_some(i);
            }
            _ => {}
        }
        i += 1;
    }
    None
}

fn read_loop(shared: Arc<Shared>, stdout: std::fs::File, max: usize, rt: Handle) {
    let mut reader =
        BoundedLineReader::new(std::io::BufReader::with_capacity(64 * 1024, stdout), max);
    loop {
        match reader.next_line() {
            Ok(Some(line)) => {
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                let line = match String::from_utf8(line) {
                    Ok(text) => match plain_result(&text) {
                        Some((id, range)) => {
                            complete(&shared, id, Ok(Reply::in_line(text, range)));
                            continue;
                        }
                        None => text.into_bytes(),
                    },
                    Err(e) => e.into_bytes(),
                };
                match parse_incoming(&line) {
                    Some(msg) => dispatch(&shared, msg, &rt),
                    None => {
                        shared.fail(format!(
                            "protocol violation: plugin wrote a line to stdout that is not a JSON-RPC message: {}",
                            snippet(&line)
                        ));
                        shared.process.kill();
                        return;
                    }
                }
            }
            Ok(None) => {
                // The exit status (and the last of stderr) comes from the runtime's waiter.
                rt.spawn(async move {
                    let status = shared.process.wait_exit(Duration::from_secs(2)).await;
                    shared.fail(shared.process.exit_message(status));
                });
                return;
            }
            Err(LineError::TooLong(n)) => {
                shared.fail(format!(
                    "protocol violation: plugin message exceeds the {n}-byte limit"
                ));
                shared.process.kill();
                return;
            }
            Err(LineError::Io(e)) => {
                shared.fail(format!("cannot read from plugin: {e}"));
                shared.process.kill();
                return;
            }
        }
    }
}

/// Hands a response to the call waiting for it (a late answer to a timed-out or aborted call
/// has nobody waiting and is dropped).
fn complete(shared: &Shared, id: u64, outcome: Result<Reply, PluginError>) {
    let pending = shared.pending.lock().ok().and_then(|mut p| p.remove(&id));
    if let Some(pending) = pending {
        let _ = pending.tx.send(outcome);
    }
}

/// Writes a reply to a plugin→host request from the runtime.
fn reply_later(rt: &Handle, shared: &Arc<Shared>, method: &str, msg: Value) {
    let shared = shared.clone();
    let method = method.to_owned();
    rt.spawn(async move {
        shared.reply(&method, &msg).await;
    });
}

fn dispatch(shared: &Arc<Shared>, msg: Incoming, rt: &Handle) {
    let Incoming {
        id,
        method,
        params,
        result,
        error,
    } = msg;
    if let Some(method) = method.as_ref().and_then(Value::as_str) {
        let params: Value = params
            .and_then(|p| serde_json::from_str(p.get()).ok())
            .unwrap_or(Value::Null);
        let rpc_error = |id: &Value, code: i64, message: &str| json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}});
        match method {
            "host/log" => {
                // Needs no session: served with or without a callId.
                let level = params
                    .get("level")
                    .and_then(Value::as_str)
                    .unwrap_or("info");
                let message = params.get("message").and_then(Value::as_str).unwrap_or("");
                let plugin = shared.plugin_id.as_str();
                match level {
                    "error" => tracing::error!(plugin, "{message}"),
                    "warn" => tracing::warn!(plugin, "{message}"),
                    "debug" => tracing::debug!(plugin, "{message}"),
                    _ => tracing::info!(plugin, "{message}"),
                }
                if let Some(id) = id {
                    reply_later(
                        rt,
                        shared,
                        method,
                        json!({"jsonrpc": "2.0", "id": id, "result": null}),
                    );
                }
            }
            "host/llm.complete" => {
                let Some(id) = id else { return };
                let shared = shared.clone();
                rt.spawn(async move {
                    let method = "host/llm.complete";
                    // The host's time: the call's deadline waits until this is answered.
                    let _serving = shared.clock_for(&params).map(|c| c.serving());
                    let reply = match (
                        shared.services_for(method, &params),
                        serde_json::from_value::<LlmCompleteRequest>(
                            params.get("request").cloned().unwrap_or(Value::Null),
                        ),
                    ) {
                        (Err(message), _) => rpc_error(&id, INVALID_PARAMS, &message),
                        (_, Err(e)) => rpc_error(
                            &id,
                            INVALID_PARAMS,
                            &format!("invalid llm.complete request: {e}"),
                        ),
                        (Ok(None), _) => rpc_error(
                            &id,
                            ENGINE_ERROR,
                            "runtime LLM completion is not available on this host",
                        ),
                        (Ok(Some(services)), Ok(request)) => {
                            match services.llm_complete(request).await {
                                Ok(r) => json!({"jsonrpc": "2.0", "id": id, "result": r}),
                                Err(e) => rpc_error(&id, ENGINE_ERROR, &e.to_string()),
                            }
                        }
                    };
                    shared.reply(method, &reply).await;
                });
            }
            "host/transcript.readVisibleMessageDelta" => {
                // `openclaw/plugin-sdk/session-transcript-runtime`'s
                // `readSessionTranscriptVisibleMessageDelta`, served with the services of the
                // call it names (the runtime answers only for that call's session).
                let Some(id) = id else { return };
                let shared = shared.clone();
                rt.spawn(async move {
                    let method = "host/transcript.readVisibleMessageDelta";
                    let reply = match (
                        shared.services_for(method, &params),
                        serde_json::from_value::<TranscriptDeltaRequest>(
                            params.get("request").cloned().unwrap_or(Value::Null),
                        ),
                    ) {
                        (Err(message), _) => rpc_error(&id, INVALID_PARAMS, &message),
                        (_, Err(e)) => rpc_error(
                            &id,
                            INVALID_PARAMS,
                            &format!(
                                "invalid readSessionTranscriptVisibleMessageDelta request: {e}"
                            ),
                        ),
                        (Ok(None), _) => rpc_error(
                            &id,
                            ENGINE_ERROR,
                            "reading the session transcript is not available on this host",
                        ),
                        (Ok(Some(services)), Ok(request)) => {
                            match services.read_transcript_delta(request).await {
                                Ok(r) => json!({"jsonrpc": "2.0", "id": id, "result": r}),
                                Err(e) => rpc_error(&id, ENGINE_ERROR, &e.to_string()),
                            }
                        }
                    };
                    shared.reply(method, &reply).await;
                });
            }
            "host/rewriteTranscriptEntries" => {
                // `runtimeContext.rewriteTranscriptEntries` (contract §9). Like the in-process
                // service it never fails: problems come back as `{changed: false, reason}`.
                // The one exception is a callback that names no call in progress: it is
                // answered with an error, never with another call's transcript.
                let Some(id) = id else { return };
                let shared = shared.clone();
                rt.spawn(async move {
                    let method = "host/rewriteTranscriptEntries";
                    let unchanged = |reason: String| TranscriptRewriteResult {
                        reason: Some(reason),
                        ..Default::default()
                    };
                    let services = match shared.services_for(method, &params) {
                        Ok(services) => services,
                        Err(message) => {
                            let reply = rpc_error(&id, INVALID_PARAMS, &message);
                            shared.reply(method, &reply).await;
                            return;
                        }
                    };
                    let result = match serde_json::from_value::<TranscriptRewriteRequest>(
                        params.get("request").cloned().unwrap_or(Value::Null),
                    ) {
                        Err(e) => {
                            unchanged(format!("invalid rewriteTranscriptEntries request: {e}"))
                        }
                        Ok(request) => match services {
                            None => {
                                unchanged("transcript rewrite is not available on this host".into())
                            }
                            Some(services) => services.rewrite_transcript_entries(request).await,
                        },
                    };
                    let reply = json!({"jsonrpc": "2.0", "id": id, "result": result});
                    shared.reply(method, &reply).await;
                });
            }
            other => {
                if let Some(id) = id {
                    reply_later(
                        rt,
                        shared,
                        other,
                        json!({"jsonrpc": "2.0", "id": id, "error": {"code": METHOD_NOT_FOUND, "message": format!("host method not found: {other}")}}),
                    );
                }
            }
        }
        return;
    }
    let Some(id) = id.as_ref().and_then(Value::as_u64) else {
        return;
    };
    let outcome = match error {
        Some(err) => Err(PluginError::Remote {
            code: err
                .get("code")
                .and_then(Value::as_i64)
                .unwrap_or(ENGINE_ERROR),
            message: err
                .get("message")
                .and_then(Value::as_str)
                .map(str::to_owned)
                .unwrap_or_else(|| format!("plugin returned an error: {err}")),
            data: err.get("data").cloned(),
        }),
        None => Ok(Reply::from_raw(result)),
    };
    complete(shared, id, outcome);
}

/// Reply construction for the adapter's tests (replies as the reader thread makes them).
#[cfg(test)]
pub(crate) mod tests_support {
    pub(crate) fn plain_result(line: &str) -> Option<(u64, std::ops::Range<usize>)> {
        super::plain_result(line)
    }

    pub(crate) fn reply_in_line(line: String, range: std::ops::Range<usize>) -> super::Reply {
        super::Reply::in_line(line, range)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_lines_are_one_json_rpc_object() {
        let line = request_line(7, "engine/\"odd\"", br#"{"a":[1,2]}"#);
        assert_eq!(line.last(), Some(&b'\n'));
        let v: Value = serde_json::from_slice(&line).expect("the request line is JSON");
        assert_eq!(
            v,
            json!({"jsonrpc": "2.0", "id": 7, "method": "engine/\"odd\"", "params": {"a": [1, 2]}})
        );
    }

    #[test]
    fn the_plain_reply_shape_is_split_by_position() {
        let line = r#"{"jsonrpc":"2.0","id":42,"result":{"messages":[]}}"#;
        let (id, range) = plain_result(line).expect("the runner's shape");
        assert_eq!((id, &line[range]), (42, r#"{"messages":[]}"#));
        let line = r#"{"jsonrpc":"2.0","id":7,"result":null}  "#;
        let (id, range) = plain_result(line).expect("a null result");
        assert!(Reply::in_line(line.to_owned(), range).is_null() && id == 7);
        for other in [
            r#"{"jsonrpc":"2.0","id":"plugin-1","result":1}"#,
            r#"{"jsonrpc":"2.0","id":1,"error":{"code":1}}"#,
            r#"{"jsonrpc": "2.0", "id": 1, "result": 1}"#,
            r#"{"jsonrpc":"2.0","id":,"result":1}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":1"#,
        ] {
            assert!(
                plain_result(other).is_none(),
                "{other} was split by position"
            );
        }
        // Members after `result` are not split by position (the envelope parser reads them).
        for extra in [
            r#"{"jsonrpc":"2.0","id":1,"result":{"a":1},"error":null}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"a":1},"error":{"code":1}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":[1,"]}"],"x":1}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":"a\"}","x":1}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":7,"x":1}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"a":1}}}"#,
        ] {
            assert!(
                plain_result(extra).is_none(),
                "{extra} was split by position"
            );
        }
        // Brackets and quotes inside strings do not end the result.
        for (line, result) in [
            (
                r#"{"jsonrpc":"2.0","id":3,"result":{"t":"}\"{[\\"}}"#,
                r#"{"t":"}\"{[\\"}"#,
            ),
            (r#"{"jsonrpc":"2.0","id":3,"result":"x\\"}"#, r#""x\\""#),
            (r#"{"jsonrpc":"2.0","id":3,"result":12.5 }"#, "12.5"),
            (r#"{"jsonrpc":"2.0","id":3,"result":[[],{}]}"#, "[[],{}]"),
        ] {
            let (_, range) = plain_result(line).unwrap_or_else(|| panic!("{line} not split"));
            assert_eq!(&line[range], result);
        }
    }

    #[test]
    fn replies_with_extra_members_are_read_and_an_error_beside_a_result_wins() {
        let line =
            br#"{"jsonrpc":"2.0","id":5,"result":{"a":[1]},"error":null,"x-trace":{"b":"}"}}"#;
        let m = parse_incoming(line).expect("a response");
        assert_eq!((m.id, m.error), (Some(json!(5)), None));
        assert_eq!(m.result.as_deref().map(RawValue::get), Some(r#"{"a":[1]}"#));
        let line =
            br#"{"jsonrpc":"2.0","id":5,"result":{"a":1},"error":{"code":-32000,"message":"no"}}"#;
        let m = parse_incoming(line).expect("a response");
        assert_eq!(m.error, Some(json!({"code": -32000, "message": "no"})));
    }

    #[test]
    fn only_json_objects_are_messages() {
        for line in [
            &b"[1,2]"[..],
            b"42",
            b"\"text\"",
            b"not json",
            b"{\"id\": 1",
        ] {
            assert!(
                parse_incoming(line).is_none(),
                "{} was accepted",
                String::from_utf8_lossy(line)
            );
        }
        let m =
            parse_incoming(br#"  {"jsonrpc":"2.0","id":3,"result":{"messages":[]},"extra":true}"#)
                .expect("a response");
        assert_eq!(m.id, Some(json!(3)));
        assert_eq!(
            m.result.as_deref().map(RawValue::get),
            Some(r#"{"messages":[]}"#)
        );
        let m = parse_incoming(br#"{"id":4,"result":null,"error":null}"#).expect("a null result");
        assert!(m.result.is_none() && m.error.is_none());
    }

    #[test]
    fn an_object_with_duplicate_keys_is_still_read_last_one_wins() {
        let m = parse_incoming(br#"{"id":1,"result":1,"result":2}"#).expect("still a message");
        assert_eq!(m.result.as_deref().map(RawValue::get), Some("2"));
    }
}
