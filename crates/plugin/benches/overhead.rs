//! Plugin overhead: `assemble` of 100 messages through a real Node plugin process versus the
//! same pass-through engine in process, and Node plugin start-up (spawn → handshake → engine
//! created). Prints p50/p99; the figures go to BENCHMARKS.md.
//!
//! The calls follow a conversation: each sends a window of 100 messages, two newer than the
//! previous call's (a turn adds a prompt and a reply, a tool step a call and its result). The
//! plugin is measured twice: as loaded by default (message references on: the runner parses
//! only the two new messages) and with references off (every message crosses every call, the
//! cost of a plugin the first time it sees a history, or of a runner without references).
//!
//! The machine this runs on is usually shared, so the three per-call measurements (plugin, in
//! process, floor) are interleaved in rounds: a load spike hits all of them alike. The *floor*
//! is the least any Node plugin can cost on this machine: the same request line written to a
//! bare Node script (`fixtures/json-floor.mjs`) that only `JSON.parse`s it and
//! `JSON.stringify`s the messages back, over blocking pipes, no runner and no host.
//!
//! Run: `cargo bench -p clawctx-plugin --bench overhead`
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clawctx_engine::*;
use clawctx_plugin::{register_plugin, PluginOptions};
use clawctx_protocol::{AgentMessage, AssembleParams};
use serde_json::json;

const ROUNDS: usize = 20;
const CALLS_PER_ROUND: usize = 100;
const STARTUPS: usize = 15;

fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    samples.sort();
    samples[((samples.len() as f64 - 1.0) * p).round() as usize]
}

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/fixtures")
}

/// Call `call`'s params: messages `2·call .. 2·call + n` of the conversation.
fn window(call: usize, n: usize) -> AssembleParams {
    let first = 2 * call as i64;
    let messages = (first..first + n as i64)
        .map(|i| {
            if i % 2 == 0 {
                AgentMessage::user(format!(
                    "user message {i}: {}",
                    "lorem ipsum dolor sit amet ".repeat(8)
                ))
                .with_timestamp(i)
            } else {
                AgentMessage::assistant(format!(
                    "assistant reply {i}: {}",
                    "consectetur adipiscing elit ".repeat(12)
                ))
                .with_timestamp(i)
            }
        })
        .collect();
    AssembleParams {
        session_id: "bench".into(),
        session_key: Some("agent:main:main".into()),
        messages,
        token_budget: Some(128_000),
        ..Default::default()
    }
}

fn params(n: usize) -> AssembleParams {
    window(0, n)
}

/// Times `n` calls of the conversation from call `from` on (params built outside the timing).
async fn time_assemble(
    engine: &dyn ContextEngine,
    from: usize,
    size: usize,
    n: usize,
    out: &mut Vec<Duration>,
) {
    let cx = CallContext::none();
    for call in from..from + n {
        let p = window(call, size);
        let t = Instant::now();
        let r = engine.assemble(&p, &cx).await;
        out.push(t.elapsed());
        assert!(
            r.is_ok_and(|r| r.messages == p.messages),
            "assemble failed during the benchmark"
        );
    }
}

/// The bare Node JSON round trip (see the module header).
struct Floor {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    line: Vec<u8>,
    reply: Vec<u8>,
}

