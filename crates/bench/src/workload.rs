//! The deterministic workload: OpenClaw-shaped conversations for benchmarking engines.
//!
//! A workload is a sequence of *turns* (a user message, then the assistant's messages: an
//! optional tool call with its result, and a text reply) produced by a seeded generator, so the
//! same `(kind, messages, seed)` gives byte-identical files on every machine. It can be consumed
//! in memory ([`Workload`] is an iterator of [`Turn`]s that holds one turn at a time) or written
//! as an OpenClaw session file ([`write_jsonl`], streamed: one million messages never sit in
//! memory) and read back turn by turn ([`JsonlTurns`]). The file format is documented in
//! `docs/workload-format.md` so engines outside this project can replay the same file.
//!
//! Sizes follow the peer benchmark (spec §8.2): user 150–450 characters, assistant 300–1,500
//! characters, tool results 2,000–6,000 characters. Every message carries a unique reference
//! (`ref <turn>.<k>`), so no two messages are identical.

use std::fmt;
use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::str::FromStr;

use clawctx_protocol::transcript::{EntryKind, SessionHeader, TranscriptEntry};
use clawctx_protocol::AgentMessage;
use serde_json::json;

use crate::error::{BenchError, Result};
use crate::rng::Rng;

/// Epoch ms of the first message (2026-01-01T00:00:00Z).
pub const BASE_TIMESTAMP_MS: i64 = 1_767_225_600_000;

/// What the conversation looks like.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WorkloadKind {
    /// Plain chat: user, assistant.
    Chat,
    /// Tool-heavy: user, assistant tool call, tool result (2–6k chars), assistant reply.
    Tools,
    /// Every other turn (at random, seeded) uses a tool.
    Mixed,
}

impl fmt::Display for WorkloadKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            WorkloadKind::Chat => "chat",
            WorkloadKind::Tools => "tools",
            WorkloadKind::Mixed => "mixed",
        })
    }
}

impl FromStr for WorkloadKind {
    type Err = BenchError;
    fn from_str(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "chat" | "plain" => Ok(WorkloadKind::Chat),
            "tools" | "tool" | "tool-heavy" => Ok(WorkloadKind::Tools),
            "mixed" => Ok(WorkloadKind::Mixed),
            other => Err(BenchError::InvalidArgument(format!(
                "unknown workload kind `{other}` (chat, tools, mixed)"
            ))),
        }
    }
}

/// Which workload to generate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct WorkloadSpec {
    /// Shape.
    pub kind: WorkloadKind,
    /// Total messages (exactly; the last turn is shortened to fit).
    pub messages: u64,
    /// Seed.
    pub seed: u64,
}

/// One turn: a user message and what followed it.
#[derive(Clone, Debug, PartialEq)]
pub struct Turn {
    /// 0-based turn number.
    pub index: u64,
    /// The messages, user first.
    pub messages: Vec<AgentMessage>,
}

const WORDS: &[&str] = &[
    "the",
    "a",
    "we",
    "it",
    "this",
    "that",
    "should",
    "could",
    "will",
    "after",
    "before",
    "when",
    "because",
    "then",
    "and",
    "but",
    "so",
    "with",
    "without",
    "for",
    "from",
    "into",
    "over",
    "under",
    "about",
    "again",
    "still",
    "now",
    "build",
    "deploy",
    "release",
    "rollback",
    "migration",
    "schema",
    "index",
    "query",
    "cache",
    "latency",
    "budget",
    "context",
    "summary",
    "session",
    "engine",
    "plugin",
    "gateway",
    "worker",
    "thread",
    "queue",
    "lock",
    "timeout",
    "retry",
    "request",
    "response",
    "payload",
    "header",
    "token",
    "window",
    "buffer",
    "stream",
    "socket",
    "client",
    "server",
    "config",
    "secret",
    "certificate",
    "proxy",
    "cluster",
    "node",
    "replica",
    "shard",
    "backup",
    "restore",
    "snapshot",
    "volume",
    "disk",
    "memory",
    "profile",
    "trace",
    "metric",
    "alert",
    "dashboard",
    "incident",
    "ticket",
    "invoice",
    "customer",
    "account",
    "billing",
    "refund",
    "contract",
    "deadline",
    "meeting",
    "review",
    "draft",
    "design",
    "prototype",
    "feature",
    "bug",
    "regression",
    "patch",
    "branch",
    "merge",
    "commit",
    "pipeline",
    "runner",
    "artifact",
    "package",
    "version",
    "dependency",
    "license",
    "audit",
    "policy",
    "permission",
    "role",
    "team",
    "project",
    "roadmap",
    "milestone",
    "estimate",
    "quarter",
    "report",
    "chart",
    "table",
    "column",
    "row",
    "field",
    "value",
    "default",
    "override",
    "fallback",
    "quarantine",
    "threshold",
    "ratio",
    "percent",
    "hour",
    "minute",
    "morning",
    "evening",
    "weekend",
    "travel",
    "flight",
    "hotel",
    "train",
    "station",
    "airport",
    "lunch",
    "coffee",
    "recipe",
    "garden",
    "bicycle",
    "guitar",
    "painting",
    "novel",
    "museum",
    "concert",
    "football",
    "marathon",
    "quickly",
    "carefully",
    "probably",
    "definitely",
    "slowly",
    "mostly",
    "rarely",
    "honestly",
    "exactly",
    "large",
    "small",
    "stable",
    "flaky",
    "broken",
    "healthy",
    "noisy",
    "quiet",
    "expensive",
    "cheap",
    "urgent",
    "check",
    "update",
    "remove",
    "rename",
    "split",
    "compare",
    "measure",
    "verify",
    "explain",
    "summarize",
    "fix",
    "Alice",
    "Bob",
    "Carmen",
    "Dmitri",
    "Elif",
    "Farah",
    "Goran",
    "Hiro",
    "Ines",
    "Jonas",
    "Berlin",
    "Lisbon",
    "Osaka",
    "Nairobi",
    "Toronto",
    "Kyiv",
    "Lima",
    "Oslo",
    "Monday",
    "Tuesday",
    "Friday",
    "March",
    "October",
];

