//! Fault injection, the hangs: a plugin that stops reading its input, and one that crashes on
//! every call. The host must never wait on them without a bound: a call (and `shutdown`) ends
//! by its deadline even when the pipe is full, a stuck plugin is killed with its process
//! group and quarantined with a reason naming it, the method and the limit, and a crash loop
//! is restarted with growing delays instead of at once, forever. Each test ends with `legacy`
//! answering through the quarantine guard and no plugin process left.
//!
//! The plugin is `tests/fixtures/command-faults`, a Python protocol server whose mode says how
//! it misbehaves. Hang checks wrap the host's calls in generous test-side timeouts: without
//! the fixes they would wait forever (or for another call's whole deadline).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use clawctx_engine::{
    AbortController, CallContext, ContextEngine, ContextEngineRegistry, FactoryContext,
};
use clawctx_plugin::{LoadedPlugin, PluginEngine};
use clawctx_protocol::*;
use common::*;
use serde_json::{json, Value};

/// The plugin's call timeout in these tests: far longer than anything should take, so that
/// "returned before the deadline" means the host did not sit out a stuck pipe.
const CALL_TIMEOUT: Duration = Duration::from_secs(20);

async fn load(
    mode_config: Value,
) -> (
    Arc<ContextEngineRegistry>,
    Arc<dyn ContextEngine>,
    LoadedPlugin,
    Value,
    tempfile::TempDir,
) {
    require("python3");
    let tmp = tempfile::tempdir().unwrap();
    let config = config("faults", "faults", json!({ "config": mode_config }));
    let opts = clawctx_plugin::PluginOptions {
        call_timeout: Some(CALL_TIMEOUT),
        ..options(&tmp.path().join("runtime"))
    };
    let (registry, engine, loaded) =
        load_selected(&fixture("command-faults"), config.clone(), "faults", opts).await;
    (registry, engine, loaded, config, tmp)
}

/// A history whose request line is far over a pipe buffer (64 KiB): 256 messages of 4 KiB.
fn big_history() -> Vec<AgentMessage> {
    (0..256)
        .map(|i| AgentMessage::user(format!("{i}: {}", "x".repeat(4096))).with_timestamp(i))
        .collect()
}

