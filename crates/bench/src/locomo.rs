//! Reading LoCoMo (Maharana et al., 2024) conversations and turning them into messages.
//!
//! The dataset is CC BY-NC 4.0 and is never shipped: the eval reads it from a path the user
//! gives (tests read `../shared/data/locomo/` and skip when it is absent, or fail under
//! `CI=true`). Only the fields the eval needs are read: speakers, sessions in order with their
//! dates, turns (`speaker`, `dia_id`, `text`, optional `blip_caption`), and the questions
//! (`question`, `answer` or `adversarial_answer`, `evidence`, `category`).
//!
//! Replay shape: each session opens with a user message stating its date; each turn is a user
//! message `"<speaker>: <text>"` (plus `[shares a photo: <caption>]` when the turn has an image).
//! Every message has a distinct timestamp, which is how recall hits are mapped back to `dia_id`s.

use std::collections::HashMap;
use std::path::Path;

use clawctx_protocol::AgentMessage;
use serde_json::Value;

use crate::error::{BenchError, Result};

/// One dialogue turn.
#[derive(Clone, Debug, PartialEq)]
pub struct DialogTurn {
    /// Speaker name.
    pub speaker: String,
    /// `D<session>:<n>`.
    pub dia_id: String,
    /// Text.
    pub text: String,
    /// Image caption, when the turn shared an image.
    pub caption: Option<String>,
}

impl DialogTurn {
    /// The message text the eval ingests.
    pub fn rendered(&self) -> String {
        match &self.caption {
            Some(c) => format!("{}: {} [shares a photo: {c}]", self.speaker, self.text),
            None => format!("{}: {}", self.speaker, self.text),
        }
    }
}

/// One session.
#[derive(Clone, Debug, PartialEq)]
pub struct Session {
    /// `N` of `session_N`.
    pub index: u32,
    /// `session_N_date_time` as written.
    pub date_time: String,
    /// Turns in order.
    pub turns: Vec<DialogTurn>,
}

/// One question.
#[derive(Clone, Debug, PartialEq)]
pub struct Question {
    /// The question.
    pub question: String,
    /// The answer (absent for most adversarial questions).
    pub answer: Option<String>,
    /// Evidence `dia_id`s, normalized (`D:11:26` → `D11:26`; `a; b` split).
    pub evidence: Vec<String>,
    /// 1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop, 5 adversarial.
    pub category: u8,
}

/// One conversation with its questions.
#[derive(Clone, Debug, PartialEq)]
pub struct Conversation {
    /// `sample_id`.
    pub sample_id: String,
    /// First speaker.
    pub speaker_a: String,
    /// Second speaker.
    pub speaker_b: String,
    /// Sessions in order.
    pub sessions: Vec<Session>,
    /// Questions.
    pub questions: Vec<Question>,
}

/// A message of the replay and the turn it carries (`None` for session headers).
#[derive(Clone, Debug)]
pub struct ReplayMessage {
    /// The message (user role, unique timestamp).
    pub message: AgentMessage,
    /// Its `dia_id`.
    pub dia_id: Option<String>,
}

fn scalar(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// Normalizes one evidence reference list entry into zero or more `D<s>:<n>` ids.
pub fn normalize_evidence(raw: &str) -> Vec<String> {
    raw.split([';', ',', ' '])
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            let s = s
                .strip_prefix("D:")
                .map(|r| format!("D{r}"))
                .unwrap_or_else(|| s.to_owned());
            s
        })
        .collect()
}

/// Loads a LoCoMo JSON file (a list of samples).
pub fn load(path: &Path) -> Result<Vec<Conversation>> {
    let text = std::fs::read_to_string(path).map_err(|e| BenchError::io(path, e))?;
    parse(path, &text)
}

/// Parses the text of a LoCoMo JSON file (as read from `path`, which errors name).
pub fn parse(path: &Path, text: &str) -> Result<Vec<Conversation>> {
    let fmt = |m: String| BenchError::Format {
        path: path.to_owned(),
        line: 0,
        message: m,
    };
    let v: Value = serde_json::from_str(text).map_err(|e| fmt(e.to_string()))?;
    let Value::Array(samples) = v else {
        return Err(fmt("expected a JSON array of samples".into()));
    };
    samples
        .iter()
        .enumerate()
        .map(|(i, s)| parse_sample(s).map_err(|m| fmt(format!("sample {i}: {m}"))))
        .collect()
}

