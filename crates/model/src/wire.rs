//! Message-to-text conversions both HTTP wire formats share.
//!
//! Roles the provider APIs do not have (bash executions, compaction and branch summaries,
//! unknown roles) reach the model as user text; these functions decide that text once so both
//! providers show the model the same thing.

use clawctx_protocol::{
    AgentMessage, BashExecutionMessage, Content, ContentBlock, BRANCH_SUMMARY_PREFIX,
    BRANCH_SUMMARY_SUFFIX, COMPACTION_SUMMARY_PREFIX, COMPACTION_SUMMARY_SUFFIX,
};

/// The text of a content value: text blocks joined by newlines, images as a placeholder naming
/// their type (used where the wire format cannot carry an image, e.g. OpenAI tool results).
pub(crate) fn content_text(content: &Content) -> String {
    match content {
        Content::Text(t) => t.clone(),
        Content::Blocks(blocks) => blocks
            .iter()
            .filter_map(|b| match b {
                ContentBlock::Text(t) => Some(t.text.clone()),
                ContentBlock::Image(i) => Some(format!("[image omitted: {}]", i.mime_type)),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("\n"),
    }
}

/// A bash execution as the user text the model reads.
pub(crate) fn bash_text(m: &BashExecutionMessage) -> String {
    let mut text = format!("Ran `{}`\n", m.command);
    if m.output.is_empty() {
        text.push_str("(no output)");
    } else {
        text.push_str("```\n");
        text.push_str(m.output.trim_end());
        text.push_str("\n```");
    }
    if let Some(code) = m.exit_code.filter(|c| *c != 0) {
        text.push_str(&format!("\n\nCommand exited with code {code}"));
    }
    text
}

/// A compaction or branch summary wrapped in the fixed prefix and suffix (contract §7.4).
pub(crate) fn summary_text(m: &AgentMessage) -> String {
    match m {
        AgentMessage::CompactionSummary(s) => format!(
            "{COMPACTION_SUMMARY_PREFIX}{}{COMPACTION_SUMMARY_SUFFIX}",
            s.summary
        ),
        AgentMessage::BranchSummary(s) => format!(
            "{BRANCH_SUMMARY_PREFIX}{}{BRANCH_SUMMARY_SUFFIX}",
            s.summary
        ),
        other => other.plain_text(),
    }
}
