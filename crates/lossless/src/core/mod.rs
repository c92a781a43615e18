//! The lossless engine's logic written once for every backend: planning and ranking, the
//! budgeted assembly, compaction policy and its rounds, validation, the recall reports and the
//! dashboard's views, the message codec. Nothing here names a SQLite or PostgreSQL type; a
//! backend (`crate::sqlite`, `crate::pg`) runs the queries and calls into these modules with
//! the rows.

pub mod assemble;
pub mod backend;
pub mod codec;
pub mod compaction;
pub mod conv;
pub mod decoded;
pub mod doctor;
pub mod ids;
pub mod import;
pub mod inspect;
pub mod pack;
pub mod prompt_recall;
pub mod recall;
pub mod relative_dates;
pub mod retention;
pub mod search;
pub mod semantic;
pub mod session;
pub mod terms;

/// A hash map with the fast, non-randomized FxHash: the stores' caches are keyed by ids and
/// strings the store itself produced.
pub(crate) type FxMap<K, V> =
    std::collections::HashMap<K, V, std::hash::BuildHasherDefault<rustc_hash::FxHasher>>;
