//! The supervisor: one plugin, at most one live process, restarted after a crash.
//!
//! [`PluginHost`] starts the process lazily (or eagerly from `register_plugin`), performs the
//! `initialize` handshake, and hands out the live [`Connection`] with a *generation* number.
//! When the process dies (crash, protocol violation, timeout, a pipe it stopped reading) the
//! next call starts a new one; engine instances notice the new generation and re-create
//! themselves. The quarantine will usually have downgraded the engine already, so this is for
//! the engines of the same plugin that were not involved and for later resolves.
//!
//! Restarts back off, or a plugin that crashes on every call would be restarted at once,
//! forever. Each dead process and each failed start is one *consecutive failure*; the count
//! goes back to zero only when a process answers a call with a result, the setup calls
//! (`initialize`, `engine/create`) not counted, since every new process passes those before it
//! fails again. After the n-th consecutive failure the next process starts no earlier than
//! `backoff_base × 2^(n−1)` (capped at `backoff_max`) after that failure: 100 ms, 200 ms,
//! 400 ms, … 5 s by default. `docs/plugin-protocol.md` gives the same numbers.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use clawctx_engine::{CallContext, RuntimeServices};
use serde_json::Value;

use crate::error::PluginError;
use crate::process::SpawnSpec;
use crate::rpc::{Connection, InitializeResult, SharedServices, DEFAULT_MAX_MESSAGE_BYTES};

/// Default per-call timeout.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// Default `initialize` timeout.
pub const DEFAULT_INIT_TIMEOUT: Duration = Duration::from_secs(10);

/// Supervisor settings.
#[derive(Clone, Debug)]
pub struct HostOptions {
    /// Timeout of every lifecycle call.
    pub call_timeout: Duration,
    /// Timeout of the handshake.
    pub init_timeout: Duration,
    /// Cap on one protocol message.
    pub max_message_bytes: usize,
    /// Restart delay after the first consecutive failure (doubled after each further one).
    pub backoff_base: Duration,
    /// Longest restart delay.
    pub backoff_max: Duration,
    /// Reference messages the runner already holds, when it offers to
    /// ([`crate::message_refs`]).
    pub message_refs: bool,
    /// How many messages the runner may hold for references.
    pub message_ref_limits: crate::message_refs::Limits,
}

impl Default for HostOptions {
    fn default() -> Self {
        Self {
            call_timeout: DEFAULT_CALL_TIMEOUT,
            init_timeout: DEFAULT_INIT_TIMEOUT,
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            backoff_base: Duration::from_millis(100),
            backoff_max: Duration::from_secs(5),
            message_refs: true,
            message_ref_limits: Default::default(),
        }
    }
}

#[derive(Default)]
struct State {
    conn: Option<Arc<Connection>>,
    generation: u64,
    /// Consecutive failures: dead processes and failed starts since a process last served a
    /// call.
    failures: u32,
    /// No process starts before this.
    retry_at: Option<Instant>,
}

/// One supervised plugin.
pub struct PluginHost {
    plugin_id: String,
    spec: SpawnSpec,
    init_params: Value,
    options: HostOptions,
    state: tokio::sync::Mutex<State>,
    services: SharedServices,
    init: Mutex<Option<InitializeResult>>,
    pid: Mutex<Option<u32>>,
    starts: AtomicU64,
}

impl std::fmt::Debug for PluginHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginHost")
            .field("plugin_id", &self.plugin_id)
            .field("pid", &self.pid())
            .finish()
    }
}

impl PluginHost {
    /// A supervisor that will run `spec` and send `init_params` as the `initialize` params.
    pub fn new(
        plugin_id: impl Into<String>,
        spec: SpawnSpec,
        init_params: Value,
        options: HostOptions,
    ) -> Self {
        Self {
            plugin_id: plugin_id.into(),
            spec,
            init_params,
            options,
            state: tokio::sync::Mutex::new(State::default()),
            services: Arc::new(RwLock::new(None)),
            init: Mutex::new(None),
            pid: Mutex::new(None),
            starts: AtomicU64::new(0),
        }
    }

    /// The plugin id.
    pub fn plugin_id(&self) -> &str {
        &self.plugin_id
    }

    /// The supervisor settings.
    pub fn options(&self) -> &HostOptions {
        &self.options
    }

    /// Services for plugin→host calls made outside any call (e.g. from a timer).
    pub fn set_default_services(&self, services: Option<Arc<dyn RuntimeServices>>) {
        if let Ok(mut s) = self.services.write() {
            *s = services;
        }
    }

    /// The pid of the current process, if one was started.
    pub fn pid(&self) -> Option<u32> {
        self.pid.lock().ok().and_then(|p| *p)
    }

