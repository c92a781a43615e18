//! The deterministic fake summarizer of the benchmarks and the counting wrapper that tells the
//! bench how much of a compaction was spent inside the summarizer.
//!
//! The fake keeps the first 10% of its input (capped at the request's token target), as in the
//! peer benchmark (spec §8.2): the summarizer then costs almost nothing, so a compaction's wall
//! time minus the time inside the summarizer is the engine's own overhead.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use clawctx_summarize::{SummarizeError, Summarizer, Summary, SummaryRequest};

/// Keeps the first 10% of the input, capped at `max_tokens` (≈ 3 characters per token).
#[derive(Clone, Copy, Debug, Default)]
pub struct HeadTenPercent;

impl HeadTenPercent {
    /// The summary text for `input` and a token cap.
    pub fn head(input: &str, max_tokens: u64) -> String {
        let cap_chars = (max_tokens.max(1) as usize).saturating_mul(3);
        let mut end = (input.len() / 10).min(cap_chars).max(1).min(input.len());
        while end > 0 && !input.is_char_boundary(end) {
            end -= 1;
        }
        input[..end].to_owned()
    }
}

#[async_trait]
impl Summarizer for HeadTenPercent {
    fn name(&self) -> &str {
        "head-10pct"
    }

    async fn summarize(&self, request: SummaryRequest) -> Result<Summary, SummarizeError> {
        let mut input = request.conversation;
        if let Some(prev) = request.previous_summary {
            input = format!("{prev}\n{input}");
        }
        let text = Self::head(&input, request.max_tokens);
        Ok(Summary {
            text,
            input_tokens: 0,
            output_tokens: 0,
        })
    }
}

/// Totals a [`CountingSummarizer`] has seen.
#[derive(Debug, Default)]
pub struct SummarizerCounters {
    calls: AtomicU64,
    input_tokens: AtomicU64,
    micros: AtomicU64,
}

/// A snapshot of [`SummarizerCounters`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SummarizerTotals {
    /// Calls.
    pub calls: u64,
    /// Input tokens (conversation plus previous summary).
    pub input_tokens: u64,
    /// Microseconds spent inside the wrapped summarizer (counting included).
    pub micros: u64,
}

impl SummarizerTotals {
    /// `self - earlier`.
    pub fn since(self, earlier: SummarizerTotals) -> SummarizerTotals {
        SummarizerTotals {
            calls: self.calls - earlier.calls,
            input_tokens: self.input_tokens - earlier.input_tokens,
            micros: self.micros - earlier.micros,
        }
    }
}

impl SummarizerCounters {
    /// Current totals.
    pub fn totals(&self) -> SummarizerTotals {
        SummarizerTotals {
            calls: self.calls.load(Ordering::SeqCst),
            input_tokens: self.input_tokens.load(Ordering::SeqCst),
            micros: self.micros.load(Ordering::SeqCst),
        }
    }
}

/// Wraps a summarizer and counts calls, input tokens and time spent inside it.
pub struct CountingSummarizer {
    inner: Arc<dyn Summarizer>,
    name: String,
    counters: Arc<SummarizerCounters>,
}

impl CountingSummarizer {
    /// Wraps `inner`; the counters are shared with the caller.
    pub fn new(inner: Arc<dyn Summarizer>) -> (Self, Arc<SummarizerCounters>) {
        let counters = Arc::new(SummarizerCounters::default());
        // The lossless engine treats a summarizer named `extractive` as its built-in fallback and
        // bypasses it; a distinct name keeps the wrapper in the call path.
        let name = format!("counting:{}", inner.name());
        (
            Self {
                inner,
                name,
                counters: counters.clone(),
            },
            counters,
        )
    }
}

#[async_trait]
impl Summarizer for CountingSummarizer {
    fn name(&self) -> &str {
        &self.name
    }

    async fn summarize(&self, request: SummaryRequest) -> Result<Summary, SummarizeError> {
        let started = Instant::now();
        let tokens = clawctx_tokens::text_tokens(&request.conversation)
            + request
                .previous_summary
                .as_deref()
                .map(clawctx_tokens::text_tokens)
                .unwrap_or(0);
        let out = self.inner.summarize(request).await;
        self.counters.calls.fetch_add(1, Ordering::SeqCst);
        self.counters
            .input_tokens
            .fetch_add(tokens, Ordering::SeqCst);
        self.counters
            .micros
            .fetch_add(started.elapsed().as_micros() as u64, Ordering::SeqCst);
        out
    }
}
