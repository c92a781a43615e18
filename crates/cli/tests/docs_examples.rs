//! The documentation's examples, run as tests, so a command or an output that drifts from what
//! the docs say fails CI (issue #33, "docs tested like code").
//!
//! Every fenced block of README.md, docs/*.md and sdk/*/README.md is read, in order:
//!
//! - ```` ```sh ```` blocks run as one `bash -eu -o pipefail` script each: every command must
//!   succeed.
//! - ```` ```console ```` blocks hold `$ command` lines, each followed by the output it must
//!   print (stdout, then stderr); `...` alone on a line stands for any lines, `[..]` within a
//!   line for any text.
//! - ```` ```json ```` blocks must parse as JSON (`[…]` and `{…}` stand for elided content; a
//!   JSON-RPC exchange written as `→ {…}` / `← {…}` lines is parsed message by message),
//!   ```` ```json5 ```` blocks as a clawctx config (JSON5, an object, no config error from
//!   `clawctx_config::check`).
//! - Any block with `file=PATH` in its info string is also written to `PATH` in the scratch
//!   working directory, for the blocks after it (a plugin's `index.js`, a manifest).
//!
//! A block that cannot run here is marked in its info string with `no-run` and the reason, e.g.
//! ```` ```sh no-run: starts a server that keeps running ````; the reason is required, and the
//! test prints every skipped block. A block marked `gateway` runs while a gateway the harness
//! started serves the file's state dir (on a free port, written into the block where it says
//! `127.0.0.1:18789`).
//!
//! Each Markdown file runs in a scratch directory of its own, as a new user would: `HOME`,
//! `CLAWCTX_STATE_DIR` (`state/`) and the working directory (`work/`, holding a recorded
//! `conversation.jsonl`) are fresh; `clawctx` on `PATH` is the binary under test; the
//! OpenAI-compatible model every block sees is a mock server on loopback (`OPENAI_BASE_URL`,
//! `OPENAI_MODEL`, `OPENAI_API_KEY` set, and the docs' placeholder address
//! `http://127.0.0.1:8000/v1` rewritten to it). Blocks of one file share that state, in order.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::json;
use wiremock::matchers::{body_partial_json, body_string_contains, method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

/// How long one block may run before it counts as hung (a guard, not a measurement).
const BLOCK_TIMEOUT_SECS: u64 = 180;
/// The docs' placeholder for "your model server".
const DOCS_MODEL_URL: &str = "http://127.0.0.1:8000/v1";
/// The docs' gateway address.
const DOCS_GATEWAY: &str = "127.0.0.1:18789";

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// One fenced block.
#[derive(Debug)]
struct Block {
    file: String,
    /// 1-based line of the opening fence.
    line: usize,
    lang: String,
    no_run: Option<String>,
    gateway: bool,
    write_to: Option<String>,
    body: String,
}

impl Block {
    fn at(&self) -> String {
        format!("{}:{}", self.file, self.line)
    }
}

fn blocks_of(file: &str, text: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut lines = text.lines().enumerate();
    while let Some((i, line)) = lines.next() {
        // A fence opens with three backticks and an info string without any (CommonMark);
        // "```` ```sh ````" inside a paragraph is code span text, not a fence.
        let Some(info) = line.trim_start().strip_prefix("```") else {
            continue;
        };
        if info.contains('`') {
            continue;
        }
        let fence_indent = line.len() - line.trim_start().len();
        let info = info.trim();
        let mut body = String::new();
        for (_, l) in lines.by_ref() {
            if l.trim_start().starts_with("```") && l.trim() == "```" {
                break;
            }
            body.push_str(l.get(fence_indent..).unwrap_or(l.trim_start()));
            body.push('\n');
        }
        let lang = info.split_whitespace().next().unwrap_or("").to_owned();
        let rest = info[lang.len()..].trim();
        let no_run = rest.find("no-run").map(|at| {
            rest[at + "no-run".len()..]
                .trim_start_matches(':')
                .trim()
                .to_owned()
        });
        let write_to = rest
            .split_whitespace()
            .find_map(|w| w.strip_prefix("file="))
            .map(str::to_owned);
        let gateway = no_run.is_none() && rest.split_whitespace().any(|w| w == "gateway");
        out.push(Block {
            file: file.to_owned(),
            line: i + 1,
            lang,
            no_run,
            gateway,
            write_to,
            body,
        });
    }
    out
}

/// The Markdown files whose examples are tested.
fn doc_files() -> Vec<String> {
    let root = repo_root();
    let mut files = vec!["README.md".to_owned()];
    let mut docs: Vec<String> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".md"))
        .map(|n| format!("docs/{n}"))
        .collect();
    docs.sort();
    files.extend(docs);
    let mut sdk: Vec<String> = std::fs::read_dir(root.join("sdk"))
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.path().join("README.md").is_file())
        .map(|e| format!("sdk/{}/README.md", e.file_name().to_string_lossy()))
        .collect();
    sdk.sort();
    files.extend(sdk);
    files
}

