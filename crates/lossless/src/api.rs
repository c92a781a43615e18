//! The library API: async methods on [`LosslessStore`] behind `clawctx lcm
//! grep|describe|expand|status|doctor|import`, returning serializable reports, and [`Recall`],
//! the recall and inspection handle over a running engine's own store. Synchronous callers can
//! use [`LosslessStore::call_read_blocking`] (reads) and [`LosslessStore::call_blocking`]
//! (writes) with the same [`Db`](crate::store::Db) methods. Every read here runs on the store's
//! read thread (SQLite) or a pooled connection (PostgreSQL), off the path of turns (see
//! [`crate::store`]).
//!
//! Why [`Recall`]: a host that serves recall next to turns (the gateway's recall routes, its
//! dashboard, its MCP server) must read the store the engine writes, with the engine's own
//! configuration (pool size, large-payload setting, where the file is). Opening a second store
//! from config re-derived those and diverged; [`Recall::of`] takes them from the engine.

use std::path::PathBuf;
use std::sync::Arc;

use clawctx_engine::ContextEngine;

use crate::backend::Backend;
use crate::config::LosslessConfig;
use crate::doctor::{DoctorReport, StatusReport};
use crate::engine::LosslessEngine;
use crate::error::Result;
use crate::import::ImportReport;
use crate::recall::{DescribeReport, ExpandReport, GrepQuery, GrepReport};
use crate::store::{ConvKey, ConvRow, LosslessStore};

/// Recall and inspection over a lossless engine's own store (see the module header). Cheap to
/// clone: the store and the configuration are shared with the engine.
#[derive(Clone, Debug)]
pub struct Recall {
    store: Arc<dyn Backend>,
    cfg: Arc<LosslessConfig>,
}

impl Recall {
    /// The handle of `engine` when it is a lossless engine (also behind the quarantine guard,
    /// which hands out the engine it wraps); `None` for any other engine.
    pub fn of(engine: &dyn ContextEngine) -> Option<Recall> {
        engine
            .as_any()?
            .downcast_ref::<LosslessEngine>()
            .map(LosslessEngine::recall)
    }

    pub(crate) fn new(store: Arc<dyn Backend>, cfg: Arc<LosslessConfig>) -> Self {
        Self { store, cfg }
    }

    /// The engine's store; its [`crate::inspect::Inspect`] views are the dashboard's.
    pub fn store(&self) -> &Arc<dyn Backend> {
        &self.store
    }

    /// The engine's configuration.
    pub fn config(&self) -> &LosslessConfig {
        &self.cfg
    }

    /// Where the store is, for errors: the SQLite file, or the PostgreSQL URL without its
    /// password.
    pub fn location(&self) -> String {
        self.store.location()
    }

    /// Searches history (see [`GrepQuery`]).
    pub async fn grep(&self, query: GrepQuery) -> Result<GrepReport> {
        self.store.grep(query).await
    }

    /// Describes `sum_<n>` or `msg_<n>`, within `agent`'s conversations when given.
    pub async fn describe(&self, id: &str, agent: Option<&str>) -> Result<DescribeReport> {
        self.store.describe(id, agent).await
    }

    /// Expands `sum_<n>` (or shows `msg_<n>`) within `max_tokens` (default: the engine's
    /// `maxExpandTokens`), within `agent`'s conversations when given.
    pub async fn expand(
        &self,
        id: &str,
        max_tokens: Option<u64>,
        agent: Option<&str>,
    ) -> Result<ExpandReport> {
        let max = max_tokens.unwrap_or(self.cfg.max_expand_tokens).max(1);
        self.store.expand(id, max, agent).await
    }

    /// Every conversation row.
    pub async fn conversations(&self) -> Result<Vec<ConvRow>> {
        self.store.conversations().await
    }
}

impl LosslessStore {
    /// Searches history (see [`GrepQuery`]).
    pub async fn grep(&self, query: GrepQuery) -> Result<GrepReport> {
        self.call_read(move |db| db.grep(&query)).await
    }

    /// Describes `sum_<n>` or `msg_<n>` (unscoped: operator view).
    pub async fn describe(&self, id: &str) -> Result<DescribeReport> {
        let id = id.to_owned();
        self.call_read(move |db| db.describe(&id, None)).await
    }

    /// Expands `sum_<n>` into its children (or shows `msg_<n>`) within `max_tokens`.
    pub async fn expand(&self, id: &str, max_tokens: u64) -> Result<ExpandReport> {
        let id = id.to_owned();
        self.call_read(move |db| db.expand(&id, max_tokens, None))
            .await
    }

    /// Size, counts, growth.
    pub async fn status(&self) -> Result<StatusReport> {
        self.call_read(|db| db.status()).await
    }

    /// Integrity checks.
    pub async fn doctor(&self) -> Result<DoctorReport> {
        self.call_read(|db| db.doctor()).await
    }

    /// Every conversation row.
    pub async fn conversations(&self) -> Result<Vec<ConvRow>> {
        self.call_read(|db| db.conversations()).await
    }

    /// Imports an OpenClaw JSONL session file into `key`'s conversation; `apply = false` only
    /// reports what would be imported.
    pub async fn import_openclaw_jsonl(
        &self,
        path: impl Into<PathBuf>,
        key: ConvKey,
        apply: bool,
    ) -> Result<ImportReport> {
        let path = path.into();
        self.call(move |db| {
            let (msgs, mut report) = crate::import::read_openclaw_jsonl(&path)?;
            db.import_messages(&key, &msgs, apply, &mut report)?;
            Ok(report)
        })
        .await
    }
}
