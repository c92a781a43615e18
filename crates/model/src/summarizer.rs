//! The LLM-backed summarizer: `clawctx_summarize::Summarizer` on top of any [`ModelProvider`].
//!
//! Compaction asks for summaries through the `Summarizer` trait; this is the implementation
//! that asks a model. It builds the prompt (contract §7.4: conversation in `<conversation>`
//! tags, previous summary in `<previous-summary>` with the update prompt, the required section
//! structure, custom instructions as an "Additional focus" line), refuses answers that are not
//! usable summaries (an error stop reason, nothing but reasoning, empty text), and wraps every
//! call in the spend guard and the circuit breaker from [`crate::guard`]. Prompts are Markdown
//! files in `prompts/`.

use std::sync::Arc;

use async_trait::async_trait;
use clawctx_protocol::AgentMessage;
use clawctx_summarize::{SummarizeError, Summarizer, Summary, SummaryKind, SummaryRequest};
use tokio_util::sync::CancellationToken;

use crate::guard::{BreakerDecision, CircuitBreaker, SpendGuard};
use crate::{CompletionRequest, ModelError, ModelProvider, StopReason};

/// System prompt of every summarization call.
pub const SYSTEM_PROMPT: &str = include_str!("../prompts/system.md");
/// First-time history summary (`SummaryKind::History` without a previous summary).
pub const HISTORY_PROMPT: &str = include_str!("../prompts/history.md");
/// History summary that updates `<previous-summary>`.
pub const UPDATE_PROMPT: &str = include_str!("../prompts/update.md");
/// Split-turn prefix summary (`SummaryKind::TurnPrefix`).
pub const TURN_PREFIX_PROMPT: &str = include_str!("../prompts/turn_prefix.md");
/// Lossless engine leaf summary (`SummaryKind::Leaf`).
pub const LEAF_PROMPT: &str = include_str!("../prompts/leaf.md");
/// Lossless engine condensed summary (`SummaryKind::Condensed`); `{depth}` is substituted.
pub const CONDENSED_PROMPT: &str = include_str!("../prompts/condensed.md");

/// Session key used when the summarizer was not scoped with [`LlmSummarizer::for_session`].
pub const DEFAULT_SESSION_KEY: &str = "default";

/// The two texts sent for one summary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SummaryPrompt {
    /// The system prompt.
    pub system: String,
    /// The single user message.
    pub user: String,
}

/// Builds the prompt for `request`.
pub fn summary_prompt(request: &SummaryRequest) -> SummaryPrompt {
    let mut user = String::new();
    user.push_str("<conversation>\n");
    user.push_str(request.conversation.trim());
    user.push_str("\n</conversation>\n\n");
    let previous = request
        .previous_summary
        .as_deref()
        .map(str::trim)
        .filter(|s| !s.is_empty());
    if let Some(prev) = previous {
        user.push_str("<previous-summary>\n");
        user.push_str(prev);
        user.push_str("\n</previous-summary>\n\n");
    }
    let instructions = match (&request.kind, previous) {
        (SummaryKind::History, Some(_)) => UPDATE_PROMPT.to_owned(),
        (SummaryKind::History, None) => HISTORY_PROMPT.to_owned(),
        (SummaryKind::TurnPrefix, _) => TURN_PREFIX_PROMPT.to_owned(),
        (SummaryKind::Leaf, _) => LEAF_PROMPT.to_owned(),
        (SummaryKind::Condensed { depth }, _) => {
            CONDENSED_PROMPT.replace("{depth}", &depth.to_string())
        }
    };
    user.push_str(instructions.trim());
    if previous.is_some() && request.kind != SummaryKind::History {
        user.push_str("\n\nThe notes in `<previous-summary>` are background only: summarize the transcript, not them.");
    }
    if let Some(focus) = request
        .custom_instructions
        .as_deref()
        .map(str::trim)
        .filter(|s| !s.is_empty())
    {
        user.push_str("\n\nAdditional focus: ");
        user.push_str(focus);
    }
    user.push('\n');
    SummaryPrompt {
        system: SYSTEM_PROMPT.trim().to_owned(),
        user,
    }
}

