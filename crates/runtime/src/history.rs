//! A session's prepared history, kept between turns.
//!
//! Every turn hands the engine the whole prepared history (contract §7.5: the transcript's
//! compaction-aware context, sanitized; limited only by a configured turn count); the engine
//! decides what fits. Rebuilding that from the transcript on every turn made a turn's cost grow
//! with the session's length (a 10,000-turn replay spent most of its time re-walking,
//! re-sanitizing, re-counting and copying history it had already prepared). So the runtime
//! keeps it per session and appends what the transcript gained since it last looked; it
//! rebuilds only when the active branch changed in any other way (a compaction entry, a
//! rewrite, a new branch, a file another writer truncated).
//!
//! Engine calls borrow the messages: [`History::lend`] moves the vector into the params and
//! [`History::give_back`] moves it back, so a turn copies no message of its history. A history
//! that was lent and never given back (the call failed) is simply rebuilt by the next
//! [`History::sync`].

use clawctx_engine::pipeline::Sanitizer;
use clawctx_protocol::transcript::EntryKind;
use clawctx_protocol::AgentMessage;
use clawctx_transcript::SessionFile;

use crate::runtime::context_entries;

/// The prepared history of one transcript (see the module docs).
#[derive(Default)]
pub(crate) struct History {
    /// The sanitized context messages of the active branch, oldest first.
    messages: Vec<AgentMessage>,
    /// Estimated tokens of each message.
    tokens: Vec<u64>,
    /// The transcript entry each message came from (`None` for a synthetic tool result).
    entry_ids: Vec<Option<String>>,
    /// Sum of `tokens`.
    total: u64,
    sanitizer: Sanitizer,
    /// The active leaf and the number of file entries when last synced.
    leaf: Option<String>,
    seen: usize,
    /// Messages after the lent range, set aside while the range is lent.
    set_aside: Vec<AgentMessage>,
    /// Times the history was rebuilt from the whole transcript (for tests and diagnostics).
    rebuilds: u64,
    /// Tokens of the engine's last `systemPromptAddition` for this session: the next
    /// assembly's budget leaves room for it.
    pub(crate) addition_tokens: u64,
}

impl History {
    /// Brings the history up to date with `file` (whose view the caller just refreshed):
    /// appends new entries that continue the active branch, rebuilds on anything else.
    pub(crate) fn sync(&mut self, file: &SessionFile) {
        let entries = file.entries();
        let leaf = file.leaf_id();
        // A history never built, or lent and never given back, is rebuilt.
        let usable = self.rebuilds > 0
            && self.messages.len() == self.tokens.len()
            && self.set_aside.is_empty();
        if usable && self.seen == entries.len() && self.leaf.as_deref() == leaf {
            return;
        }
        if usable && self.seen <= entries.len() {
            let new = &entries[self.seen..];
            let mut parent = self.leaf.as_deref();
            let continues = new.iter().all(|e| {
                let ok =
                    e.parent_id.as_deref() == parent && !matches!(e.kind, EntryKind::Compaction(_));
                parent = Some(e.id.as_str());
                ok
            });
            if continues && parent == leaf {
                for e in new {
                    if let Some(m) = e.context_message() {
                        self.push(Some(&e.id), m);
                    }
                }
                self.seen = entries.len();
                self.leaf = leaf.map(str::to_owned);
                return;
            }
        }
        self.rebuild(file);
    }

    fn rebuild(&mut self, file: &SessionFile) {
        let (rebuilds, addition_tokens) = (self.rebuilds + 1, self.addition_tokens);
        *self = History {
            rebuilds,
            addition_tokens,
            ..History::default()
        };
        for (id, m) in context_entries(&file.active_path()) {
            self.push(Some(&id), m);
        }
        self.seen = file.entries().len();
        self.leaf = file.leaf_id().map(str::to_owned);
    }

