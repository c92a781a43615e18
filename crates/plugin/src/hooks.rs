//! Plugin hooks: the handlers plugins registered with `api.on(hook, handler, opts)`, run in
//! their processes for the runtime ([`clawctx_engine::HookDispatcher`]).
//!
//! OpenClaw runs every plugin's handlers of a hook as one list, sorted by `priority` (higher
//! first, ties in registration order), so one plugin's handler may run between two of another's.
//! Here handlers live in several processes. The handshake reports each process's handlers
//! with their priorities ([`HookDecl`]); the dispatcher sorts them all (plugins in load order)
//! and cuts the sorted list into runs of consecutive handlers of the same process, one
//! `hook/run` request per run, naming the handlers in order. That keeps OpenClaw's order exactly
//! with one round trip per plugin in the usual case.
//!
//! Per mode ([`clawctx_engine::hooks::hook_mode`]): observe-only hooks send every run at once;
//! modifying hooks send runs one after the other and stop after a terminal result (`block` or
//! `cancel`); chains (`tool_result_persist`) pass the `message` a run ended with to the next.
//! The runner runs its handlers the same way and answers one result per handler it ran; the
//! merge of those results is the engine crate's ([`clawctx_engine::hooks`]), the same for
//! every dispatcher.
//!
//! A hook never costs the plugin its process: each request carries a time budget (`budgetMs`)
//! a little under the plugin's call timeout, and the runner answers by then, reporting
//! handlers it gave up on as timed out (`timed out after <ms>ms`; they are not cancelled). Only
//! a runner that cannot answer at all (stuck in synchronous code) meets the call timeout and is
//! killed, as for any call. Either way every handler of the run gets the failure as its output,
//! which is logged (`[hooks] <hook> handler from <pluginId> failed: …`) and never fails the
//! turn.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use clawctx_engine::hooks::{
    default_timeout, failure_line, hook_mode, is_terminal, isolates_event, HookMode,
};
use clawctx_engine::{CallContext, HookDispatcher, HookOutput};
use serde_json::{json, Value};

use crate::host::PluginHost;
use crate::register::LoadedPlugin;
use crate::rpc::HookDecl;

/// How much of the call timeout a hook request leaves the runner for its answer.
const ANSWER_MARGIN: Duration = Duration::from_millis(500);

struct HookedPlugin {
    host: Arc<PluginHost>,
    hooks: Vec<HookDecl>,
}

/// The hook handlers of loaded plugins, as one [`HookDispatcher`].
#[derive(Default)]
pub struct PluginHooks {
    plugins: Vec<HookedPlugin>,
}

impl std::fmt::Debug for PluginHooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut l = f.debug_list();
        for p in &self.plugins {
            l.entry(&(p.host.plugin_id(), p.hooks.len()));
        }
        l.finish()
    }
}

/// One `hook/run` request: a plugin and the ids of its handlers, in the order they run.
struct Run<'a> {
    plugin: &'a HookedPlugin,
    handlers: Vec<u64>,
}

impl PluginHooks {
    /// The handlers of `plugins` (in this order: a tie in priority runs the earlier plugin's
    /// handler first), as their handshakes reported them.
    pub fn new(plugins: &[LoadedPlugin]) -> Self {
        let mut hooks = Self::default();
        for p in plugins {
            hooks.add(p.host.clone(), p.hooks.clone());
        }
        hooks
    }

    /// Adds a plugin's handlers (after those already added).
    pub fn add(&mut self, host: Arc<PluginHost>, hooks: Vec<HookDecl>) {
        if !hooks.is_empty() {
            self.plugins.push(HookedPlugin { host, hooks });
        }
    }

    /// Whether no plugin registered any handler.
    pub fn is_empty(&self) -> bool {
        self.plugins.is_empty()
    }