/// A [`Summarizer`] that asks a model.
#[derive(Clone)]
pub struct LlmSummarizer {
    name: String,
    provider: Arc<dyn ModelProvider>,
    model: String,
    session_key: String,
    spend_guard: Option<Arc<SpendGuard>>,
    breaker: Option<Arc<CircuitBreaker>>,
    cancel: CancellationToken,
    temperature: Option<f64>,
    max_output_tokens: Option<u64>,
}

impl std::fmt::Debug for LlmSummarizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlmSummarizer")
            .field("name", &self.name)
            .field("session_key", &self.session_key)
            .finish_non_exhaustive()
    }
}

impl LlmSummarizer {
    /// Summarizes with `model` at `provider`; no spend guard, no breaker.
    pub fn new(provider: Arc<dyn ModelProvider>, model: impl Into<String>) -> Self {
        let model = model.into();
        Self {
            name: format!("{}:{}", provider.id(), model),
            provider,
            model,
            session_key: DEFAULT_SESSION_KEY.into(),
            spend_guard: None,
            breaker: None,
            cancel: CancellationToken::new(),
            temperature: None,
            max_output_tokens: None,
        }
    }

    /// Caps tokens per session key (shared by every clone and [`Self::for_session`] view).
    pub fn with_spend_guard(mut self, guard: Arc<SpendGuard>) -> Self {
        self.spend_guard = Some(guard);
        self
    }

    /// Stops calling the provider while it keeps failing.
    pub fn with_circuit_breaker(mut self, breaker: Arc<CircuitBreaker>) -> Self {
        self.breaker = Some(breaker);
        self
    }

    /// Cancels in-flight and future calls when `token` is cancelled.
    pub fn with_cancellation(mut self, token: CancellationToken) -> Self {
        self.cancel = token;
        self
    }

    /// Sampling temperature for summary calls.
    pub fn with_temperature(mut self, t: f64) -> Self {
        self.temperature = Some(t);
        self
    }

    /// Never asks for more than `max` output tokens (the model's output limit), whatever the
    /// request's `max_tokens`: a provider may reject a larger request outright.
    pub fn with_max_output_tokens(mut self, max: u64) -> Self {
        self.max_output_tokens = Some(max.max(1));
        self
    }

    /// A view of this summarizer that charges the spend guard to `session_key`.
    pub fn for_session(&self, session_key: impl Into<String>) -> Self {
        Self {
            session_key: session_key.into(),
            ..self.clone()
        }
    }

    fn check_breaker(&self) -> Result<(), SummarizeError> {
        let Some(b) = &self.breaker else {
            return Ok(());
        };
        match b.decide() {
            BreakerDecision::Allow | BreakerDecision::Probe => Ok(()),
            BreakerDecision::Refuse { retry_in_ms } => {
                let snap = b.snapshot();
                Err(SummarizeError::Unavailable(format!(
                    "circuit breaker open after {} consecutive failures (last: {}); next attempt in {}s",
                    snap.consecutive_failures,
                    snap.last_error.unwrap_or_default(),
                    retry_in_ms.div_ceil(1000)
                )))
            }
        }
    }

    fn note_error(&self, e: &ModelError) {
        let Some(b) = &self.breaker else { return };
        match e {
            ModelError::Auth { .. }
            | ModelError::Unavailable { .. }
            | ModelError::RateLimited { .. } => b.on_failure(&e.to_string()),
            // The provider answered: it is up and accepts our key.
            ModelError::ContextOverflow { .. } | ModelError::Rejected { .. } => b.on_success(),
            ModelError::BadResponse { .. } | ModelError::Aborted | ModelError::Config { .. } => {
                b.on_neutral()
            }
        }
    }
}

fn to_summarize_error(e: ModelError) -> SummarizeError {
    match e {
        ModelError::Aborted => SummarizeError::Aborted,
        ModelError::Auth { .. } => SummarizeError::Auth(e.to_string()),
        ModelError::Unavailable { .. } | ModelError::RateLimited { .. } => {
            SummarizeError::Unavailable(e.to_string())
        }
        other => SummarizeError::Failed(other.to_string()),
    }
}

