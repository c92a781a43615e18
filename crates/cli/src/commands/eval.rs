//! `clawctx eval locomo FILE`: replay LoCoMo conversations through engines at several budgets
//! and score whether each question's evidence is still reachable (in context or by recall).
//!
//! The lossless engine runs with the config every other command reads (`--config`, else the
//! state dir's `clawctx.json`: `plugins.entries.lossless.config`), changed by `--set key=value`
//! for quick comparisons, so a setting (the recall share, the fresh tail) can be measured. The
//! eval is a measurement: a key the engine does not read, or a value of the wrong type, is an
//! error naming it (the engine itself would fall back to the default and only log it), and the
//! report shows the config in effect. The store keys are replaced by the eval's own file.
//!
//! With `--answer-model` and `--judge-model` (any configured `provider/model`, as `clawctx chat
//! --model` takes) the eval also answers every question with a gold answer from the assembled
//! context and has the judge grade it ([`clawctx_bench::judged`]); verdicts are kept in the
//! answer cache (`--answers`, default `<state dir>/eval-answers.jsonl`), so a rerun asks only
//! what it has not.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Subcommand};
use clawctx_bench::eval::{parse_eval_engines, render_table, run_eval, EvalOptions};
use clawctx_bench::judged::{AnswerCache, Judging, ModelUse};
use clawctx_config::parse_cli_value;
use serde_json::{Map, Value};

use crate::global::GlobalArgs;

/// `clawctx eval`.
#[derive(Debug, Args)]
pub struct EvalArgs {
    #[command(subcommand)]
    command: EvalCommand,
}

#[derive(Debug, Subcommand)]
enum EvalCommand {
    /// LoCoMo evidence reachability: raw evidence in context, recall@k, answer in context.
    Locomo(LocomoArgs),
}

#[derive(Debug, Args)]
struct LocomoArgs {
    /// A LoCoMo JSON file (e.g. locomo10.json or a split of it). Never bundled: CC BY-NC 4.0.
    file: PathBuf,
    /// Engines, comma-separated: `legacy`, `lossless`, and `full` (the ceiling: the whole
    /// conversation verbatim, no budget and no compaction; run once whatever `--budget` says,
    /// its context tokens reported per question).
    #[arg(long, default_value = "legacy,lossless")]
    engine: String,
    /// Token budgets, comma-separated.
    #[arg(long, default_value = "4000")]
    budget: String,
    /// Recall top-k.
    #[arg(long, default_value_t = 5)]
    k: usize,
    /// Only the first N conversations.
    #[arg(long)]
    limit: Option<usize>,
    /// A lossless setting for this run, over the config file's
    /// `plugins.entries.lossless.config` (repeatable), e.g. `--set promptRecallShare=0`. The
    /// value is JSON5 when it parses, else a string.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
    /// Only the first N questions of each conversation.
    #[arg(long, value_name = "N")]
    questions: Option<usize>,
    /// Answer each question from the assembled context with this model (`provider/model`);
    /// needs `--judge-model`.
    #[arg(long, value_name = "PROVIDER/MODEL", requires = "judge_model")]
    answer_model: Option<String>,
    /// Grade the answers with this model (`provider/model`); needs `--answer-model`.
    #[arg(long, value_name = "PROVIDER/MODEL", requires = "answer_model")]
    judge_model: Option<String>,
    /// The answer cache of the judged mode (JSONL; reused and extended by every run).
    /// Default: `<state dir>/eval-answers.jsonl`.
    #[arg(long, value_name = "FILE")]
    answers: Option<PathBuf>,
    /// Print the report (with per-question outcomes) as JSON.
    #[arg(long)]
    json: bool,
}

/// The config keys that choose the store: the eval uses a file of its own.
const STORE_KEYS: [&str; 4] = ["database", "databaseEnv", "databasePath", "dbPath"];
/// Older key names the engine still reads.
const ALIASES: [&str; 2] = ["dbPath", "statelessSessionPatterns"];
const BASE: &str = "plugins.entries.lossless.config";

