//! The producer of the turn trace: the task that watches a turn (and an engine-API
//! `assemble`), records each assembly, reads the lossless frontier while the model answers,
//! and hands the finished trace to the [`super::Tracer`] thread; it also publishes the turn's
//! live events ([`super::bus`]).
//!
//! Why here: the trace is made from what the turn path already hands over (every `assemble`
//! result through [`clawctx_runtime::TurnRequest::assembled`], the turn's end through a
//! oneshot), and the same records feed the dashboard. Producing it in the trace, with the
//! records in [`super::assembled`] and the bus in [`super::bus`], lets the chat endpoint, the
//! engine API and `clawctx run` (through [`super::LocalTrace`]) start a watcher without
//! importing the dashboard, which only reads what is recorded.

use std::sync::Arc;
use std::time::Duration;

use clawctx_lossless::ConvKey;
use clawctx_protocol::{AssembleParams, AssembleResult};
use clawctx_runtime::AssembledView;
use serde_json::json;

use super::assembled::Recorded;
use super::{Builder, TurnEnd};
use crate::state::AppState;

/// The engine API's `assemble` handler records its answer here (and in the turn trace, on a
/// task of its own: the answer does not wait for the frontier read nor the write).
pub(crate) fn engine_assembled(
    shared: &AppState,
    params: &AssembleParams,
    result: &AssembleResult,
    fallback: Option<clawctx_engine::Fallback>,
) {
    let key = params
        .session_key
        .as_deref()
        .filter(|k| !k.trim().is_empty())
        .unwrap_or(&params.session_id)
        .trim();
    let recorded = record(
        shared,
        key,
        Recorded {
            at_ms: super::now_ms(),
            source: "engine-api",
            session_id: params.session_id.clone(),
            token_budget: params.token_budget,
            history_messages: params.messages.len(),
            result: result.clone(),
            epoch: None,
            fallback,
            split: Default::default(),
        },
    );
    if shared.tracer.enabled() {
        let shared = shared.clone();
        let key = key.to_owned();
        tokio::spawn(async move {
            let mut b = Builder::new(&key, "engine-api");
            b.assembled(&recorded);
            trace_left_out(&shared, &key, &mut b).await;
            let summaries = shared.tracer.summaries_since(b.started());
            let trace = b.finish(&shared, None, summaries);
            shared.tracer.write(trace);
        });
    }
}

/// What the last assembly of `b` left out: from the lossless frontier (read now, on the store's
/// read thread), else (another engine, or lossless's fallback answered) from the history the
/// engine was given.
async fn trace_left_out(shared: &AppState, key: &str, b: &mut Builder) {
    let lossless = crate::engine_store::lossless(shared).filter(|_| !b.by_fallback());
    if let Some(recall) = lossless {
        let conv_key = ConvKey::from_host(Some(key), key);
        if let Some(hits) = recall.last_recall(&conv_key) {
            b.recall_hits(hits);
        }
        match recall.store().frontier_view(&conv_key).await {
            Ok(view) => b.frontier(view.as_ref()),
            Err(e) => tracing::debug!("the turn trace reads no frontier for {key}: {e}"),
        }
    } else {
        b.history_left_out();
    }
}

/// Keeps `r` as `key`'s last assembly, with the lossless conversation's epoch it was made at
/// (lossless names it in `contextProjection.epoch` as `<conversation>:<epoch>`), so a later
/// compaction marks the record's "left out" stale. Costs the turn nothing more than the copy.
fn record(shared: &AppState, key: &str, mut r: Recorded) -> Arc<Recorded> {
    if r.epoch.is_none() && crate::engine_store::is_lossless(shared) {
        r.epoch = r
            .result
            .context_projection
            .as_ref()
            .and_then(|p| p.epoch.as_deref())
            .and_then(|e| e.rsplit_once(':'))
            .and_then(|(_, n)| n.parse().ok());
    }
    // Split it here and keep only the split (tokens and a preview a part): a record must not
    // hold a whole context per session for the life of the process. Inline, not on the
    // blocking pool: under load, queued splits would each hold a whole context meanwhile.
    // (The turn path calls this from its watcher task, not from the turn itself.)
    let b = r.breakdown();
    if shared.live.listened() {
        shared.live.publish(
            key,
            "assembled",
            json!({"totals": b.totals, "totalTokens": b.total_tokens, "tokenBudget": r.token_budget}),
        );
    }
    r.result.messages = Vec::new();
    let r = Arc::new(r);
    shared.recorder.record(key, r.clone());
    r
}

/// What says a session's stored history was compacted: the lossless conversation's epoch
/// and summary passes, or the transcript's compaction entries.
async fn compaction_marker(shared: &AppState, key: &str) -> Option<(i64, i64)> {
    if shared.runtime.engine_id() == clawctx_lossless::ENGINE_ID {
        let recall = crate::engine_store::lossless(shared)?;
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
    Option<tokio::sync::oneshot::Sender<TurnEnd>>,
    tokio::task::JoinHandle<()>,
) {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<AssembledView>();
    let (ended_tx, ended) = if shared.tracer.enabled() {
        let (a, b) = tokio::sync::oneshot::channel::<TurnEnd>();
        (Some(a), Some(b))
    } else {
        (None, None)
    };
    let shared = shared.clone();
    let key = key.to_owned();
    let watcher = tokio::spawn(async move {
        let mut trace = Builder::new(&key, "turn");
        let listened = shared.live.listened();
        let before = if listened {
            compaction_marker(&shared, &key).await
        } else {
            None
        };
        if listened {
            shared.live.publish(&key, "turnStarted", json!({}));
        }
        while let Some(view) = rx.recv().await {
            let recorded = record(
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
                trace_left_out(&shared, &key, &mut trace).await;
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
        if listened || shared.live.listened() {
            let after = compaction_marker(&shared, &key).await;
            if before.is_some() && after != before {
                shared.live.publish(
                    &key,
                    "compaction",
                    json!({"before": before, "after": after}),
                );
            }
            shared.live.publish(&key, "turnDone", json!({}));
            // A background engine compacts after the reply, on the session's maintenance lane
            // (scheduled before the turn ended): show that compaction too once it settles.
            let settled = tokio::time::timeout(
                MAINTENANCE_WATCH,
                shared.runtime.wait_for_session_maintenance(&key),
            )
            .await;
            if settled.is_ok() && after.is_some() && shared.live.listened() {
                let later = compaction_marker(&shared, &key).await;
                if later.is_some() && later != after {
                    shared.live.publish(
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
