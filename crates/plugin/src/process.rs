//! The plugin child process: spawn, supervise, kill.
//!
//! Each plugin runs in its own process group (so a plugin that starts helpers dies with
//! them), with `kill_on_drop`, and is killed with its whole group when the host drops the
//! [`PluginProcess`]. A waiter task owns the child and reaps it, so a killed plugin never
//! lingers as a zombie; it publishes the exit status for crash messages. Stderr is read
//! continuously (a plugin that logs a lot must never block on a full pipe) and its last
//! [`STDERR_TAIL_BYTES`] are kept for error messages. Stdout is the protocol channel, read by
//! the bounded line reader on the reader thread of [`crate::rpc`].

use std::collections::VecDeque;
use std::fmt;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::io::AsyncReadExt;
use tokio::process::{ChildStdin, ChildStdout, Command};
use tokio::sync::watch;

use crate::error::PluginError;

/// How much of stderr is kept for error messages.
pub const STDERR_TAIL_BYTES: usize = 8 * 1024;

/// What to run.
#[derive(Clone, Debug, Default)]
pub struct SpawnSpec {
    /// The plugin id (for messages).
    pub plugin_id: String,
    /// Program.
    pub program: PathBuf,
    /// Arguments.
    pub args: Vec<String>,
    /// Working directory (the plugin root).
    pub cwd: PathBuf,
    /// Environment set for the child on top of what it inherits ([`inherited_env`]).
    pub env: Vec<(String, String)>,
    /// Names of the host's variables the operator passes through besides the defaults
    /// (`plugins.entries.<id>.passEnv`).
    pub pass_env: Vec<String>,
}

/// Variables every plugin process inherits from the host, when set: what a Node or Python
/// program needs to find its interpreter, libraries, certificates, proxy, locale and
/// temporary directory. Everything else (model API keys, the gateway token, database URLs and
/// their passwords, anything the operator exported) stays with the host unless named in
/// `plugins.entries.<id>.passEnv`.
pub const INHERITED_ENV: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "TZ",
    "TERM",
    "TMPDIR",
    "TMP",
    "TEMP",
    "NODE_PATH",
    "NODE_OPTIONS",
    "NODE_EXTRA_CA_CERTS",
    "PYTHONHOME",
    "PYENV_ROOT",
    "PYENV_VERSION",
    "VIRTUAL_ENV",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
];

/// Whether the host's variable `name` reaches a plugin process: [`INHERITED_ENV`], the
/// locale's `LC_*`, or one of `pass_env`.
pub fn inherited_env(name: &str, pass_env: &[String]) -> bool {
    INHERITED_ENV.contains(&name) || name.starts_with("LC_") || pass_env.iter().any(|p| p == name)
}

/// How a process ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExitInfo {
    /// Exit code, when it exited.
    pub code: Option<i32>,
    /// Signal, when it was killed.
    pub signal: Option<i32>,
}

impl fmt::Display for ExitInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.code, self.signal) {
            (Some(c), _) => write!(f, "code {c}"),
            (None, Some(s)) => write!(f, "signal {s}"),
            (None, None) => f.write_str("code unknown"),
        }
    }
}

/// The last bytes a process wrote to stderr.
#[derive(Debug, Default)]
pub struct StderrTail {
    buf: VecDeque<u8>,
}

impl StderrTail {
    fn push(&mut self, bytes: &[u8]) {
        self.buf.extend(bytes);
        let excess = self.buf.len().saturating_sub(STDERR_TAIL_BYTES);
        self.buf.drain(..excess);
    }

    /// The tail as text, trimmed.
    pub fn text(&self) -> String {
        let (a, b) = self.buf.as_slices();
        let mut v = Vec::with_capacity(a.len() + b.len());
        v.extend_from_slice(a);
        v.extend_from_slice(b);
        String::from_utf8_lossy(&v).trim().to_owned()
    }
}