const TOOLS: &[&str] = &["read_file", "exec", "grep", "web_fetch", "list_dir"];
const DIRS: &[&str] = &[
    "src",
    "crates/core/src",
    "docs",
    "tests",
    "scripts",
    "config",
    "web/app",
    "infra/terraform",
];
const EXTS: &[&str] = &["rs", "ts", "md", "toml", "json", "py", "yaml", "sql"];

/// Appends sentences of random words until `out` holds about `target` characters (never more
/// than `max`).
fn fill_text(rng: &mut Rng, out: &mut String, target: usize, max: usize) {
    while out.len() < target {
        let words = rng.range(5, 16) as usize;
        let mut sentence = String::new();
        for w in 0..words {
            let word: String = if rng.chance(1, 25) {
                format!("{}", rng.range(2, 99_999))
            } else {
                (*rng.pick(WORDS)).to_owned()
            };
            if w == 0 {
                let mut c = word.chars();
                if let Some(f) = c.next() {
                    sentence.extend(f.to_uppercase());
                    sentence.push_str(c.as_str());
                }
            } else {
                sentence.push(' ');
                sentence.push_str(&word);
            }
        }
        sentence.push(if rng.chance(1, 6) { '?' } else { '.' });
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(&sentence);
    }
    if out.len() > max {
        let mut end = max;
        while end > 0 && !out.is_char_boundary(end) {
            end -= 1;
        }
        // Cut at a word boundary, then close the sentence.
        let cut = out[..end].rfind(' ').unwrap_or(end);
        out.truncate(cut);
        if !out.ends_with(['.', '?']) {
            out.push('.');
        }
    }
}

/// A message text of `lo..=hi` characters ending with the unique reference `tag`.
fn text_message(rng: &mut Rng, lo: u64, hi: u64, tag: &str) -> String {
    let target = rng.range(lo, hi) as usize;
    let body_target = target.saturating_sub(tag.len() + 1).max(1);
    let body_max = (hi as usize).saturating_sub(tag.len() + 1).max(1);
    let mut s = String::with_capacity(target + 8);
    fill_text(rng, &mut s, body_target, body_max);
    s.push(' ');
    s.push_str(tag);
    s
}

fn path(rng: &mut Rng) -> String {
    format!(
        "{}/{}_{}.{}",
        rng.pick(DIRS),
        rng.pick(WORDS).to_ascii_lowercase(),
        rng.range(1, 400),
        rng.pick(EXTS)
    )
}

/// A tool result of 2,000–6,000 characters: file/grep/log-shaped lines.
fn tool_output(rng: &mut Rng, tool: &str, tag: &str) -> String {
    let target = rng.range(2_000, 6_000) as usize;
    let mut s = String::with_capacity(target + 128);
    s.push_str(tag);
    s.push('\n');
    let mut line_no = rng.range(1, 500);
    while s.len() + 2 < target {
        let mut line = match tool {
            "grep" => format!("{}:{}: ", path(rng), line_no),
            "exec" => format!(
                "[{:02}:{:02}:{:02}] ",
                rng.range(0, 23),
                rng.range(0, 59),
                rng.range(0, 59)
            ),
            "web_fetch" => String::new(),
            _ => format!("{line_no:>5}  "),
        };
        let len = rng.range(30, 110) as usize;
        fill_text(rng, &mut line, len, 140);
        line_no += 1;
        let room = target - s.len() - 1;
        if line.len() > room {
            let mut end = room;
            while end > 0 && !line.is_char_boundary(end) {
                end -= 1;
            }
            line.truncate(end);
        }
        s.push_str(&line);
        s.push('\n');
    }
    while s.len() < 2_000 {
        s.push('.');
    }
    s
}