    /// `hook`'s handlers in OpenClaw's order, cut into runs per process.
    fn runs(&self, hook: &str) -> Vec<Run<'_>> {
        let mut all: Vec<(f64, usize, usize, u64)> = Vec::new();
        for (pi, p) in self.plugins.iter().enumerate() {
            for (ri, h) in p.hooks.iter().enumerate().filter(|(_, h)| h.name == hook) {
                let priority = if h.priority.is_finite() {
                    h.priority
                } else {
                    0.0
                };
                all.push((priority, pi, ri, h.id));
            }
        }
        all.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
        let mut runs: Vec<Run<'_>> = Vec::new();
        let mut last: Option<usize> = None;
        for (_, pi, _, id) in all {
            match runs.last_mut() {
                Some(run) if last == Some(pi) => run.handlers.push(id),
                _ => runs.push(Run {
                    plugin: &self.plugins[pi],
                    handlers: vec![id],
                }),
            }
            last = Some(pi);
        }
        runs
    }

    async fn call(
        &self,
        run: &Run<'_>,
        hook: &str,
        mode: HookMode,
        event: &Value,
        ctx: &Value,
        cx: &CallContext,
    ) -> Vec<HookOutput> {
        let host = &run.plugin.host;
        let plugin_id = host.plugin_id().to_owned();
        let timeout = host.options().call_timeout;
        let budget = if timeout > ANSWER_MARGIN * 2 {
            timeout - ANSWER_MARGIN
        } else {
            timeout / 2
        };
        let params = json!({
            "hook": hook,
            "event": event,
            "ctx": ctx,
            "handlers": run.handlers,
            "mode": mode.as_str(),
            "isolate": isolates_event(hook),
            "defaultTimeoutMs": default_timeout(hook).map(|d| d.as_millis() as u64),
            "budgetMs": budget.as_millis() as u64,
        });
        let outputs = match host.call("hook/run", params, Some(cx)).await {
            Ok(reply) => read_results(&plugin_id, &reply),
            Err(e) => Err(e.to_string()),
        };
        let outputs = outputs.unwrap_or_else(|e| {
            run.handlers
                .iter()
                .map(|_| HookOutput {
                    plugin_id: plugin_id.clone(),
                    result: Err(e.clone()),
                })
                .collect()
        });
        for out in &outputs {
            if let Err(e) = &out.result {
                tracing::error!("{}", failure_line(hook, &out.plugin_id, e));
            }
        }
        outputs
    }
}

/// `{results: [{id, value} | {id, error}]}` → one output per handler that ran.
fn read_results(plugin_id: &str, reply: &Value) -> Result<Vec<HookOutput>, String> {
    let results = reply
        .get("results")
        .and_then(Value::as_array)
        .ok_or_else(|| {
            "contract violation: hook/run answered without a `results` array".to_owned()
        })?;
    Ok(results
        .iter()
        .map(|r| {
            let result = match r.get("error") {
                Some(e) if !e.is_null() => Err(e
                    .as_str()
                    .map(str::to_owned)
                    .unwrap_or_else(|| e.to_string())),
                _ => Ok(r.get("value").filter(|v| !v.is_null()).cloned()),
            };
            HookOutput {
                plugin_id: plugin_id.to_owned(),
                result,
            }
        })
        .collect())
}

#[async_trait]
impl HookDispatcher for PluginHooks {
    fn has(&self, hook: &str) -> bool {
        self.plugins
            .iter()
            .any(|p| p.hooks.iter().any(|h| h.name == hook))
    }

    async fn run(&self, hook: &str, event: Value, ctx: Value, cx: &CallContext) -> Vec<HookOutput> {
        let runs = self.runs(hook);
        if runs.is_empty() {
            return Vec::new();
        }
        let mode = hook_mode(hook);
        match mode {
            HookMode::Parallel => {
                let calls = runs
                    .iter()
                    .map(|r| self.call(r, hook, mode, &event, &ctx, cx));
                futures::future::join_all(calls)
                    .await
                    .into_iter()
                    .flatten()
                    .collect()
            }
            HookMode::Sequential | HookMode::Chain => {
                let mut event = event;
                let mut all = Vec::new();
                for run in &runs {
                    let outputs = self.call(run, hook, mode, &event, &ctx, cx).await;
                    if mode == HookMode::Chain {
                        if let Some(m) = clawctx_engine::hooks::persisted_message(&outputs) {
                            event["message"] = m;
                        }
                    }
                    let stop = outputs
                        .iter()
                        .filter_map(HookOutput::value)
                        .any(is_terminal);
                    all.extend(outputs);
                    if stop {
                        break;
                    }
                }
                all
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_are_read_per_handler() {
        let reply = json!({"results": [{"id": 0, "value": {"a": 1}}, {"id": 1, "value": null}, {"id": 2, "error": "boom"}]});
        let out = read_results("p", &reply).unwrap_or_default();
        assert_eq!(out.len(), 3);
        assert_eq!(out[0].value(), Some(&json!({"a": 1})));
        assert_eq!(out[1].result, Ok(None));
        assert_eq!(out[2].result, Err("boom".into()));
        assert!(read_results("p", &json!(null)).is_err());
    }
}
