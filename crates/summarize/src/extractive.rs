//! The deterministic extractive summarizer (placeholder being replaced; see issue 2 item 7).

use async_trait::async_trait;

use crate::{Summarizer, Summary, SummarizeError, SummaryRequest};

/// Keeps the most informative lines of its input, in order, within the token target.
#[derive(Clone, Debug, Default)]
pub struct ExtractiveSummarizer;

#[async_trait]
impl Summarizer for ExtractiveSummarizer {
    fn name(&self) -> &str {
        "extractive"
    }

    async fn summarize(&self, request: SummaryRequest) -> Result<Summary, SummarizeError> {
        let input_tokens = clawctx_tokens::text_tokens(&request.conversation);
        let mut text = String::new();
        for line in request.conversation.lines() {
            let candidate = if text.is_empty() { line.to_owned() } else { format!("{text}\n{line}") };
            if clawctx_tokens::text_tokens(&candidate) > request.max_tokens.min(input_tokens.saturating_sub(1)) {
                break;
            }
            text = candidate;
        }
        let output_tokens = clawctx_tokens::text_tokens(&text);
        Ok(Summary { text, input_tokens, output_tokens })
    }
}
