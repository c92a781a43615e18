//! Turns messages into the plain text a summarizer reads.
//!
//! Summarizers get the conversation as labelled text rather than as chat messages, so an LLM
//! summarizer does not mistake it for a conversation to continue (contract §7.4), and so the
//! extractive summarizer can work line by line. Every line starts with a bracketed label saying
//! who said it; tool calls are written as `name(arguments)`.

use clawctx_protocol::{AgentMessage, Content, ContentBlock};

/// Serializes `messages` into labelled lines, one paragraph per message part.
pub fn serialize_conversation(messages: &[AgentMessage]) -> String {
    let mut out = String::new();
    for m in messages {
        match m {
            AgentMessage::User(u) => push_content(&mut out, "User", &u.content),
            AgentMessage::Assistant(a) => {
                for block in a.content.blocks() {
                    match block {
                        ContentBlock::Text(t) => push(&mut out, "Assistant", &t.text),
                        ContentBlock::Thinking(t) => {
                            push(&mut out, "Assistant thinking", &t.thinking)
                        }
                        ContentBlock::ToolCall(c) => push(
                            &mut out,
                            "Assistant tool call",
                            &format!("{}({})", c.name, c.arguments),
                        ),
                        ContentBlock::Image(_) => push(&mut out, "Assistant", "[image]"),
                        ContentBlock::Unknown(_) => {}
                    }
                }
            }
            AgentMessage::ToolResult(t) => {
                let label = if t.is_error == Some(true) {
                    "Tool error"
                } else {
                    "Tool result"
                };
                let label = format!("{label} {}", t.tool_name);
                push_content(&mut out, label.trim(), &t.content)
            }
            AgentMessage::BashExecution(b) => {
                push(&mut out, "Bash command", &b.command);
                push(&mut out, "Bash output", &b.output);
            }
            AgentMessage::Custom(c) => push_content(&mut out, "Note", &c.content),
            AgentMessage::BranchSummary(s) => push(&mut out, "Branch summary", &s.summary),
            AgentMessage::CompactionSummary(s) => push(&mut out, "Earlier summary", &s.summary),
            AgentMessage::Other(_) => push(&mut out, m.role(), &m.plain_text()),
        }
    }
    out
}

fn push_content(out: &mut String, label: &str, content: &Content) {
    match content {
        Content::Text(t) => push(out, label, t),
        Content::Blocks(blocks) => {
            for b in blocks {
                match b {
                    ContentBlock::Text(t) => push(out, label, &t.text),
                    ContentBlock::Image(_) => push(out, label, "[image]"),
                    ContentBlock::Thinking(t) => push(out, label, &t.thinking),
                    ContentBlock::ToolCall(c) => {
                        push(out, label, &format!("{}({})", c.name, c.arguments))
                    }
                    ContentBlock::Unknown(_) => {}
                }
            }
        }
    }
}

fn push(out: &mut String, label: &str, text: &str) {
    let text = text.trim();
    if text.is_empty() {
        return;
    }
    if !out.is_empty() {
        out.push_str("\n\n");
    }
    out.push('[');
    out.push_str(label);
    out.push_str("]: ");
    out.push_str(text);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_each_speaker_and_tool_call() {
        let text = serialize_conversation(&[
            AgentMessage::user("fix the build"),
            AgentMessage::tool_call("c1", "bash", serde_json::json!({"cmd": "cargo build"})),
            AgentMessage::tool_result("c1", "bash", "error[E0277]"),
            AgentMessage::assistant("done"),
        ]);
        assert_eq!(
            text,
            "[User]: fix the build\n\n[Assistant tool call]: bash({\"cmd\":\"cargo build\"})\n\n[Tool result bash]: error[E0277]\n\n[Assistant]: done"
        );
    }
}
