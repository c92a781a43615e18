//! `clawctx gateway status`: whether a gateway holds the state dir, and whether it answers;
//! and what `/readyz` says about the configured engine.
//!
//! The lock tells whether a gateway process is alive (the OS releases it when the process
//! dies); `/healthz` at the address its lock file records tells whether it serves. Both are
//! reported, since a gateway can be alive and stuck.
//!
//! Readiness is about the engine, not the process: while the configured engine's store cannot
//! be reached (a PostgreSQL outage), or turns it accepted still wait in the outbox for it, the
//! gateway answers turns from the transcript (legacy assembles them; their commits wait), and
//! `/readyz` says 503 with the reason, so a load balancer sends new turns to a node whose
//! engine serves ([`readiness_problem`]).

use std::path::Path;
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

use crate::error::Result;
use crate::lock::{probe, LockState};
use clawctx_runtime::AgentRuntime;

/// What `gateway status` reports.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GatewayStatus {
    /// Whether a gateway holds the state dir's lock.
    pub running: bool,
    /// Its pid, from the lock file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// Where it listens, from the lock file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// When it started (epoch ms).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub started_at: Option<u64>,
    /// Whether `/healthz` answered 200.
    pub healthy: bool,
    /// `/healthz`'s body, when it answered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub health: Option<Value>,
    /// Why it is not healthy, when running.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

/// Looks at the state dir's gateway.
pub async fn status(state_dir: &Path) -> Result<GatewayStatus> {
    let info = match probe(state_dir)? {
        LockState::Free => {
            return Ok(GatewayStatus {
                running: false,
                pid: None,
                url: None,
                started_at: None,
                healthy: false,
                health: None,
                problem: None,
            })
        }
        LockState::Held(info) => info,
    };
    let mut out = GatewayStatus {
        running: true,
        pid: info.as_ref().map(|i| i.pid),
        url: info.as_ref().and_then(|i| i.url.clone()),
        started_at: info.as_ref().map(|i| i.started_at),
        healthy: false,
        health: None,
        problem: None,
    };
    let Some(url) = out.url.clone() else {
        out.problem = Some("the gateway is starting (no address recorded yet)".into());
        return Ok(out);
    };
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(3))
        .build();
    let answer = match client {
        Ok(c) => c.get(format!("{url}/healthz")).send().await,
        Err(e) => {
            out.problem = Some(format!("cannot build an HTTP client: {e}"));
            return Ok(out);
        }
    };
    match answer {
        Ok(r) if r.status().is_success() => {
            out.healthy = true;
            out.health = r.json::<Value>().await.ok();
        }
        Ok(r) => out.problem = Some(format!("{url}/healthz answered {}", r.status())),
        Err(e) => out.problem = Some(format!("{url}/healthz did not answer: {e}")),
    }
    Ok(out)
}

/// Why `/readyz` must answer 503 for `runtime`'s engine (see the module header), `None` when
/// it serves: the configured engine was quarantined (its factory failed at start, as when a
/// gateway starts while its PostgreSQL server is down, or it failed for real later: `legacy`
/// answers instead), its store cannot be reached now, or accepted turns wait for it.
pub async fn readiness_problem(
    runtime: &AgentRuntime,
    registry: Option<&clawctx_engine::ContextEngineRegistry>,
) -> Option<String> {
    if let Some(q) = registry.and_then(|r| r.quarantines().into_iter().next()) {
        return Some(format!(
            "context engine \"{}\" is quarantined for this process (it failed in {}: {}); \"{}\" answers instead",
            q.engine_id,
            q.operation,
            q.reason,
            runtime.engine_id()
        ));
    }
    runtime.engine_not_serving().await
}
