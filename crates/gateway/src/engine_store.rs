//! The one lossless store the gateway reads: the engine's own.
//!
//! The recall routes, the dashboard, the session list, the turn trace and the MCP server all
//! read through [`handle`] (or [`lossless`]): the [`Recall`] the runtime's lossless engine hands
//! out (through the quarantine guard) over the store it writes, with its configuration. The
//! gateway never opens a store of its own, so it has one pool and one configuration per
//! engine, and reads see every write the engine acknowledged. On SQLite the reads run on the
//! store's read thread, off the path of turns; on PostgreSQL on pooled connections.
//!
//! A failing store is a 5xx naming the store ([`store_error`]): 503 `store_unavailable` when it
//! cannot be reached for now, 500 `store_error` for anything else. These are here, not in one of
//! the handlers, because every reader above answers with them.

use axum::http::StatusCode;
use clawctx_lossless::{LosslessError, Recall};

use crate::api_error::ApiError;
use crate::state::Shared;

/// Whether the engine in charge is `lossless`.
pub(crate) fn is_lossless(s: &Shared) -> bool {
    s.runtime.engine_id() == clawctx_lossless::ENGINE_ID
}

/// The lossless engine's recall handle, or `None` when the engine in charge is another one.
pub(crate) fn lossless(s: &Shared) -> Option<Recall> {
    Recall::of(s.runtime.engine().as_ref())
}

/// The lossless engine's recall handle, or a 409 naming the engine in charge.
pub(crate) fn handle(s: &Shared) -> Result<Recall, ApiError> {
    lossless(s).ok_or_else(|| {
        ApiError::conflict(format!(
            "recall needs the lossless engine; the engine in charge is \"{}\" (plugins.slots.contextEngine)",
            s.runtime.engine_id()
        ))
    })
}

/// Whether `e` means the store cannot be reached for now (a retry later may work).
pub(crate) fn is_unavailable(e: &LosslessError) -> bool {
    matches!(
        e,
        LosslessError::Unreachable { .. }
            | LosslessError::ConnectionLost(_)
            | LosslessError::Busy { .. }
            | LosslessError::Closed
    )
}

/// The HTTP error of a failed store call `what` on `recall`'s store (see the module header).
pub(crate) fn store_error(recall: &Recall, what: &str, e: LosslessError) -> ApiError {
    match e {
        LosslessError::NotFound(m) => ApiError::not_found(format!("{what} failed: not found: {m}")),
        LosslessError::InvalidInput(m) => ApiError::bad_request(format!("{what} failed: {m}")),
        e if is_unavailable(&e) => ApiError {
            code: Some("store_unavailable"),
            ..ApiError::unavailable(format!(
                "{what} failed: the lossless store {} is unavailable: {e}",
                recall.location()
            ))
        },
        e => ApiError {
            code: Some("store_error"),
            status: StatusCode::INTERNAL_SERVER_ERROR,
            ..ApiError::internal(format!(
                "{what} failed: the lossless store {} failed: {e}",
                recall.location()
            ))
        },
    }
}
