//! The engines this build of clawctx knows: `legacy` (core) and the bundled `lossless` plugin.
//! Out-of-process plugin engines are registered here too once installed.

use std::sync::Arc;

use clawctx_engine::ContextEngineRegistry;

/// A registry with every built-in engine registered.
pub fn builtin_registry() -> anyhow::Result<Arc<ContextEngineRegistry>> {
    let registry = Arc::new(ContextEngineRegistry::with_legacy());
    clawctx_lossless::register(&registry).map_err(|e| anyhow::anyhow!("registering the lossless engine: {e}"))?;
    Ok(registry)
}
