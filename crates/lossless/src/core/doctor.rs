//! Doctor and status: checks the invariants the engine promises and reports size and growth.
//!
//! Integrity means, per active conversation: every stored message is covered by the frontier
//! exactly once (raw, or through exactly one chain of summaries); no summary is orphaned (in no
//! frontier and child of no summary); every summary's children exist and a leaf covers a
//! contiguous run of messages; a tool result is never separated from its call (both raw and
//! adjacent, or under the same leaf); and the running totals match the rows. Archived
//! conversations (after a reset) are checked the same way against their own frontier.

use std::collections::{HashMap, HashSet};

use serde::Serialize;

use crate::core::codec::role;
use crate::core::conv::ConvRow;
use crate::error::Result;

/// One problem found.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct DoctorIssue {
    /// Conversation row (0 = whole database).
    pub conversation_id: i64,
    /// Short machine code (`uncovered`, `double-covered`, `orphan-summary`, ...).
    pub code: String,
    /// Human explanation.
    pub detail: String,
}

/// Size and growth figures.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusReport {
    /// Database file bytes (pages × page size, WAL excluded).
    pub db_bytes: u64,
    /// Free pages' bytes.
    pub free_bytes: u64,
    /// Conversation rows (active + archived).
    pub conversations: u64,
    /// Messages stored.
    pub messages: u64,
    /// Summaries stored.
    pub summaries: u64,
    /// Deepest summary.
    pub max_depth: i64,
    /// Summaries per depth.
    pub depth_histogram: Vec<(i64, u64)>,
    /// Text bytes of all messages ingested.
    pub raw_text_bytes: u64,
    /// Tokens of all messages ingested.
    pub message_tokens: u64,
    /// Frontier tokens over active conversations.
    pub frontier_tokens: u64,
    /// `db_bytes / raw_text_bytes`.
    pub bytes_per_raw_byte: f64,
    /// Average database bytes per stored message.
    pub bytes_per_message: f64,
    /// The summary DAG by depth: counts and fanout.
    pub dag: Vec<DagLevel>,
    /// Raw messages in the active frontiers.
    pub frontier_messages: u64,
    /// Summaries in the active frontiers.
    pub frontier_summaries: u64,
    /// Large payloads stored (once per content).
    pub payloads: u64,
    /// Their text bytes.
    pub payload_bytes: u64,
    /// Messages pointing at them (`payload_refs - payloads` copies were saved).
    pub payload_refs: u64,
}

/// One depth of the summary DAG.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DagLevel {
    /// Depth (0 = leaf summaries of raw messages).
    pub depth: i64,
    /// Summaries at this depth.
    pub count: u64,
    /// Mean children per summary.
    pub mean_fanout: f64,
    /// Most children of one summary.
    pub max_fanout: u64,
}

/// The backend's own integrity check in a [`DoctorReport`], named for the backend, so a report
/// of a PostgreSQL store does not claim a SQLite check: `"sqliteCheck": "ok"` (SQLite's
/// `PRAGMA quick_check`) or `"postgresCheck": "ok"` (the schema check: the schema row names
/// this application at this build's version; PostgreSQL checks its own storage).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum StoreCheck {
    /// SQLite's `quick_check` result (`ok` or its findings).
    #[serde(rename = "sqliteCheck")]
    Sqlite(String),
    /// The PostgreSQL schema check (`ok` or what is wrong).
    #[serde(rename = "postgresCheck")]
    Postgres(String),
}

impl StoreCheck {
    /// The check's result (`ok` when nothing is wrong), whatever the backend.
    pub fn result(&self) -> &str {
        match self {
            StoreCheck::Sqlite(r) | StoreCheck::Postgres(r) => r,
        }
    }
}

/// Doctor's verdict.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DoctorReport {
    /// No issues.
    pub ok: bool,
    /// The store's own check, named for its backend (`sqliteCheck` or `postgresCheck`).
    #[serde(flatten)]
    pub store_check: StoreCheck,
    /// Problems.
    pub issues: Vec<DoctorIssue>,
    /// Conversations checked.
    pub conversations_checked: usize,
    /// Size figures.
    pub status: StatusReport,
}

