//! Protections around the LLM summarizer: a spend guard and a circuit breaker.
//!
//! Compaction can run often; a misconfigured threshold or a retry storm must not turn into an
//! unbounded bill or a hammered provider. The [`SpendGuard`] caps summarizer tokens (input +
//! output) per session key per time window. The [`CircuitBreaker`] stops calling a provider
//! after N consecutive auth/unavailable failures, waits out a cooldown, then lets one probe
//! through. Its state is a small JSON file written atomically (temp file + rename), so a gateway
//! restart does not reset an open breaker and start hammering again.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// Caps summarizer tokens per session key over a sliding window.
#[derive(Debug)]
pub struct SpendGuard {
    max_tokens: u64,
    window: Duration,
    spent: Mutex<HashMap<String, VecDeque<(Instant, u64)>>>,
}

impl SpendGuard {
    /// At most `max_tokens` (input + output) per session key within any `window`.
    pub fn new(max_tokens: u64, window: Duration) -> Self {
        Self {
            max_tokens,
            window,
            spent: Mutex::new(HashMap::new()),
        }
    }

    /// The configured cap.
    pub fn max_tokens(&self) -> u64 {
        self.max_tokens
    }

    /// Tokens spent by `key` in the current window.
    pub fn spent(&self, key: &str) -> u64 {
        self.spent_at(key, Instant::now())
    }

    /// [`Self::spent`] as of `now`.
    pub fn spent_at(&self, key: &str, now: Instant) -> u64 {
        // Poison recovered: a panic elsewhere must not lift the cap (the map is only ever
        // pushed to and pruned, consistent at every step).
        let mut map = self.spent.lock().unwrap_or_else(|p| p.into_inner());
        let Some(entries) = map.get_mut(key) else {
            return 0;
        };
        prune(entries, now, self.window);
        entries.iter().map(|(_, n)| n).sum()
    }

    /// Checks that `key` may spend `estimate` more tokens; the error says how much is left.
    pub fn check(&self, key: &str, estimate: u64) -> Result<(), String> {
        self.check_at(key, estimate, Instant::now())
    }

    /// [`Self::check`] as of `now`.
    pub fn check_at(&self, key: &str, estimate: u64, now: Instant) -> Result<(), String> {
        let spent = self.spent_at(key, now);
        if spent.saturating_add(estimate) > self.max_tokens {
            return Err(format!(
                "session `{key}` has used {spent} of {} summarizer tokens in the last {}s; this call needs about {estimate}",
                self.max_tokens,
                self.window.as_secs()
            ));
        }
        Ok(())
    }

    /// Records `tokens` spent by `key`.
    pub fn record(&self, key: &str, tokens: u64) {
        self.record_at(key, tokens, Instant::now())
    }

    /// [`Self::record`] as of `now`.
    pub fn record_at(&self, key: &str, tokens: u64, now: Instant) {
        let mut map = self.spent.lock().unwrap_or_else(|p| p.into_inner());
        let entries = map.entry(key.to_owned()).or_default();
        prune(entries, now, self.window);
        entries.push_back((now, tokens));
    }
}

fn prune(entries: &mut VecDeque<(Instant, u64)>, now: Instant, window: Duration) {
    while let Some((t, _)) = entries.front() {
        if now.saturating_duration_since(*t) >= window {
            entries.pop_front();
        } else {
            break;
        }
    }
}

/// The breaker's position.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum BreakerState {
    /// Calls go through.
    Closed,
    /// Calls are refused until the cooldown has passed.
    Open,
    /// The cooldown passed; one probe call is in flight.
    HalfOpen,
}

/// What the breaker persists.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BreakerSnapshot {
    /// Position.
    pub state: BreakerState,
    /// Consecutive counted failures.
    pub consecutive_failures: u32,
    /// When it last opened (epoch ms), if it is open or half-open.
    pub opened_at_ms: Option<u64>,
    /// The failure that opened it (for `doctor`).
    pub last_error: Option<String>,
}