fn tool_args(rng: &mut Rng, tool: &str) -> serde_json::Value {
    match tool {
        "exec" => {
            json!({"command": format!("cargo test -p {} -- {}", rng.pick(WORDS).to_ascii_lowercase(), rng.pick(WORDS).to_ascii_lowercase())})
        }
        "grep" => json!({"pattern": rng.pick(WORDS).to_ascii_lowercase(), "path": rng.pick(DIRS)}),
        "web_fetch" => {
            json!({"url": format!("https://docs.example.com/{}/{}", rng.pick(WORDS).to_ascii_lowercase(), rng.range(1, 999))})
        }
        "list_dir" => json!({"path": rng.pick(DIRS)}),
        _ => json!({"path": path(rng)}),
    }
}

fn assistant_meta(m: AgentMessage) -> AgentMessage {
    match m {
        AgentMessage::Assistant(mut a) => {
            a.api = Some("openai-responses".into());
            a.provider = Some("bench".into());
            a.model = Some("bench-model".into());
            AgentMessage::Assistant(a)
        }
        other => other,
    }
}

/// The generator: an iterator of turns holding one turn at a time.
#[derive(Clone, Debug)]
pub struct Workload {
    spec: WorkloadSpec,
    rng: Rng,
    emitted: u64,
    turn: u64,
    ts: i64,
}

impl Workload {
    /// A generator for `spec`.
    pub fn new(spec: WorkloadSpec) -> Self {
        Self {
            spec,
            rng: Rng::new(spec.seed),
            emitted: 0,
            turn: 0,
            ts: BASE_TIMESTAMP_MS,
        }
    }

    /// The spec.
    pub fn spec(&self) -> WorkloadSpec {
        self.spec
    }

    fn tick(&mut self) -> i64 {
        self.ts += self.rng.range(1_000, 20_000) as i64;
        self.ts
    }
}

impl Iterator for Workload {
    type Item = Turn;

    fn next(&mut self) -> Option<Turn> {
        let left = self.spec.messages.saturating_sub(self.emitted);
        if left == 0 {
            return None;
        }
        let t = self.turn;
        let wants_tool = match self.spec.kind {
            WorkloadKind::Chat => false,
            WorkloadKind::Tools => true,
            WorkloadKind::Mixed => self.rng.chance(1, 2),
        };
        let mut messages = Vec::with_capacity(4);
        let user = text_message(&mut self.rng, 150, 450, &format!("(ref {t}.0)"));
        let ts = self.tick();
        messages.push(AgentMessage::user(user).with_timestamp(ts));
        if wants_tool && left >= 4 {
            let tool = *self.rng.pick(TOOLS);
            let call_id = format!("call_{t:07}");
            let args = tool_args(&mut self.rng, tool);
            let ts = self.tick();
            messages.push(
                assistant_meta(AgentMessage::tool_call(&call_id, tool, args)).with_timestamp(ts),
            );
            let out = tool_output(&mut self.rng, tool, &format!("(ref {t}.2)"));
            let ts = self.tick();
            messages.push(AgentMessage::tool_result(&call_id, tool, out).with_timestamp(ts));
        }
        if left >= 2 {
            let k = messages.len();
            let reply = text_message(&mut self.rng, 300, 1_500, &format!("(ref {t}.{k})"));
            let ts = self.tick();
            messages.push(assistant_meta(AgentMessage::assistant(reply)).with_timestamp(ts));
        }
        self.emitted += messages.len() as u64;
        self.turn += 1;
        Some(Turn { index: t, messages })
    }
}

/// The entry id of message `index`: 8 hex digits, a bijection of the index (so unique).
pub fn entry_id(seed: u64, index: u64) -> String {
    let mut x = (index as u32).wrapping_add(1).wrapping_mul(0x9E37_79B1);
    x ^= x >> 16;
    x = x.wrapping_mul(0x85EB_CA6B);
    x ^= x >> 13;
    x ^= seed as u32;
    format!("{x:08x}")
}

fn iso(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|d| d.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string())
        .unwrap_or_else(|| "1970-01-01T00:00:00.000Z".into())
}

/// What [`write_jsonl`] wrote.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct WriteReport {
    /// Message entries.
    pub messages: u64,
    /// Turns.
    pub turns: u64,
    /// File bytes.
    pub bytes: u64,
    /// Characters of message text (what a store would have to keep).
    pub text_bytes: u64,
}