/// A summary's children `(kind, id)` in order, by summary id.
pub(crate) type Children = HashMap<i64, Vec<(i64, i64)>>;

/// The checks of one conversation (see the module docs): `by_seq` its messages `(id, seq,
/// role)` in seq order, `frontier` its frontier `(kind, item id, tokens)` in order,
/// `children` every summary's children. Shared by every backend.
pub(crate) fn check_conversation(
    conv: &ConvRow,
    by_seq: &[(i64, i64, i64)],
    frontier: &[(i64, i64, i64)],
    children: &Children,
    issues: &mut Vec<DoctorIssue>,
) {
    let msgs: HashMap<i64, (i64, i64)> = by_seq
        .iter()
        .map(|&(id, seq, ro)| (id, (seq, ro)))
        .collect();
    // Raw frontier items are messages of this conversation.
    for (kind, id, _) in frontier {
        if *kind == 0 && !msgs.contains_key(id) {
            issues.push(DoctorIssue {
                conversation_id: conv.id,
                code: "missing-item".into(),
                detail: format!(
                    "the frontier names msg_{id}, which is not a message of this conversation"
                ),
            });
        }
    }
    // `seq` is unique within a conversation (no index enforces it since schema v8).
    for w in by_seq.windows(2) {
        if w[0].1 == w[1].1 {
            issues.push(DoctorIssue {
                conversation_id: conv.id,
                code: "duplicate-seq".into(),
                detail: format!("msg_{} and msg_{} share seq {}", w[0].0, w[1].0, w[1].1),
            });
        }
    }
    let ft: i64 = frontier.iter().map(|f| f.2).sum();
    if ft != conv.frontier_tokens || frontier.len() as i64 != conv.frontier_items {
        issues.push(DoctorIssue {
            conversation_id: conv.id,
            code: "totals".into(),
            detail: format!(
                "running totals say {} tokens / {} items, frontier has {ft} / {}",
                conv.frontier_tokens,
                conv.frontier_items,
                frontier.len()
            ),
        });
    }
    if msgs.len() as i64 != conv.msg_count {
        issues.push(DoctorIssue {
            conversation_id: conv.id,
            code: "totals".into(),
            detail: format!("msg_count {} but {} rows", conv.msg_count, msgs.len()),
        });
    }
    // Coverage: message id -> (count, covering leaf or 0 for raw).
    let mut cover: HashMap<i64, (u32, i64)> = HashMap::new();
    let mut prev_raw: Option<i64> = None;
    for (kind, id, _) in frontier {
        if *kind == 0 {
            let e = cover.entry(*id).or_insert((0, 0));
            e.0 += 1;
            e.1 = 0;
            if let (Some((_, ro)), Some(prev)) = (msgs.get(id), prev_raw) {
                let _ = (ro, prev);
            }
            prev_raw = Some(*id);
        } else {
            prev_raw = None;
            let mut stack = vec![(*id, 0i64)];
            let mut guard = 0usize;
            while let Some((sid, leaf)) = stack.pop() {
                guard += 1;
                if guard > 10_000_000 {
                    break;
                }
                let Some(kids) = children.get(&sid) else {
                    issues.push(DoctorIssue {
                        conversation_id: conv.id,
                        code: "childless-summary".into(),
                        detail: format!("sum_{sid} has no children"),
                    });
                    continue;
                };
                let _ = leaf;
                for (k, cid) in kids {
                    if *k == 0 {
                        if msgs.contains_key(cid) {
                            let e = cover.entry(*cid).or_insert((0, 0));
                            e.0 += 1;
                            e.1 = sid;
                        }
                    } else {
                        stack.push((*cid, sid));
                    }
                }
            }
        }
    }
    for (id, seq, _) in by_seq {
        match cover.get(id).map(|c| c.0).unwrap_or(0) {
            1 => {}
            0 => issues.push(DoctorIssue {
                conversation_id: conv.id,
                code: "uncovered".into(),
                detail: format!("msg_{id} (seq {seq}) is not covered by the frontier"),
            }),
            n => issues.push(DoctorIssue {
                conversation_id: conv.id,
                code: "double-covered".into(),
                detail: format!("msg_{id} (seq {seq}) is covered {n} times"),
            }),
        }
    }
    // Tool pairs: a result and the message before it (its call group) share coverage.
    for w in by_seq.windows(2) {
        let (prev, cur) = (w[0], w[1]);
        if cur.2 != role::TOOL_RESULT {
            continue;
        }
        let a = cover.get(&prev.0).map(|c| c.1);
        let b = cover.get(&cur.0).map(|c| c.1);
        if a != b {
            issues.push(DoctorIssue {
                conversation_id: conv.id,
                code: "tool-pair-split".into(),
                detail: format!(
                    "msg_{} (tool result) is separated from msg_{} before it",
                    cur.0, prev.0
                ),
            });
        }
    }
    // Raw tool results in the frontier must follow their call group directly.
    let mut last: Option<(i64, i64)> = None;
    for (kind, id, _) in frontier {
        if *kind == 0 {
            if let Some((seq, ro)) = msgs.get(id) {
                if *ro == role::TOOL_RESULT {
                    let ok = matches!(last, Some((k, pseq)) if k == 0 && pseq == seq - 1);
                    if !ok {
                        issues.push(DoctorIssue {
                            conversation_id: conv.id,
                            code: "tool-result-first".into(),
                            detail: format!(
                                "msg_{id} (tool result) does not follow its call in the frontier"
                            ),
                        });
                    }
                }
                last = Some((0, *seq));
            }
        } else {
            last = Some((1, -1));
        }
    }
}

