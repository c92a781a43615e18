//! What the embedder and the vector searches exchange with a store (both backends' queries
//! return these).

pub use super::cache::{ItemKind, VectorRow};

/// An embedding model's row in the store, with how far it got (see the stores' schema:
/// SQLite v11, PostgreSQL v4).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EmbedModel {
    /// `embed_models.id`.
    pub id: i64,
    /// The model's identity ([`clawctx_embed::Embedder::model_id`]).
    pub name: String,
    /// Its vectors' length.
    pub dim: usize,
    /// Every message with an id up to this has its vector (or has no text).
    pub msg_done: i64,
    /// Every summary with an id up to this has its vector.
    pub sum_done: i64,
}

/// A message or summary still to embed.
#[derive(Clone, Debug)]
pub struct EmbedItem {
    /// Message or summary.
    pub kind: ItemKind,
    /// Its id.
    pub item_id: i64,
    /// Its conversation.
    pub conv_id: i64,
    /// Its tokens.
    pub tokens: u64,
    /// Its text.
    pub text: String,
}

/// A vector to store.
#[derive(Clone, Debug)]
pub struct NewVector {
    /// Message or summary.
    pub kind: ItemKind,
    /// Its id.
    pub item_id: i64,
    /// Its conversation.
    pub conv_id: i64,
    /// Its tokens.
    pub tokens: u64,
    /// The quantization scale.
    pub scale: f32,
    /// The quantized vector.
    pub vec: Vec<i8>,
}

/// How far an embedder got in one pass: every message up to `msg_done` and every summary up
/// to `sum_done` is embedded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Done {
    /// Messages embedded up to this id.
    pub msg_done: i64,
    /// Summaries embedded up to this id.
    pub sum_done: i64,
}

impl Done {
    /// Whether `kind`'s item `item_id` is at or below this progress (embedded already).
    pub fn covers(&self, kind: ItemKind, item_id: i64) -> bool {
        item_id
            <= match kind {
                ItemKind::Message => self.msg_done,
                ItemKind::Summary => self.sum_done,
            }
    }
}

/// The roles whose messages are embedded: the user's and the assistant's (`codec::role` 0 and
/// 1, as the stores' `embed_todo` queries select them), and every summary. Tool results stay
/// searchable by their words only: on a 2-core machine a 256-word-piece tool output costs the
/// model about as much as eight chat messages, and what a tool printed is found by its words
/// (names, paths, errors) better than by its meaning.
pub const EMBEDDED_ROLES: [i64; 2] = [
    crate::core::codec::role::USER,
    crate::core::codec::role::ASSISTANT,
];

/// The most of a text that is embedded (bytes): about the first 120-150 word pieces of English.
/// The model's cost grows with the length it reads (all-MiniLM-L6-v2 reads up to 256 word
/// pieces): on this 2-core machine a long assistant reply cut at 2,000 bytes embedded at about
/// 9 messages a second (BENCHMARKS.md §17); what a message is about is mostly in its opening.
pub const MAX_EMBED_CHARS: usize = 600;

/// `text` cut to at most [`MAX_EMBED_CHARS`] bytes at a character boundary.
pub fn embed_text(text: &str) -> &str {
    if text.len() <= MAX_EMBED_CHARS {
        return text;
    }
    let mut end = MAX_EMBED_CHARS;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stores_queries_name_the_embedded_roles_by_number() {
        // `store/vectors.rs` and `pg/vectors.rs` select `role IN (0, 1)`.
        assert_eq!(EMBEDDED_ROLES, [0, 1]);
        assert_eq!(embed_text(&"é".repeat(1_500)).len(), MAX_EMBED_CHARS);
        assert!(embed_text(&"é".repeat(1_500)).chars().all(|c| c == 'é'));
        assert_eq!(embed_text("short"), "short");
    }
}
