//! Summaries for compaction: the [`Summarizer`] trait, how a conversation is turned into text
//! for a summarizer, and the deterministic [`ExtractiveSummarizer`] that is the embedded,
//! offline default and every engine's last resort.
//!
//! Compaction code (the built-in runtime compaction in `clawctx-engine`, the lossless engine)
//! depends only on the trait. LLM-backed summarizers live with the model providers
//! (`clawctx-model`) and implement the same trait, so this crate sits below both and knows
//! nothing of HTTP or engines. [`FallbackSummarizer`] puts the extractive summarizer behind any
//! other one, for callers that must always get a summary.

mod conversation;
mod extractive;
mod fallback;
pub mod observe;
mod salience;
mod segment;

pub use conversation::serialize_conversation;
pub use extractive::ExtractiveSummarizer;
pub use fallback::FallbackSummarizer;
pub use salience::salient_terms;

use async_trait::async_trait;

/// What kind of summary is asked for. LLM summarizers pick their prompt from it; the
/// extractive summarizer uses it to label sections.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SummaryKind {
    /// The history before a compaction cut point (runtime compaction).
    History,
    /// The early part of a turn split by a cut point (runtime compaction, split turn).
    TurnPrefix,
    /// A leaf summary of raw messages (lossless engine).
    Leaf,
    /// A condensed summary of summaries at `depth` (lossless engine).
    Condensed {
        /// Depth of the summary being produced (1 = summary of leaves).
        depth: u32,
    },
}

/// One summarization request.
#[derive(Clone, Debug)]
pub struct SummaryRequest {
    /// The kind of summary.
    pub kind: SummaryKind,
    /// The material to summarize, already serialized (see [`serialize_conversation`]).
    pub conversation: String,
    /// A previous summary to update rather than replace (update mode).
    pub previous_summary: Option<String>,
    /// Extra focus from the user (`/compact <instructions>`).
    pub custom_instructions: Option<String>,
    /// Upper bound on the summary, in tokens of the one estimator (`clawctx-tokens`).
    pub max_tokens: u64,
}

/// A produced summary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Summary {
    /// The text.
    pub text: String,
    /// Tokens the summarizer read (for spend accounting).
    pub input_tokens: u64,
    /// Tokens of `text`.
    pub output_tokens: u64,
}

/// Why a summary could not be produced. Variants say what the caller should do.
#[derive(Debug, thiserror::Error)]
pub enum SummarizeError {
    /// Transient (timeout, 5xx, rate limit): keep the raw range and retry later.
    #[error("summarizer temporarily unavailable: {0}")]
    Unavailable(String),
    /// Credentials rejected: stop calling this summarizer (circuit breaker).
    #[error("summarizer authentication failed: {0}")]
    Auth(String),
    /// The spend guard refused the call: fall back to the extractive summarizer.
    #[error("summarizer budget exhausted: {0}")]
    BudgetExhausted(String),
    /// The caller cancelled.
    #[error("summarization aborted")]
    Aborted,
    /// The summarizer answered with something unusable (`Summarization failed: ...`).
    #[error("Summarization failed: {0}")]
    Failed(String),
}

/// Produces summaries for compaction.
#[async_trait]
pub trait Summarizer: Send + Sync {
    /// A short name for logs and `doctor` (e.g. `extractive`, `openai:gpt-4o-mini`).
    fn name(&self) -> &str;

    /// Summarizes `request.conversation` into at most `request.max_tokens` tokens.
    async fn summarize(&self, request: SummaryRequest) -> Result<Summary, SummarizeError>;
}