impl Default for BreakerSnapshot {
    fn default() -> Self {
        Self {
            state: BreakerState::Closed,
            consecutive_failures: 0,
            opened_at_ms: None,
            last_error: None,
        }
    }
}

/// Whether a call may proceed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BreakerDecision {
    /// Go ahead (closed).
    Allow,
    /// Go ahead as the single half-open probe.
    Probe,
    /// Refused; retry after this many milliseconds (0 when a probe is already in flight).
    Refuse {
        /// Milliseconds until a probe will be allowed.
        retry_in_ms: u64,
    },
}

/// A circuit breaker whose state survives restarts through a JSON file.
#[derive(Debug)]
pub struct CircuitBreaker {
    threshold: u32,
    cooldown: Duration,
    path: Option<PathBuf>,
    state: Mutex<BreakerSnapshot>,
}

fn epoch_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

impl CircuitBreaker {
    /// An in-memory breaker: opens after `threshold` consecutive failures for `cooldown`.
    pub fn new(threshold: u32, cooldown: Duration) -> Self {
        Self {
            threshold: threshold.max(1),
            cooldown,
            path: None,
            state: Mutex::new(BreakerSnapshot::default()),
        }
    }

    /// A breaker persisted at `path`, loading the state a previous process left there. A
    /// missing file means closed; an unreadable one is logged and treated as closed (failing to
    /// open is safer than refusing forever).
    pub fn with_state_file(threshold: u32, cooldown: Duration, path: impl Into<PathBuf>) -> Self {
        let path = path.into();
        let snapshot = match std::fs::read_to_string(&path) {
            Ok(text) => serde_json::from_str(&text).unwrap_or_else(|e| {
                tracing::warn!(path = %path.display(), error = %e, "circuit breaker state unreadable; starting closed");
                BreakerSnapshot::default()
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => BreakerSnapshot::default(),
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "cannot read circuit breaker state; starting closed");
                BreakerSnapshot::default()
            }
        };
        // A probe that was in flight when the process died never finished: count it as open.
        let snapshot = if snapshot.state == BreakerState::HalfOpen {
            BreakerSnapshot {
                state: BreakerState::Open,
                ..snapshot
            }
        } else {
            snapshot
        };
        Self {
            threshold: threshold.max(1),
            cooldown,
            path: Some(path),
            state: Mutex::new(snapshot),
        }
    }

    /// The state, poison recovered: a panic elsewhere must not leave the breaker letting every
    /// call through (each update leaves the snapshot whole).
    fn state(&self) -> std::sync::MutexGuard<'_, BreakerSnapshot> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The current state.
    pub fn snapshot(&self) -> BreakerSnapshot {
        self.state().clone()
    }

    /// Asks whether a call may proceed now.
    pub fn decide(&self) -> BreakerDecision {
        self.decide_at(epoch_ms())
    }

    /// [`Self::decide`] at `now_ms` (epoch ms).
    pub fn decide_at(&self, now_ms: u64) -> BreakerDecision {
        let mut s = self.state();
        match s.state {
            BreakerState::Closed => BreakerDecision::Allow,
            BreakerState::HalfOpen => BreakerDecision::Refuse { retry_in_ms: 0 },
            BreakerState::Open => {
                let opened = s.opened_at_ms.unwrap_or(0);
                let ready_at = opened.saturating_add(self.cooldown.as_millis() as u64);
                if now_ms >= ready_at {
                    s.state = BreakerState::HalfOpen;
                    self.persist(&s);
                    BreakerDecision::Probe
                } else {
                    BreakerDecision::Refuse {
                        retry_in_ms: ready_at - now_ms,
                    }
                }
            }
        }
    }

    /// Records a successful call: closes the breaker.
    pub fn on_success(&self) {
        let mut s = self.state();
        let changed = *s != BreakerSnapshot::default();
        *s = BreakerSnapshot::default();
        if changed {
            self.persist(&s);
        }
    }

    /// Records a counted failure (auth or unavailable).
    pub fn on_failure(&self, error: &str) {
        self.on_failure_at(error, epoch_ms())
    }

