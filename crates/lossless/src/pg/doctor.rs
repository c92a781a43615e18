//! `status` and `doctor` on the PostgreSQL store.
//!
//! Placeholder until the PostgreSQL checks land: every call answers a clear error.

use super::store::PgStore;
use crate::doctor::{DoctorReport, StatusReport};
use crate::error::{LosslessError, Result};
use crate::retention::RetentionReport;

fn not_yet(what: &str) -> LosslessError {
    LosslessError::InvalidInput(format!("{what} is not available on the PostgreSQL store yet"))
}

impl PgStore {
    /// Size, counts, growth.
    pub(crate) async fn status_report(&self) -> Result<StatusReport> {
        Err(not_yet("status"))
    }

    /// Integrity checks.
    pub(crate) async fn doctor_report(&self) -> Result<DoctorReport> {
        Err(not_yet("doctor"))
    }

    /// Payload retention.
    pub(crate) async fn expire(&self, _cutoff_ms: i64, _apply: bool) -> Result<RetentionReport> {
        Err(not_yet("payload retention"))
    }
}
