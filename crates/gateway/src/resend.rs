//! Each session's last chat answer, kept so that a re-sent request is answered again instead
//! of run as a new turn (the rule is [`crate::openai`]'s, in its module text; its windows are
//! here).
//!
//! In memory only: a restart forgets it, and at most [`RECENT_SESSIONS`] sessions are kept,
//! the oldest dropped first. It is the gateway's shared state ([`crate::state`]) that holds
//! it, which is why it is not in the chat handler: the state imports no handler.

use std::time::{Duration, Instant};

use crate::openai_wire::ChatCompletion;

/// How long a byte-identical re-send without a key is the same request.
const RESEND_WINDOW: Duration = Duration::from_secs(10);
/// How long an answer is kept for its idempotency key.
const KEYED_WINDOW: Duration = Duration::from_secs(24 * 60 * 60);
/// Sessions whose last answer is kept at most (the oldest goes first).
const RECENT_SESSIONS: usize = 4096;

/// Each session's last answer (plain or streamed to its end), so that a re-sent request is answered again instead of
/// being run as a new turn (see [`crate::openai`]'s module text).
#[derive(Default)]
pub(crate) struct RecentAnswers(std::sync::Mutex<std::collections::HashMap<String, Recent>>);

struct Recent {
    key: Option<String>,
    fingerprint: [u8; 32],
    body: ChatCompletion,
    at: Instant,
}

/// What to do with a request given the session's last answer.
pub(crate) enum Replay {
    /// Run it.
    Run,
    /// Answer this again.
    Answer(Box<ChatCompletion>),
    /// The key was used for a different request.
    Conflict,
}

impl RecentAnswers {
    /// What to do with `session`'s request of idempotency `key` and `fingerprint`.
    pub(crate) fn check(&self, session: &str, key: Option<&str>, fingerprint: &[u8; 32]) -> Replay {
        let Ok(map) = self.0.lock() else {
            return Replay::Run;
        };
        let Some(last) = map.get(session) else {
            return Replay::Run;
        };
        let age = last.at.elapsed();
        match (key, last.key.as_deref()) {
            (Some(k), Some(prev)) if k == prev && age <= KEYED_WINDOW => {
                if last.fingerprint == *fingerprint {
                    Replay::Answer(Box::new(last.body.clone()))
                } else {
                    Replay::Conflict
                }
            }
            (None, _) if last.fingerprint == *fingerprint && age <= RESEND_WINDOW => {
                Replay::Answer(Box::new(last.body.clone()))
            }
            _ => Replay::Run,
        }
    }

    /// Keeps `body` as `session`'s last answer.
    pub(crate) fn remember(
        &self,
        session: &str,
        key: Option<String>,
        fingerprint: [u8; 32],
        body: &ChatCompletion,
    ) {
        let Ok(mut map) = self.0.lock() else {
            return;
        };
        if map.len() >= RECENT_SESSIONS && !map.contains_key(session) {
            let oldest = map.iter().min_by_key(|(_, r)| r.at).map(|(k, _)| k.clone());
            if let Some(oldest) = oldest {
                map.remove(&oldest);
            }
        }
        map.insert(
            session.to_owned(),
            Recent {
                key,
                fingerprint,
                body: body.clone(),
                at: Instant::now(),
            },
        );
    }
}
