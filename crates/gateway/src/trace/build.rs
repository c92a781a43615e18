//! A turn's trace from what the gateway sees: the split of each `assemble` answer (already
//! made for the record the dashboard reads, [`super::assembled`], so no token is counted
//! twice), the lossless frontier read while the model answers (which tells what was left out
//! and which stored message each part is), and the turn's outcome.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use clawctx_lossless::inspect::FrontierView;
use clawctx_runtime::{RuntimeError, TurnOutcome};

use super::assembled::{Breakdown, Recorded};
use super::{CompactionTrace, EngineServed, LeftItem, LeftOut, ModelTrace, TracePart, TurnTrace};
use crate::state::Shared;

/// Left-out items listed one by one at most (the rest are counted).
const LISTED: usize = 32;
/// Runtime warnings kept per turn, and their length.
const WARNINGS: usize = 8;
const WARNING_CHARS: usize = 300;

/// What a turn's task hands the trace when the turn has ended.
pub(crate) struct TurnEnd {
    model: ModelTrace,
    engine: Option<String>,
    compactions: Vec<CompactionTrace>,
    warnings: Vec<String>,
}

impl TurnEnd {
    /// From the turn's result and its wall time.
    pub(crate) fn of(result: &Result<TurnOutcome, RuntimeError>, wall: Duration) -> TurnEnd {
        let turn_ms = wall.as_secs_f64() * 1000.0;
        match result {
            Ok(o) => TurnEnd {
                model: ModelTrace {
                    calls: o.model_calls as u64,
                    latency_ms: o.model_micros as f64 / 1000.0,
                    turn_ms,
                    input_tokens: o.usage.input,
                    output_tokens: o.usage.output,
                    cached_tokens: o.usage.cache_read,
                    cache_write_tokens: o.usage.cache_write,
                    prompt_estimates: o.prompt_tokens.clone(),
                    outcome: "ok".into(),
                },
                engine: Some(o.engine.clone()),
                compactions: o
                    .compactions
                    .iter()
                    .map(|c| CompactionTrace {
                        trigger: c.trigger.clone(),
                        by: c.by.clone(),
                        tokens_before: c.tokens_before,
                        tokens_after: c.tokens_after,
                        ms: c.micros as f64 / 1000.0,
                    })
                    .collect(),
                warnings: o
                    .warnings
                    .iter()
                    .take(WARNINGS)
                    .map(|w| w.chars().take(WARNING_CHARS).collect())
                    .collect(),
            },
            Err(e) => TurnEnd {
                model: ModelTrace {
                    turn_ms,
                    outcome: e.to_string().chars().take(WARNING_CHARS).collect(),
                    ..Default::default()
                },
                engine: None,
                compactions: Vec::new(),
                warnings: Vec::new(),
            },
        }
    }
}

/// The engine that served and why, from the runtime's selection and the registry's
/// quarantines.
pub(crate) fn engine_served(shared: &Shared, served: &str) -> EngineServed {
    let settings = shared.runtime.runtime_settings();
    let selection = settings.context_engine_selection;
    let source = serde_json::to_value(selection.source)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_else(|| "unknown".into());
    let selected = selection.selected_id;
    let reason = match selected.as_deref() {
        Some(s) if s == served => match source.as_str() {
            "configured" => format!("{served} is the configured engine"),
            "default" => format!("{served} is the default engine"),
            _ => format!("{served} is the engine in charge"),
        },
        Some(s) => {
            let quarantine = shared
                .registry
                .as_ref()
                .and_then(|r| r.quarantines().into_iter().find(|q| q.engine_id == s));
            match quarantine {
                Some(q) => format!(
                    "fallback: {s} is quarantined ({}: {}), so {served} answered",
                    q.operation,
                    q.reason.chars().take(WARNING_CHARS).collect::<String>()
                ),
                None => format!("fallback: {s} did not answer, so {served} did"),
            }
        }
        None => format!("{served} is the engine in charge"),
    };
    EngineServed {
        id: served.to_owned(),
        selected: selected.filter(|s| s != served),
        reason,
    }
}