#[async_trait]
impl Summarizer for LlmSummarizer {
    fn name(&self) -> &str {
        &self.name
    }

    async fn summarize(&self, request: SummaryRequest) -> Result<Summary, SummarizeError> {
        let started = std::time::Instant::now();
        let result = self.summarize_once(request).await;
        clawctx_summarize::observe::report(clawctx_summarize::observe::SummaryCall {
            summarizer: "llm",
            took: started.elapsed(),
            ok: result.is_ok(),
        });
        result
    }
}

impl LlmSummarizer {
    async fn summarize_once(&self, request: SummaryRequest) -> Result<Summary, SummarizeError> {
        if request.conversation.trim().is_empty()
            && request
                .previous_summary
                .as_deref()
                .is_none_or(|s| s.trim().is_empty())
        {
            return Err(SummarizeError::Failed(
                "nothing to summarize: the conversation is empty".into(),
            ));
        }
        if self.cancel.is_cancelled() {
            return Err(SummarizeError::Aborted);
        }
        let max_tokens = match self.max_output_tokens {
            Some(cap) => request.max_tokens.min(cap),
            None => request.max_tokens,
        };
        let prompt = summary_prompt(&request);
        let estimated_input =
            clawctx_tokens::text_tokens(&prompt.system) + clawctx_tokens::text_tokens(&prompt.user);
        if let Some(g) = &self.spend_guard {
            g.check(&self.session_key, estimated_input + max_tokens)
                .map_err(SummarizeError::BudgetExhausted)?;
        }
        self.check_breaker()?;
        let completion_request = CompletionRequest {
            model: self.model.clone(),
            system_prompt: Some(prompt.system),
            messages: vec![AgentMessage::user(prompt.user)],
            tools: Vec::new(),
            max_output_tokens: Some(max_tokens),
            temperature: self.temperature,
            sampling: Default::default(),
            cache_key: None,
        };
        let completion = match self
            .provider
            .complete(completion_request, None, &self.cancel)
            .await
        {
            Ok(c) => c,
            Err(e) => {
                self.note_error(&e);
                return Err(to_summarize_error(e));
            }
        };
        let usage = completion.usage();
        if let Some(g) = &self.spend_guard {
            let spent = usage.input + usage.cache_read + usage.cache_write + usage.output;
            g.record(
                &self.session_key,
                if spent == 0 { estimated_input } else { spent },
            );
        }
        match completion.stop_reason() {
            StopReason::Aborted => {
                self.note_error(&ModelError::Aborted);
                return Err(SummarizeError::Aborted);
            }
            StopReason::Error => {
                if let Some(b) = &self.breaker {
                    b.on_neutral();
                }
                let why = completion
                    .message
                    .error_message
                    .clone()
                    .unwrap_or_else(|| "the model stopped with an error".into());
                return Err(SummarizeError::Failed(why));
            }
            StopReason::Stop | StopReason::Length | StopReason::ToolUse => {}
        }
        if let Some(b) = &self.breaker {
            b.on_success();
        }
        let text = completion.text().trim().to_owned();
        if text.is_empty() {
            let has_thinking = completion
                .message
                .content
                .block_slice()
                .iter()
                .any(|b| matches!(b, clawctx_protocol::ContentBlock::Thinking(_)));
            return Err(SummarizeError::Failed(if has_thinking {
                "the model returned only reasoning and no summary text".into()
            } else {
                "the model returned an empty summary".into()
            }));
        }
        let input_tokens = match usage.input + usage.cache_read + usage.cache_write {
            0 => estimated_input,
            n => n,
        };
        let output_tokens = clawctx_tokens::text_tokens(&text);
        Ok(Summary {
            text,
            input_tokens,
            output_tokens,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(kind: SummaryKind, prev: Option<&str>, focus: Option<&str>) -> SummaryRequest {
        SummaryRequest {
            kind,
            conversation: "[User]: fix src/lib.rs".into(),
            previous_summary: prev.map(str::to_owned),
            custom_instructions: focus.map(str::to_owned),
            max_tokens: 500,
        }
    }

    #[test]
    fn history_prompt_has_the_required_structure() {
        let p = summary_prompt(&req(SummaryKind::History, None, None));
        for heading in [
            "## Goal",
            "## Constraints & Preferences",
            "## Progress",
            "### Done",
            "### In Progress",
            "### Blocked",
            "## Key Decisions",
            "## Next Steps",
            "## Critical Context",
        ] {
            assert!(p.user.contains(heading), "missing {heading}");
        }
        assert!(p
            .user
            .starts_with("<conversation>\n[User]: fix src/lib.rs\n</conversation>"));
        assert!(!p.user.contains("<previous-summary>"));
        assert!(!p.user.contains("Additional focus"));
    }

    #[test]
    fn update_mode_and_focus() {
        let p = summary_prompt(&req(
            SummaryKind::History,
            Some("## Goal\nold"),
            Some("keep the SQL"),
        ));
        assert!(p
            .user
            .contains("<previous-summary>\n## Goal\nold\n</previous-summary>"));
        assert!(p.user.contains(UPDATE_PROMPT.trim()));
        assert!(p
            .user
            .trim_end()
            .ends_with("Additional focus: keep the SQL"));
    }

    /// A span with a person's name, a number and a date, as a LoCoMo-style chat carries them.
    const FACT_SPAN: &str = "[User]: Caroline: I adopted Pixel, a 3-year-old tabby, on 7 May 2023.\n\n[Assistant]: Melanie: So you decided on the shelter in Tacoma after all!";

    /// What a summary of any kind must be told to keep (issue #30 item 2): the names, numbers,
    /// dates and decisions of the span. Checked on the instructions only (the text after the
    /// conversation), so a word of the span cannot satisfy it.
    #[test]
    fn every_prompt_tells_the_model_to_keep_names_numbers_dates_and_decisions() {
        let kinds = [
            (SummaryKind::History, None),
            (SummaryKind::History, Some("## Goal\nAdopt a cat.")),
            (SummaryKind::TurnPrefix, None),
            (SummaryKind::Leaf, None),
            (SummaryKind::Condensed { depth: 1 }, None),
        ];
        for (kind, prev) in kinds {
            let p = summary_prompt(&SummaryRequest {
                kind: kind.clone(),
                conversation: FACT_SPAN.into(),
                previous_summary: prev.map(str::to_owned),
                custom_instructions: None,
                max_tokens: 300,
            });
            let span = format!("<conversation>\n{FACT_SPAN}\n</conversation>");
            assert!(
                p.user.contains(&span),
                "{kind:?}: the span's text: {}",
                p.user
            );
            let instructions = p
                .user
                .rsplit("</conversation>")
                .next()
                .unwrap_or_default()
                .to_lowercase();
            for word in ["names", "numbers", "dates", "decision"] {
                assert!(
                    instructions.contains(word),
                    "{kind:?} (previous summary: {prev:?}): the instructions must ask to keep {word}:\n{instructions}"
                );
            }
        }
        // The leaf prompt (the lossless engine's summaries) spells the facts out and asks for
        // them as written, with relative dates anchored.
        let leaf = LEAF_PROMPT.to_lowercase();
        for phrase in [
            "names of people",
            "numbers",
            "dates",
            "exactly as written",
            "yesterday",
        ] {
            assert!(leaf.contains(phrase), "leaf prompt lacks `{phrase}`");
        }
    }

    #[test]
    fn kinds_pick_their_prompts() {
        assert!(summary_prompt(&req(SummaryKind::TurnPrefix, None, None))
            .user
            .contains("## Original Request"));
        assert!(summary_prompt(&req(SummaryKind::TurnPrefix, None, None))
            .user
            .contains("## Context for Suffix"));
        assert!(summary_prompt(&req(SummaryKind::Leaf, None, None))
            .user
            .contains(LEAF_PROMPT.trim()));
        let c = summary_prompt(&req(SummaryKind::Condensed { depth: 3 }, None, None)).user;
        assert!(c.contains("depth 3") && !c.contains("{depth}"));
    }
}