/// A recorded conversation for `replay` examples: long enough to compact under lossless, with
/// an early detail (`invoice`) for `lcm grep`.
fn conversation() -> String {
    let mut out = String::new();
    out.push_str("{\"role\": \"user\", \"content\": \"We moved the invoice job to the new queue on Tuesday; the old cron is gone.\"}\n");
    out.push_str("{\"role\": \"assistant\", \"content\": \"Noted: the invoice job runs on the new queue since Tuesday.\"}\n");
    for i in 0..60 {
        let _ = writeln!(
            out,
            "{{\"role\": \"user\", \"content\": \"Step {i}: review the deployment checklist item {i} for the billing service, with its logs and owners.\"}}"
        );
        let _ = writeln!(
            out,
            "{{\"role\": \"assistant\", \"content\": \"Item {i} reviewed: the checklist entry is done, logs attached, owner confirmed.\"}}"
        );
    }
    out
}

/// What every block of one Markdown file shares.
struct Scratch {
    _dir: tempfile::TempDir,
    home: PathBuf,
    state: PathBuf,
    work: PathBuf,
    bin: PathBuf,
    model_url: String,
}

impl Scratch {
    fn new(model_url: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        let (home, state, work, bin) = (
            root.join("home"),
            root.join("state"),
            root.join("work"),
            root.join("bin"),
        );
        for d in [&home, &state, &work, &bin] {
            std::fs::create_dir_all(d).unwrap();
        }
        std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_clawctx"), bin.join("clawctx")).unwrap();
        std::fs::write(work.join("conversation.jsonl"), conversation()).unwrap();
        // The repository's own paths (`sdk/openclaw-bridge`, `examples/…`) as a clone has them.
        for entry in ["sdk", "examples", "docs"] {
            let from = repo_root().join(entry);
            if from.exists() {
                std::os::unix::fs::symlink(&from, work.join(entry)).unwrap();
            }
        }
        Self {
            _dir: dir,
            home,
            state,
            work,
            bin,
            model_url: model_url.to_owned(),
        }
    }