/// The DAG checks over the whole store: orphan summaries (in no frontier, child of no
/// summary), children that do not exist (`message_exists` tells about message ids) and
/// depths that do not follow the DAG (a leaf's children are messages, a condensed summary's
/// are summaries one level shallower). `summary_conv`: every summary's `(conversation,
/// depth)`; `in_frontier`: the summaries in some frontier. Shared by every backend.
pub(crate) fn check_dag(
    children: &Children,
    summary_conv: &HashMap<i64, (i64, i64)>,
    in_frontier: &HashSet<i64>,
    mut message_exists: impl FnMut(i64) -> Result<bool>,
    issues: &mut Vec<DoctorIssue>,
) -> Result<()> {
    let mut referenced: HashSet<i64> = HashSet::new();
    for kids in children.values() {
        for (k, id) in kids {
            if *k == 1 {
                referenced.insert(*id);
            }
        }
    }
    for (sid, (conv_id, _)) in summary_conv {
        if !in_frontier.contains(sid) && !referenced.contains(sid) {
            issues.push(DoctorIssue {
                conversation_id: *conv_id,
                code: "orphan-summary".into(),
                detail: format!(
                    "sum_{sid} is neither in a frontier nor a child of another summary"
                ),
            });
        }
    }
    for (sid, kids) in children {
        for (k, cid) in kids {
            let exists = if *k == 1 {
                summary_conv.contains_key(cid)
            } else {
                message_exists(*cid)?
            };
            if !exists {
                issues.push(DoctorIssue {
                    conversation_id: summary_conv.get(sid).map(|s| s.0).unwrap_or(0),
                    code: "dangling-child".into(),
                    detail: format!("sum_{sid} points at a missing child {cid}"),
                });
            }
        }
    }
    for (sid, kids) in children {
        let Some(&(conv_id, depth)) = summary_conv.get(sid) else {
            continue;
        };
        for (k, cid) in kids {
            let fits = match (*k, summary_conv.get(cid)) {
                (0, _) => depth == 0,
                (_, Some(&(_, d))) => d == depth - 1,
                // A missing child is reported above.
                (_, None) => true,
            };
            if !fits {
                let child = if *k == 0 {
                    crate::core::ids::message_id(*cid)
                } else {
                    crate::core::ids::summary_id(*cid)
                };
                issues.push(DoctorIssue {
                    conversation_id: conv_id,
                    code: "depth-mismatch".into(),
                    detail: format!("sum_{sid} (depth {depth}) has child {child} of another level"),
                });
            }
        }
    }
    Ok(())
}

