//! The PostgreSQL backend: one lossless store that several gateways share.
//!
//! The SQLite store is one file per agent, owned by one process. When several gateways serve
//! the same agents (behind a load balancer, or a restart overlapping the old process), they need
//! one store every node reads and writes: a PostgreSQL database. Every acknowledged write is
//! visible to all nodes at once, ingest stays idempotent under concurrent re-sends, and a
//! compaction commits all of its summaries or none, whichever node runs it.
//!
//! - [`connect`]: the database's URL ([`connect::PgTarget`], never displayed with its
//!   password) and the connection pool; an unreachable database fails at start with
//!   [`crate::LosslessError::Unreachable`] naming host and port.
//! - [`schema`]: versioned migrations, applied under an advisory lock so gateways starting
//!   together do not race; a database with a newer schema is refused, never modified.
//!
//! Tests run against `CLAWCTX_TEST_PG_URL` (see `clawctx_test_support::pg`; `.ci/run` starts a
//! throwaway server, `scripts/pg-throwaway` does the same by hand).

pub mod connect;
mod doctor;
mod inspect;
mod libpq_tls;
mod read;
mod recall;
pub mod schema;
mod store;
mod vectors;
mod write;

pub use store::{PgStore, DEFAULT_POOL_SIZE};
