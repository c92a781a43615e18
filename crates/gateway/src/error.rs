//! The crate boundary's error: why a gateway cannot start, keep its state dir, or stop cleanly.
//!
//! Request-level failures are not errors of this kind: they become HTTP responses in OpenAI's
//! error shape ([`crate::api_error::ApiError`]) and the gateway keeps serving. A
//! [`GatewayError`] ends `clawctx gateway` with a message that says what to change.

use std::path::PathBuf;

/// Why the gateway cannot start or stop.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    /// A `gateway.*` config value (or a flag or environment variable standing in for it) is
    /// wrong. Fix the named key.
    #[error("{key}: {message}")]
    Config {
        /// The dotted key (or flag) at fault.
        key: String,
        /// What is wrong and what would be right.
        message: String,
    },
    /// A bind off loopback without a token (OpenClaw's refusal): set a token or bind loopback.
    #[error(
        "refusing to bind gateway to {addr} without auth: set gateway.auth.token (or gateway.auth.tokenEnv, or the \
         CLAWCTX_GATEWAY_TOKEN environment variable), or bind loopback (--bind loopback)"
    )]
    NoAuthOffLoopback {
        /// The address the gateway would have listened on.
        addr: String,
    },
    /// Another gateway holds the state dir's lock. Stop it, or use another state dir.
    #[error(
        "another clawctx gateway (pid {pid}{url}) is using the state dir {state_dir}; stop it first or pass another \
         --state-dir (`clawctx gateway status` shows it)",
        pid = pid.map_or_else(|| "unknown".to_owned(), |p| p.to_string()),
        url = url.as_deref().map(|u| format!(", {u}")).unwrap_or_default(),
        state_dir = state_dir.display()
    )]
    Locked {
        /// The state directory.
        state_dir: PathBuf,
        /// The holder's process id, when its lock file says.
        pid: Option<u32>,
        /// Where the holder listens, when its lock file says.
        url: Option<String>,
    },
    /// The listening socket could not be opened (port in use, address not on this machine).
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// A file of the gateway's own (the lock file) could not be read or written.
    #[error("{path}: {source}", path = path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The HTTP server stopped with an error.
    #[error("the HTTP server failed: {0}")]
    Serve(std::io::Error),
}

/// The crate's result type.
pub type Result<T, E = GatewayError> = std::result::Result<T, E>;

impl GatewayError {
    pub(crate) fn config(key: impl Into<String>, message: impl Into<String>) -> Self {
        GatewayError::Config {
            key: key.into(),
            message: message.into(),
        }
    }

    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        GatewayError::Io {
            path: path.into(),
            source,
        }
    }
}
