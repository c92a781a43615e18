//! The trace of turns no gateway serves: `clawctx run` and `clawctx chat` run the same
//! runtime as the gateway, so their turns are traced the same way, into the same file.
//!
//! Why: the trace was written only by the gateway's turn path, so a session driven from the
//! terminal had "no traced turns" although `clawctx sessions trace` reads the state dir
//! (issue #39). [`LocalTrace`] holds the gateway's own shared state without serving it (no
//! socket, no lanes in use): each turn is watched by the very task the gateway's chat
//! completions use (`watch::watch_turn`), which records every assembly, reads the
//! lossless frontier while the model answers and hands the finished trace to the [`Tracer`]
//! thread. The turn never waits for any of it; [`LocalTrace::finish`] waits only when the
//! process is about to exit, so the last turn's trace is not lost.
//!
//! [`Tracer`]: super::Tracer

use std::time::Instant;

use clawctx_runtime::{RuntimeError, TurnOutcome, TurnRequest};

use super::TurnEnd;
use crate::state::{AppState, GatewayParts, Shared};

/// Traces the turns of a runtime that no gateway serves.
pub struct LocalTrace {
    shared: AppState,
    watchers: Vec<tokio::task::JoinHandle<()>>,
}

/// One watched turn: tell it how the turn ended with [`TurnWatch::ended`].
pub struct TurnWatch {
    ended: Option<tokio::sync::oneshot::Sender<TurnEnd>>,
    started: Instant,
}

impl LocalTrace {
    /// Starts the trace writer on the runtime's state dir (`parts.config.trace` says whether
    /// and how much to keep). Must be called inside a tokio runtime.
    pub fn start(parts: GatewayParts) -> LocalTrace {
        LocalTrace {
            shared: std::sync::Arc::new(Shared::new(parts)),
            watchers: Vec::new(),
        }
    }

    /// Watches the turn `request` asks for (sets its `assembled` channel).
    pub fn watch(&mut self, request: &mut TurnRequest) -> TurnWatch {
        let (assembled, ended, watcher) =
            super::watch::watch_turn(&self.shared, &request.session_key);
        request.assembled = Some(assembled);
        self.watchers.retain(|w| !w.is_finished());
        self.watchers.push(watcher);
        TurnWatch {
            ended,
            started: Instant::now(),
        }
    }

    /// Waits for the watched turns' traces to be written (before the runtime shuts down: a
    /// watcher may still read the engine's store).
    pub async fn finish(mut self) {
        for w in self.watchers.drain(..) {
            if let Err(e) = w.await {
                tracing::warn!("a turn's trace watcher failed: {e}");
            }
        }
        self.shared.tracer.flush().await;
    }
}

impl TurnWatch {
    /// The turn's result: its trace is finished and queued for writing.
    pub fn ended(self, result: &Result<TurnOutcome, RuntimeError>) {
        if let Some(ended) = self.ended {
            let _ = ended.send(TurnEnd::of(result, self.started.elapsed()));
        }
    }
}
