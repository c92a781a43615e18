//! The grep arguments the recall routes ([`crate::recall`]) and the MCP server
//! ([`crate::mcp`]) share: one vocabulary of modes, targets and orders, mapped onto the lossless
//! engine's own, in a module of its own so that neither imports the other for it.

use clawctx_lossless::{GrepMode, GrepSort, GrepTarget};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Grep mode.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RecallMode {
    /// `hybrid` when the engine has an embedding model, else `full_text` (the default).
    #[default]
    Auto,
    /// Every term must match (BM25 ranked). `fts` (the CLI's former name) is accepted too.
    #[serde(alias = "fts")]
    FullText,
    /// A whole question: rows sharing the most and rarest words. `any` is accepted too.
    #[serde(alias = "any")]
    AnyTerm,
    /// A regular expression.
    Regex,
    /// By meaning: the rows whose sentence vectors are closest to the query's (needs an
    /// embedding model; an error without one).
    Semantic,
    /// `any_term` and `semantic` fused by reciprocal rank (`any_term` without a model).
    Hybrid,
}

impl From<RecallMode> for GrepMode {
    fn from(m: RecallMode) -> Self {
        match m {
            RecallMode::FullText => GrepMode::FullText,
            RecallMode::AnyTerm => GrepMode::AnyTerm,
            RecallMode::Regex => GrepMode::Regex,
            RecallMode::Semantic => GrepMode::Semantic,
            RecallMode::Hybrid => GrepMode::Hybrid,
            RecallMode::Auto => GrepMode::Auto,
        }
    }
}

/// What grep searches.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RecallTarget {
    /// Messages and summaries.
    #[default]
    Both,
    /// Messages only.
    Messages,
    /// Summaries only.
    Summaries,
}

impl From<RecallTarget> for GrepTarget {
    fn from(t: RecallTarget) -> Self {
        match t {
            RecallTarget::Both => GrepTarget::Both,
            RecallTarget::Messages => GrepTarget::Messages,
            RecallTarget::Summaries => GrepTarget::Summaries,
        }
    }
}

/// Grep order.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RecallSort {
    /// Best match first.
    #[default]
    Relevance,
    /// Newest first.
    Recency,
}

impl From<RecallSort> for GrepSort {
    fn from(s: RecallSort) -> Self {
        match s {
            RecallSort::Relevance => GrepSort::Relevance,
            RecallSort::Recency => GrepSort::Recency,
        }
    }
}