/// The trace's parts of a split answer (no text is read again: the split has the tokens and
/// digests). Public for the trace bench.
#[doc(hidden)]
pub fn parts_of(b: &Breakdown) -> Vec<TracePart> {
    b.parts
        .iter()
        .map(|p| {
            // Legacy's compaction summary is a summary too (no id: it lives in the transcript).
            let summary_role = matches!(
                p.role.as_deref(),
                Some("compactionSummary" | "branchSummary")
            );
            TracePart {
                kind: if summary_role {
                    "summary".into()
                } else {
                    p.kind.to_owned()
                },
                index: p.index.map(|i| i.min(u32::MAX as usize) as u32),
                id: p.id.clone(),
                depth: p.depth,
                role: p.role.clone(),
                tokens: p.tokens,
                digest: format!("{:08x}", p.digest),
                span: None,
                quotes: p.quotes.iter().map(|n| format!("msg_{n}")).collect(),
                hits: Vec::new(),
            }
        })
        .collect()
}

/// A trace in the making: fed every assembly of a turn, the frontier after it, then the end.
pub(crate) struct Builder {
    started: Instant,
    trace: TurnTrace,
    /// The engine that answered the last assembly instead of the one in charge.
    fallback: Option<clawctx_engine::Fallback>,
}

impl Builder {
    /// A trace for `key`'s turn from `source` (`turn` or `engine-api`).
    pub(crate) fn new(key: &str, source: &str) -> Builder {
        Builder {
            started: Instant::now(),
            trace: TurnTrace {
                session_key: key.to_owned(),
                source: source.to_owned(),
                ..Default::default()
            },
            fallback: None,
        }
    }

    /// Whether the last assembly was answered by the fallback of the engine in charge.
    pub(crate) fn by_fallback(&self) -> bool {
        self.fallback.is_some()
    }

    /// When the turn began (summarizer calls are taken from then on).
    pub(crate) fn started(&self) -> Instant {
        self.started
    }

    /// Whether an assembly was seen.
    pub(crate) fn has_assembly(&self) -> bool {
        self.trace.assemble_calls > 0
    }

    /// One `assemble` answer (the last one's parts are kept).
    pub(crate) fn assembled(&mut self, r: &Recorded) {
        let b = r.breakdown();
        self.fallback.clone_from(&r.fallback);
        let t = &mut self.trace;
        t.assemble_calls += 1;
        t.at_ms = r.at_ms;
        t.session_id.clone_from(&r.session_id);
        t.token_budget = r.token_budget;
        t.history_messages = r.history_messages as u64;
        t.gateway_tokens = b.total_tokens;
        t.engine_estimate = b.estimated_tokens;
        t.epoch = r
            .result
            .context_projection
            .as_ref()
            .and_then(|p| p.epoch.clone());
        t.left_out = None;
        t.parts = parts_of(b);
    }

    /// Why the recalled block quotes each message, from the lossless engine's last assembly of
    /// the session: kept only when they are the block's quotes (else another assembly came
    /// between, and the scores would be of a block the model did not see).
    pub(crate) fn recall_hits(&mut self, hits: Vec<clawctx_lossless::RecallHit>) {
        let Some(block) = self.trace.parts.iter_mut().find(|p| p.kind == "recalled") else {
            return;
        };
        let hits: Vec<super::RecallHitTrace> = hits
            .into_iter()
            .map(|h| super::RecallHitTrace {
                id: format!("msg_{}", h.id),
                score: h.score.map(|s| (s * 100.0).round() / 100.0),
                matched: u32::try_from(h.matched).unwrap_or(u32::MAX),
            })
            .collect();
        let mut theirs: Vec<&str> = hits.iter().map(|h| h.id.as_str()).collect();
        let mut quoted: Vec<&str> = block.quotes.iter().map(String::as_str).collect();
        theirs.sort_unstable();
        quoted.sort_unstable();
        if theirs == quoted {
            block.hits = hits;
        }
    }

    /// What was left out, for an engine other than lossless: the history messages the answer
    /// does not hold.
    pub(crate) fn history_left_out(&mut self) {
        let t = &mut self.trace;
        let sent = t
            .parts
            .iter()
            .filter(|p| p.kind == "raw" || p.kind == "summary")
            .count() as u64;
        let items = t.history_messages.saturating_sub(sent);
        t.left_out = Some(LeftOut {
            known: true,
            items,
            messages: items,
            listed: Vec::new(),
            ..Default::default()
        });
    }

