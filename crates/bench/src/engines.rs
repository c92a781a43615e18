//! Opening the engines under test, each with the summarizer the instrument chose.
//!
//! Engines are built directly rather than through a registry slot: the instruments must put
//! their own (fake, counting) summarizer inside every engine, and the lossless factory has no
//! hook for that. `legacy` is the core engine (its compaction runs in the [`BenchHost`]);
//! `lossless` gets a fresh SQLite file in the run's work directory.
//!
//! [`BenchHost`]: crate::host::BenchHost

use std::path::{Path, PathBuf};
use std::sync::Arc;

use clawctx_engine::{AgentTool, ContextEngine, LegacyEngine};
use clawctx_lossless::{LosslessConfig, LosslessEngine, LosslessStore};
use clawctx_summarize::Summarizer;

use crate::error::{BenchError, Result};

/// Engine ids the instruments can open.
pub const SUPPORTED_ENGINES: &[&str] = &["legacy", "lossless"];

/// An engine under test and what the instruments may inspect.
pub struct EngineUnderTest {
    /// Engine id.
    pub id: String,
    /// The engine.
    pub engine: Arc<dyn ContextEngine>,
    /// The lossless store (recall, sizes, DAG), for `lossless`.
    pub store: Option<LosslessStore>,
    /// The SQLite file, for `lossless`.
    pub database_path: Option<PathBuf>,
    /// Whether the engine compacts on its own (otherwise the runtime's trigger drives it).
    pub owns_compaction: bool,
    /// The lossless engine's semantic recall, when it has an embedding model.
    pub semantic: Option<Arc<clawctx_lossless::semantic::Semantic>>,
}

impl EngineUnderTest {
    /// The engine's `lcm_grep`-style recall tool, when it has one.
    pub fn grep_tool(&self) -> Option<Arc<dyn AgentTool>> {
        self.engine
            .tools()
            .into_iter()
            .find(|t| t.name() == "lcm_grep")
    }

    /// Bytes the engine keeps on disk (database plus WAL), when it keeps any.
    pub fn disk_bytes(&self) -> Option<u64> {
        let db = self.database_path.as_ref()?;
        let mut total = std::fs::metadata(db).ok()?.len();
        for suffix in ["-wal", "-shm"] {
            let mut p = db.as_os_str().to_owned();
            p.push(suffix);
            if let Ok(m) = std::fs::metadata(PathBuf::from(p)) {
                total += m.len();
            }
        }
        Some(total)
    }
}

/// Parses `a,b,c` into engine ids, checking each is supported.
pub fn parse_engine_list(list: &str) -> Result<Vec<String>> {
    parse_engine_list_of(list, SUPPORTED_ENGINES)
}

/// Parses `a,b,c` into engine ids, checking each is one of `supported` (an instrument with
/// choices of its own, such as the eval's `full` baseline, passes its list).
pub fn parse_engine_list_of(list: &str, supported: &[&str]) -> Result<Vec<String>> {
    let ids: Vec<String> = list
        .split(',')
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .collect();
    if ids.is_empty() {
        return Err(BenchError::InvalidArgument("no engine given".into()));
    }
    for id in &ids {
        if !supported.contains(&id.as_str()) {
            return Err(BenchError::InvalidArgument(format!(
                "unknown engine `{id}` (supported: {})",
                supported.join(", ")
            )));
        }
    }
    Ok(ids)
}

/// Opens engine `id` with `summarizer`. `lossless_config` is the engine's own config object
/// (`plugins.entries.lossless.config`); its `databasePath` is replaced by a file in `dir`.
pub async fn open_engine(
    id: &str,
    dir: &Path,
    summarizer: Arc<dyn Summarizer>,
    lossless_config: &serde_json::Value,
) -> Result<EngineUnderTest> {
    match id {
        "legacy" => Ok(EngineUnderTest {
            id: id.to_owned(),
            engine: Arc::new(LegacyEngine),
            store: None,
            database_path: None,
            owns_compaction: false,
            semantic: None,
        }),
        "lossless" => {
            std::fs::create_dir_all(dir).map_err(|e| BenchError::io(dir, e))?;
            let path = dir.join("lossless.db");
            let cfg = LosslessConfig::from_value(lossless_config);
            // The embedding model the config or the environment names (none for
            // `recallMethod: lexical`), as the engine's factory loads it.
            let embedder = if cfg.recall_method == clawctx_lossless::RecallMethod::Lexical {
                None
            } else {
                clawctx_lossless::semantic::model::embedder_for(&cfg, dir)
                    .await
                    .map_err(|e| BenchError::engine(id, "embedding model", e))?
            };
            let p = path.clone();
            let mut engine = tokio::task::spawn_blocking(move || LosslessEngine::open(&p, cfg))
                .await
                .map_err(|e| BenchError::engine(id, "open", e))?
                .map_err(|e| BenchError::engine(id, "open", e))?
                .with_summarizer(summarizer);
            if let Some(e) = embedder {
                engine = engine.with_embedder(e);
            }
            let semantic = engine.semantic().cloned();
            let store = engine.store().cloned();
            Ok(EngineUnderTest {
                id: id.to_owned(),
                engine: Arc::new(engine),
                store,
                database_path: Some(path),
                owns_compaction: true,
                semantic,
            })
        }
        other => Err(BenchError::InvalidArgument(format!(
            "unknown engine `{other}` (supported: {})",
            SUPPORTED_ENGINES.join(", ")
        ))),
    }
}
