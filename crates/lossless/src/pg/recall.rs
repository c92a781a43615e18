//! The recall tools on the PostgreSQL store: `lcm_grep`, `lcm_describe`, `lcm_expand`.
//!
//! Placeholder until the PostgreSQL recall lands: every call answers a clear error.

use super::store::PgStore;
use crate::error::{LosslessError, Result};
use crate::recall::{DescribeReport, ExpandReport, GrepQuery, GrepReport};

fn not_yet(what: &str) -> LosslessError {
    LosslessError::InvalidInput(format!("{what} is not available on the PostgreSQL store yet"))
}

impl PgStore {
    /// `lcm_grep`.
    pub(crate) async fn grep_history(&self, _query: GrepQuery) -> Result<GrepReport> {
        Err(not_yet("lcm_grep"))
    }

    /// `lcm_describe`.
    pub(crate) async fn describe_item(&self, _id: &str, _agent: Option<&str>) -> Result<DescribeReport> {
        Err(not_yet("lcm_describe"))
    }

    /// `lcm_expand`.
    pub(crate) async fn expand_item(
        &self,
        _id: &str,
        _max_tokens: u64,
        _agent: Option<&str>,
    ) -> Result<ExpandReport> {
        Err(not_yet("lcm_expand"))
    }
}
