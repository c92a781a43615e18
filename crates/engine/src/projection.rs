//! Host-param projection through `info.acceptedHostParams` (contract §1.6, G3).
//!
//! Unset `acceptedHostParams` passes every param through. A declared list keeps every non-host
//! key plus the listed host keys; for `compact` the abort signal is always kept. Projection
//! never mutates the caller's params: it returns `None` when nothing needs removing (the hot
//! path, no clone) and a modified copy otherwise. Nothing is ever retried (the G2 heuristic
//! shim is superseded).

use std::borrow::Cow;

use clawctx_protocol::*;

use crate::engine::{CallContext, Method};

/// Params that carry host-added keys.
pub trait HostParams: Clone {
    /// The host keys present in these params, by contract name.
    fn present_host_keys(&self) -> Vec<&'static str>;
    /// Removes the host key `key`.
    fn strip(&mut self, key: &str);
}

/// Projects `params` for an engine with `info`.
pub fn project_params<'a, P: HostParams>(params: &'a P, info: &ContextEngineInfo) -> Cow<'a, P> {
    if info.accepted_host_params.is_none() {
        return Cow::Borrowed(params);
    }
    let rejected: Vec<&str> = params
        .present_host_keys()
        .into_iter()
        .filter(|k| !info.accepts_host_param(k))
        .collect();
    if rejected.is_empty() {
        return Cow::Borrowed(params);
    }
    let mut copy = params.clone();
    for k in rejected {
        copy.strip(k);
    }
    Cow::Owned(copy)
}

/// Projects the non-JSON half of a call: the abort signal (`abortSignal`, always kept for
/// compact) and the runtime services (`runtimeContext`).
pub fn project_context(cx: &CallContext, info: &ContextEngineInfo, method: Method) -> CallContext {
    CallContext {
        abort: if method == Method::Compact || info.accepts_host_param("abortSignal") {
            cx.abort.clone()
        } else {
            None
        },
        services: if info.accepts_host_param("runtimeContext") {
            cx.services.clone()
        } else {
            None
        },
        // The caller's, not the engine's.
        served: None,
    }
}

macro_rules! host_params {
    ($ty:ty { $($field:ident => $key:literal),* $(,)? }) => {
        impl HostParams for $ty {
            #[allow(unused_mut)]
            fn present_host_keys(&self) -> Vec<&'static str> {
                let mut out = Vec::new();
                $( if self.$field.is_some() { out.push($key); } )*
                out
            }
            #[allow(unused_variables)]
            fn strip(&mut self, key: &str) {
                $( if key == $key { self.$field = None; } )*
            }
        }
    };
}

host_params!(IngestParams { session_key => "sessionKey" });
host_params!(IngestBatchParams { session_key => "sessionKey" });
host_params!(AssembleParams {
    session_key => "sessionKey", prompt => "prompt", runtime_settings => "runtimeSettings", runtime_context => "runtimeContext",
});
host_params!(CompactParams {
    session_key => "sessionKey", session_target => "sessionTarget", runtime_settings => "runtimeSettings", runtime_context => "runtimeContext",
});
host_params!(BootstrapParams {
    session_key => "sessionKey", session_target => "sessionTarget", runtime_settings => "runtimeSettings", runtime_context => "runtimeContext",
});
host_params!(MaintainParams {
    session_key => "sessionKey", session_target => "sessionTarget", runtime_settings => "runtimeSettings", runtime_context => "runtimeContext",
});
host_params!(AfterTurnParams {
    session_key => "sessionKey", session_target => "sessionTarget", runtime_settings => "runtimeSettings", runtime_context => "runtimeContext",
});
host_params!(CommitTurnParams {
    session_key => "sessionKey", session_target => "sessionTarget", runtime_settings => "runtimeSettings", runtime_context => "runtimeContext",
});
host_params!(PrepareSubagentSpawnParams {});
host_params!(SubagentEndedParams {});
