//! Session policies: which session keys the engine ignores entirely and which it serves
//! read-only (e.g. cron or subagent lanes that should not grow the store).
//!
//! Patterns are globs over session keys whose segments are separated by `:`: `*` matches within
//! one segment, `**` across segments (`agent:*:subagent:**`). They are compiled once with
//! `globset`, with `:` mapped to globset's literal separator.

use globset::{GlobBuilder, GlobSet, GlobSetBuilder};

use crate::error::{LosslessError, Result};

/// How the engine treats one session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SessionMode {
    /// Stored, compacted and assembled normally.
    Normal,
    /// Assembled from what is stored, never written (no ingest, no compaction).
    ReadOnly,
    /// Not stored at all: assemble passes the host's messages through (clamped to budget).
    Ignored,
}

/// Compiled ignore / read-only globs.
#[derive(Clone, Debug)]
pub struct SessionPolicy {
    ignore: GlobSet,
    read_only: GlobSet,
}

impl Default for SessionPolicy {
    fn default() -> Self {
        Self {
            ignore: GlobSet::empty(),
            read_only: GlobSet::empty(),
        }
    }
}

fn compile(patterns: &[String]) -> Result<GlobSet> {
    let mut b = GlobSetBuilder::new();
    for p in patterns {
        let glob = GlobBuilder::new(&p.replace(':', "/"))
            .literal_separator(true)
            .build()
            .map_err(|e| LosslessError::InvalidInput(format!("session pattern {p:?}: {e}")))?;
        b.add(glob);
    }
    b.build()
        .map_err(|e| LosslessError::InvalidInput(format!("session patterns: {e}")))
}

impl SessionPolicy {
    /// Compiles the two pattern lists. An invalid pattern is an error naming it.
    pub fn new(ignore: &[String], read_only: &[String]) -> Result<Self> {
        Ok(Self {
            ignore: compile(ignore)?,
            read_only: compile(read_only)?,
        })
    }

    /// The mode of `session_key` (ignore wins over read-only).
    pub fn mode(&self, session_key: &str) -> SessionMode {
        let k = session_key.replace(':', "/");
        if self.ignore.is_match(&k) {
            SessionMode::Ignored
        } else if self.read_only.is_match(&k) {
            SessionMode::ReadOnly
        } else {
            SessionMode::Normal
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn star_stays_in_segment_double_star_crosses() {
        let p = SessionPolicy::new(&["agent:*:cron:*".into()], &["agent:*:subagent:**".into()])
            .unwrap();
        assert_eq!(p.mode("agent:main:cron:nightly"), SessionMode::Ignored);
        assert_eq!(p.mode("agent:main:cron:nightly:x"), SessionMode::Normal);
        assert_eq!(p.mode("agent:main:subagent:a:b:c"), SessionMode::ReadOnly);
        assert_eq!(p.mode("agent:main:telegram:direct:1"), SessionMode::Normal);
    }
}
