//! The `ModelProvider` trait: the one way the rest of clawctx calls a model.
//!
//! The runtime's agent loop, the LLM summarizer and `replay` all talk to this trait, so the
//! HTTP providers and the scripted one are interchangeable.

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

use crate::{Completion, CompletionRequest, EventSender, ModelError};

/// A model behind some API. `Debug` is required so hosts can log which provider they hold;
/// implementations must redact credentials in it.
#[async_trait]
pub trait ModelProvider: Send + Sync + std::fmt::Debug {
    /// The provider id from config (`models.providers.<id>`).
    fn id(&self) -> &str;

    /// The API family, written into `AssistantMessage.api` (`openai-completions`,
    /// `anthropic-messages`, `scripted`).
    fn api(&self) -> &str;

    /// Runs one completion.
    ///
    /// When `events` is given the provider streams and reports text and tool-call fragments as
    /// they arrive; without it the provider may use its non-streaming endpoint. Either way the
    /// result is the complete assistant message. Cancelling `cancel` ends the call promptly
    /// with [`ModelError::Aborted`].
    async fn complete(
        &self,
        request: CompletionRequest,
        events: Option<&EventSender>,
        cancel: &CancellationToken,
    ) -> Result<Completion, ModelError>;
}
