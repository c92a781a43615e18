//! The LLM-judged mode of `clawctx eval locomo` (issue #30 item 3): answers, not just presence.
//!
//! Whether the evidence is in the context is a proxy. What a user cares about is whether the
//! model answers right from it. For each question with a gold answer (categories 1–4; the
//! adversarial category has none, and published LoCoMo evaluations leave it out), the *answer
//! model* reads the assembled context and answers in a few words, and the *judge model* grades
//! that answer against the gold one as CORRECT or WRONG: the "J score" of published LoCoMo
//! tables is the share judged correct. Both are any configured model (`provider/model`, as
//! `clawctx chat --model` takes), so a user with an API key reproduces such a table, and the
//! tests run it offline against a mock server on loopback.
//!
//! Calls cost money, so every verdict is kept in an append-only JSONL file (the *answer cache*)
//! under a key naming the engine, budget, question, both models and a digest of the context: a
//! rerun (after a crash, or with more engines) asks again only what it has not asked, and a
//! changed context (another engine setting) is asked afresh. A torn last line (a crash in the
//! middle of an append) is cut off and asked again; any other bad line is an error naming the
//! file and line.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use clawctx_model::{CompletionRequest, ModelProvider};
use clawctx_protocol::AgentMessage;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;

use crate::error::{BenchError, Result};

/// What the answer model is told (the assembled context follows as the conversation).
pub const ANSWER_INSTRUCTIONS: &str = "You are answering a question about a long conversation \
between two people. The messages you are given are what a memory system kept of it: summaries \
of older parts, messages it recalled for this question, and the most recent messages, with \
their dates. Answer the question from them in a few words (a name, a date, a short phrase). \
When the question asks when something happened, answer with the date or period it happened, \
worked out from the dates given. If they do not say, give your best guess from what they do say.";

/// What the judge model is told.
pub const JUDGE_INSTRUCTIONS: &str = "You grade answers to questions about a conversation. You \
are given the question, the gold answer and a generated answer. Reply CORRECT if the generated \
answer states the same fact as the gold answer: be generous about wording and length, and \
count a date or period as the same when it names the same day, month, year or span as the \
gold answer (in any format). Reply WRONG if it states another fact, misses the point, or says \
it does not know. Reply with the one word CORRECT or WRONG.";

/// Tokens one call used, as the provider reported them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TokenCost {
    /// Prompt tokens.
    pub input: u64,
    /// Completion tokens.
    pub output: u64,
}

impl TokenCost {
    fn add(&mut self, o: TokenCost) {
        self.input += o.input;
        self.output += o.output;
    }
}

/// One question's answer and verdict.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Verdict {
    /// The answer model's answer.
    pub answer: String,
    /// The judge said CORRECT.
    pub correct: bool,
    /// The judge's reply named neither verdict (counted as wrong).
    pub unparsed: bool,
    /// The answer call's tokens.
    pub answer_tokens: TokenCost,
    /// The judge call's tokens.
    pub judge_tokens: TokenCost,
}

/// One line of the answer cache.
#[derive(Serialize, Deserialize)]
struct CacheLine {
    key: String,
    verdict: Verdict,
}

/// The answer cache: verdicts by key, appended to a JSONL file as they come.
#[derive(Debug)]
pub struct AnswerCache {
    path: PathBuf,
    entries: Mutex<HashMap<String, Verdict>>,
}