    /// The last handshake result.
    pub fn initialize_result(&self) -> Option<InitializeResult> {
        self.init.lock().ok().and_then(|i| i.clone())
    }

    /// The live connection without starting one.
    pub async fn current(&self) -> Option<(Arc<Connection>, u64)> {
        let st = self.state.lock().await;
        st.conn
            .as_ref()
            .filter(|c| c.is_alive())
            .map(|c| (c.clone(), st.generation))
    }

    /// The live connection and its generation, (re)starting the process when needed, no
    /// earlier than the backoff allows (see the module header).
    pub async fn connection(&self) -> Result<(Arc<Connection>, u64), PluginError> {
        let mut st = self.state.lock().await;
        if let Some(c) = st.conn.as_ref().filter(|c| c.is_alive()) {
            return Ok((c.clone(), st.generation));
        }
        if let Some(dead) = st.conn.take() {
            // A process that served a call ended the previous streak: its death starts anew.
            if dead.served_calls() > 0 {
                st.failures = 0;
            }
            st.failures = st.failures.saturating_add(1);
            let died = dead.died_at().unwrap_or_else(Instant::now);
            let delay = self.restart_delay(st.failures);
            st.retry_at = Some(died + delay);
            if let Some(reason) = dead.dead_reason() {
                tracing::warn!(
                    plugin = %self.plugin_id,
                    "plugin process died: {reason}; restarting ({} consecutive failures, after {} ms)",
                    st.failures,
                    delay.as_millis()
                );
            }
            drop(dead);
        }
        if let Some(at) = st.retry_at {
            let now = Instant::now();
            if at > now {
                tokio::time::sleep(at - now).await;
            }
        }
        self.starts.fetch_add(1, Ordering::Relaxed);
        match self.start().await {
            Ok((conn, init)) => {
                st.generation += 1;
                st.retry_at = None;
                if let Ok(mut p) = self.pid.lock() {
                    *p = Some(conn.pid());
                }
                if let Ok(mut i) = self.init.lock() {
                    *i = Some(init);
                }
                st.conn = Some(conn.clone());
                Ok((conn, st.generation))
            }
            Err(e) => {
                st.failures = st.failures.saturating_add(1);
                st.retry_at = Some(Instant::now() + self.restart_delay(st.failures));
                Err(e)
            }
        }
    }

    /// The delay after the `failures`-th consecutive failure: `backoff_base × 2^(failures−1)`,
    /// at most `backoff_max` (none before any failure).
    pub fn restart_delay(&self, failures: u32) -> Duration {
        let Some(doublings) = failures.checked_sub(1) else {
            return Duration::ZERO;
        };
        self.options
            .backoff_base
            .saturating_mul(1u32 << doublings.min(20))
            .min(self.options.backoff_max)
    }

    /// How many processes were started (the first one included): restarts are this less one.
    pub fn starts(&self) -> u64 {
        self.starts.load(Ordering::Relaxed)
    }

    async fn start(&self) -> Result<(Arc<Connection>, InitializeResult), PluginError> {
        let conn = Connection::spawn(
            &self.spec,
            self.options.max_message_bytes,
            self.services.clone(),
        )?;
        if let Ok(mut p) = self.pid.lock() {
            *p = Some(conn.pid());
        }
        let raw = conn
            .call(
                "initialize",
                self.init_params.clone(),
                None,
                self.options.init_timeout,
            )
            .await?;
        let init: InitializeResult = serde_json::from_value(raw).map_err(|e| {
            let err = PluginError::Contract(format!(
                "contract violation: initialize returned an invalid result: {e}"
            ));
            conn.kill(err.to_string());
            err
        })?;
        if self.options.message_refs && init.offers_message_refs() {
            conn.enable_message_refs(self.options.message_ref_limits);
        }
        Ok((conn, init))
    }

    /// One request on the live connection (restarting it when needed), with the call timeout.
    pub async fn call(
        &self,
        method: &str,
        params: Value,
        cx: Option<&CallContext>,
    ) -> Result<Value, PluginError> {
        let (conn, _) = self.connection().await?;
        conn.call(method, params, cx, self.options.call_timeout)
            .await
    }

    /// Asks the plugin to shut down (`shutdown`, 2 s), then kills the process group.
    pub async fn shutdown(&self) {
        let conn = self.state.lock().await.conn.take();
        if let Some(conn) = conn {
            if conn.is_alive() {
                let _ = conn
                    .call("shutdown", Value::Null, None, Duration::from_secs(2))
                    .await;
            }
            conn.kill("plugin was shut down".into());
        }
    }
}
