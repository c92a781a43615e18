//! The runtime's built-in summarization compaction (contract §7.4): the compaction `legacy`
//! delegates to and that non-owning engines get from the host.
//!
//! It works on the active path of a transcript (root → leaf entries) and produces one summary
//! of the older part plus the id of the first entry kept raw; the host appends that as a
//! `compaction` entry, and the rebuilt context is the summary (as a user message with the fixed
//! prefix/suffix) followed by the kept entries. Three pieces:
//! - [`settings`]: reserve/keep-recent defaults, the reserve floor, the trigger;
//! - [`cut`]: where to cut (never at a tool result; split turns);
//! - [`summary`]: generating the summary text (history + split-turn prefix, update mode,
//!   file-operation tracking) through any [`clawctx_summarize::Summarizer`].
//!
//! Token figures come from the one estimator (`clawctx-tokens`: exact o200k, images at 4,800
//! characters) rather than the runtime's chars/4, so the trigger and the assembly budget agree.

pub mod cut;
pub mod settings;
pub mod summary;

pub use cut::{find_cut_point, prepare_compaction, CompactionPreparation, CutPoint};
pub use settings::{effective_reserve_tokens, should_compact, CompactionSettings};
pub use summary::{compact_path, generate_summary, CompactionOutcome, FileOps};
