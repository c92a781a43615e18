//! Importing an OpenClaw JSONL session into SQLite ([`crate::core::import`] reads the file):
//! the messages stored as an ingest would, idempotent by identity (a dry run counts the new ones).

use clawctx_protocol::AgentMessage;

use crate::core::codec;
use crate::core::conv::ConvKey;
use crate::core::import::ImportReport;
use crate::error::Result;
use crate::sqlite::Db;

impl Db {
    /// Imports `msgs` into `key`'s conversation (`apply = false`: count only).
    pub fn import_messages(
        &mut self,
        key: &ConvKey,
        msgs: &[AgentMessage],
        apply: bool,
        report: &mut ImportReport,
    ) -> Result<()> {
        let encoded = msgs.iter().map(codec::encode).collect::<Result<Vec<_>>>()?;
        if apply {
            let out = self.ingest(key, &encoded)?;
            report.new_messages = out.stored.iter().filter(|s| **s).count();
            report.applied = true;
        } else {
            let conv = self.conversation(key)?;
            let mut seen = std::collections::HashSet::new();
            report.new_messages = encoded
                .iter()
                .filter(|e| seen.insert(e.hash))
                .filter(|e| match &conv {
                    Some(c) => !self.has_message(c.id, e.ts, e.hash).unwrap_or(false),
                    None => true,
                })
                .count();
        }
        Ok(())
    }
}
