//! The library API behind `clawctx lcm grep|describe|expand|status|doctor|import`: async
//! methods on [`LosslessStore`] returning serializable reports. Synchronous callers can use
//! [`LosslessStore::call_read_blocking`] (reads) and [`LosslessStore::call_blocking`] (writes)
//! with the same [`Db`](crate::store::Db) methods. Every read here runs on the store's read
//! thread, off the path of turns (see [`crate::store`]).

use std::path::PathBuf;

use crate::doctor::{DoctorReport, StatusReport};
use crate::error::Result;
use crate::import::ImportReport;
use crate::recall::{DescribeReport, ExpandReport, GrepQuery, GrepReport};
use crate::store::{ConvKey, ConvRow, LosslessStore};

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