fn parse_sample(s: &Value) -> std::result::Result<Conversation, String> {
    let conv = s
        .get("conversation")
        .and_then(Value::as_object)
        .ok_or("no `conversation` object")?;
    let sample_id = s
        .get("sample_id")
        .and_then(scalar)
        .unwrap_or_else(|| "sample".into());
    let speaker_a = conv.get("speaker_a").and_then(scalar).unwrap_or_default();
    let speaker_b = conv.get("speaker_b").and_then(scalar).unwrap_or_default();
    let mut sessions = Vec::new();
    for (k, v) in conv {
        let Some(n) = k
            .strip_prefix("session_")
            .and_then(|r| r.parse::<u32>().ok())
        else {
            continue;
        };
        let Value::Array(turns) = v else { continue };
        let date_time = conv
            .get(&format!("session_{n}_date_time"))
            .and_then(scalar)
            .unwrap_or_default();
        let turns = turns
            .iter()
            .filter_map(|t| {
                Some(DialogTurn {
                    speaker: t.get("speaker").and_then(scalar)?,
                    dia_id: t.get("dia_id").and_then(scalar)?,
                    text: t.get("text").and_then(scalar).unwrap_or_default(),
                    caption: t
                        .get("blip_caption")
                        .and_then(scalar)
                        .filter(|c| !c.trim().is_empty()),
                })
            })
            .collect();
        sessions.push(Session {
            index: n,
            date_time,
            turns,
        });
    }
    sessions.sort_by_key(|s| s.index);
    let questions = s
        .get("qa")
        .and_then(Value::as_array)
        .map(|qa| {
            qa.iter()
                .filter_map(|q| {
                    Some(Question {
                        question: q.get("question").and_then(scalar)?,
                        answer: q.get("answer").and_then(scalar),
                        evidence: q
                            .get("evidence")
                            .and_then(Value::as_array)
                            .map(|e| {
                                e.iter()
                                    .filter_map(scalar)
                                    .flat_map(|r| normalize_evidence(&r))
                                    .collect()
                            })
                            .unwrap_or_default(),
                        category: q.get("category").and_then(Value::as_u64).unwrap_or(0) as u8,
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    Ok(Conversation {
        sample_id,
        speaker_a,
        speaker_b,
        sessions,
        questions,
    })
}

/// Parses `1:56 pm on 8 May, 2023` into epoch ms.
pub fn parse_session_date(s: &str) -> Option<i64> {
    let s = s.trim().replace("  ", " ");
    for fmt in [
        "%I:%M %p on %d %B, %Y",
        "%I:%M %p on %d %b, %Y",
        "%H:%M on %d %B, %Y",
    ] {
        if let Ok(dt) = chrono::NaiveDateTime::parse_from_str(&s, fmt) {
            return Some(dt.and_utc().timestamp_millis());
        }
    }
    None
}

impl Conversation {
    /// The replay: per session a date header, then its turns; strictly increasing timestamps.
    pub fn replay(&self) -> Vec<ReplayMessage> {
        let mut out = Vec::new();
        let mut ts: i64 = 1_672_531_200_000; // 2023-01-01, when a date does not parse
        for s in &self.sessions {
            if s.turns.is_empty() {
                continue;
            }
            ts = parse_session_date(&s.date_time)
                .filter(|t| *t > ts)
                .unwrap_or(ts + 86_400_000);
            let header = format!(
                "[Session {} of the conversation between {} and {}, held at {}]",
                s.index, self.speaker_a, self.speaker_b, s.date_time
            );
            out.push(ReplayMessage {
                message: AgentMessage::user(header).with_timestamp(ts),
                dia_id: None,
            });
            for t in &s.turns {
                ts += 1_000;
                out.push(ReplayMessage {
                    message: AgentMessage::user(t.rendered()).with_timestamp(ts),
                    dia_id: Some(t.dia_id.clone()),
                });
            }
        }
        out
    }

    /// `dia_id` → rendered text.
    pub fn turn_texts(&self) -> HashMap<String, String> {
        self.sessions
            .iter()
            .flat_map(|s| s.turns.iter())
            .map(|t| (t.dia_id.clone(), t.rendered()))
            .collect()
    }
}
