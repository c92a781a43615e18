//! What the last assembly of a session left out of the lossless frontier: the session view's
//! "left out" (`GET /v1/dashboard/session`).
//!
//! The assembly itself is the turn trace's record ([`crate::trace::assembled`], split into its
//! parts there); the dashboard only reads it, against the frontier it reads from the store.

use clawctx_lossless::inspect;

use crate::trace::assembled::Breakdown;

/// The frontier items an assembly split into `b` left out, oldest first. What it sent is not a
/// suffix of the frontier: lossless keeps its summaries and the newest messages and drops the
/// messages between, so a summary is sent when its id is among the parts, and a message when
/// it is one of the newest `raw` ones (counted from the end; the last part or two, the turn's
/// own, may not be stored yet, which can only keep an older message out of this list). Counting
/// a suffix instead listed summaries the card's own bar shows as left out (issue #39).
/// `stored_before`: the number of messages the assembly's history held, when it was a turn's
/// (its messages are the conversation's first ones, seq 0 on): messages stored after it (the
/// turn's reply, later turns) were not there to be sent and are skipped, not counted against
/// the raw parts (which listed the oldest raw messages as left out when nothing was).
pub fn left_out<'a>(
    frontier: &'a [inspect::FrontierItem],
    b: &Breakdown,
    stored_before: Option<i64>,
) -> Vec<&'a inspect::FrontierItem> {
    let frontier = match stored_before {
        Some(n) => {
            let end = frontier
                .iter()
                .position(|i| i.id.starts_with("msg_") && i.first_seq >= n)
                .unwrap_or(frontier.len());
            &frontier[..end]
        }
        None => frontier,
    };
    let sent: std::collections::HashSet<&str> = b
        .parts
        .iter()
        .filter(|p| p.kind == "summary")
        .filter_map(|p| p.id.as_deref())
        .collect();
    let mut raw = b.totals.raw_count;
    let mut kept = vec![false; frontier.len()];
    for (i, item) in frontier.iter().enumerate().rev() {
        if item.id.starts_with("msg_") {
            if raw > 0 {
                raw -= 1;
                kept[i] = true;
            }
        } else {
            kept[i] = sent.contains(item.id.as_str());
        }
    }
    frontier
        .iter()
        .zip(kept)
        .filter_map(|(item, kept)| (!kept).then_some(item))
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::trace::assembled::breakdown;
    use clawctx_protocol::{AgentMessage, AssembleResult};

    #[test]
    fn what_was_left_out_is_what_the_parts_do_not_hold() {
        let item = |id: &str, seq: i64| inspect::FrontierItem {
            id: id.into(),
            tokens: 10,
            first_seq: seq,
            last_seq: seq,
        };
        // Two summaries, then six messages; the assembly sent both summaries and the newest
        // two messages (and the unstored prompt): the messages between are left out.
        let frontier = vec![
            item("sum_19", 0),
            item("sum_21", 1),
            item("msg_30", 30),
            item("msg_31", 31),
            item("msg_32", 32),
            item("msg_33", 33),
            item("msg_34", 34),
            item("msg_35", 35),
        ];
        let result = AssembleResult {
            messages: vec![
                AgentMessage::user(
                    "<summary id=\"sum_19\" depth=\"1\" from=\"a\" to=\"b\">\nold\n</summary>",
                ),
                AgentMessage::user(
                    "<summary id=\"sum_21\" depth=\"1\" from=\"a\" to=\"b\">\nlater\n</summary>",
                ),
                AgentMessage::user("message 34"),
                AgentMessage::assistant("message 35"),
            ],
            ..Default::default()
        };
        let b = breakdown(&result);
        let left: Vec<&str> = left_out(&frontier, &b, None)
            .iter()
            .map(|i| i.id.as_str())
            .collect();
        assert_eq!(left, ["msg_30", "msg_31", "msg_32", "msg_33"]);
        // A summary the parts do not hold is left out.
        let result = AssembleResult {
            messages: vec![
                AgentMessage::user(
                    "<summary id=\"sum_21\" depth=\"1\" from=\"a\" to=\"b\">\nlater\n</summary>",
                ),
                AgentMessage::user("message 35"),
            ],
            ..Default::default()
        };
        let b = breakdown(&result);
        let left: Vec<&str> = left_out(&frontier, &b, None)
            .iter()
            .map(|i| i.id.as_str())
            .collect();
        assert_eq!(
            left,
            ["sum_19", "msg_30", "msg_31", "msg_32", "msg_33", "msg_34"]
        );
        // A turn's assembly over 35 messages (seq 0 to 34, the prompt last, not yet stored)
        // sent everything; its reply (seq 35) was stored after: nothing is left out.
        let result = AssembleResult {
            messages: vec![
                AgentMessage::user(
                    "<summary id=\"sum_19\" depth=\"1\" from=\"a\" to=\"b\">\nold\n</summary>",
                ),
                AgentMessage::user(
                    "<summary id=\"sum_21\" depth=\"1\" from=\"a\" to=\"b\">\nlater\n</summary>",
                ),
                AgentMessage::user("message 30"),
                AgentMessage::user("message 31"),
                AgentMessage::user("message 32"),
                AgentMessage::user("message 33"),
                AgentMessage::user("message 34"),
            ],
            ..Default::default()
        };
        let b = breakdown(&result);
        assert!(left_out(&frontier, &b, Some(35)).is_empty());
        let left: Vec<&str> = left_out(&frontier, &b, None)
            .iter()
            .map(|i| i.id.as_str())
            .collect();
        assert_eq!(
            left,
            ["msg_30"],
            "without the rule the reply pushes one out"
        );
    }
}