fn quarantine_of(registry: &ContextEngineRegistry) -> (String, String) {
    let q = registry.quarantines();
    let rec = q
        .iter()
        .find(|r| r.engine_id == "faults")
        .unwrap_or_else(|| panic!("no quarantine of faults in {q:?}"));
    (rec.operation.clone(), rec.reason.clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_that_stops_reading_is_killed_by_the_deadline_and_shutdown_returns() {
    let (registry, engine, loaded, _config, _tmp) = load(json!({"mode": "stop-reading"})).await;
    let host = loaded.host.clone();
    let first_pid = host.pid().unwrap();
    let session = |messages| AssembleParams {
        session_id: "s".into(),
        messages,
        ..Default::default()
    };

    // Its first call is answered; then it spins and never reads again.
    engine
        .ingest(
            &IngestParams {
                session_id: "s".into(),
                session_key: None,
                message: AgentMessage::user("hi"),
                is_heartbeat: None,
            },
            &CallContext::none(),
        )
        .await
        .unwrap();
    assert!(registry.quarantines().is_empty());

    // A request over the pipe's size, aborted while the host is stuck writing it.
    let history = big_history();
    let controller = AbortController::new();
    let cx = CallContext::none().with_abort(controller.signal());
    let aborter = tokio::spawn(async move {
        // Long enough for the host to be writing (the pipe fills at once).
        tokio::time::sleep(Duration::from_secs(1)).await;
        controller.abort("the user pressed stop");
    });
    let started = Instant::now();
    let result = tokio::time::timeout(
        Duration::from_secs(15),
        engine.assemble(&session(history.clone()), &cx),
    )
    .await
    .expect("the host hung writing to a plugin that stopped reading")
    .expect("legacy answers");
    let took = started.elapsed();
    aborter.await.unwrap();
    assert!(
        took < CALL_TIMEOUT,
        "the call outlived its deadline: {took:?}"
    );
    assert_eq!(
        (
            result.messages.len(),
            result.estimated_tokens,
            result.system_prompt_addition
        ),
        (history.len(), 0, None),
        "legacy passes the history through"
    );
    let (operation, reason) = quarantine_of(&registry);
    assert_eq!(operation, "assemble");
    for needle in [
        "plugin \"faults\" stopped reading its input",
        "`engine/assemble`",
        "within 2000 ms",
        "the process was killed",
    ] {
        assert!(
            reason.contains(needle),
            "reason {reason:?} lacks {needle:?}"
        );
    }
    assert_pid_gone(first_pid).await;

    // A fresh process that stops reading again, with a large request stuck in its pipe:
    // `shutdown` must not wait for that request's deadline.
    let (conn, _) = host.connection().await.unwrap();
    let second_pid = conn.pid();
    assert_ne!(second_pid, first_pid);
    let pong = host
        .call(
            "tool/execute",
            json!({"name": "faults_ping", "arguments": {}, "context": {}}),
            None,
        )
        .await
        .unwrap();
    assert_eq!(pong["content"][0]["text"], "pong");
    // On this connection itself: after the shutdown, nothing may start a new process.
    let stuck = {
        let big =
            json!({"instanceId": "1", "params": {"sessionId": "s", "messages": big_history()}});
        tokio::spawn(async move {
            conn.call("engine/ingestBatch", big, None, CALL_TIMEOUT)
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !stuck.is_finished(),
        "the large request should be stuck in the pipe"
    );
    tokio::time::timeout(Duration::from_secs(10), host.shutdown())
        .await
        .expect("shutdown waited on a request stuck in the pipe of a plugin that stopped reading");
    let stuck = tokio::time::timeout(Duration::from_secs(10), stuck)
        .await
        .expect("the stuck request outlived the shutdown")
        .unwrap();
    assert!(stuck.is_err(), "{stuck:?}");
    assert_pid_gone(second_pid).await;

    // Still quarantined: legacy keeps answering.
    let again = engine
        .assemble(&session(conversation()), &CallContext::none())
        .await
        .unwrap();
    assert_eq!(
        (again.messages, again.estimated_tokens),
        (conversation(), 0)
    );
    drop((engine, registry, loaded));
}

/// `(pid, monotonic seconds)` of every process the crash-loop fixture started.
fn spawns(log: &std::path::Path) -> Vec<(u32, f64)> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|l| {
            let (pid, at) = l.split_once(' ').unwrap();
            (pid.parse().unwrap(), at.parse().unwrap())
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_that_crashes_on_every_call_is_restarted_with_growing_delays() {
    let log_dir = tempfile::tempdir().unwrap();
    let log = log_dir.path().join("spawns.log");
    let (registry, _, loaded, config, _tmp) =
        load(json!({"mode": "crash-every-call", "log": log.display().to_string()})).await;
    let host = loaded.host.clone();
    // Resolution created a guarded instance without calling it; these calls go to the plugin
    // itself, so every one of them reaches a process (the guard would stop at the first).
    let raw = PluginEngine::create(host.clone(), "faults".into(), FactoryContext::default())
        .await
        .unwrap();
    let params = AssembleParams {
        session_id: "s".into(),
        messages: conversation(),
        ..Default::default()
    };
    for call in 0..4 {
        let err = raw
            .assemble(&params, &CallContext::none())
            .await
            .expect_err("the plugin crashes");
        let err = err.to_string();
        assert!(
            err.contains("plugin process exited (code 9)")
                && err.contains("boom: crash on engine/assemble"),
            "call {call}: {err}"
        );
    }

    // The guard's turn: one more restart, then the quarantine and legacy's answer.
    let resolved = registry
        .resolve(Some(Arc::new(config)), None, None)
        .await
        .unwrap();
    let result = resolved
        .engine
        .assemble(&params, &CallContext::none())
        .await
        .expect("legacy answers");
    assert_eq!(
        (result.messages, result.estimated_tokens),
        (conversation(), 0)
    );
    let (operation, reason) = quarantine_of(&registry);
    assert_eq!(operation, "assemble");
    assert!(
        reason.contains("plugin process exited (code 9)")
            && reason.contains("boom: crash on engine/assemble"),
        "{reason}"
    );

    // Five processes: the first and one restart per failed call. The n-th restart waited at
    // least 100 ms × 2^(n−1) after the n-th consecutive failure, so at least that separates
    // two starts (lower bounds only: a loaded machine only makes the gaps longer).
    let spawned = spawns(&log);
    assert_eq!(spawned.len(), 5, "{spawned:?}");
    assert_eq!(host.starts(), 5);
    let gaps: Vec<f64> = spawned.windows(2).map(|w| w[1].1 - w[0].1).collect();
    for (n, gap) in gaps.iter().enumerate() {
        let floor = 0.1 * f64::from(1u32 << n);
        assert!(
            *gap >= floor,
            "restart {} came {gap:.3} s after the previous start, before its {floor:.1} s backoff: {gaps:?}",
            n + 1
        );
    }

    drop((resolved, raw, registry, loaded));
    for (pid, _) in spawned {
        assert_pid_gone(pid).await;
    }
}
