//! Abort signals: the Rust shape of the `AbortSignal` host param.
//!
//! OpenClaw passes an `AbortSignal` to compact and maintain; the guard must tell the caller's
//! own cancellation (propagate, never quarantine) from an engine failure. An [`AbortSignal`] is
//! a cancellation token plus the reason it was aborted with.

use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;

/// The default reason when an abort carries none.
pub const DEFAULT_ABORT_REASON: &str = "Context engine operation aborted.";

/// The sending side: aborts its signal.
#[derive(Clone, Debug, Default)]
pub struct AbortController {
    signal: AbortSignal,
}

impl AbortController {
    /// A controller with a fresh, un-aborted signal.
    pub fn new() -> Self {
        Self::default()
    }

    /// The signal to hand to callees.
    pub fn signal(&self) -> AbortSignal {
        self.signal.clone()
    }

    /// Aborts with `reason` (the first reason wins).
    pub fn abort(&self, reason: impl Into<String>) {
        if let Ok(mut r) = self.signal.reason.lock() {
            if r.is_none() {
                *r = Some(reason.into());
            }
        }
        self.signal.token.cancel();
    }
}

/// The receiving side: tells whether and why the operation was aborted.
#[derive(Clone, Debug, Default)]
pub struct AbortSignal {
    token: CancellationToken,
    reason: Arc<Mutex<Option<String>>>,
}

impl AbortSignal {
    /// Whether the signal has been aborted.
    pub fn is_aborted(&self) -> bool {
        self.token.is_cancelled()
    }

    /// The abort reason, or [`DEFAULT_ABORT_REASON`].
    pub fn reason(&self) -> String {
        self.reason
            .lock()
            .ok()
            .and_then(|r| r.clone())
            .unwrap_or_else(|| DEFAULT_ABORT_REASON.to_owned())
    }

    /// Resolves when the signal is aborted.
    pub async fn aborted(&self) {
        self.token.cancelled().await
    }

    /// The underlying token (for `select!` with other cancellation-aware code).
    pub fn token(&self) -> &CancellationToken {
        &self.token
    }
}