/// Issues in report order: by conversation, then code. Shared by every backend.
pub(crate) fn sort_issues(issues: &mut [DoctorIssue]) {
    issues.sort_by(|a, b| (a.conversation_id, &a.code).cmp(&(b.conversation_id, &b.code)));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conv(msgs: i64, items: i64, tokens: i64) -> ConvRow {
        ConvRow {
            id: 1,
            agent_id: "a".into(),
            session_key: "k".into(),
            active: true,
            next_seq: msgs,
            next_ord: items,
            msg_count: msgs,
            msg_tokens: tokens,
            raw_bytes: 0,
            frontier_tokens: tokens,
            frontier_items: items,
            epoch: 0,
        }
    }

    fn codes(issues: &[DoctorIssue]) -> Vec<&str> {
        issues.iter().map(|i| i.code.as_str()).collect()
    }

    #[test]
    fn a_sound_conversation_has_no_issues() {
        // msg 1 (user), 2 (assistant call), 3 (tool result) under sum 10; msg 4 raw.
        let by_seq = [
            (1, 0, role::USER),
            (2, 1, role::ASSISTANT),
            (3, 2, role::TOOL_RESULT),
            (4, 3, role::USER),
        ];
        let frontier = [(1, 10, 7), (0, 4, 3)];
        let children: Children = [(10, vec![(0, 1), (0, 2), (0, 3)])].into_iter().collect();
        let mut issues = Vec::new();
        check_conversation(&conv(4, 2, 10), &by_seq, &frontier, &children, &mut issues);
        assert!(issues.is_empty(), "{issues:?}");
        let summaries = [(10, (1, 0))].into_iter().collect();
        let in_frontier = [10].into_iter().collect();
        check_dag(
            &children,
            &summaries,
            &in_frontier,
            |_| Ok(true),
            &mut issues,
        )
        .unwrap();
        assert!(issues.is_empty(), "{issues:?}");
    }

    #[test]
    fn broken_conversations_are_reported() {
        let by_seq = [
            (1, 0, role::USER),
            (2, 0, role::USER),
            (3, 1, role::TOOL_RESULT),
        ];
        // msg 1 twice, msg 2 never, msg 9 not a message, sum 11 without children.
        let frontier = [(0, 1, 1), (0, 1, 1), (0, 9, 1), (1, 11, 1), (0, 3, 1)];
        let mut issues = Vec::new();
        check_conversation(
            &conv(5, 1, 1),
            &by_seq,
            &frontier,
            &Children::new(),
            &mut issues,
        );
        sort_issues(&mut issues);
        let got = codes(&issues);
        for code in [
            "duplicate-seq",
            "totals",
            "double-covered",
            "uncovered",
            "missing-item",
            "childless-summary",
        ] {
            assert!(got.contains(&code), "{code} missing from {got:?}");
        }
    }

    #[test]
    fn the_dag_is_checked_for_orphans_missing_children_and_depths() {
        // sum 1 (leaf) fine; sum 2 depth 1 over a message (wrong level) and a missing summary;
        // sum 3 depth 2 over sum 1 (depth 0: skips a level); sum 4 orphan.
        let children: Children = [
            (1, vec![(0, 100)]),
            (2, vec![(0, 100), (1, 77)]),
            (3, vec![(1, 1)]),
            (4, vec![(0, 101)]),
        ]
        .into_iter()
        .collect();
        let summaries = [(1, (1, 0)), (2, (1, 1)), (3, (1, 2)), (4, (1, 0))]
            .into_iter()
            .collect();
        let in_frontier = [2, 3].into_iter().collect();
        let mut issues = Vec::new();
        check_dag(
            &children,
            &summaries,
            &in_frontier,
            |id| Ok(id == 100),
            &mut issues,
        )
        .unwrap();
        sort_issues(&mut issues);
        let got = codes(&issues);
        assert_eq!(
            got.iter().filter(|c| **c == "depth-mismatch").count(),
            2,
            "{issues:?}"
        );
        assert_eq!(
            got.iter().filter(|c| **c == "dangling-child").count(),
            2,
            "{issues:?}"
        );
        assert_eq!(
            got.iter().filter(|c| **c == "orphan-summary").count(),
            1,
            "{issues:?}"
        );
        let mut sorted = got.clone();
        sorted.sort();
        assert_eq!(got, sorted, "one conversation: by code");
    }
}
