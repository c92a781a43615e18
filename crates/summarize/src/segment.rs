//! Splits serialized conversation text into the units the extractive summarizer scores.
//!
//! The extractive summarizer works on *units*: a sentence of prose (user or assistant text), or
//! a line of tool output, code or a command. Each unit remembers which message (labelled
//! paragraph, see [`crate::serialize_conversation`]) it came from, so the summary can be emitted
//! as a condensed transcript that keeps every speaker label. Units are borrowed slices of the
//! input, so parsing a multi-megabyte tool output allocates little, and overlong units are cut
//! into bounded chunks so that scoring and token counting stay linear in the input size.

use std::sync::LazyLock;

use regex::Regex;

/// Longest unit, in bytes. Longer sentences or lines (a minified JSON blob, a huge log line) are
/// cut, preferably at whitespace, into chunks of about this size.
pub(crate) const MAX_UNIT_BYTES: usize = 800;

/// The labels [`crate::serialize_conversation`] writes, plus bare role names for `Other`
/// messages. Anything else in brackets (`[INFO]: ...` in a log) is ordinary text.
static LABEL: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(
        r"^\[(User|Assistant|Assistant thinking|Assistant tool call|Tool result[^\]\n]{0,80}|Tool error[^\]\n]{0,80}|Bash command|Bash output|Note|Branch summary|Earlier summary|[a-z][A-Za-z_-]{0,30})\]:[ \t]?",
    )
    .ok()
});

/// Who produced a message, as far as scoring cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    User,
    Assistant,
    Thinking,
    ToolCall,
    ToolResult,
    ToolError,
    BashCommand,
    BashOutput,
    Summary,
    Note,
    Other,
    /// Text without a label (a previous summary, or input that is not a serialized transcript).
    Plain,
}

impl Role {
    fn from_label(label: &str) -> Role {
        match label {
            "User" => Role::User,
            "Assistant" => Role::Assistant,
            "Assistant thinking" => Role::Thinking,
            "Assistant tool call" => Role::ToolCall,
            "Bash command" => Role::BashCommand,
            "Bash output" => Role::BashOutput,
            "Note" => Role::Note,
            "Branch summary" | "Earlier summary" => Role::Summary,
            l if l.starts_with("Tool result") => Role::ToolResult,
            l if l.starts_with("Tool error") => Role::ToolError,
            _ => Role::Other,
        }
    }

    /// Whether the message is prose, split into sentences; the rest (tool calls and output,
    /// commands) is split into lines.
    pub(crate) fn is_prose_role(self) -> bool {
        self.is_prose()
    }

    fn is_prose(self) -> bool {
        matches!(
            self,
            Role::User
                | Role::Assistant
                | Role::Thinking
                | Role::Summary
                | Role::Note
                | Role::Other
                | Role::Plain
        )
    }
}

/// One labelled paragraph of the input.
#[derive(Clone, Debug)]
pub(crate) struct Message<'a> {
    /// The label without brackets (`User`, `Tool result bash`), if the paragraph had one.
    pub label: Option<&'a str>,
    pub role: Role,
}

/// One scoreable piece of text.
#[derive(Clone, Debug)]
pub(crate) struct Unit<'a> {
    /// Index into [`Doc::messages`].
    pub message: usize,
    pub text: &'a str,
}

/// A parsed input: messages in order, and their units in order.
#[derive(Clone, Debug, Default)]
pub(crate) struct Doc<'a> {
    pub messages: Vec<Message<'a>>,
    pub units: Vec<Unit<'a>>,
}

/// Parses `text`. With `line_messages`, every line is its own message (used for a previous
/// summary, whose lines are already condensed and must not be run together); otherwise an
/// unlabelled line continues the message above it.
pub(crate) fn parse(text: &str, line_messages: bool) -> Doc<'_> {
    let mut doc = Doc::default();
    let mut in_code = false;
    for line in text.lines() {
        let mut rest = line;
        let labelled = LABEL
            .as_ref()
            .and_then(|re| re.captures(line))
            .and_then(|c| {
                let whole = c.get(0)?;
                let label = c.get(1)?;
                Some((label.as_str(), whole.end()))
            });
        if let Some((label, end)) = labelled {
            doc.messages.push(Message {
                label: Some(label),
                role: Role::from_label(label),
            });
            rest = line.get(end..).unwrap_or("");
            in_code = false;
        } else if line.trim().is_empty() {
            continue;
        } else if line_messages || doc.messages.is_empty() {
            doc.messages.push(Message {
                label: None,
                role: Role::Plain,
            });
            in_code = false;
        }
        let rest = rest.trim();
        if rest.is_empty() {
            continue;
        }
        if rest.starts_with("```") {
            in_code = !in_code;
            continue;
        }
        let message = doc.messages.len().saturating_sub(1);
        let prose = doc.messages.get(message).is_some_and(|m| m.role.is_prose()) && !in_code;
        if prose {
            for sentence in sentences(rest) {
                push_chunks(sentence, message, &mut doc.units);
            }
        } else {
            push_chunks(rest, message, &mut doc.units);
        }
    }
    doc
}