impl Floor {
    fn start(p: &AssembleParams) -> Self {
        let mut child = Command::new("node")
            .arg(fixtures().join("json-floor.mjs"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("node runs (the benchmark needs it)");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = BufReader::with_capacity(64 * 1024, child.stdout.take().expect("stdout"));
        // Byte for byte the line the plugin host sends for this assemble.
        let params = serde_json::to_value(p).expect("params encode");
        let mut line = serde_json::to_vec(
            &json!({"jsonrpc": "2.0", "id": 1, "method": "engine/assemble",
            "params": {"instanceId": "1", "params": params, "abortable": false}}),
        )
        .expect("request encodes");
        line.push(b'\n');
        Floor {
            child,
            stdin,
            stdout,
            line,
            reply: Vec::new(),
        }
    }

    fn time(&mut self, n: usize, out: &mut Vec<Duration>) {
        for _ in 0..n {
            let t = Instant::now();
            self.stdin
                .write_all(&self.line)
                .expect("write to the floor script");
            self.reply.clear();
            self.stdout
                .read_until(b'\n', &mut self.reply)
                .expect("read from the floor script");
            out.push(t.elapsed());
            assert!(
                self.reply.len() > self.line.len() / 2,
                "the floor script answered short"
            );
        }
    }
}

impl Drop for Floor {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn startup(dir: &Path, engine_id: &str, opts: &PluginOptions, out: &mut Vec<Duration>) {
    let config = json!({"plugins": {"slots": {"contextEngine": engine_id}}});
    let registry = Arc::new(ContextEngineRegistry::with_legacy());
    let t = Instant::now();
    let loaded = register_plugin(&registry, dir, &config, opts.clone())
        .await
        .expect("plugin loads");
    let resolved = registry
        .resolve(Some(Arc::new(config.clone())), None, None)
        .await
        .expect("resolve");
    out.push(t.elapsed());
    assert_eq!(resolved.effective_id, engine_id);
    loaded.host.shutdown().await;
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let runtime_dir = tempfile::tempdir().expect("tempdir");
        let opts = PluginOptions {
            runtime_dir: Some(runtime_dir.path().to_path_buf()),
            ..Default::default()
        };

        // Start-up: spawn + handshake + the engine's factory over RPC, alternating a plugin
        // without imports and one importing the OpenClaw SDK from an ES module.
        let (mut plain, mut sdk) = (Vec::new(), Vec::new());
        for _ in 0..STARTUPS {
            startup(&fixtures().join("node-echo"), "echo", &opts, &mut plain).await;
            startup(
                &fixtures().join("node-echo-sdk"),
                "echo-sdk",
                &opts,
                &mut sdk,
            )
            .await;
        }

        let config = json!({"plugins": {"slots": {"contextEngine": "echo"}}});
        let load = |opts: PluginOptions| {
            let config = config.clone();
            async move {
                let registry = Arc::new(ContextEngineRegistry::with_legacy());
                let loaded = register_plugin(
                    &registry,
                    &fixtures().join("node-echo"),
                    &config,
                    opts,
                )
                .await
                .expect("plugin loads");
                let resolved = registry
                    .resolve(Some(Arc::new(config.clone())), None, None)
                    .await
                    .expect("resolve");
                (registry, loaded, resolved.engine.clone())
            }
        };
        let (registry, loaded, engine) = load(opts.clone()).await;
        let (cold_registry, cold_loaded, cold) = load(PluginOptions {
            no_message_refs: true,
            ..opts.clone()
        })
        .await;
        let p = params(100);
        let mut floor = Floor::start(&p);

        // Warm-up: JIT on both sides, the token memo, the page cache.
        let mut scratch = Vec::new();
        time_assemble(engine.as_ref(), 0, 100, 100, &mut scratch).await;
        time_assemble(cold.as_ref(), 0, 100, 100, &mut scratch).await;
        time_assemble(&LegacyEngine, 0, 100, 100, &mut scratch).await;
        floor.time(100, &mut scratch);

        let (mut plugin, mut plugin_cold, mut in_process, mut bare, mut tiny) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let mut call = 100;
        for _ in 0..ROUNDS {
            time_assemble(engine.as_ref(), call, 100, CALLS_PER_ROUND, &mut plugin).await;
            time_assemble(cold.as_ref(), call, 100, CALLS_PER_ROUND, &mut plugin_cold).await;
            time_assemble(&LegacyEngine, call, 100, CALLS_PER_ROUND, &mut in_process).await;
            floor.time(CALLS_PER_ROUND, &mut bare);
            time_assemble(cold.as_ref(), call, 1, CALLS_PER_ROUND / 4, &mut tiny).await;
            call += CALLS_PER_ROUND;
        }
        assert!(
            registry.quarantines().is_empty() && cold_registry.quarantines().is_empty(),
            "the plugin was quarantined during the benchmark"
        );
        loaded.host.shutdown().await;
        cold_loaded.host.shutdown().await;

        let (pp50, pp99) = (percentile(&mut plugin, 0.5), percentile(&mut plugin, 0.99));
        let (cp50, cp99) = (
            percentile(&mut plugin_cold, 0.5),
            percentile(&mut plugin_cold, 0.99),
        );
        let (ip50, ip99) = (
            percentile(&mut in_process, 0.5),
            percentile(&mut in_process, 0.99),
        );
        let (fp50, fp99) = (percentile(&mut bare, 0.5), percentile(&mut bare, 0.99));
        println!(
            "node plugin start-up, no imports (spawn → handshake → engine):  p50 {:?}  max {:?}",
            percentile(&mut plain, 0.5),
            percentile(&mut plain, 1.0)
        );
        println!(
            "node plugin start-up, ESM import of openclaw/plugin-sdk:         p50 {:?}  max {:?}",
            percentile(&mut sdk, 0.5),
            percentile(&mut sdk, 1.0)
        );
        println!(
            "assemble, 1 message, node plugin (fixed per-call cost): p50 {:?}",
            percentile(&mut tiny, 0.5)
        );
        println!("assemble, 100 messages (2 new a call), node plugin:             p50 {pp50:?}  p99 {pp99:?}");
        println!("assemble, 100 messages, node plugin, message references off:    p50 {cp50:?}  p99 {cp99:?}");
        println!("assemble, 100 messages, in process:                             p50 {ip50:?}  p99 {ip99:?}");
        println!("floor, bare node JSON round trip of all 100 messages:           p50 {fp50:?}  p99 {fp99:?}");
        println!(
            "plugin overhead at p50: {:?} (references off: {:?})",
            pp50.saturating_sub(ip50),
            cp50.saturating_sub(ip50)
        );
    });
}
