//! Live updates: the SSE stream a dashboard page listens on, over the live bus the turn path
//! publishes to ([`crate::trace::bus`], which says what a turn publishes).

use std::convert::Infallible;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::extract::{Query, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::IntoResponse;
use serde::Deserialize;
use serde_json::json;
use tokio::sync::broadcast;

use crate::state::AppState;

/// `?key=` of the event stream (absent: every session).
#[derive(Debug, Deserialize)]
pub(crate) struct EventsQuery {
    key: Option<String>,
}

/// `GET /v1/dashboard/events`: the bus as server-sent events, one `data:` JSON
/// [`LiveEvent`](crate::trace::bus::LiveEvent) each (a `lagged` event when this listener fell behind). Ends when the
/// gateway begins to shut down.
pub(crate) async fn events(
    State(shared): State<AppState>,
    Query(q): Query<EventsQuery>,
) -> impl IntoResponse {
    let rx = shared.live.subscribe();
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