    fn command(&self, program: &str) -> Command {
        let mut cmd = Command::new(program);
        let path = format!(
            "{}:{}",
            self.bin.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        cmd.current_dir(&self.work)
            .env_clear()
            .env("PATH", path)
            .env("HOME", &self.home)
            .env("LANG", "C.UTF-8")
            .env("CLAWCTX_STATE_DIR", &self.state)
            .env("OPENAI_BASE_URL", &self.model_url)
            .env("OPENAI_MODEL", "mock-model")
            .env("OPENAI_API_KEY", "sk-docs-test")
            .stdin(Stdio::null());
        for keep in ["CLAWCTX_TEST_PG_URL", "CI", "TMPDIR"] {
            if let Ok(v) = std::env::var(keep) {
                cmd.env(keep, v);
            }
        }
        cmd
    }

    /// Runs `script` with bash under the block timeout: (exit code, stdout, stderr).
    fn bash(&self, script: &str, strict: bool) -> (i32, String, String) {
        let mut cmd = self.command("timeout");
        cmd.arg(BLOCK_TIMEOUT_SECS.to_string()).arg("bash");
        if strict {
            cmd.args(["-eu", "-o", "pipefail"]);
        }
        let out = cmd.arg("-c").arg(script).output().expect("running bash");
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }
}

/// A gateway serving the scratch state dir, stopped when dropped.
struct Gateway {
    child: std::process::Child,
    port: u16,
}

impl Gateway {
    fn start(scratch: &Scratch) -> Result<Self, String> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .map_err(|e| e.to_string())?;
        let child = scratch
            .command(env!("CARGO_BIN_EXE_clawctx"))
            .args(["gateway", "--port", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| e.to_string())?;
        let mut gateway = Self { child, port };
        for _ in 0..300 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return Ok(gateway);
            }
            if let Ok(Some(status)) = gateway.child.try_wait() {
                return Err(format!("the gateway exited at start: {status}"));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Err("the gateway did not listen within 30 s".into())
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether `actual` matches `expected` (`...` lines: any lines; `[..]`: any text in a line).
fn matches(expected: &str, actual: &str) -> bool {
    fn line_matches(pattern: &str, line: &str) -> bool {
        let parts: Vec<&str> = pattern.split("[..]").collect();
        if parts.len() == 1 {
            return pattern == line;
        }
        let mut rest = line;
        for (i, part) in parts.iter().enumerate() {
            if i == 0 {
                let Some(r) = rest.strip_prefix(part) else {
                    return false;
                };
                rest = r;
            } else if i == parts.len() - 1 {
                return rest.ends_with(part);
            } else {
                let Some(at) = rest.find(part) else {
                    return false;
                };
                rest = &rest[at + part.len()..];
            }
        }
        true
    }
    fn go(exp: &[&str], act: &[&str]) -> bool {
        match exp.split_first() {
            None => act.is_empty(),
            Some((&"...", rest)) => (0..=act.len()).any(|skip| go(rest, &act[skip..])),
            Some((first, rest)) => {
                act.first().is_some_and(|a| line_matches(first, a)) && go(rest, &act[1..])
            }
        }
    }
    let exp: Vec<&str> = expected.lines().collect();
    let act: Vec<&str> = actual.lines().collect();
    go(&exp, &act)
}

/// Runs one block; `Err` says what went wrong.
fn run_block(block: &Block, scratch: &Scratch) -> Result<(), String> {
    if let Some(target) = &block.write_to {
        let dest = scratch.work.join(target);
        std::fs::create_dir_all(dest.parent().unwrap()).map_err(|e| e.to_string())?;
        std::fs::write(&dest, &block.body).map_err(|e| e.to_string())?;
    }
    match block.lang.as_str() {
        "json" => {
            // `[…]` and `{…}` stand for elided content.
            let body = block.body.replace("[…]", "[]").replace("{…}", "{}");
            for message in json_messages(&body) {
                serde_json::from_str::<serde_json::Value>(&message)
                    .map_err(|e| format!("not JSON: {e}\n{message}"))?;
            }
            Ok(())
        }
        "json5" => {
            let value = clawctx_config::ConfigFile::parse(Path::new(&block.at()), &block.body)
                .map_err(|e| e.to_string())?;
            let errors: Vec<String> = clawctx_config::check(&value)
                .into_iter()
                .filter(|p| p.severity == clawctx_config::Severity::Error)
                .map(|p| format!("{}: {}", p.key, p.message))
                .collect();
            if errors.is_empty() {
                Ok(())
            } else {
                Err(format!("config problems: {errors:?}"))
            }
        }
        "sh" | "bash" | "console" => {
            let gateway = if block.gateway {
                Some(Gateway::start(scratch)?)
            } else {
                None
            };
            let mut body = block.body.replace(DOCS_MODEL_URL, &scratch.model_url);
            if let Some(g) = &gateway {
                body = body.replace(DOCS_GATEWAY, &format!("127.0.0.1:{}", g.port));
            }
            if block.lang == "console" {
                run_console(&body, scratch)
            } else {
                let (code, stdout, stderr) = scratch.bash(&body, true);
                if code == 0 {
                    Ok(())
                } else {
                    Err(format!(
                        "exit {code}\n--- script\n{body}--- stdout\n{stdout}\n--- stderr\n{stderr}"
                    ))
                }
            }
        }
        _ => Ok(()),
    }
}

/// A `json` block's documents: the block itself, or, for a JSON-RPC exchange written as
/// `→ {…}` (host to plugin) and `← {…}` (plugin to host) lines, each message.
fn json_messages(body: &str) -> Vec<String> {
    let exchange = body.trim_start().starts_with(|c| c == '→' || c == '←');
    if !exchange {
        return vec![body.to_owned()];
    }
    let mut out: Vec<String> = Vec::new();
    for line in body.lines() {
        let trimmed = line.trim_start();
        if let Some(rest) = trimmed
            .strip_prefix('→')
            .or_else(|| trimmed.strip_prefix('←'))
        {
            out.push(rest.to_owned());
        } else if let Some(last) = out.last_mut() {
            last.push('\n');
            last.push_str(line);
        }
    }
    out
}

fn run_console(body: &str, scratch: &Scratch) -> Result<(), String> {
    let mut steps: Vec<(String, String)> = Vec::new();
    for line in body.lines() {
        if let Some(cmd) = line.strip_prefix("$ ") {
            steps.push((cmd.to_owned(), String::new()));
        } else if let Some((_, expected)) = steps.last_mut() {
            expected.push_str(line);
            expected.push('\n');
        }
    }
    if steps.is_empty() {
        return Err("a console block without a `$ ` command".into());
    }
    for (cmd, expected) in steps {
        let (code, stdout, stderr) = scratch.bash(&cmd, false);
        let printed = format!("{stdout}{stderr}");
        if code != 0 || !matches(&expected, &printed) {
            return Err(format!(
                "$ {cmd}\nexit {code}\n--- expected\n{expected}--- printed\n{printed}"
            ));
        }
    }
    Ok(())
}

/// The model behind every block: a plain answer, except for the README's client-tool example
/// (a request offering `get_weather` is answered with a call of it, `call_1`, until its result,
/// `light rain`, is in the request; then a plain answer).
async fn mock_model() -> MockServer {
    let server = MockServer::start().await;
    let answer = json!({
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "An answer from the mock model."}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 20, "completion_tokens": 7, "total_tokens": 27}
    });
    let call = json!({"index": 0, "id": "call_1", "type": "function",
        "function": {"name": "get_weather", "arguments": "{\"city\":\"Oslo\"}"}});
    let call_sse = format!(
        "data: {}\n\ndata: {}\n\ndata: [DONE]\n\n",
        json!({"choices": [{"index": 0, "delta": {"role": "assistant", "tool_calls": [call]}}]}),
        json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
    );
    let call_json = json!({
        "choices": [{"index": 0, "message": {"role": "assistant", "content": null,
            "tool_calls": [{"id": "call_1", "type": "function",
                "function": {"name": "get_weather", "arguments": "{\"city\":\"Oslo\"}"}}]},
            "finish_reason": "tool_calls"}],
        "usage": {"prompt_tokens": 20, "completion_tokens": 7, "total_tokens": 27}
    });
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .and(body_string_contains("light rain"))
        .and(body_partial_json(json!({"stream": true})))
        .respond_with(ResponseTemplate::new(200).set_body_raw(
            "data: {\"choices\": [{\"index\": 0, \"delta\": {\"role\": \"assistant\", \"content\": \"Light rain in Oslo.\"}}]}\n\ndata: {\"choices\": [{\"index\": 0, \"delta\": {}, \"finish_reason\": \"stop\"}]}\n\ndata: [DONE]\n\n",
            "text/event-stream",
        ))
        .with_priority(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .and(body_string_contains("light rain"))
        .respond_with(ResponseTemplate::new(200).set_body_json(answer.clone()))
        .with_priority(2)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .and(body_string_contains("get_weather"))
        .and(body_partial_json(json!({"stream": true})))
        .respond_with(ResponseTemplate::new(200).set_body_raw(call_sse, "text/event-stream"))
        .with_priority(3)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .and(body_string_contains("get_weather"))
        .respond_with(ResponseTemplate::new(200).set_body_json(call_json))
        .with_priority(4)
        .mount(&server)
        .await;
    let sse = concat!(
        "data: {\"choices\": [{\"index\": 0, \"delta\": {\"role\": \"assistant\"}}]}\n\n",
        "data: {\"choices\": [{\"index\": 0, \"delta\": {\"content\": \"An answer from the mock model.\"}}]}\n\n",
        "data: {\"choices\": [{\"index\": 0, \"delta\": {}, \"finish_reason\": \"stop\"}]}\n\n",
        "data: [DONE]\n\n"
    );
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .and(body_partial_json(json!({"stream": true})))
        .respond_with(ResponseTemplate::new(200).set_body_raw(sse, "text/event-stream"))
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "An answer from the mock model."}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 20, "completion_tokens": 7, "total_tokens": 27}
        })))
        .mount(&server)
        .await;
    server
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_docs_examples_run_as_written() {
    let model = mock_model().await;
    let model_url = format!("{}/v1", model.uri());
    let root = repo_root();
    let files = doc_files();
    let (ran, skipped, failures) = tokio::task::spawn_blocking(move || {
        let mut ran = 0usize;
        let mut skipped = Vec::new();
        let mut failures = Vec::new();
        for file in files {
            let text = std::fs::read_to_string(root.join(&file)).unwrap();
            let scratch = Scratch::new(&model_url);
            for block in blocks_of(&file, &text) {
                if let Some(reason) = &block.no_run {
                    if reason.is_empty() {
                        failures.push(format!(
                            "{}: `no-run` needs a reason (```sh no-run: why)",
                            block.at()
                        ));
                    }
                    skipped.push(format!("{} ({})", block.at(), reason));
                    continue;
                }
                if !matches!(
                    block.lang.as_str(),
                    "sh" | "bash" | "console" | "json" | "json5"
                ) && block.write_to.is_none()
                {
                    continue;
                }
                ran += 1;
                if let Err(e) = run_block(&block, &scratch) {
                    failures.push(format!("{} ({}): {e}", block.at(), block.lang));
                }
            }
        }
        (ran, skipped, failures)
    })
    .await
    .unwrap();
    eprintln!(
        "docs examples: {ran} blocks run, {} not run:\n  {}",
        skipped.len(),
        skipped.join("\n  ")
    );
    assert!(
        ran >= 20,
        "only {ran} blocks ran: is the harness reading the docs?"
    );
    assert!(
        failures.is_empty(),
        "{} doc example(s) drifted from what clawctx does:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

#[test]
fn the_output_patterns_match_as_documented() {
    assert!(matches("a\n...\nd\n", "a\nb\nc\nd\n"));
    assert!(matches("a\n...\n", "a\n"));
    assert!(matches("x [..] z\n", "x yyy z\n"));
    assert!(!matches("a\nd\n", "a\nb\nd\n"));
    assert!(!matches("x [..] z\n", "x y w\n"));
    let blocks = blocks_of(
        "t.md",
        "text\n```sh no-run: needs a key\nclawctx chat\n```\n```js file=p/index.js\nx\n```\n```sh gateway\ncurl\n```\nsay ```` ```sh no-run: why ````.\n",
    );
    assert_eq!(blocks.len(), 3);
    assert_eq!(blocks[0].no_run.as_deref(), Some("needs a key"));
    assert_eq!(blocks[1].write_to.as_deref(), Some("p/index.js"));
    assert!(blocks[2].gateway);
    assert_eq!(
        json_messages("→ {\"id\": 1,\n  \"x\": 2}\n← {\"id\": 1}\n").len(),
        2
    );
    assert_eq!(blocks[2].line, 8);
}
