//! What the runtime keeps of a session between its turns, bounded.
//!
//! A session's open transcript and its prepared history ([`crate::history`]) stay in memory
//! between turns, so a turn costs what it adds rather than what the session holds. Kept for
//! every session a long-running process ever served, they grew without bound (the soak found
//! it: a gateway's memory rose with the history of every session it had seen). So at most
//! [`WARM_SESSIONS`] are kept; past that the least recently used one is dropped, and its next
//! turn reads it again from its transcript, once.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Sessions whose transcript and prepared history are kept between turns. Above the sessions a
/// gateway serves at once (the load bench runs 50), so busy sessions never rebuild.
pub const WARM_SESSIONS: usize = 128;

/// Values by transcript path, at most `cap`, the least recently used dropped first.
pub(crate) struct Warm<V> {
    entries: HashMap<PathBuf, (V, u64)>,
    clock: u64,
    cap: usize,
}

impl<V> Warm<V> {
    pub(crate) fn new(cap: usize) -> Self {
        Warm {
            entries: HashMap::new(),
            clock: 0,
            cap: cap.max(1),
        }
    }

    fn tick(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }

    /// The value at `path`, marked as just used.
    pub(crate) fn get(&mut self, path: &Path) -> Option<&V> {
        let now = self.tick();
        let e = self.entries.get_mut(path)?;
        e.1 = now;
        Some(&e.0)
    }

    /// Takes the value at `path` out.
    pub(crate) fn remove(&mut self, path: &Path) -> Option<V> {
        self.entries.remove(path).map(|(v, _)| v)
    }

    /// Keeps `value` at `path`; then, over the cap, drops the least recently used other
    /// entries that `busy` does not hold (an entry someone still uses is kept; its owner has
    /// it anyway).
    pub(crate) fn insert(&mut self, path: PathBuf, value: V, busy: impl Fn(&V) -> bool) {
        let now = self.tick();
        self.entries.insert(path.clone(), (value, now));
        while self.entries.len() > self.cap {
            let oldest = self
                .entries
                .iter()
                .filter(|(p, (v, _))| **p != path && !busy(v))
                .min_by_key(|(_, (_, used))| *used)
                .map(|(p, _)| p.clone());
            match oldest {
                Some(p) => {
                    self.entries.remove(&p);
                }
                None => break,
            }
        }
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_least_recently_used_idle_entry_goes_first() {
        let mut w = Warm::new(2);
        w.insert("a".into(), 1, |_| false);
        w.insert("b".into(), 2, |_| false);
        assert_eq!(w.get(Path::new("a")), Some(&1), "a is used again");
        w.insert("c".into(), 3, |_| false);
        assert_eq!(w.len(), 2);
        assert!(
            w.get(Path::new("b")).is_none(),
            "b, the least recently used, was dropped"
        );
        assert!(w.get(Path::new("a")).is_some() && w.get(Path::new("c")).is_some());
    }

    #[test]
    fn a_busy_entry_is_never_dropped() {
        let mut w = Warm::new(1);
        w.insert("a".into(), 1, |_| false);
        // `a` is busy: the cap is exceeded rather than an entry in use dropped (or the one
        // just kept).
        w.insert("b".into(), 2, |v| *v == 1);
        assert_eq!(w.len(), 2);
        assert!(w.get(Path::new("b")).is_some());
        w.insert("c".into(), 3, |_| false);
        assert_eq!(w.len(), 1, "once idle, the older entries go");
        assert!(w.get(Path::new("c")).is_some());
    }
}