    /// The lossless frontier read after the assembly: which stored item each sent part is,
    /// and what was left out with why.
    pub(crate) fn frontier(&mut self, view: Option<&FrontierView>) {
        let t = &mut self.trace;
        let Some(view) = view else {
            t.left_out = Some(LeftOut {
                known: false,
                unknown: Some("the engine's store has no conversation for this session yet".into()),
                ..Default::default()
            });
            return;
        };
        let now = view.conversation.epoch;
        let then = t
            .epoch
            .as_deref()
            .and_then(|e| e.rsplit_once(':'))
            .and_then(|(_, n)| n.parse::<i64>().ok());
        if let Some(then) = then.filter(|e| *e != now) {
            t.left_out = Some(LeftOut {
                known: false,
                unknown: Some(format!(
                    "the store was compacted before its frontier was read (epoch {then}, now {now})"
                )),
                stored_messages: Some(view.conversation.msg_count),
                ..Default::default()
            });
            return;
        }
        // A turn's assembly was given the conversation's first `history_messages` messages
        // (seq 0 on): what was stored after it (the turn's prompt and reply, when the frontier
        // is read late) was not there to be sent, and would otherwise line up with the sent
        // raw parts and push the oldest sent messages into "left out".
        let frontier = match t.source.as_str() {
            "turn" => {
                let n = t.history_messages as i64;
                let end = view
                    .frontier
                    .iter()
                    .position(|i| i.id.starts_with("msg_") && i.first_seq >= n)
                    .unwrap_or(view.frontier.len());
                &view.frontier[..end]
            }
            _ => &view.frontier[..],
        };
        // The sent summaries and raw messages, in order: a suffix of the frontier, but the last
        // one or two (the prompt, a turn's own messages) may not be stored yet.
        let seq: Vec<usize> = t
            .parts
            .iter()
            .enumerate()
            .filter(|(_, p)| p.kind == "summary" || p.kind == "raw")
            .map(|(i, _)| i)
            .collect();
        let n = seq.len();
        let aligned = (0..=n.min(2)).find_map(|unstored| {
            let m = n - unstored;
            let start = frontier.len().checked_sub(m)?;
            let fits = seq[..m].iter().zip(&frontier[start..]).all(|(&i, item)| {
                let p = &t.parts[i];
                if p.kind == "summary" {
                    p.id.as_deref() == Some(item.id.as_str())
                } else {
                    item.id.starts_with("msg_")
                }
            });
            fits.then_some((start, m))
        });
        let kept_from = match aligned {
            Some((start, m)) => {
                for (&i, item) in seq[..m].iter().zip(&frontier[start..]) {
                    let p = &mut t.parts[i];
                    if p.kind == "summary" {
                        p.span = Some([item.first_seq, item.last_seq]);
                    } else {
                        p.id = Some(item.id.clone());
                    }
                }
                start
            }
            None => frontier.len().saturating_sub(n),
        };
        let left = &frontier[..kept_from];
        let quoted: HashSet<&str> = t
            .parts
            .iter()
            .flat_map(|p| p.quotes.iter().map(String::as_str))
            .collect();
        // The system prompt addition is outside the engine's budget.
        let addition: u64 = t
            .parts
            .iter()
            .filter(|p| p.kind == "systemPromptAddition")
            .map(|p| p.tokens)
            .sum();
        let unused = t
            .token_budget
            .unwrap_or(0)
            .saturating_sub(t.gateway_tokens.saturating_sub(addition)) as i64;
        let listed: Vec<LeftItem> = left
            .iter()
            .rev()
            .take(LISTED)
            .map(|item| LeftItem {
                id: item.id.clone(),
                tokens: item.tokens,
                first_seq: item.first_seq,
                last_seq: item.last_seq,
                quoted: quoted.contains(item.id.as_str()),
                // In words on reading (`views::reasons`): the numbers are what is stored.
                reason: String::new(),
            })
            .collect();
        let span = |a: i64, b: i64| (b - a + 1).max(0) as u64;
        t.left_out = Some(LeftOut {
            known: aligned.is_some() || left.is_empty(),
            unknown: aligned.is_none().then(|| {
                "the sent parts do not line up with the frontier; counts are estimates".into()
            }),
            items: left.len() as u64,
            tokens: left.iter().map(|i| i.tokens.max(0) as u64).sum(),
            messages: left.iter().map(|i| span(i.first_seq, i.last_seq)).sum(),
            listed,
            stored_messages: Some(view.conversation.msg_count),
            summarized_messages: t
                .parts
                .iter()
                .filter_map(|p| p.span)
                .map(|[a, b]| span(a, b))
                .sum(),
            unused: t.token_budget.map(|_| unused),
        });
    }

