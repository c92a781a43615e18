//! Host descriptors and host-requirement checks (contract §5).
//!
//! An engine declares per operation the host capabilities it needs; the host checks them
//! *before* starting the operation and fails closed with an exact error text. This is not a
//! quarantine and not a fallback: an engine that would corrupt its state on an unsuitable host
//! must not run there at all.

use clawctx_protocol::{
    ContextEngineHostRequirements, ContextEngineInfo, ContextEngineOperation, HostCapability,
    HostDescriptor,
};

/// The embedded runner: what clawctx's own runtime offers.
pub fn embedded_host() -> HostDescriptor {
    HostDescriptor {
        id: "openclaw-embedded".into(),
        label: "OpenClaw embedded runner".into(),
        capabilities: [
            HostCapability::BOOTSTRAP,
            HostCapability::ASSEMBLE_BEFORE_PROMPT,
            HostCapability::REFERENCE_CONTEXT,
            HostCapability::AFTER_TURN,
            HostCapability::MAINTAIN,
            HostCapability::COMPACT,
            HostCapability::RUNTIME_LLM_COMPLETE,
        ]
        .into_iter()
        .map(HostCapability::from)
        .collect(),
    }
}

/// The Codex app-server harness: the embedded set plus thread-bootstrap projection.
pub fn codex_app_server_host() -> HostDescriptor {
    let mut caps = embedded_host().capabilities;
    caps.push(HostCapability::from(
        HostCapability::THREAD_BOOTSTRAP_PROJECTION,
    ));
    HostDescriptor {
        id: "codex-app-server".into(),
        label: "Codex app-server harness".into(),
        capabilities: caps,
    }
}

/// A generic CLI backend (`cli:<backendId>`): bootstrap, after-turn, maintain by default, and
/// notably no `assemble-before-prompt`. `capabilities` overrides the list.
pub fn cli_backend_host(backend_id: &str, capabilities: Option<Vec<String>>) -> HostDescriptor {
    let caps = capabilities.unwrap_or_else(|| {
        [
            HostCapability::BOOTSTRAP,
            HostCapability::AFTER_TURN,
            HostCapability::MAINTAIN,
        ]
        .map(str::to_owned)
        .to_vec()
    });
    HostDescriptor {
        id: format!("cli:{backend_id}"),
        label: format!("CLI backend \"{backend_id}\""),
        capabilities: caps.into_iter().map(HostCapability).collect(),
    }
}

/// Outcome of [`evaluate`].
#[derive(Clone, Debug, PartialEq)]
pub struct HostEvaluation {
    /// Whether the host satisfies the requirements.
    pub ok: bool,
    /// The requirements looked at (none when the engine declares none for the operation).
    pub requirements: Option<ContextEngineHostRequirements>,
    /// Required capabilities the host lacks, in required order.
    pub missing_capabilities: Vec<String>,
}

/// Evaluates `info.hostRequirements[operation]` against `host`. Never fails.
pub fn evaluate(
    info: &ContextEngineInfo,
    operation: ContextEngineOperation,
    host: &HostDescriptor,
) -> HostEvaluation {
    let req = info
        .host_requirements
        .as_ref()
        .and_then(|m| m.get(&operation));
    let Some(req) = req.filter(|r| !r.required_capabilities.is_empty()) else {
        return HostEvaluation {
            ok: true,
            requirements: None,
            missing_capabilities: Vec::new(),
        };
    };
    let missing: Vec<String> = req
        .required_capabilities
        .iter()
        .filter(|c| !host.has(c.as_str()))
        .map(|c| c.0.clone())
        .collect();
    HostEvaluation {
        ok: missing.is_empty(),
        requirements: Some(req.clone()),
        missing_capabilities: missing,
    }
}

/// The exact assertion text of §5.
pub fn requirement_error_text(
    info: &ContextEngineInfo,
    operation: ContextEngineOperation,
    host: &HostDescriptor,
    eval: &HostEvaluation,
) -> String {
    let required: Vec<&str> = eval
        .requirements
        .as_ref()
        .map(|r| r.required_capabilities.iter().map(|c| c.as_str()).collect())
        .unwrap_or_default();
    let caps: Vec<&str> = host.capabilities.iter().map(|c| c.as_str()).collect();
    let mut text = format!(
        "Context engine \"{}\" cannot run operation \"{}\" on {}. Missing host capabilities: {}. Required capabilities: {}. Host capabilities: {}.",
        info.id,
        operation.as_str(),
        host.label,
        eval.missing_capabilities.join(", "),
        required.join(", "),
        if caps.is_empty() { "(none)".to_owned() } else { caps.join(", ") }
    );
    if let Some(extra) = eval
        .requirements
        .as_ref()
        .and_then(|r| r.unsupported_message.as_deref())
    {
        text.push(' ');
        text.push_str(extra);
    }
    text
}

/// Asserts the requirements: `Err(EngineError::HostRequirement(text))` when unmet.
pub fn assert_host_requirements(
    info: &ContextEngineInfo,
    operation: ContextEngineOperation,
    host: &HostDescriptor,
) -> Result<(), crate::EngineError> {
    let eval = evaluate(info, operation, host);
    if eval.ok {
        Ok(())
    } else {
        Err(crate::EngineError::HostRequirement(requirement_error_text(
            info, operation, host, &eval,
        )))
    }
}