impl AnswerCache {
    /// Opens (or starts) the cache at `path`.
    pub fn open(path: &Path) -> Result<Self> {
        let mut entries = HashMap::new();
        match std::fs::read_to_string(path) {
            Ok(text) => {
                let lines: Vec<&str> = text.lines().collect();
                let torn_tail = !text.is_empty() && !text.ends_with('\n');
                for (i, line) in lines.iter().enumerate() {
                    if line.trim().is_empty() {
                        continue;
                    }
                    match serde_json::from_str::<CacheLine>(line) {
                        Ok(l) => {
                            entries.insert(l.key, l.verdict);
                        }
                        Err(_) if torn_tail && i + 1 == lines.len() => {
                            say_skipped(path, i + 1);
                        }
                        Err(e) => {
                            return Err(BenchError::Format {
                                path: path.to_owned(),
                                line: i + 1,
                                message: format!("not an answer-cache entry: {e}"),
                            })
                        }
                    }
                }
                if torn_tail {
                    // The torn line goes (it is asked again), so that later appends follow the
                    // last whole line and the file holds whole lines only.
                    let whole = text.rfind('\n').map_or(0, |i| i + 1) as u64;
                    std::fs::OpenOptions::new()
                        .write(true)
                        .open(path)
                        .and_then(|f| f.set_len(whole))
                        .map_err(|e| BenchError::io(path, e))?;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(BenchError::io(path, e)),
        }
        Ok(AnswerCache {
            path: path.to_owned(),
            entries: Mutex::new(entries),
        })
    }

    /// Verdicts held.
    pub fn len(&self) -> usize {
        self.entries.lock().map(|e| e.len()).unwrap_or(0)
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn get(&self, key: &str) -> Option<Verdict> {
        self.entries.lock().ok()?.get(key).cloned()
    }

    /// Keeps `verdict` under `key`: one whole line appended and flushed.
    fn put(&self, key: &str, verdict: &Verdict) -> Result<()> {
        let line = serde_json::to_string(&CacheLine {
            key: key.to_owned(),
            verdict: verdict.clone(),
        })
        .map_err(|e| BenchError::Format {
            path: self.path.clone(),
            line: 0,
            message: e.to_string(),
        })?;
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
            .map_err(|e| BenchError::io(&self.path, e))?;
        f.write_all(format!("{line}\n").as_bytes())
            .and_then(|_| f.flush())
            .map_err(|e| BenchError::io(&self.path, e))?;
        if let Ok(mut e) = self.entries.lock() {
            e.insert(key.to_owned(), verdict.clone());
        }
        Ok(())
    }
}

fn say_skipped(path: &Path, line: usize) {
    eprintln!(
        "{}: line {line} is incomplete (an interrupted write); skipped, it will be asked again",
        path.display()
    );
}

/// A configured model: its provider, the model id at the provider, and the ref it was named by.
#[derive(Clone, Debug)]
pub struct ModelUse {
    /// The provider.
    pub provider: Arc<dyn ModelProvider>,
    /// The model id at the provider.
    pub model: String,
    /// `provider/model`, as given.
    pub model_ref: String,
}

/// The judged mode's settings.
#[derive(Clone, Debug)]
pub struct Judging {
    /// Answers the questions.
    pub answer: ModelUse,
    /// Grades the answers.
    pub judge: ModelUse,
    /// Verdicts already asked for.
    pub cache: Arc<AnswerCache>,
}

/// Totals of the judged mode for one run.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct JudgedCost {
    /// Answer calls' tokens (cached verdicts included, as first paid).
    pub answer_tokens: TokenCost,
    /// Judge calls' tokens.
    pub judge_tokens: TokenCost,
    /// Questions judged now (model calls made).
    pub asked: u64,
    /// Questions answered from the cache.
    pub cached: u64,
    /// Judge replies that named neither verdict.
    pub unparsed: u64,
}

impl JudgedCost {
    pub(crate) fn add(&mut self, v: &Verdict, from_cache: bool) {
        self.answer_tokens.add(v.answer_tokens);
        self.judge_tokens.add(v.judge_tokens);
        if from_cache {
            self.cached += 1;
        } else {
            self.asked += 1;
        }
        self.unparsed += v.unparsed as u64;
    }
}

/// The cache key of one question's verdict.
pub(crate) fn cache_key(
    j: &Judging,
    engine: &str,
    budget: u64,
    sample_id: &str,
    index: usize,
    context: &[AgentMessage],
) -> String {
    let mut h = Sha256::new();
    for m in context {
        h.update(serde_json::to_string(m).unwrap_or_default().as_bytes());
        h.update([0u8]);
    }
    let digest: String = h.finalize()[..12]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!(
        "{engine}|{budget}|{sample_id}|{index}|{}|{}|{digest}",
        j.answer.model_ref, j.judge.model_ref
    )
}

/// The verdict for one question (from the cache, or asked now), and whether it was cached.
/// `context` is the assembled context with the question last.
pub(crate) async fn judge(
    j: &Judging,
    key: &str,
    context: &[AgentMessage],
    question: &str,
    gold: &str,
) -> Result<(Verdict, bool)> {
    if let Some(v) = j.cache.get(key) {
        return Ok((v, true));
    }
    let mut messages: Vec<AgentMessage> = context[..context.len().saturating_sub(1)].to_vec();
    messages.push(AgentMessage::user(format!(
        "Question: {question}\nAnswer in a few words."
    )));
    let (answer, answer_tokens) = call(&j.answer, ANSWER_INSTRUCTIONS, messages, 64).await?;
    let grading = format!(
        "Question: {question}\nGold answer: {gold}\nGenerated answer: {}",
        answer.trim()
    );
    let (reply, judge_tokens) = call(
        &j.judge,
        JUDGE_INSTRUCTIONS,
        vec![AgentMessage::user(grading)],
        8,
    )
    .await?;
    let (correct, unparsed) = match parse_verdict(&reply) {
        Some(c) => (c, false),
        None => (false, true),
    };
    let v = Verdict {
        answer: answer.trim().to_owned(),
        correct,
        unparsed,
        answer_tokens,
        judge_tokens,
    };
    j.cache.put(key, &v)?;
    Ok((v, false))
}

/// CORRECT or WRONG, whichever the reply names first (any case); `None` if neither.
pub fn parse_verdict(reply: &str) -> Option<bool> {
    let up = reply.to_ascii_uppercase();
    match (up.find("CORRECT"), up.find("WRONG")) {
        // "INCORRECT" names WRONG's meaning with CORRECT inside it.
        (Some(c), _) if up[..c].ends_with("IN") => Some(false),
        (Some(c), Some(w)) => Some(c < w),
        (Some(_), None) => Some(true),
        (None, Some(_)) => Some(false),
        (None, None) => None,
    }
}

async fn call(
    m: &ModelUse,
    system: &str,
    messages: Vec<AgentMessage>,
    max_output_tokens: u64,
) -> Result<(String, TokenCost)> {
    let req = CompletionRequest {
        model: m.model.clone(),
        system_prompt: Some(system.to_owned()),
        messages,
        max_output_tokens: Some(max_output_tokens),
        temperature: Some(0.0),
        ..Default::default()
    };
    let out = m
        .provider
        .complete(req, None, &CancellationToken::new())
        .await
        .map_err(|e| BenchError::Model {
            model: m.model_ref.clone(),
            message: e.to_string(),
        })?;
    let usage = out.usage();
    let text = AgentMessage::Assistant(out.message).plain_text();
    Ok((
        text,
        TokenCost {
            input: usage.input,
            output: usage.output,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts_parse_in_any_case_and_incorrect_is_wrong() {
        assert_eq!(parse_verdict("CORRECT"), Some(true));
        assert_eq!(parse_verdict("correct."), Some(true));
        assert_eq!(parse_verdict("Wrong"), Some(false));
        assert_eq!(parse_verdict("Incorrect"), Some(false));
        assert_eq!(parse_verdict("WRONG, not CORRECT"), Some(false));
        assert_eq!(parse_verdict("I cannot tell"), None);
    }

    #[test]
    fn the_cache_survives_a_torn_last_line_and_refuses_a_bad_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("answers.jsonl");
        let c = AnswerCache::open(&path).unwrap();
        let v = Verdict {
            answer: "Biscuit".into(),
            correct: true,
            unparsed: false,
            answer_tokens: TokenCost {
                input: 10,
                output: 2,
            },
            judge_tokens: TokenCost::default(),
        };
        c.put("a", &v).unwrap();
        // A crash in the middle of the next append.
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        f.write_all(b"{\"key\":\"b\",\"verd").unwrap();
        drop(f);
        let c = AnswerCache::open(&path).unwrap();
        assert_eq!(c.get("a"), Some(v.clone()));
        assert_eq!(c.len(), 1);
        c.put("b", &v).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 2, "the torn line is gone: {text}");
        assert_eq!(AnswerCache::open(&path).unwrap().len(), 2);

        std::fs::write(&path, "not json\n{}\n").unwrap();
        let e = AnswerCache::open(&path).unwrap_err().to_string();
        assert!(e.contains("answers.jsonl:1:"), "{e}");
    }
}
