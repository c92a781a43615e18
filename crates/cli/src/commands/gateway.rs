//! `clawctx gateway`: run the gateway (engines, stores and plugins warm behind HTTP), and
//! `clawctx gateway status`.
//!
//! The order matters: the settings are resolved first (a bind off loopback without a token is
//! refused before anything is opened), then the state dir's lock is taken (a second gateway is
//! refused before it opens a store), then the runtime is built exactly as `run` and `chat`
//! build it (every engine and installed plugin), then the socket is bound and its address
//! recorded in the lock file and printed. SIGTERM or Ctrl-C drain the gateway (see
//! `clawctx_gateway::Gateway::serve`); the plugin processes and the lock go when this returns.

use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::{Args, Subcommand};
use clawctx_gateway::{Gateway, GatewayConfig, GatewayParts, Overrides, StateLock};

use crate::global::GlobalArgs;

/// `gateway` arguments.
#[derive(Debug, Args)]
pub struct GatewayArgs {
    #[command(subcommand)]
    action: Option<GatewayAction>,
    #[command(flatten)]
    run: RunFlags,
}

#[derive(Debug, Subcommand)]
enum GatewayAction {
    /// Run the gateway (the default).
    Run(RunFlags),
    /// Whether a gateway serves this state dir: pid, address, health.
    Status {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Clone, Args)]
struct RunFlags {
    /// Port (default: $CLAWCTX_GATEWAY_PORT, else gateway.port, else 18789; 0 = any free port).
    #[arg(long)]
    port: Option<u16>,
    /// loopback (default), lan, auto, custom (gateway.customBindHost) or an IP address. Anything
    /// off loopback needs a token (gateway.auth.token / tokenEnv / $CLAWCTX_GATEWAY_TOKEN).
    #[arg(long, value_name = "MODE|IP")]
    bind: Option<String>,
    /// Model as provider/model (default: agents.defaults.model.primary, then OPENAI_*).
    #[arg(long, value_name = "PROVIDER/MODEL")]
    model: Option<String>,
}

/// Runs `clawctx gateway`.
pub async fn run(global: &GlobalArgs, args: GatewayArgs) -> anyhow::Result<ExitCode> {
    match args.action {
        Some(GatewayAction::Status { json }) => status(global, json).await,
        Some(GatewayAction::Run(flags)) => serve(global, flags).await,
        None => serve(global, args.run).await,
    }
}

async fn serve(global: &GlobalArgs, flags: RunFlags) -> anyhow::Result<ExitCode> {
    let config = global.load_config()?;
    let overrides = Overrides {
        port: flags.port,
        bind: flags.bind,
    };
    let env = |k: &str| std::env::var(k).ok();
    let settings = GatewayConfig::resolve(config.value(), &overrides, &env)?;
    let state_dir = global.writable_state_dir()?;
    let mut lock = StateLock::acquire(&state_dir)?;
    // No model is no error: a bridge user's model is OpenClaw's, and the engine API needs
    // none; chat completions then answer 503 naming the keys to set.
    let (runtime, engines) =
        crate::commands::run::build_runtime_with(global, flags.model.clone(), true).await?;
    let model = match clawctx_runtime::select_backend(
        config.value(),
        flags.model.as_deref(),
        &clawctx_model::process_env,
    ) {
        Ok(clawctx_runtime::Backend::Model(b)) => b.resolved_ref(),
        // No model (or none that resolves, which building the runtime has already refused).
        Ok(clawctx_runtime::Backend::Cli(c)) => c.id,
        Err(_) => String::new(),
    };
    let gateway = Gateway::new(GatewayParts {
        runtime: runtime.clone(),
        registry: Some(engines.registry.clone()),
        host_config: Arc::new(config.value().clone()),
        model: model.clone(),
        config: settings,
    });
    let listener = match gateway.bind().await {
        Ok(l) => l,
        Err(e) => {
            runtime.shutdown().await;
            return Err(e.into());
        }
    };
    let stop = stop_signal();
    let addr = listener
        .local_addr()
        .context("reading the listening address")?;
    let url = format!("http://{addr}");
    lock.set_url(&url)?;
    {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(
            out,
            "clawctx gateway listening on {url} (engine {}, model {}, pid {}, auth {})",
            runtime.engine_id(),
            if model.is_empty() {
                "none: the engine API only"
            } else {
                &model
            },
            std::process::id(),
            if gateway.config().token.is_some() {
                "token"
            } else {
                "none"
            }
        );
        let _ = out.flush();
    }
    tracing::info!(%url, "gateway listening");
    gateway.serve(listener, stop).await?;
    drop(engines);
    drop(lock);
    println!("clawctx gateway stopped");
    Ok(ExitCode::SUCCESS)
}

/// SIGTERM or Ctrl-C (SIGINT). The handlers are installed when this is called, not when the
/// future is first polled, so a signal that comes right after the address is printed is not
/// lost (the default action would kill the process without draining).
fn stop_signal() -> impl std::future::Future<Output = ()> + Send + 'static {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let term = signal(SignalKind::terminate());
        let int = signal(SignalKind::interrupt());
        async move {
            match (term, int) {
                (Ok(mut term), Ok(mut int)) => {
                    tokio::select! {
                        _ = term.recv() => {}
                        _ = int.recv() => {}
                    }
                }
                (term, int) => {
                    if let Err(e) = term.and(int) {
                        tracing::warn!(
                            "cannot listen for SIGTERM/SIGINT ({e}); only Ctrl-C stops the gateway"
                        );
                    }
                    let _ = tokio::signal::ctrl_c().await;
                }
            }
        }
    }
    #[cfg(not(unix))]
    {
        async move {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

async fn status(global: &GlobalArgs, json: bool) -> anyhow::Result<ExitCode> {
    let state_dir = global.state_dir();
    let s = clawctx_gateway::status(&state_dir).await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&s)?);
    } else if !s.running {
        println!("no gateway is running on {}", state_dir.display());
    } else {
        println!(
            "gateway running: pid {}, {}",
            s.pid
                .map_or_else(|| "unknown".to_owned(), |p| p.to_string()),
            s.url.as_deref().unwrap_or("(no address yet)")
        );
        match (&s.problem, s.healthy) {
            (_, true) => println!("healthy"),
            (Some(p), false) => println!("not healthy: {p}"),
            (None, false) => println!("not healthy"),
        }
    }
    // 0: running and healthy; 1: running but not answering; 3: not running (as LSB status).
    Ok(match (s.running, s.healthy) {
        (true, true) => ExitCode::SUCCESS,
        (true, false) => ExitCode::FAILURE,
        (false, _) => ExitCode::from(3),
    })
}