    /// The finished trace; `end` is the turn's (`None` for an engine-API assembly).
    pub(crate) fn finish(
        mut self,
        shared: &Shared,
        end: Option<TurnEnd>,
        summarizer: Vec<super::SummarizerTrace>,
    ) -> TurnTrace {
        self.trace.engine = match &self.fallback {
            // The engine in charge did not answer the assembly the model got: say who did.
            Some(f) => EngineServed {
                id: f.engine_id.clone(),
                selected: Some(f.instead_of.clone()),
                reason: format!(
                    "fallback: {}, so {} answered",
                    f.reason.chars().take(WARNING_CHARS).collect::<String>(),
                    f.engine_id
                ),
            },
            None => {
                let served = end
                    .as_ref()
                    .and_then(|e| e.engine.clone())
                    .unwrap_or_else(|| shared.runtime.engine_id());
                engine_served(shared, &served)
            }
        };
        if let Some(end) = end {
            self.trace.model = Some(end.model);
            self.trace.compactions = end.compactions;
            self.trace.runtime_warnings = end.warnings;
        }
        self.trace.summarizer = summarizer;
        // Only while an LLM summarizer is the host's (the file outlives a config change).
        if shared
            .registry
            .as_ref()
            .is_some_and(|r| r.host_summarizer().is_some())
        {
            self.trace.summarizer_breaker = super::BreakerTrace::read(shared.runtime.state_dir());
        }
        if self.trace.at_ms == 0 {
            self.trace.at_ms = super::now_ms();
        }
        self.trace
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use clawctx_lossless::inspect::FrontierItem;
    use clawctx_lossless::ConvRow;

    use super::*;

    fn part(kind: &str, id: Option<&str>) -> TracePart {
        TracePart {
            kind: kind.into(),
            index: None,
            id: id.map(str::to_owned),
            depth: None,
            role: None,
            tokens: 10,
            digest: String::new(),
            span: None,
            quotes: Vec::new(),
            hits: Vec::new(),
        }
    }

    fn item(id: &str, first_seq: i64, last_seq: i64) -> FrontierItem {
        FrontierItem {
            id: id.into(),
            tokens: 10,
            first_seq,
            last_seq,
        }
    }

    /// The turn was assembled from messages 0–5 (a summary of 0–3, then 4 and 5, all sent);
    /// its prompt and reply (6, 7) were stored before the frontier was read. Nothing was
    /// left out: read as a suffix, the two stored late lined up with the sent raw parts and
    /// pushed messages 4 and 5 into "left out".
    #[test]
    fn messages_stored_after_a_turns_assembly_are_not_counted_as_left_out() {
        let mut b = Builder::new("k", "turn");
        b.trace.history_messages = 6;
        b.trace.parts = vec![
            part("summary", Some("sum_1")),
            part("raw", None),
            part("raw", None),
        ];
        let view = FrontierView {
            conversation: ConvRow {
                id: 1,
                agent_id: "main".into(),
                session_key: "k".into(),
                active: true,
                next_seq: 8,
                next_ord: 4,
                msg_count: 8,
                msg_tokens: 80,
                raw_bytes: 320,
                frontier_tokens: 50,
                frontier_items: 5,
                epoch: 0,
            },
            frontier: vec![
                item("sum_1", 0, 3),
                item("msg_5", 4, 4),
                item("msg_6", 5, 5),
                item("msg_7", 6, 6),
                item("msg_8", 7, 7),
            ],
        };
        b.frontier(Some(&view));
        let left = b.trace.left_out.as_ref().unwrap();
        assert!(left.known);
        assert_eq!((left.items, left.messages), (0, 0), "{left:?}");
        assert_eq!(b.trace.parts[1].id.as_deref(), Some("msg_5"));
        assert_eq!(b.trace.parts[0].span, Some([0, 3]));
    }
}
