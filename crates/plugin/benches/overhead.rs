//! Plugin overhead: `assemble` of 100 messages through a real Node plugin process versus the
//! same pass-through engine in process, and Node plugin start-up (spawn → handshake → engine
//! created). Prints p50/p99; the figures go to BENCHMARKS.md.
//!
//! Run: `cargo bench -p clawctx-plugin --bench overhead`

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clawctx_engine::*;
use clawctx_plugin::{register_plugin, PluginOptions};
use clawctx_protocol::{AgentMessage, AssembleParams};
use serde_json::json;

fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    samples.sort();
    samples[((samples.len() as f64 - 1.0) * p).round() as usize]
}

fn params() -> AssembleParams {
    let messages = (0..100)
        .map(|i| {
            if i % 2 == 0 {
                AgentMessage::user(format!("user message {i}: {}", "lorem ipsum dolor sit amet ".repeat(8))).with_timestamp(i)
            } else {
                AgentMessage::assistant(format!("assistant reply {i}: {}", "consectetur adipiscing elit ".repeat(12))).with_timestamp(i)
            }
        })
        .collect();
    AssembleParams { session_id: "bench".into(), session_key: Some("agent:main:main".into()), messages, token_budget: Some(128_000), ..Default::default() }
}

async fn time_assemble(engine: &dyn ContextEngine, p: &AssembleParams, n: usize) -> Vec<Duration> {
    let cx = CallContext::none();
    for _ in 0..50 {
        let _ = engine.assemble(p, &cx).await;
    }
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let r = engine.assemble(p, &cx).await;
        out.push(t.elapsed());
        assert!(r.is_ok_and(|r| r.messages.len() == 100), "assemble failed during the benchmark");
    }
    out
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    rt.block_on(async {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/fixtures/node-echo");
        let runtime_dir = tempfile::tempdir().expect("tempdir");
        let config = json!({"plugins": {"slots": {"contextEngine": "echo"}}});
        let opts = PluginOptions { runtime_dir: Some(runtime_dir.path().to_path_buf()), ..Default::default() };

        // Start-up: spawn + handshake + the engine's factory over RPC.
        let mut startup = Vec::new();
        for _ in 0..15 {
            let registry = Arc::new(ContextEngineRegistry::with_legacy());
            let t = Instant::now();
            let loaded = register_plugin(&registry, &dir, &config, opts.clone()).await.expect("plugin loads");
            let resolved = registry.resolve(Some(Arc::new(config.clone())), None, None).await.expect("resolve");
            startup.push(t.elapsed());
            assert_eq!(resolved.effective_id, "echo");
            loaded.host.shutdown().await;
        }

        let registry = Arc::new(ContextEngineRegistry::with_legacy());
        let loaded = register_plugin(&registry, &dir, &config, opts.clone()).await.expect("plugin loads");
        let resolved = registry.resolve(Some(Arc::new(config.clone())), None, None).await.expect("resolve");
        let p = params();
        let n = 2_000;
        let mut plugin = time_assemble(resolved.engine.as_ref(), &p, n).await;
        let mut in_process = time_assemble(&LegacyEngine, &p, n).await;
        let one = AssembleParams { messages: p.messages[..1].to_vec(), ..p.clone() };
        let mut tiny = Vec::new();
        for _ in 0..n {
            let t = Instant::now();
            let _ = resolved.engine.assemble(&one, &CallContext::none()).await;
            tiny.push(t.elapsed());
        }
        println!("assemble, 1 message, node plugin (fixed per-call cost): p50 {:?}", percentile(&mut tiny, 0.5));
        assert!(registry.quarantines().is_empty(), "the plugin was quarantined during the benchmark");
        loaded.host.shutdown().await;

        let (pp50, pp99) = (percentile(&mut plugin, 0.5), percentile(&mut plugin, 0.99));
        let (ip50, ip99) = (percentile(&mut in_process, 0.5), percentile(&mut in_process, 0.99));
        println!("node plugin start-up (spawn → handshake → engine): p50 {:?}  max {:?}", percentile(&mut startup, 0.5), percentile(&mut startup, 1.0));
        println!("assemble, 100 messages, node plugin:  p50 {pp50:?}  p99 {pp99:?}");
        println!("assemble, 100 messages, in process:   p50 {ip50:?}  p99 {ip99:?}");
        println!("plugin overhead at p50: {:?}", pp50.saturating_sub(ip50));
    });
}
