//! Live updates: a broadcast bus the turn path publishes to, and the SSE stream a dashboard
//! page listens on.
//!
//! A turn publishes `turnStarted`, then `assembled` for every `assemble` result (with the
//! split's totals), then `compaction` when the session's stored history was compacted during
//! the turn (the lossless epoch or the transcript's compaction count moved), then `turnDone`.
//! Publishing never blocks a turn: the bus is a bounded `tokio::sync::broadcast` channel and a
//! listener that falls behind gets a `lagged` event telling it to reload. Without listeners
//! the turn path does nothing but record the assembly.

use std::convert::Infallible;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::extract::{Query, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::IntoResponse;
use clawctx_runtime::AssembledView;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tokio::sync::broadcast;

use super::last_assembled::Recorded;
use crate::server::AppState;

/// Events kept for a slow listener before it lags.
const CAPACITY: usize = 256;

/// One live event.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LiveEvent {
    /// The session it is about.
    pub session_key: String,
    /// `turnStarted`, `assembled`, `compaction`, `turnDone`.
    pub kind: &'static str,
    /// When (epoch ms).
    pub at_ms: i64,
    /// Details.
    pub data: Value,
}

/// The bus.
pub struct Live {
    tx: broadcast::Sender<LiveEvent>,
}

impl Default for Live {
    fn default() -> Self {
        Live {
            tx: broadcast::channel(CAPACITY).0,
        }
    }
}

impl Live {
    /// Sends `kind` for `key` to every listener (none: dropped).
    pub fn publish(&self, key: &str, kind: &'static str, data: Value) {
        let _ = self.tx.send(LiveEvent {
            session_key: key.to_owned(),
            kind,
            at_ms: super::now_ms(),
            data,
        });
    }

    /// Whether anyone listens.
    pub fn listened(&self) -> bool {
        self.tx.receiver_count() > 0
    }

    fn subscribe(&self) -> broadcast::Receiver<LiveEvent> {
        self.tx.subscribe()
    }
}

/// What says a session's stored history was compacted: the lossless conversation's epoch
/// and summary passes, or the transcript's compaction entries.
async fn compaction_marker(shared: &AppState, key: &str) -> Option<(i64, i64)> {
    if shared.runtime.engine_id() == clawctx_lossless::ENGINE_ID {
        let recall = crate::recall::lossless(shared)?;
        let backend = recall.store();
        let conv_key = clawctx_lossless::ConvKey::from_host(Some(key), key);
        // No conversation yet: nothing compacted (the first turn bootstraps it).
        let view = backend.session_view(&conv_key).await.ok()?;
        Some(view.map_or((0, 0), |v| (v.conversation.epoch, v.timeline.len() as i64)))
    } else {
        let rt = shared.runtime.clone();
        let key = key.to_owned();
        tokio::task::spawn_blocking(move || {
            // Looking never creates a session for a key nobody used.
            if !rt.knows(&key).ok()? {
                return Some((0, 0));
            }
            rt.status(&key).ok().map(|s| (s.compactions as i64, 0))
        })
        .await
        .ok()
        .flatten()
    }
}