/// Shared view of a running process: its pid, stderr tail and exit status.
#[derive(Clone, Debug)]
pub struct ProcessInfo {
    /// OS pid (also the process group id).
    pub pid: u32,
    tail: Arc<Mutex<StderrTail>>,
    exit: watch::Receiver<Option<ExitInfo>>,
    stderr_done: watch::Receiver<bool>,
}

impl ProcessInfo {
    /// The stderr tail.
    pub fn stderr_tail(&self) -> String {
        self.tail.lock().map(|t| t.text()).unwrap_or_default()
    }

    /// The exit status, once the process is reaped.
    pub fn exit_status(&self) -> Option<ExitInfo> {
        *self.exit.borrow()
    }

    /// Waits up to `limit` for the exit status (and for stderr to be drained, so the tail is
    /// complete).
    pub async fn wait_exit(&self, limit: std::time::Duration) -> Option<ExitInfo> {
        let mut rx = self.exit.clone();
        let mut done = self.stderr_done.clone();
        let _ = tokio::time::timeout(limit, async {
            let _ = rx.wait_for(Option::is_some).await;
            let _ = done.wait_for(|d| *d).await;
        })
        .await;
        let status = *rx.borrow();
        status
    }

    /// Kills the whole process group (SIGKILL). Idempotent; errors (already gone) ignored.
    pub fn kill(&self) {
        if let Ok(pid) = i32::try_from(self.pid) {
            let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
        }
    }

    /// The crash message: `plugin process exited (code …): <stderr tail>`.
    pub fn exit_message(&self, status: Option<ExitInfo>) -> String {
        let status = status
            .map(|s| s.to_string())
            .unwrap_or_else(|| "code unknown".into());
        let tail = self.stderr_tail();
        if tail.is_empty() {
            format!("plugin process exited ({status})")
        } else {
            format!("plugin process exited ({status}): {tail}")
        }
    }
}

/// A running plugin process. Dropping it kills the process group.
#[derive(Debug)]
pub struct PluginProcess {
    info: ProcessInfo,
}

impl PluginProcess {
    /// Spawns `spec` in its own process group; returns the process and its stdio.
    pub fn spawn(
        spec: &SpawnSpec,
    ) -> Result<(PluginProcess, ChildStdin, ChildStdout), PluginError> {
        let mut cmd = Command::new(&spec.program);
        cmd.args(&spec.args)
            .current_dir(&spec.cwd)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .process_group(0)
            .env_clear();
        for (k, v) in std::env::vars_os() {
            if k.to_str().is_some_and(|k| inherited_env(k, &spec.pass_env)) {
                cmd.env(k, v);
            }
        }
        for (k, v) in &spec.env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().map_err(|e| PluginError::Spawn {
            plugin_id: spec.plugin_id.clone(),
            message: format!("cannot run `{}`: {e}", spec.program.display()),
        })?;
        let pid = child.id().ok_or_else(|| PluginError::Spawn {
            plugin_id: spec.plugin_id.clone(),
            message: "the process exited before it could be supervised".into(),
        })?;
        let missing = |what: &str| PluginError::Spawn {
            plugin_id: spec.plugin_id.clone(),
            message: format!("no {what} pipe"),
        };
        let stdin = child.stdin.take().ok_or_else(|| missing("stdin"))?;
        let stdout = child.stdout.take().ok_or_else(|| missing("stdout"))?;
        let stderr = child.stderr.take().ok_or_else(|| missing("stderr"))?;

        let tail = Arc::new(Mutex::new(StderrTail::default()));
        let tail_w = tail.clone();
        let plugin_id = spec.plugin_id.clone();
        let (done_tx, done_rx) = watch::channel(false);
        tokio::spawn(async move {
            let mut stderr = stderr;
            let mut buf = vec![0u8; 4096];
            loop {
                match stderr.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        tracing::debug!(plugin = %plugin_id, "stderr: {}", String::from_utf8_lossy(&buf[..n]).trim_end());
                        if let Ok(mut t) = tail_w.lock() {
                            t.push(&buf[..n]);
                        }
                    }
                }
            }
            let _ = done_tx.send(true);
        });

        let (exit_tx, exit_rx) = watch::channel(None);
        tokio::spawn(async move {
            let status = child.wait().await;
            // Whatever the child left behind in its group goes with it.
            if let Ok(p) = i32::try_from(pid) {
                let _ = killpg(Pid::from_raw(p), Signal::SIGKILL);
            }
            let info = match status {
                Ok(s) => {
                    use std::os::unix::process::ExitStatusExt;
                    ExitInfo {
                        code: s.code(),
                        signal: s.signal(),
                    }
                }
                Err(_) => ExitInfo {
                    code: None,
                    signal: None,
                },
            };
            let _ = exit_tx.send(Some(info));
        });

        Ok((
            PluginProcess {
                info: ProcessInfo {
                    pid,
                    tail,
                    exit: exit_rx,
                    stderr_done: done_rx,
                },
            },
            stdin,
            stdout,
        ))
    }

    /// The shared view.
    pub fn info(&self) -> &ProcessInfo {
        &self.info
    }

    /// The pid.
    pub fn pid(&self) -> u32 {
        self.info.pid
    }
}