    /// [`Self::on_failure`] at `now_ms`.
    pub fn on_failure_at(&self, error: &str, now_ms: u64) {
        let mut s = self.state();
        s.consecutive_failures = s.consecutive_failures.saturating_add(1);
        s.last_error = Some(error.to_owned());
        if s.state == BreakerState::HalfOpen || s.consecutive_failures >= self.threshold {
            if s.state != BreakerState::Open {
                tracing::warn!(
                    failures = s.consecutive_failures,
                    error,
                    "summarizer circuit breaker opened"
                );
            }
            s.state = BreakerState::Open;
            s.opened_at_ms = Some(now_ms);
        }
        self.persist(&s);
    }

    /// Records a call that ended without saying anything about the provider's health (cancelled,
    /// unusable answer): a half-open probe goes back to open without resetting the cooldown.
    pub fn on_neutral(&self) {
        let mut s = self.state();
        if s.state == BreakerState::HalfOpen {
            s.state = BreakerState::Open;
            self.persist(&s);
        }
    }

    fn persist(&self, snapshot: &BreakerSnapshot) {
        let Some(path) = &self.path else { return };
        if let Err(e) = write_atomically(path, snapshot) {
            tracing::warn!(path = %path.display(), error = %e, "cannot persist circuit breaker state");
        }
    }
}

/// Writes `value` as JSON to a temp file next to `path`, then renames it over `path`.
fn write_atomically(path: &Path, value: &BreakerSnapshot) -> std::io::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".tmp-{}", std::process::id()));
    let tmp = PathBuf::from(tmp);
    let text = serde_json::to_vec_pretty(value).map_err(std::io::Error::other)?;
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spend_guard_refuses_over_budget_and_forgets_after_the_window() {
        let g = SpendGuard::new(100, Duration::from_secs(60));
        let t0 = Instant::now();
        g.check_at("s", 80, t0).unwrap();
        g.record_at("s", 80, t0);
        assert!(g.check_at("s", 30, t0).is_err());
        g.check_at("other", 30, t0).unwrap();
        g.check_at("s", 30, t0 + Duration::from_secs(61)).unwrap();
    }

    #[test]
    fn a_panic_holding_their_locks_neither_lifts_the_cap_nor_opens_the_breaker() {
        let g = SpendGuard::new(100, Duration::from_secs(60));
        let t0 = Instant::now();
        g.record_at("s", 90, t0);
        let b = CircuitBreaker::new(1, Duration::from_secs(60));
        b.on_failure_at("503", 0);
        std::thread::scope(|scope| {
            let _ = scope
                .spawn(|| {
                    let _spent = g.spent.lock();
                    let _state = b.state.lock();
                    panic!("poison both");
                })
                .join();
        });
        assert!(g.spent.is_poisoned() && b.state.is_poisoned());
        assert!(g.check_at("s", 30, t0).is_err(), "the cap still holds");
        assert!(matches!(b.decide_at(10), BreakerDecision::Refuse { .. }));
        b.on_success();
        assert_eq!(b.decide_at(11), BreakerDecision::Allow);
    }

    #[test]
    fn breaker_opens_cools_down_and_probes() {
        let b = CircuitBreaker::new(2, Duration::from_millis(1000));
        b.on_failure_at("503", 0);
        assert_eq!(b.decide_at(1), BreakerDecision::Allow);
        b.on_failure_at("503", 10);
        assert_eq!(
            b.decide_at(500),
            BreakerDecision::Refuse { retry_in_ms: 510 }
        );
        assert_eq!(b.decide_at(1010), BreakerDecision::Probe);
        assert_eq!(
            b.decide_at(1011),
            BreakerDecision::Refuse { retry_in_ms: 0 }
        );
        b.on_failure_at("503", 1020);
        assert!(matches!(b.decide_at(1500), BreakerDecision::Refuse { .. }));
        assert_eq!(b.decide_at(2020), BreakerDecision::Probe);
        b.on_success();
        assert_eq!(b.decide_at(2021), BreakerDecision::Allow);
        assert_eq!(b.snapshot().consecutive_failures, 0);
    }
}
