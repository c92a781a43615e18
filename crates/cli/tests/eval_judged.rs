//! `clawctx eval locomo --answer-model … --judge-model …` (issue #30 item 3), offline: a mock
//! model on loopback answers each question `A<n>` (the n-th answer asked for) and, as the
//! judge, grades an answer CORRECT when its n is even, so the J score of every category is
//! known in advance. The answer model must be given the assembled context and the question,
//! the judge the question, the gold answer and the generated answer; a second run over the
//! same answer cache asks the models nothing and reports the same scores.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use serde_json::{json, Value};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../bench/tests/fixtures/tiny-locomo.json")
}

struct Model {
    answers: Arc<AtomicUsize>,
}

impl Respond for Model {
    fn respond(&self, req: &Request) -> ResponseTemplate {
        let body: Value = serde_json::from_slice(&req.body).unwrap_or(Value::Null);
        let system = body["messages"][0]["content"].as_str().unwrap_or_default();
        let reply = if system.contains("You grade answers") {
            let text = body["messages"][1]["content"].as_str().unwrap_or_default();
            let n: usize = text
                .split("Generated answer: A")
                .nth(1)
                .and_then(|r| r.trim().parse().ok())
                .unwrap_or(1);
            if n % 2 == 0 { "CORRECT" } else { "Wrong." }.to_owned()
        } else {
            format!("A{}", self.answers.fetch_add(1, Ordering::SeqCst) + 1)
        };
        ResponseTemplate::new(200).set_body_json(json!({
            "choices": [{"index": 0, "message": {"role": "assistant", "content": reply}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 3, "total_tokens": 103}
        }))
    }
}

fn eval(state: &Path, answers: &Path) -> (common::Run, Value) {
    eval_engine(state, answers, "lossless")
}

fn eval_engine(state: &Path, answers: &Path, engine: &str) -> (common::Run, Value) {
    let f = fixture();
    let run = common::run(
        state,
        &[
            "eval",
            "locomo",
            f.to_str().unwrap(),
            "--engine",
            engine,
            "--budget",
            "600",
            "--answer-model",
            "mock/m",
            "--judge-model",
            "mock/m",
            "--answers",
            answers.to_str().unwrap(),
            "--json",
        ],
    );
    assert_eq!(run.code, 0, "{run}");
    let v = serde_json::from_str(&run.stdout).unwrap_or_else(|e| panic!("not JSON ({e}):\n{run}"));
    (run, v)
}

fn judged(report: &Value, category: &str) -> (u64, u64) {
    let c = &report["runs"][0]["categories"][category];
    (
        c["judged"].as_u64().unwrap(),
        c["judgedCorrect"].as_u64().unwrap(),
    )
}

/// The scripted model (answers and verdicts) on a mock server, and a state dir whose
/// `clawctx.json` names it as provider `mock` (model `m`).
async fn mock_models() -> (MockServer, tempfile::TempDir) {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(Model {
            answers: Arc::new(AtomicUsize::new(0)),
        })
        .mount(&server)
        .await;
    let dir = tempfile::tempdir().unwrap();
    let config = json!({
        "models": {"providers": {"mock": {"api": "openai-completions", "baseUrl": format!("{}/v1", server.uri()),
            "models": [{"id": "m", "contextWindow": 16000, "maxTokens": 512}], "maxRetries": 0}}}
    });
    std::fs::write(dir.path().join("clawctx.json"), config.to_string()).unwrap();
    (server, dir)
}

#[tokio::test(flavor = "multi_thread")]
async fn answers_are_judged_per_category_and_cached() {
    let (server, dir) = mock_models().await;
    let answers = dir.path().join("answers.jsonl");

    let state = dir.path().to_owned();
    let a = answers.clone();
    let (run, report) = tokio::task::spawn_blocking(move || eval(&state, &a))
        .await
        .unwrap();
    // The fixture's questions in order: categories 4, 1, 5, 3, 2. Adversarial (5) has no gold
    // answer to grade; the other four are answered A1..A4, and the even ones graded CORRECT.
    assert_eq!(judged(&report, "4"), (1, 0), "{run}");
    assert_eq!(judged(&report, "1"), (1, 1), "{run}");
    assert_eq!(judged(&report, "3"), (1, 0), "{run}");
    assert_eq!(judged(&report, "2"), (1, 1), "{run}");
    assert_eq!(judged(&report, "5"), (0, 0), "{run}");
    let overall = &report["runs"][0]["overall"];
    assert_eq!(
        (
            overall["judged"].as_u64(),
            overall["judgedCorrect"].as_u64()
        ),
        (Some(4), Some(2))
    );
    let cost = &report["runs"][0]["judged"];
    assert_eq!(cost["asked"], 4, "{run}");
    assert_eq!(cost["cached"], 0, "{run}");
    assert_eq!(
        cost["answerTokens"]["input"], 400,
        "the provider's usage: {run}"
    );
    assert_eq!(
        report["models"],
        json!({"answer": "mock/m", "judge": "mock/m"})
    );

    // What each model was given.
    let requests = server.received_requests().await.unwrap();
    assert_eq!(
        requests.len(),
        8,
        "one answer and one grading per judged question"
    );
    let bodies: Vec<Value> = requests
        .iter()
        .map(|r| serde_json::from_slice(&r.body).unwrap())
        .collect();
    let questions: Vec<Value> =
        serde_json::from_str::<Value>(&std::fs::read_to_string(fixture()).unwrap()).unwrap()[0]
            ["qa"]
            .as_array()
            .unwrap()
            .clone();
    let (answer_calls, judge_calls): (Vec<&Value>, Vec<&Value>) = bodies.iter().partition(|b| {
        !b["messages"][0]["content"]
            .as_str()
            .unwrap_or_default()
            .contains("You grade answers")
    });
    assert_eq!((answer_calls.len(), judge_calls.len()), (4, 4));
    for (b, q) in answer_calls
        .iter()
        .zip(questions.iter().filter(|q| q["category"] != 5))
    {
        let msgs = b["messages"].as_array().unwrap();
        assert!(
            msgs.len() > 2,
            "the assembled context comes before the question: {b}"
        );
        let last = msgs.last().unwrap()["content"].to_string();
        assert!(
            last.contains(&format!("Question: {}", q["question"].as_str().unwrap())),
            "{last}"
        );
    }
    for (b, q) in judge_calls
        .iter()
        .zip(questions.iter().filter(|q| q["category"] != 5))
    {
        let text = b["messages"][1]["content"].to_string();
        let gold = q["answer"].to_string();
        assert!(
            text.contains(gold.trim_matches('"')),
            "the gold answer {gold}: {text}"
        );
        assert!(text.contains("Generated answer: A"), "{text}");
    }

    // Again over the same answer cache: nothing asked, the same scores.
    let state = dir.path().to_owned();
    let a = answers.clone();
    let (run, again) = tokio::task::spawn_blocking(move || eval(&state, &a))
        .await
        .unwrap();
    assert_eq!(server.received_requests().await.unwrap().len(), 8, "{run}");
    assert_eq!(again["runs"][0]["judged"]["cached"], 4, "{run}");
    assert_eq!(again["runs"][0]["overall"]["judgedCorrect"], 2, "{run}");
}

/// The `full` baseline in the judged mode: the answer model is given the whole conversation
/// (every turn of the fixture, far over the 600-token budget) and the report says the run had
/// no budget.
#[tokio::test(flavor = "multi_thread")]
async fn the_full_baseline_answers_from_the_whole_conversation() {
    let (server, dir) = mock_models().await;
    let answers = dir.path().join("answers.jsonl");
    let state = dir.path().to_owned();
    let (run, report) = tokio::task::spawn_blocking(move || eval_engine(&state, &answers, "full"))
        .await
        .unwrap();
    let r = &report["runs"][0];
    assert_eq!(
        (&r["engine"], &r["budget"], &r["ignoresBudget"]),
        (&json!("full"), &json!(0), &json!(true)),
        "{run}"
    );
    assert_eq!(r["overall"]["judged"], 4, "{run}");
    assert!(r["contextTokensMax"].as_u64().unwrap() > 600, "{run}");
    let fixture: Value =
        serde_json::from_str(&std::fs::read_to_string(fixture()).unwrap()).unwrap();
    let conv = fixture[0]["conversation"].as_object().unwrap();
    let turns: Vec<String> = conv
        .iter()
        .filter(|(k, v)| k.starts_with("session_") && v.is_array())
        .flat_map(|(_, v)| v.as_array().unwrap().iter())
        .map(|t| t["text"].as_str().unwrap().to_owned())
        .collect();
    assert!(turns.len() > 40, "the fixture's turns");
    let requests = server.received_requests().await.unwrap();
    let answer_calls: Vec<Value> = requests
        .iter()
        .map(|r| serde_json::from_slice::<Value>(&r.body).unwrap())
        .filter(|b| {
            !b["messages"][0]["content"]
                .as_str()
                .unwrap_or_default()
                .contains("You grade answers")
        })
        .collect();
    assert_eq!(answer_calls.len(), 4, "{run}");
    for b in &answer_calls {
        let given = b["messages"].to_string();
        for t in &turns {
            let t = serde_json::to_string(t).unwrap();
            assert!(
                given.contains(t.trim_matches('"')),
                "every turn reaches the answer model; missing {t}"
            );
        }
    }
}

#[test]
fn one_model_flag_without_the_other_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let f = fixture();
    let run = common::run(
        dir.path(),
        &[
            "eval",
            "locomo",
            f.to_str().unwrap(),
            "--answer-model",
            "mock/m",
        ],
    );
    assert_ne!(run.code, 0, "{run}");
    assert!(run.stderr.contains("--judge-model"), "{run}");
}