impl Drop for PluginProcess {
    fn drop(&mut self) {
        self.info.kill();
    }
}

/// A line longer than the cap (a protocol violation).
#[derive(Debug)]
pub enum LineError {
    /// The line exceeded this many bytes.
    TooLong(usize),
    /// Reading failed.
    Io(std::io::Error),
}

/// Reads `\n`-terminated lines without ever buffering more than `max` bytes of one line.
/// Blocking: the protocol reader runs on its own thread (see [`crate::rpc`]).
pub struct BoundedLineReader<R> {
    inner: R,
    max: usize,
    /// The last line's length: the next one is usually alike (a history, a little longer), so
    /// its buffer starts that big instead of growing by doubling and copying.
    last_len: usize,
}

impl<R: std::io::BufRead> BoundedLineReader<R> {
    /// Wraps a buffered reader.
    pub fn new(inner: R, max: usize) -> Self {
        Self {
            inner,
            max,
            last_len: 0,
        }
    }

    /// The next line without its terminator; `None` at EOF.
    pub fn next_line(&mut self) -> Result<Option<Vec<u8>>, LineError> {
        let mut line = Vec::with_capacity(self.last_len.min(self.max).saturating_add(64));
        loop {
            let buf = match self.inner.fill_buf() {
                Ok(buf) => buf,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(LineError::Io(e)),
            };
            if buf.is_empty() {
                return Ok(if line.is_empty() { None } else { Some(line) });
            }
            match buf.iter().position(|b| *b == b'\n') {
                Some(pos) => {
                    if line.len() + pos > self.max {
                        return Err(LineError::TooLong(self.max));
                    }
                    line.extend_from_slice(&buf[..pos]);
                    self.inner.consume(pos + 1);
                    if line.last() == Some(&b'\r') {
                        line.pop();
                    }
                    self.last_len = line.len();
                    return Ok(Some(line));
                }
                None => {
                    let n = buf.len();
                    if line.len() + n > self.max {
                        return Err(LineError::TooLong(self.max));
                    }
                    line.extend_from_slice(buf);
                    self.inner.consume(n);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_reader_splits_and_caps() {
        let data: &[u8] = b"abc\r\nde\nxxxxxxxxxxxx\n";
        let mut r = BoundedLineReader::new(std::io::BufReader::with_capacity(4, data), 8);
        assert_eq!(r.next_line().ok().flatten(), Some(b"abc".to_vec()));
        assert_eq!(r.next_line().ok().flatten(), Some(b"de".to_vec()));
        assert!(matches!(r.next_line(), Err(LineError::TooLong(8))));
    }

    #[test]
    fn tail_keeps_last_bytes() {
        let mut t = StderrTail::default();
        t.push(&vec![b'a'; STDERR_TAIL_BYTES]);
        t.push(b"END");
        assert!(t.text().ends_with("END"));
        assert_eq!(t.buf.len(), STDERR_TAIL_BYTES);
    }
}