    fn push(&mut self, entry_id: Option<&str>, m: AgentMessage) {
        // The sanitizer emits synthetic results for calls left open, then the message itself
        // (unless it drops it): every emitted message but a kept last one is made up.
        let mut out = Vec::new();
        self.sanitizer.push(m, |m| out.push(m));
        let last = out.len().saturating_sub(1);
        for (i, m) in out.into_iter().enumerate() {
            self.append(m, if i == last { entry_id } else { None });
        }
    }

    fn append(&mut self, m: AgentMessage, entry_id: Option<&str>) {
        let t = clawctx_tokens::message_tokens(&m);
        self.total += t;
        self.tokens.push(t);
        self.entry_ids.push(entry_id.map(str::to_owned));
        self.messages.push(m);
    }

    /// Closes tool calls left without results (the end of a history cut short), as the
    /// one-shot pipeline does at its end.
    pub(crate) fn close_pending(&mut self) {
        if !self.sanitizer.has_pending() {
            return;
        }
        let mut out = Vec::new();
        self.sanitizer.flush(|m| out.push(m));
        for m in out {
            self.append(m, None);
        }
    }

    /// Number of messages.
    pub(crate) fn len(&self) -> usize {
        self.messages.len()
    }

    /// Estimated tokens of `messages[range]`.
    pub(crate) fn tokens_of(&self, range: std::ops::Range<usize>) -> u64 {
        if range.start == 0 && range.end == self.tokens.len() {
            return self.total;
        }
        self.tokens.get(range).map(|t| t.iter().sum()).unwrap_or(0)
    }

    /// The messages (for reading; engine calls use [`Self::lend`]).
    pub(crate) fn messages(&self) -> &[AgentMessage] {
        &self.messages
    }

    /// Where the first message that came from one of `ids` is, searching from the end (the
    /// current turn's messages are the newest).
    pub(crate) fn position_of_first(
        &self,
        ids: &std::collections::HashSet<String>,
    ) -> Option<usize> {
        let mut found = None;
        for (i, id) in self.entry_ids.iter().enumerate().rev() {
            match id {
                Some(id) if ids.contains(id) => found = Some(i),
                // A synthetic result belongs to whatever surrounds it.
                None => {}
                Some(_) if found.is_some() => break,
                Some(_) => {}
            }
        }
        found
    }

    /// Moves `messages[start..end]` out for an engine call. With `start == 0` nothing is
    /// copied (the messages after `end` are set aside until [`Self::give_back`]); a later
    /// start (a configured turn limit) copies just that range.
    pub(crate) fn lend(&mut self, start: usize, end: usize) -> Vec<AgentMessage> {
        let end = end.min(self.messages.len());
        let start = start.min(end);
        if start > 0 {
            return self.messages[start..end].to_vec();
        }
        self.set_aside = self.messages.split_off(end);
        std::mem::take(&mut self.messages)
    }

    /// Takes back what [`Self::lend`] moved out (a copied range is dropped).
    pub(crate) fn give_back(&mut self, lent: Vec<AgentMessage>) {
        if !self.messages.is_empty() || lent.len() + self.set_aside.len() != self.tokens.len() {
            // A copied range, or not what was lent: the history itself never left.
            return;
        }
        self.messages = lent;
        self.messages.append(&mut self.set_aside);
    }

