//! `clawctx run "prompt"`: one turn, scriptable. Text streams to stdout; `--json` prints the
//! turn's outcome (reply, tool calls, usage, tokens against the budget, compactions, engine)
//! instead. Also home of the runtime setup the interactive commands share.

use std::io::Write;
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;
use clawctx_engine::AbortController;
use clawctx_gateway::trace::{LocalTrace, TurnWatch};
use clawctx_model::StreamEvent;
use clawctx_runtime::setup::{runtime_from_config, SetupOptions};
use clawctx_runtime::{AgentRuntime, TurnOutcome, TurnRequest};

use crate::global::GlobalArgs;

/// The session key used when `--session` is not given.
pub const DEFAULT_SESSION_KEY: &str = "agent:main:main";

/// `run` arguments.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The prompt.
    prompt: String,
    /// Print the outcome as JSON instead of streaming the reply.
    #[arg(long)]
    json: bool,
    /// Session key (default agent:main:main).
    #[arg(long, value_name = "KEY")]
    session: Option<String>,
    /// Model as provider/model (default: agents.defaults.model.primary, then OPENAI_*).
    #[arg(long, value_name = "PROVIDER/MODEL")]
    model: Option<String>,
}

/// Builds the runtime from the config, the state dir and `--model`, with every engine this
/// build knows plus the installed plugins. Keep the returned [`crate::engines::Engines`] alive
/// while the runtime runs: it owns the plugin processes.
pub async fn build_runtime(
    global: &GlobalArgs,
    model: Option<String>,
) -> anyhow::Result<(AgentRuntime, crate::engines::Engines)> {
    build_runtime_inner(global, model, false, true).await
}

/// [`build_runtime`]; with `model_optional`, no model is no error: the runtime is built on
/// `Backend::unconfigured` (the gateway, whose engine API needs no model).
pub async fn build_runtime_with(
    global: &GlobalArgs,
    model: Option<String>,
    model_optional: bool,
) -> anyhow::Result<(AgentRuntime, crate::engines::Engines)> {
    build_runtime_inner(global, model, model_optional, false).await
}

/// [`build_runtime_with`]; with `files`, the model also gets the read-only file tools over
/// the working directory ([`crate::file_tools`]: `chat` and `run`, not the gateway).
async fn build_runtime_inner(
    global: &GlobalArgs,
    model: Option<String>,
    model_optional: bool,
    files: bool,
) -> anyhow::Result<(AgentRuntime, crate::engines::Engines)> {
    // A read-only state dir fails here, before any engine or plugin starts.
    global.writable_state_dir()?;
    let config = global.load_config()?;
    let engines = crate::engines::load_for_turns(global, config.value()).await?;
    for (dir, err) in &engines.failed {
        eprintln!("warning: plugin at {} does not load: {err}", dir.display());
    }
    // Plugins take part whether or not their engine is the selected one: their hooks fire
    // and their tools are offered (the selected engine's own tools win a name clash).
    let hooks = clawctx_plugin::PluginHooks::new(&engines.plugins);
    let runtime = runtime_from_config(SetupOptions {
        config: std::sync::Arc::new(config.value().clone()),
        state_dir: global.state_dir(),
        registry: engines.registry.clone(),
        model,
        env: &clawctx_model::process_env,
        agent_id: "main".into(),
        hooks: (!hooks.is_empty()).then(|| {
            std::sync::Arc::new(hooks) as std::sync::Arc<dyn clawctx_engine::HookDispatcher>
        }),
        tools: engines
            .plugins
            .iter()
            .flat_map(|p| p.agent_tools())
            .chain(
                files
                    .then(|| std::env::current_dir().ok())
                    .flatten()
                    .map(|dir| crate::file_tools::file_tools(&dir))
                    .unwrap_or_default(),
            )
            .collect(),
        model_optional,
    })
    .await?;
    Ok((runtime, engines))
}

/// The turn trace of `run` and `chat` (`<state>/runtime/turn-trace.sqlite`, the gateway's
/// own, read by `clawctx sessions trace` and the dashboard's Turns tab), honouring
/// `gateway.trace`. Finish it before the runtime shuts down.
pub fn local_trace(
    global: &GlobalArgs,
    runtime: &AgentRuntime,
    engines: &crate::engines::Engines,
) -> anyhow::Result<LocalTrace> {
    let config = global.load_config()?;
    let mut settings = clawctx_gateway::GatewayConfig::loopback(0);
    settings.trace = clawctx_gateway::trace::TraceSettings::from_config(config.value())?;
    Ok(LocalTrace::start(clawctx_gateway::GatewayParts {
        runtime: runtime.clone(),
        registry: Some(engines.registry.clone()),
        host_config: std::sync::Arc::new(config.value().clone()),
        model: String::new(),
        config: settings,
    }))
}

