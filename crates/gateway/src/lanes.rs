//! One turn at a time per session, sessions in parallel.
//!
//! Two turns on one session at once would interleave their messages in the transcript and hand
//! the engine two overlapping views of one conversation. Each session key gets a lane: an async
//! mutex (a one-permit semaphore) plus a count of requests waiting for it. A request that finds
//! the queue full is refused at once with 429 and a message saying how many wait, instead of
//! piling up until its own deadline. Lanes of idle sessions are dropped, so the map holds only
//! sessions with a request running or waiting.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::api_error::ApiError;

struct Lane {
    permit: Arc<Semaphore>,
    /// Requests holding or waiting for the permit.
    users: usize,
}

/// Every session's lane.
pub struct Lanes {
    lanes: Mutex<HashMap<String, Lane>>,
    max_queued: usize,
    /// Requests waiting for a busy session now (a metric).
    waiting: Gauge,
}

/// The right to run one request on a session; dropping it lets the next one in.
pub struct LaneGuard {
    lanes: Arc<Lanes>,
    key: String,
    _permit: OwnedSemaphorePermit,
}

impl Lanes {
    /// Lanes where at most `max_queued` requests wait behind the running one.
    pub fn new(max_queued: usize, waiting: Gauge) -> Arc<Self> {
        Arc::new(Lanes {
            lanes: Mutex::new(HashMap::new()),
            max_queued,
            waiting,
        })
    }

    /// Waits for `key`'s lane. Refused with 429 when `max_queued` requests already wait.
    pub async fn acquire(self: &Arc<Self>, key: &str) -> Result<LaneGuard, ApiError> {
        let semaphore = {
            let mut lanes = self
                .lanes
                .lock()
                .map_err(|_| ApiError::internal("the session lanes lock was poisoned"))?;
            let lane = lanes.entry(key.to_owned()).or_insert_with(|| Lane {
                permit: Arc::new(Semaphore::new(1)),
                users: 0,
            });
            // `users` counts the running request too: waiting = users - 1 when busy.
            let waiting = lane.users.saturating_sub(1);
            if lane.users > 0 && waiting >= self.max_queued {
                return Err(ApiError::busy(format!(
                    "session \"{key}\" is busy: a turn is running and {waiting} more request(s) are waiting for it \
                     (gateway.http.maxQueuedPerSession = {}); retry when it has finished",
                    self.max_queued
                )));
            }
            lane.users += 1;
            lane.permit.clone()
        };
        // Counted as a user from here: a cancelled wait must give its place back.
        let mut pending = Pending {
            lanes: self.clone(),
            key: key.to_owned(),
            armed: true,
        };
        let permit = match semaphore.clone().try_acquire_owned() {
            Ok(permit) => permit,
            Err(_) => {
                let _waiting = Waiting::new(&self.waiting);
                semaphore
                    .acquire_owned()
                    .await
                    .map_err(|_| ApiError::internal("a session lane was closed"))?
            }
        };
        pending.armed = false;
        Ok(LaneGuard {
            lanes: self.clone(),
            key: key.to_owned(),
            _permit: permit,
        })
    }

    fn release(&self, key: &str) {
        if let Ok(mut lanes) = self.lanes.lock() {
            if let Some(lane) = lanes.get_mut(key) {
                lane.users = lane.users.saturating_sub(1);
                if lane.users == 0 {
                    lanes.remove(key);
                }
            }
        }
    }

    /// Sessions with a request running or waiting.
    pub fn active(&self) -> usize {
        self.lanes.lock().map(|l| l.len()).unwrap_or(0)
    }
}

/// Counts a request in the waiting gauge while it waits (also when its wait is cancelled).
struct Waiting<'a>(&'a Gauge);

impl<'a> Waiting<'a> {
    fn new(gauge: &'a Gauge) -> Self {
        gauge.inc();
        Waiting(gauge)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// Gives a waiter's place back when its wait is cancelled (client gone, deadline).
struct Pending {
    lanes: Arc<Lanes>,
    key: String,
    armed: bool,
}

impl Drop for Pending {
    fn drop(&mut self) {
        if self.armed {
            self.lanes.release(&self.key);
        }
    }
}

impl Drop for LaneGuard {
    fn drop(&mut self) {
        self.lanes.release(&self.key);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn one_runs_per_session_a_bounded_number_waits_and_others_run_in_parallel() {
        let lanes = Lanes::new(1, Gauge::default());
        let first = lanes.acquire("a").await.unwrap();
        // Another session is not held up.
        let other = tokio::time::timeout(Duration::from_secs(5), lanes.acquire("b"))
            .await
            .unwrap()
            .unwrap();
        // One may wait behind the running turn...
        let l2 = lanes.clone();
        let waiter = tokio::spawn(async move { l2.acquire("a").await.map(|_g| ()) });
        while lanes.waiting.get() == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(
            !waiter.is_finished(),
            "the second request on a session must wait"
        );
        // ...the next is refused with 429 naming the session.
        let err = lanes.acquire("a").await.err().expect("the queue is full");
        assert_eq!(err.status.as_u16(), 429);
        assert!(
            err.message.contains("session \"a\" is busy"),
            "{}",
            err.message
        );
        drop(first);
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        drop(other);
        assert_eq!(lanes.active(), 0, "idle lanes are dropped");
    }

    #[tokio::test]
    async fn a_cancelled_wait_gives_its_place_back() {
        let lanes = Lanes::new(1, Gauge::default());
        let first = lanes.acquire("a").await.unwrap();
        let cancelled = tokio::time::timeout(Duration::from_millis(20), lanes.acquire("a")).await;
        assert!(cancelled.is_err());
        // The place is free again: one more may wait.
        let l2 = lanes.clone();
        let waiter = tokio::spawn(async move { l2.acquire("a").await.map(|_g| ()) });
        tokio::time::sleep(Duration::from_millis(20)).await;
        drop(first);
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
    }
}
