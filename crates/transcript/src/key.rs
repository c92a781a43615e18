//! Session keys (contract §10 "Session keys"): the routing buckets a conversation lives in.
//!
//! A key such as `agent:main:main` or `agent:ops:subagent:<uuid>` names *where* a conversation
//! is routed; the sessions map points each key at its current `sessionId`. The agent id is the
//! segment after `agent:` and decides which agent's session directory the session lives in
//! (§7.2 uses it for conflict checks). Keys like `cron:<jobId>` and `hook:<uuid>` carry no
//! agent id. Parsing is lenient (any string is a key); the helpers that build paths validate the
//! agent id, because it becomes a directory name.

use crate::error::{Result, TranscriptError};

/// What kind of routing bucket a key names, as far as its shape tells.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SessionKeyKind {
    /// `agent:<id>:<mainKey>` with a single trailing segment (default mainKey `main`).
    Main,
    /// `agent:<id>:subagent:<uuid>`.
    Subagent,
    /// `agent:<id>:<channel>:group:<id>`.
    Group,
    /// `agent:<id>:<channel>:channel:<id>`.
    Channel,
    /// `agent:<id>:<channel>:room:<id>`.
    Room,
    /// `agent:<id>:<channel>:dm:<user>`.
    DirectMessage,
    /// `agent:<id>:explicit:...` (model-run probes and explicit keys).
    Explicit,
    /// `cron:<jobId>`.
    Cron,
    /// `hook:<uuid>`.
    Hook,
    /// Any other shape.
    Other,
}

/// A parsed session key. Borrowing view over the original string.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SessionKey<'a> {
    raw: &'a str,
    agent_id: Option<&'a str>,
    rest: &'a str,
}

impl<'a> SessionKey<'a> {
    /// Parses a key. `agent:<agentId>:<rest>` (both non-empty) yields an agent id; anything else
    /// (including `cron:` and `hook:` keys) has none and `rest` is the whole key.
    pub fn parse(raw: &'a str) -> Self {
        if let Some(after) = raw.strip_prefix("agent:") {
            if let Some((agent, rest)) = after.split_once(':') {
                if !agent.is_empty() && !rest.is_empty() {
                    return SessionKey {
                        raw,
                        agent_id: Some(agent),
                        rest,
                    };
                }
            }
        }
        SessionKey {
            raw,
            agent_id: None,
            rest: raw,
        }
    }

    /// The whole key as given.
    pub fn as_str(&self) -> &'a str {
        self.raw
    }

    /// The agent id (segment after `agent:`), if the key has one.
    pub fn agent_id(&self) -> Option<&'a str> {
        self.agent_id
    }

    /// Everything after `agent:<agentId>:`, or the whole key when there is no agent id.
    pub fn rest(&self) -> &'a str {
        self.rest
    }

    /// The bucket kind.
    pub fn kind(&self) -> SessionKeyKind {
        if self.agent_id.is_none() {
            return if self.raw.starts_with("cron:") {
                SessionKeyKind::Cron
            } else if self.raw.starts_with("hook:") {
                SessionKeyKind::Hook
            } else {
                SessionKeyKind::Other
            };
        }
        let parts: Vec<&str> = self.rest.split(':').collect();
        match parts.as_slice() {
            [_main] => SessionKeyKind::Main,
            ["subagent", ..] => SessionKeyKind::Subagent,
            ["explicit", ..] => SessionKeyKind::Explicit,
            [_, "group", ..] => SessionKeyKind::Group,
            [_, "channel", ..] => SessionKeyKind::Channel,
            [_, "room", ..] => SessionKeyKind::Room,
            [_, "dm", ..] => SessionKeyKind::DirectMessage,
            _ => SessionKeyKind::Other,
        }
    }

    /// Whether this is a subagent key.
    pub fn is_subagent(&self) -> bool {
        self.kind() == SessionKeyKind::Subagent
    }
}

/// The agent id of a key (`agent:<agentId>:...`), or `None` (`cron:`, `hook:`, malformed).
pub fn agent_id_of(key: &str) -> Option<&str> {
    SessionKey::parse(key).agent_id()
}

/// `agent:<agentId>:main`, the default direct/main bucket.
pub fn main_session_key(agent_id: &str) -> Result<String> {
    validate_agent_id(agent_id)?;
    Ok(format!("agent:{agent_id}:main"))
}