/// Splits a line of prose after `.`, `!` or `?` followed by whitespace and a character that is
/// not lowercase (so `e.g. this` stays whole), and after CJK full stops.
pub(crate) fn sentences(line: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut chars = line.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        if matches!(c, '。' | '！' | '？') {
            let end = i + c.len_utf8();
            out.push(line.get(start..end).unwrap_or(""));
            start = end;
            continue;
        }
        if !matches!(c, '.' | '!' | '?') {
            continue;
        }
        let Some(&(next_i, next)) = chars.peek() else {
            continue;
        };
        if !next.is_whitespace() {
            continue;
        }
        let after = line.get(next_i..).unwrap_or("").trim_start().chars().next();
        if after.is_none_or(|a| !a.is_lowercase()) {
            out.push(line.get(start..next_i).unwrap_or(""));
            start = next_i;
        }
    }
    if start < line.len() {
        out.push(line.get(start..).unwrap_or(""));
    }
    out.into_iter()
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect()
}

/// Pushes `text` as one unit, or as several chunks of at most [`MAX_UNIT_BYTES`] bytes cut at
/// whitespace where possible (always at a char boundary).
fn push_chunks<'a>(text: &'a str, message: usize, units: &mut Vec<Unit<'a>>) {
    let mut rest = text.trim();
    while rest.len() > MAX_UNIT_BYTES {
        let limit = floor_char_boundary(rest, MAX_UNIT_BYTES);
        let head = rest.get(..limit).unwrap_or("");
        let mut cut = match head.rfind(char::is_whitespace) {
            Some(ws) if ws > MAX_UNIT_BYTES / 2 => ws,
            _ => limit,
        };
        if cut == 0 {
            cut = rest.chars().next().map_or(rest.len(), char::len_utf8);
        }
        let piece = rest.get(..cut).unwrap_or("").trim();
        if !piece.is_empty() {
            units.push(Unit {
                message,
                text: piece,
            });
        }
        rest = rest.get(cut..).unwrap_or("").trim_start();
    }
    if !rest.is_empty() {
        units.push(Unit {
            message,
            text: rest,
        });
    }
}

/// The largest char boundary of `s` at or below `index`.
pub(crate) fn floor_char_boundary(s: &str, index: usize) -> usize {
    if index >= s.len() {
        return s.len();
    }
    let mut i = index;
    while i > 0 && !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_start_messages_and_continuation_lines_stay_in_them() {
        let doc = parse(
            "[User]: Fix it. Now please.\nsecond line\n\n[Tool result bash]: a\nb\n[INFO]: log",
            false,
        );
        let labels: Vec<_> = doc.messages.iter().map(|m| m.label).collect();
        assert_eq!(labels, vec![Some("User"), Some("Tool result bash")]);
        let texts: Vec<_> = doc.units.iter().map(|u| (u.message, u.text)).collect();
        assert_eq!(
            texts,
            vec![
                (0, "Fix it."),
                (0, "Now please."),
                (0, "second line"),
                (1, "a"),
                (1, "b"),
                (1, "[INFO]: log")
            ]
        );
        assert_eq!(doc.messages[1].role, Role::ToolResult);
    }

    #[test]
    fn sentence_split_keeps_abbreviations_and_versions() {
        assert_eq!(
            sentences("Use e.g. serde 1.0. Then build! Done?"),
            vec!["Use e.g. serde 1.0.", "Then build!", "Done?"]
        );
        assert_eq!(sentences("好的。继续"), vec!["好的。", "继续"]);
    }

    #[test]
    fn long_lines_are_chunked_at_char_boundaries() {
        let line = "é".repeat(3000);
        let doc = parse(&line, false);
        assert!(doc.units.len() >= 7);
        assert!(doc.units.iter().all(|u| u.text.len() <= MAX_UNIT_BYTES));
        let total: usize = doc.units.iter().map(|u| u.text.len()).sum();
        assert_eq!(total, line.len());
    }

    #[test]
    fn line_messages_mode_splits_unlabelled_lines() {
        let doc = parse("## Goal\nfix build\n[User]: hi", true);
        assert_eq!(doc.messages.len(), 3);
    }
}