    /// Times the history was built from the whole transcript.
    #[cfg(test)]
    pub(crate) fn rebuilds(&self) -> u64 {
        self.rebuilds
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use clawctx_engine::pipeline::{prepare_history, PipelineOptions};
    use clawctx_protocol::transcript::CompactionEntryData;
    use clawctx_protocol::*;

    use super::*;

    fn assistant_calling(id: &str) -> AgentMessage {
        AgentMessage::Assistant(AssistantMessage {
            content: Content::Blocks(vec![ContentBlock::ToolCall(ToolCall {
                id: id.into(),
                name: "read".into(),
                arguments: serde_json::json!({}),
                thought_signature: None,
                extra: JsonMap::new(),
            })]),
            ..Default::default()
        })
    }

    fn result(id: &str) -> AgentMessage {
        AgentMessage::ToolResult(ToolResultMessage {
            tool_call_id: id.into(),
            tool_name: "read".into(),
            content: Content::Blocks(vec![ContentBlock::text("ok")]),
            ..Default::default()
        })
    }

    /// What the one-shot pipeline makes of the whole transcript: the history must always
    /// equal it, however it was brought up to date.
    fn one_shot(file: &SessionFile) -> Vec<AgentMessage> {
        let all = context_entries(&file.active_path())
            .into_iter()
            .map(|(_, m)| m)
            .collect();
        prepare_history(all, &PipelineOptions::default()).messages
    }

    #[test]
    fn appended_turns_extend_the_history_without_rebuilding_it_and_equal_the_one_shot_pipeline() {
        let dir = tempfile::tempdir().unwrap();
        let mut file = SessionFile::create(dir.path().join("s.jsonl"), "s", "/").unwrap();
        let mut h = History::default();
        h.sync(&file);
        for turn in 0..30 {
            file.append_message(AgentMessage::user(format!("question {turn}")))
                .unwrap();
            if turn % 3 == 0 {
                file.append_message(assistant_calling(&format!("c{turn}")))
                    .unwrap();
                // Every fifth call never gets its result: the sanitizer closes it.
                if turn % 5 != 0 {
                    file.append_message(result(&format!("c{turn}"))).unwrap();
                }
            }
            // An orphan result the sanitizer drops.
            if turn == 7 {
                file.append_message(result("nobody-called-this")).unwrap();
            }
            file.append_message(AgentMessage::assistant(format!("answer {turn}")))
                .unwrap();
            h.sync(&file);
            h.close_pending();
            assert_eq!(
                h.messages(),
                one_shot(&file).as_slice(),
                "after turn {turn} the kept history differs from a fresh §7.5 pipeline"
            );
            assert_eq!(
                h.tokens_of(0..h.len()),
                clawctx_tokens::messages_tokens(h.messages()),
                "running token total"
            );
        }
        assert_eq!(
            h.rebuilds(),
            1,
            "30 appended turns must not rebuild the history (only the first sync builds it)"
        );
    }

    #[test]
    fn a_compaction_or_another_branch_rebuilds_and_lending_copies_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let mut file = SessionFile::create(dir.path().join("s.jsonl"), "s", "/").unwrap();
        let mut ids = Vec::new();
        for i in 0..6 {
            ids.push(
                file.append_message(AgentMessage::user(format!("u{i}")))
                    .unwrap(),
            );
            file.append_message(AgentMessage::assistant(format!("a{i}")))
                .unwrap();
        }
        let mut h = History::default();
        h.sync(&file);
        file.append_compaction(CompactionEntryData {
            summary: "earlier turns".into(),
            first_kept_entry_id: ids[4].clone(),
            tokens_before: 100,
            ..Default::default()
        })
        .unwrap();
        h.sync(&file);
        assert_eq!(
            h.rebuilds(),
            2,
            "a compaction entry changes the context before the end: rebuild"
        );
        assert_eq!(h.messages(), one_shot(&file).as_slice());
        assert!(
            matches!(h.messages()[0], AgentMessage::CompactionSummary(_)),
            "the summary leads the rebuilt context"
        );

        // Lending the whole history moves it; giving it back restores it; a turn limit copies.
        let before = h.messages().to_vec();
        let n = h.len();
        let lent = h.lend(0, n - 1);
        assert_eq!(lent.as_slice(), &before[..n - 1]);
        assert_eq!(h.len(), 0, "lent, not copied");
        h.give_back(lent);
        assert_eq!(
            h.messages(),
            before.as_slice(),
            "given back in order, the set-aside tail included"
        );
        let copy = h.lend(2, n);
        assert_eq!(copy.as_slice(), &before[2..]);
        h.give_back(copy);
        assert_eq!(
            h.messages(),
            before.as_slice(),
            "a copied range leaves the history as it was"
        );

        // A history lent and never given back is rebuilt, not trusted.
        let _lost = h.lend(0, n);
        h.sync(&file);
        assert_eq!(h.messages(), before.as_slice());
        assert_eq!(h.rebuilds(), 3);
    }
}