/// `agent:<agentId>:subagent:<uuid>`, a fresh subagent key with a new v4 uuid.
pub fn new_subagent_session_key(agent_id: &str) -> Result<String> {
    validate_agent_id(agent_id)?;
    Ok(format!(
        "agent:{agent_id}:subagent:{}",
        uuid::Uuid::new_v4()
    ))
}

/// Refuses agent ids that cannot safely be a directory name (they become
/// `<stateDir>/agents/<agentId>/`). Also refuses `:`, which would change the key's parse.
pub fn validate_agent_id(agent_id: &str) -> Result<()> {
    validate_component("agent id", agent_id)?;
    if agent_id.contains(':') {
        return Err(TranscriptError::InvalidName {
            what: "agent id",
            value: agent_id.to_owned(),
            reason: "must not contain ':'",
        });
    }
    Ok(())
}

/// Refuses session ids that cannot safely be a file name (they become `<sessionId>.jsonl`).
pub fn validate_session_id(session_id: &str) -> Result<()> {
    validate_component("session id", session_id)
}

fn validate_component(what: &'static str, value: &str) -> Result<()> {
    let reason = if value.trim().is_empty() {
        Some("must not be blank")
    } else if value == "." || value == ".." {
        Some("must not be a relative path component")
    } else if value.contains(['/', '\\', '\0']) {
        Some("must not contain path separators or NUL")
    } else {
        None
    };
    match reason {
        Some(reason) => Err(TranscriptError::InvalidName {
            what,
            value: value.to_owned(),
            reason,
        }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // §10 "Session keys": the agent id is the segment after `agent:`.
    #[test]
    fn section10_agent_id_is_segment_after_agent_prefix() {
        assert_eq!(agent_id_of("agent:main:main"), Some("main"));
        assert_eq!(agent_id_of("agent:ops:discord:group:123"), Some("ops"));
        assert_eq!(agent_id_of("agent:*:explicit:model-run-1"), Some("*"));
        assert_eq!(agent_id_of("cron:nightly"), None);
        assert_eq!(agent_id_of("hook:5f1c"), None);
        assert_eq!(agent_id_of("agent:"), None);
        assert_eq!(agent_id_of("agent:x"), None);
        assert_eq!(agent_id_of("agent::main"), None);
        assert_eq!(
            SessionKey::parse("agent:ops:discord:dm:u1").rest(),
            "discord:dm:u1"
        );
    }

    #[test]
    fn section10_key_kinds() {
        use SessionKeyKind::*;
        let cases = [
            ("agent:main:main", Main),
            ("agent:main:work", Main),
            ("agent:a:subagent:0d6c", Subagent),
            ("agent:a:telegram:group:-100", Group),
            ("agent:a:slack:channel:C1", Channel),
            ("agent:a:matrix:room:r1", Room),
            ("agent:main:discord:dm:user", DirectMessage),
            ("agent:*:explicit:model-run-1", Explicit),
            ("cron:job-1", Cron),
            ("hook:abc", Hook),
            ("whatever", Other),
        ];
        for (key, kind) in cases {
            assert_eq!(SessionKey::parse(key).kind(), kind, "{key}");
        }
    }

    #[test]
    fn section8_helpers_build_main_and_subagent_keys() {
        assert_eq!(main_session_key("ops").unwrap(), "agent:ops:main");
        let sub = new_subagent_session_key("ops").unwrap();
        let parsed = SessionKey::parse(&sub);
        assert_eq!(parsed.agent_id(), Some("ops"));
        assert!(parsed.is_subagent());
        let uuid = parsed.rest().strip_prefix("subagent:").unwrap();
        assert!(uuid::Uuid::parse_str(uuid).is_ok(), "{uuid}");
        assert_ne!(sub, new_subagent_session_key("ops").unwrap());
    }

    #[test]
    fn unsafe_agent_ids_are_refused() {
        for bad in ["", " ", "..", "a/b", "a\\b", "a:b"] {
            assert!(main_session_key(bad).is_err(), "{bad:?}");
        }
        assert!(validate_session_id("../x").is_err());
        assert!(validate_session_id("0b9d-uuid").is_ok());
    }
}