/// Runs the command.
pub async fn run(global: &GlobalArgs, args: EvalArgs) -> anyhow::Result<ExitCode> {
    let EvalCommand::Locomo(a) = args.command;
    let engines = parse_eval_engines(&a.engine)?;
    let budgets = a
        .budget
        .split(',')
        .map(|b| {
            b.trim()
                .replace('_', "")
                .parse::<u64>()
                .with_context(|| format!("invalid budget `{b}`"))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let config = global.load_config()?;
    let lossless_config =
        lossless_config(config.value(), &config.path().display().to_string(), &a.set)?;
    let mut conversations = clawctx_bench::locomo::load(&a.file)?;
    if let Some(n) = a.limit {
        conversations.truncate(n);
    }
    let judging = match (&a.answer_model, &a.judge_model) {
        (Some(answer), Some(judge)) => {
            let env = |n: &str| std::env::var(n).ok();
            let models = clawctx_model::ModelsConfig::from_config(config.value(), &env)
                .with_context(|| format!("{}: models", config.path().display()))?;
            let model_use = |r: &str, flag: &str| -> anyhow::Result<ModelUse> {
                let (provider, spec) = models
                    .provider_for(r)
                    .with_context(|| format!("{flag} {r}"))?;
                Ok(ModelUse {
                    provider,
                    model: spec.id,
                    model_ref: r.to_owned(),
                })
            };
            let path = a
                .answers
                .clone()
                .unwrap_or_else(|| global.state_dir().join("eval-answers.jsonl"));
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir)
                    .with_context(|| format!("creating {}", dir.display()))?;
            }
            Some(Judging {
                answer: model_use(answer, "--answer-model")?,
                judge: model_use(judge, "--judge-model")?,
                cache: std::sync::Arc::new(AnswerCache::open(&path)?),
            })
        }
        _ => None,
    };
    let temp = clawctx_bench::temp_dir().context("creating a temporary directory")?;
    let opts = EvalOptions {
        engines,
        budgets,
        k: a.k,
        work_dir: temp.path().to_owned(),
        lossless_config,
        questions: a.questions,
        judging,
    };
    let report = run_eval(&a.file, &conversations, &opts).await?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", render_table(&report));
    }
    Ok(ExitCode::SUCCESS)
}

/// The lossless engine's config for the eval: `plugins.entries.lossless.config` of `root`
/// (read from `file`), then each `KEY=VALUE` of `sets` (a key relative to that object, or the
/// whole dotted path), store keys removed; every key checked against what the engine reads.
fn lossless_config(root: &Value, file: &str, sets: &[String]) -> anyhow::Result<Value> {
    let cfg = match root.pointer("/plugins/entries/lossless/config") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(m)) => m.clone(),
        Some(other) => anyhow::bail!("{file}: {BASE} must be an object, not {other}"),
    };
    for (key, value) in &cfg {
        check_key(key, value).with_context(|| format!("{file}: {BASE}.{key}"))?;
    }
    // The config's own dotted-key setter (as `clawctx config set`), over the engine's object.
    let mut edited = clawctx_config::ConfigFile::from_value(BASE, Value::Object(cfg));
    for s in sets {
        let Some((key, text)) = s.split_once('=') else {
            anyhow::bail!("--set {s}: expected KEY=VALUE (e.g. --set promptRecallShare=0)");
        };
        let key = key.trim();
        let key = key
            .strip_prefix(BASE)
            .and_then(|k| k.strip_prefix('.'))
            .unwrap_or(key);
        edited
            .set(key, parse_cli_value(text))
            .with_context(|| format!("--set {s}"))?;
        // `a.b=v` sets inside the object at `a`: the whole of `a` is checked.
        let top = key.split('.').next().unwrap_or(key);
        let whole = edited.value().get(top).cloned().unwrap_or(Value::Null);
        check_key(top, &whole).with_context(|| format!("--set {s}"))?;
    }
    let Value::Object(mut cfg) = edited.value().clone() else {
        anyhow::bail!("{BASE} is not an object");
    };
    for k in STORE_KEYS {
        cfg.remove(k);
    }
    Ok(Value::Object(cfg))
}

/// `key` is a setting the engine reads and `value` has the type it reads it with.
fn check_key(key: &str, value: &Value) -> anyhow::Result<()> {
    let known: Vec<String> = serde_json::to_value(clawctx_lossless::LosslessConfig::default())
        .ok()
        .and_then(|v| v.as_object().map(|m| m.keys().cloned().collect()))
        .unwrap_or_default();
    if !known.iter().any(|k| k == key) && !ALIASES.contains(&key) {
        anyhow::bail!(
            "`{key}` is not a lossless setting (the engine reads: {})",
            known.join(", ")
        );
    }
    if STORE_KEYS.contains(&key) {
        return Ok(());
    }
    let one = Value::Object([(key.to_owned(), value.clone())].into_iter().collect());
    if let Err(e) = serde_json::from_value::<clawctx_lossless::LosslessConfig>(one) {
        anyhow::bail!("`{key}`: {value} is not a valid value ({e})");
    }
    Ok(())
}