/// Runs one turn, streaming text to stdout when `stream` is set; Ctrl-C aborts the turn
/// cleanly. Returns the outcome and whether any text was streamed, and the turn's watch in
/// `trace` (tell it the result once the turn's maintenance is done).
pub async fn turn_with_ctrl_c(
    runtime: &AgentRuntime,
    trace: &mut LocalTrace,
    key: &str,
    prompt: &str,
    stream: bool,
) -> (clawctx_runtime::Result<TurnOutcome>, bool, TurnWatch) {
    let controller = AbortController::new();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut request = TurnRequest::new(key, prompt);
    request.abort = Some(controller.signal());
    let watch = trace.watch(&mut request);
    if stream {
        request.events = Some(tx);
    } else {
        drop(tx);
    }
    let printer = tokio::spawn(async move {
        let mut printed = false;
        while let Some(event) = rx.recv().await {
            match event {
                StreamEvent::TextDelta(t) => {
                    let mut out = std::io::stdout().lock();
                    let _ = out.write_all(t.as_bytes());
                    let _ = out.flush();
                    printed = true;
                }
                StreamEvent::ToolCallStart { name, .. } => eprintln!("\n[tool] {name}"),
                StreamEvent::Retry {
                    attempt,
                    delay_ms,
                    reason,
                } => {
                    eprintln!("[retry {attempt} in {delay_ms} ms: {reason}]")
                }
                _ => {}
            }
        }
        printed
    });
    let fut = runtime.run_turn(request);
    tokio::pin!(fut);
    let result = loop {
        tokio::select! {
            r = &mut fut => break r,
            _ = tokio::signal::ctrl_c() => controller.abort("interrupted by Ctrl-C"),
        }
    };
    let printed = printer.await.unwrap_or(false);
    (result, printed, watch)
}

/// The compactions engines report in this process (`clawctx_summarize::observe`), for those
/// the lossless engine runs on the session's maintenance lane after the reply, which the
/// turn's outcome cannot list (`run` is one turn: every pass in the process is its session's).
struct MaintenanceCompactions {
    seen: std::sync::Arc<std::sync::Mutex<Vec<clawctx_summarize::observe::CompactionCall>>>,
    _guard: clawctx_summarize::observe::CompactionObserverGuard,
}

impl MaintenanceCompactions {
    fn watch() -> Self {
        let seen: std::sync::Arc<std::sync::Mutex<Vec<_>>> = Default::default();
        let into = seen.clone();
        let guard = clawctx_summarize::observe::add_compaction_observer(move |c| {
            if let Ok(mut v) = into.lock() {
                v.push(*c);
            }
        });
        MaintenanceCompactions {
            seen,
            _guard: guard,
        }
    }

    /// The compactions reported in this process that `listed` (the turn's own records) does
    /// not already hold, as the turn lists its own (`trigger: "maintenance"`). Matched by
    /// engine and duration rather than by time: the maintenance lane may finish its pass
    /// before the turn's future has returned.
    fn not_in(
        &self,
        listed: &[clawctx_runtime::CompactionRecord],
    ) -> Vec<clawctx_runtime::CompactionRecord> {
        let Ok(seen) = self.seen.lock() else {
            return Vec::new();
        };
        let mut unmatched: Vec<&clawctx_runtime::CompactionRecord> = listed.iter().collect();
        let mut out = Vec::new();
        for c in seen.iter().filter(|c| c.ok && c.summaries > 0) {
            let micros = c.took.as_micros() as u64;
            if let Some(i) = unmatched
                .iter()
                .position(|r| r.by == c.engine && r.micros == micros)
            {
                unmatched.swap_remove(i);
                continue;
            }
            out.push(clawctx_runtime::CompactionRecord {
                trigger: "maintenance".into(),
                by: c.engine.to_owned(),
                tokens_before: 0,
                tokens_after: None,
                micros,
            });
        }
        out
    }
}

/// Runs `clawctx run`.
pub async fn run(global: &GlobalArgs, args: RunArgs) -> anyhow::Result<ExitCode> {
    let (runtime, engines) = build_runtime(global, args.model).await?;
    let key = args
        .session
        .unwrap_or_else(|| DEFAULT_SESSION_KEY.to_owned());
    let mut trace = local_trace(global, &runtime, &engines)?;
    let later = MaintenanceCompactions::watch();
    let (mut result, printed, watch) =
        turn_with_ctrl_c(&runtime, &mut trace, &key, &args.prompt, !args.json).await;
    // Background maintenance (the lossless engine's compaction after the reply) finishes
    // before the process exits; Ctrl-C abandons it (nothing half-written: see RELIABILITY.md).
    tokio::select! {
        _ = runtime.wait_for_maintenance() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    // Its compactions are this turn's too: in `--json` and in the turn's trace.
    if let Ok(o) = &mut result {
        let maintenance = later.not_in(&o.compactions);
        o.compactions.extend(maintenance);
    }
    watch.ended(&result);
    trace.finish().await;
    runtime.shutdown().await;
    let outcome = result.context("the turn failed")?;
    // Engines quarantined during this run (this process): the reply came from legacy.
    let quarantines = engines.registry.quarantines();
    if args.json {
        let mut v = serde_json::to_value(&outcome)?;
        if let Some(map) = v.as_object_mut() {
            map.insert("quarantines".into(), serde_json::to_value(&quarantines)?);
        }
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        if !printed {
            print!("{}", outcome.reply);
        }
        println!();
        for w in &outcome.warnings {
            eprintln!("warning: {w}");
        }
    }
    Ok(ExitCode::SUCCESS)
}
