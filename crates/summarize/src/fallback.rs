//! [`FallbackSummarizer`]: a primary summarizer (usually an LLM) with the extractive summarizer
//! behind it, so a compaction never fails because a model could not summarize.
//!
//! The runtime's built-in compaction (contract §7.4) turns a summarizer error into a failed
//! compaction, and a failed compaction during overflow recovery fails the turn. A model that is
//! down, slow, out of budget or answering nonsense must not take the agent down with it: this
//! wrapper answers with the deterministic extractive summary instead, and says so in one warning
//! line. Only the caller's own abort is passed through. Engines with their own failure policy
//! (the lossless engine keeps a failed range raw and retries it later) call the primary directly
//! instead of wrapping it twice.

use std::sync::Arc;

use async_trait::async_trait;

use crate::{ExtractiveSummarizer, SummarizeError, Summarizer, Summary, SummaryRequest};

/// Tries `primary`; on any failure but an abort, logs one warning and returns the extractive
/// summary of the same request.
pub struct FallbackSummarizer {
    primary: Arc<dyn Summarizer>,
    name: String,
}

impl std::fmt::Debug for FallbackSummarizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FallbackSummarizer")
            .field("name", &self.name)
            .finish()
    }
}

impl FallbackSummarizer {
    /// `primary`, falling back to [`ExtractiveSummarizer`]. The name is
    /// `<primary>, else extractive` (the warning says which one produced a given summary).
    pub fn new(primary: Arc<dyn Summarizer>) -> Self {
        let name = format!("{}, else extractive", primary.name());
        Self { primary, name }
    }

    /// The summarizer tried first.
    pub fn primary(&self) -> &Arc<dyn Summarizer> {
        &self.primary
    }
}

#[async_trait]
impl Summarizer for FallbackSummarizer {
    fn name(&self) -> &str {
        &self.name
    }

    async fn summarize(&self, request: SummaryRequest) -> Result<Summary, SummarizeError> {
        let reason = match self.primary.summarize(request.clone()).await {
            Ok(summary) if !summary.text.trim().is_empty() => return Ok(summary),
            Ok(_) => "it returned an empty summary".to_owned(),
            Err(SummarizeError::Aborted) => return Err(SummarizeError::Aborted),
            Err(e) => e.to_string(),
        };
        tracing::warn!(
            "summarizer `{}` failed ({reason}); using the extractive summary instead",
            self.primary.name()
        );
        Ok(ExtractiveSummarizer.summarize_now(&request))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SummaryKind;

    struct Scripted(Result<&'static str, fn() -> SummarizeError>);

    #[async_trait]
    impl Summarizer for Scripted {
        fn name(&self) -> &str {
            "scripted"
        }
        async fn summarize(&self, _request: SummaryRequest) -> Result<Summary, SummarizeError> {
            match &self.0 {
                Ok(text) => Ok(Summary {
                    text: (*text).to_owned(),
                    input_tokens: 1,
                    output_tokens: 1,
                }),
                Err(make) => Err(make()),
            }
        }
    }

    fn request() -> SummaryRequest {
        SummaryRequest {
            kind: SummaryKind::History,
            conversation: "[User]: please fix src/lib.rs, it fails with E0425\n[Assistant]: fixed the import in src/lib.rs".into(),
            previous_summary: None,
            custom_instructions: None,
            max_tokens: 200,
        }
    }

    async fn run(primary: Scripted) -> Result<Summary, SummarizeError> {
        FallbackSummarizer::new(Arc::new(primary))
            .summarize(request())
            .await
    }

    #[tokio::test]
    async fn a_working_primary_answers() {
        let s = run(Scripted(Ok("## Goal\nfix the import"))).await;
        assert_eq!(
            s.map(|s| s.text).ok().as_deref(),
            Some("## Goal\nfix the import"),
            "the primary's summary must be returned unchanged"
        );
    }

    #[tokio::test]
    async fn every_failure_but_an_abort_gives_the_extractive_summary() {
        let extractive = ExtractiveSummarizer.summarize_now(&request()).text;
        let failures: [fn() -> SummarizeError; 4] = [
            || SummarizeError::Unavailable("HTTP 500".into()),
            || SummarizeError::Auth("401".into()),
            || SummarizeError::BudgetExhausted("spent".into()),
            || SummarizeError::Failed("garbage".into()),
        ];
        for make in failures {
            let why = make().to_string();
            let s = run(Scripted(Err(make))).await;
            assert_eq!(
                s.map(|s| s.text).ok(),
                Some(extractive.clone()),
                "after `{why}` the extractive summary must be used"
            );
        }
        let empty = run(Scripted(Ok("  \n"))).await;
        assert_eq!(
            empty.map(|s| s.text).ok(),
            Some(extractive),
            "an empty answer must be replaced by the extractive summary"
        );
    }

    #[tokio::test]
    async fn an_abort_is_passed_through() {
        let s = run(Scripted(Err(|| SummarizeError::Aborted))).await;
        assert!(
            matches!(s, Err(SummarizeError::Aborted)),
            "the caller's abort must not be turned into a summary: {s:?}"
        );
    }

    #[test]
    fn the_name_says_both() {
        let f = FallbackSummarizer::new(Arc::new(Scripted(Ok("x"))));
        assert_eq!(f.name(), "scripted, else extractive");
    }
}