/// Writes the workload as an OpenClaw session file (header line, then one `message` entry per
/// line), streaming: memory use does not grow with the size.
pub fn write_jsonl(spec: WorkloadSpec, out: &Path) -> Result<WriteReport> {
    let file = File::create(out).map_err(|e| BenchError::io(out, e))?;
    let mut w = BufWriter::with_capacity(1 << 20, file);
    let report = write_to(spec, &mut w).map_err(|e| BenchError::io(out, e))?;
    w.flush().map_err(|e| BenchError::io(out, e))?;
    Ok(report)
}

/// [`write_jsonl`] into any writer.
pub fn write_to(spec: WorkloadSpec, w: &mut impl Write) -> std::io::Result<WriteReport> {
    let mut report = WriteReport::default();
    let header = SessionHeader {
        kind: "session".into(),
        version: Some(json!(3)),
        id: format!("bench-{}-{}-{:016x}", spec.kind, spec.messages, spec.seed),
        timestamp: iso(BASE_TIMESTAMP_MS),
        cwd: "/workspace".into(),
        parent_session: None,
        extra: [
            ("generator".to_owned(), json!("clawctx-bench")),
            (
                "workload".to_owned(),
                json!({"kind": spec.kind, "messages": spec.messages, "seed": spec.seed}),
            ),
        ]
        .into_iter()
        .collect(),
    };
    let line = serde_json::to_string(&header)?;
    w.write_all(line.as_bytes())?;
    w.write_all(b"\n")?;
    report.bytes += line.len() as u64 + 1;
    let mut parent: Option<String> = None;
    let mut index = 0u64;
    for turn in Workload::new(spec) {
        report.turns += 1;
        for m in turn.messages {
            let id = entry_id(spec.seed, index);
            index += 1;
            report.text_bytes += m.plain_text().len() as u64;
            let ts = m.timestamp_ms().unwrap_or(BASE_TIMESTAMP_MS);
            let entry = TranscriptEntry {
                id: id.clone(),
                parent_id: parent.take(),
                timestamp: iso(ts),
                kind: EntryKind::Message(m),
            };
            let map = entry.to_json()?;
            let line = serde_json::to_string(&map)?;
            w.write_all(line.as_bytes())?;
            w.write_all(b"\n")?;
            report.bytes += line.len() as u64 + 1;
            report.messages += 1;
            parent = Some(id);
        }
    }
    Ok(report)
}

/// Reads a session file back as turns (a turn starts at each user message), one turn in
/// memory at a time. Non-message entries are skipped.
pub struct JsonlTurns {
    path: PathBuf,
    lines: std::io::Lines<BufReader<File>>,
    line_no: usize,
    pending: Option<AgentMessage>,
    index: u64,
    done: bool,
}

impl JsonlTurns {
    /// Opens `path`.
    pub fn open(path: &Path) -> Result<Self> {
        let f = File::open(path).map_err(|e| BenchError::io(path, e))?;
        Ok(Self {
            path: path.to_owned(),
            lines: BufReader::new(f).lines(),
            line_no: 0,
            pending: None,
            index: 0,
            done: false,
        })
    }

    fn next_message(&mut self) -> Result<Option<AgentMessage>> {
        loop {
            let Some(line) = self.lines.next() else {
                return Ok(None);
            };
            self.line_no += 1;
            let line = line.map_err(|e| BenchError::io(&self.path, e))?;
            if line.trim().is_empty() {
                continue;
            }
            let fmt = |message: String| BenchError::Format {
                path: self.path.clone(),
                line: self.line_no,
                message,
            };
            let v: serde_json::Value =
                serde_json::from_str(&line).map_err(|e| fmt(e.to_string()))?;
            let serde_json::Value::Object(map) = v else {
                return Err(fmt("not a JSON object".into()));
            };
            if map.get("type").and_then(|t| t.as_str()) != Some("message") {
                continue;
            }
            let entry = TranscriptEntry::from_json(map).map_err(fmt)?;
            if let EntryKind::Message(m) = entry.kind {
                return Ok(Some(m));
            }
        }
    }
}

impl Iterator for JsonlTurns {
    type Item = Result<Turn>;

    fn next(&mut self) -> Option<Result<Turn>> {
        if self.done {
            return None;
        }
        let mut messages: Vec<AgentMessage> = self.pending.take().into_iter().collect();
        loop {
            match self.next_message() {
                Err(e) => {
                    self.done = true;
                    return Some(Err(e));
                }
                Ok(None) => {
                    self.done = true;
                    break;
                }
                Ok(Some(m)) => {
                    if matches!(m, AgentMessage::User(_)) && !messages.is_empty() {
                        self.pending = Some(m);
                        break;
                    }
                    messages.push(m);
                }
            }
        }
        if messages.is_empty() {
            return None;
        }
        let t = Turn {
            index: self.index,
            messages,
        };
        self.index += 1;
        Some(Ok(t))
    }
}