/// The turn path's hook: a sender for [`clawctx_runtime::TurnRequest::assembled`] and one
/// for the turn's end. A task records every assembly it receives (reading the lossless
/// frontier after each, while the model answers, for the turn trace) and, when someone
/// listens, publishes the turn's events; the runtime drops the sender when the turn ends,
/// and the turn's task sends its end, after which the task writes the turn's trace
/// ([`crate::trace`]). The task's handle is returned for a caller that must not exit before
/// the trace is written (`clawctx run`).
pub(crate) fn watch_turn(
    shared: &AppState,
    key: &str,
) -> (
    tokio::sync::mpsc::UnboundedSender<AssembledView>,
    Option<tokio::sync::oneshot::Sender<crate::trace::TurnEnd>>,
    tokio::task::JoinHandle<()>,
) {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<AssembledView>();
    let (ended_tx, ended) = if shared.tracer.enabled() {
        let (a, b) = tokio::sync::oneshot::channel::<crate::trace::TurnEnd>();
        (Some(a), Some(b))
    } else {
        (None, None)
    };
    let shared = shared.clone();
    let key = key.to_owned();
    let watcher = tokio::spawn(async move {
        let mut trace = crate::trace::Builder::new(&key, "turn");
        let listened = shared.dashboard.live.listened();
        let before = if listened {
            compaction_marker(&shared, &key).await
        } else {
            None
        };
        if listened {
            shared
                .dashboard
                .live
                .publish(&key, "turnStarted", json!({}));
        }
        while let Some(view) = rx.recv().await {
            let recorded = super::record(
                &shared,
                &key,
                Recorded {
                    at_ms: super::now_ms(),
                    source: "turn",
                    session_id: view.session_id,
                    token_budget: Some(view.token_budget),
                    history_messages: view.history_messages,
                    result: view.result,
                    epoch: None,
                    fallback: view.fallback,
                    split: Default::default(),
                },
            );
            if ended.is_some() {
                trace.assembled(&recorded);
                super::trace_left_out(&shared, &key, &mut trace).await;
            }
        }
        if let Some(ended) = ended {
            // Sent by the turn's task once the turn has ended (dropped if it panicked).
            let end = ended.await.ok();
            if trace.has_assembly() {
                let summaries = shared.tracer.summaries_since(trace.started());
                let t = trace.finish(&shared, end, summaries);
                shared.tracer.write(t);
            }
        }
        if listened || shared.dashboard.live.listened() {
            let after = compaction_marker(&shared, &key).await;
            if before.is_some() && after != before {
                shared.dashboard.live.publish(
                    &key,
                    "compaction",
                    json!({"before": before, "after": after}),
                );
            }
            shared.dashboard.live.publish(&key, "turnDone", json!({}));
            // A background engine compacts after the reply, on the session's maintenance lane
            // (scheduled before the turn ended): show that compaction too once it settles.
            let settled = tokio::time::timeout(
                MAINTENANCE_WATCH,
                shared.runtime.wait_for_session_maintenance(&key),
            )
            .await;
            if settled.is_ok() && after.is_some() && shared.dashboard.live.listened() {
                let later = compaction_marker(&shared, &key).await;
                if later.is_some() && later != after {
                    shared.dashboard.live.publish(
                        &key,
                        "compaction",
                        json!({"before": after, "after": later, "background": true}),
                    );
                }
            }
        }
    });
    (tx, ended_tx, watcher)
}

/// How long a turn's watcher waits for the session's background maintenance before it stops
/// watching (a summary by a slow model takes seconds; the next turn's events show the rest).
const MAINTENANCE_WATCH: Duration = Duration::from_secs(300);

/// `?key=` of the event stream (absent: every session).
#[derive(Debug, Deserialize)]
pub(crate) struct EventsQuery {
    key: Option<String>,
}

/// `GET /v1/dashboard/events`: the bus as server-sent events, one `data:` JSON
/// [`LiveEvent`] each (a `lagged` event when this listener fell behind). Ends when the
/// gateway begins to shut down.
pub(crate) async fn events(
    State(shared): State<AppState>,
    Query(q): Query<EventsQuery>,
) -> impl IntoResponse {
    let rx = shared.dashboard.live.subscribe();
    let filter = q.key.filter(|k| !k.trim().is_empty());
    let hello = Event::default().data(json!({"kind": "hello", "sessionKey": filter}).to_string());
    let stream = futures::stream::unfold(
        (rx, shared, filter),
        |(mut rx, shared, filter)| async move {
            loop {
                if shared.stopping.load(Ordering::SeqCst) {
                    return None;
                }
                let next = tokio::time::timeout(Duration::from_millis(500), rx.recv()).await;
                let event = match next {
                    Err(_) => continue,
                    Ok(Ok(e)) if filter.as_deref().is_none_or(|k| k == e.session_key) => {
                        Event::default().data(serde_json::to_string(&e).unwrap_or_default())
                    }
                    Ok(Ok(_)) => continue,
                    Ok(Err(broadcast::error::RecvError::Lagged(n))) => {
                        Event::default().data(json!({"kind": "lagged", "missed": n}).to_string())
                    }
                    Ok(Err(broadcast::error::RecvError::Closed)) => return None,
                };
                return Some((Ok::<Event, Infallible>(event), (rx, shared, filter)));
            }
        },
    );
    let stream = futures::StreamExt::chain(futures::stream::once(async move { Ok(hello) }), stream);
    Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(10)))
}
