//! The vectors of the conversations being searched, in memory, caught up with the store before
//! each search.
//!
//! Why in memory: recall is per conversation and a query is compared with every vector of the
//! conversation (exact search, no index to build or go stale). Reading 100,000 vectors from the
//! store per question would cost more than the comparison; held here, each search first reads
//! only the rows stored since the last one (`vid` grows with every insert, on both backends),
//! so vectors written by this process's embedder, another process's or a backfill are all seen.
//!
//! The cache holds one embedding model's vectors (the engine's). It keeps at most
//! [`MAX_VECTORS`] vectors, dropping the conversations searched longest ago when over.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use super::quant;

/// Vectors held at most (about 400 bytes each with all-MiniLM-L6-v2's 384 dimensions).
pub const MAX_VECTORS: usize = 2_000_000;

/// What a stored item is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ItemKind {
    /// A message (`msg_<n>`).
    Message,
    /// A summary (`sum_<n>`).
    Summary,
}

impl ItemKind {
    /// The number stored in `vectors.kind`.
    pub fn code(self) -> i64 {
        match self {
            ItemKind::Message => 0,
            ItemKind::Summary => 1,
        }
    }

    /// The kind stored as `code`.
    pub fn from_code(code: i64) -> Option<Self> {
        match code {
            0 => Some(ItemKind::Message),
            1 => Some(ItemKind::Summary),
            _ => None,
        }
    }
}

/// One stored vector as read from the store.
#[derive(Clone, Debug)]
pub struct VectorRow {
    /// Its row (grows with every insert).
    pub vid: i64,
    /// Message or summary.
    pub kind: ItemKind,
    /// `messages.id` or `summaries.id`.
    pub item_id: i64,
    /// Its conversation.
    pub conv_id: i64,
    /// The item's tokens.
    pub tokens: u64,
    /// The quantization scale.
    pub scale: f32,
    /// The quantized vector.
    pub vec: Vec<i8>,
}

impl VectorRow {
    /// A row as the stores read it (`kind`: `vectors.kind`, `bytes`: `vectors.vec`); `None`
    /// for a kind this build does not know or a vector not of `dim` bytes (skipped).
    #[allow(clippy::too_many_arguments)]
    pub fn read(
        vid: i64,
        kind: i64,
        item_id: i64,
        conv_id: i64,
        tokens: i64,
        scale: f32,
        bytes: &[u8],
        dim: usize,
    ) -> Option<Self> {
        Some(VectorRow {
            vid,
            kind: ItemKind::from_code(kind)?,
            item_id,
            conv_id,
            tokens: tokens.max(0) as u64,
            scale,
            vec: quant::from_bytes(bytes, dim)?,
        })
    }
}

/// One search hit.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct VectorHit {
    /// Message or summary.
    pub kind: ItemKind,
    /// Its id.
    pub item_id: i64,
    /// Its conversation.
    pub conv_id: i64,
    /// Its tokens.
    pub tokens: u64,
    /// Cosine with the query (about: both sides quantized).
    pub score: f32,
}

#[derive(Default)]
struct ConvVectors {
    /// The newest `vid` read.
    upto: i64,
    items: Vec<(ItemKind, i64, u64, f32)>,
    /// `items.len() * dim` bytes, item after item.
    data: Vec<i8>,
    /// When it was last searched (a counter).
    used: u64,
}

/// See the module header.
pub struct VectorCache {
    dim: usize,
    convs: Mutex<HashMap<i64, Arc<RwLock<ConvVectors>>>>,
    clock: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for VectorCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VectorCache")
            .field("dim", &self.dim)
            .finish()
    }
}

impl VectorCache {
    /// An empty cache of vectors of `dim` dimensions.
    pub fn new(dim: usize) -> Self {
        Self {
            dim,
            convs: Mutex::default(),
            clock: Default::default(),
        }
    }

    fn conv(&self, conv_id: i64) -> Arc<RwLock<ConvVectors>> {
        let mut convs = self.convs.lock().unwrap_or_else(PoisonError::into_inner);
        convs.entry(conv_id).or_default().clone()
    }

    /// The newest row read of each of `convs` (0: none yet): what to read from the store.
    pub fn stale(&self, convs: &[i64]) -> Vec<(i64, i64)> {
        convs
            .iter()
            .map(|&c| {
                let v = self.conv(c);
                let upto = v.read().unwrap_or_else(PoisonError::into_inner).upto;
                (c, upto)
            })
            .collect()
    }

    /// Adds rows read from the store (those already held, or of another length, are skipped).
    pub fn extend(&self, rows: Vec<VectorRow>) {
        let mut by_conv: HashMap<i64, Vec<VectorRow>> = HashMap::new();
        for r in rows {
            by_conv.entry(r.conv_id).or_default().push(r);
        }
        for (conv, mut rows) in by_conv {
            rows.sort_by_key(|r| r.vid);
            let v = self.conv(conv);
            let mut v = v.write().unwrap_or_else(PoisonError::into_inner);
            for r in rows {
                if r.vid <= v.upto || r.vec.len() != self.dim {
                    continue;
                }
                v.upto = r.vid;
                v.items.push((r.kind, r.item_id, r.tokens, r.scale));
                v.data.extend_from_slice(&r.vec);
            }
        }
        self.evict();
    }

    /// Drops the conversations searched longest ago while more than [`MAX_VECTORS`] are held.
    fn evict(&self) {
        let mut convs = self.convs.lock().unwrap_or_else(PoisonError::into_inner);
        let mut sizes: Vec<(u64, i64, usize)> = convs
            .iter()
            .map(|(&c, v)| {
                let v = v.read().unwrap_or_else(PoisonError::into_inner);
                (v.used, c, v.items.len())
            })
            .collect();
        let mut total: usize = sizes.iter().map(|s| s.2).sum();
        if total <= MAX_VECTORS {
            return;
        }
        sizes.sort_unstable();
        for (_, c, n) in sizes {
            if total <= MAX_VECTORS {
                break;
            }
            convs.remove(&c);
            total -= n;
        }
    }

    /// The `k` items of `convs` (of the kinds `kinds` allows) most like `query` (unit length),
    /// best first, at least `min_score` alike.
    pub fn search(
        &self,
        convs: &[i64],
        query: &[f32],
        k: usize,
        min_score: f32,
        kinds: impl Fn(ItemKind) -> bool,
    ) -> Vec<VectorHit> {
        if query.len() != self.dim || k == 0 {
            return Vec::new();
        }
        let (qscale, q) = quant::quantize(query);
        let now = self
            .clock
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut hits: Vec<VectorHit> = Vec::new();
        for &c in convs {
            let v = self.conv(c);
            let mut v = v.write().unwrap_or_else(PoisonError::into_inner);
            v.used = now;
            for (i, &(kind, item_id, tokens, scale)) in v.items.iter().enumerate() {
                if !kinds(kind) {
                    continue;
                }
                let row = &v.data[i * self.dim..(i + 1) * self.dim];
                let score = quant::dot(&q, row) as f32 * qscale * scale;
                if score >= min_score {
                    hits.push(VectorHit {
                        kind,
                        item_id,
                        conv_id: c,
                        tokens,
                        score,
                    });
                }
            }
        }
        let by_score = |a: &VectorHit, b: &VectorHit| {
            b.score.total_cmp(&a.score).then(b.item_id.cmp(&a.item_id))
        };
        if hits.len() > k {
            hits.select_nth_unstable_by(k - 1, by_score);
            hits.truncate(k);
        }
        hits.sort_by(by_score);
        hits
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(vid: i64, conv: i64, item: i64, v: &[f32]) -> VectorRow {
        let (scale, vec) = quant::quantize(v);
        VectorRow {
            vid,
            kind: ItemKind::Message,
            item_id: item,
            conv_id: conv,
            tokens: 5,
            scale,
            vec,
        }
    }

    #[test]
    fn search_ranks_by_cosine_within_the_conversations_asked() {
        let c = VectorCache::new(2);
        assert_eq!(c.stale(&[1, 2]), vec![(1, 0), (2, 0)]);
        c.extend(vec![
            row(1, 1, 10, &[1.0, 0.0]),
            row(2, 1, 11, &[0.6, 0.8]),
            row(3, 2, 20, &[1.0, 0.0]),
            row(4, 1, 12, &[0.0, 1.0]),
        ]);
        assert_eq!(c.stale(&[1, 2]), vec![(1, 4), (2, 3)]);
        // A row read twice is held once.
        c.extend(vec![row(2, 1, 11, &[0.6, 0.8])]);
        let hits = c.search(&[1], &[1.0, 0.0], 5, 0.1, |_| true);
        let ids: Vec<i64> = hits.iter().map(|h| h.item_id).collect();
        assert_eq!(
            ids,
            vec![10, 11],
            "conversation 2's vector and the orthogonal one are out"
        );
        assert!((hits[1].score - 0.6).abs() < 0.01, "{hits:?}");
        let top1 = c.search(&[1, 2], &[1.0, 0.0], 1, 0.0, |_| true);
        assert_eq!(top1.len(), 1);
        assert!(c
            .search(&[1], &[1.0, 0.0], 5, 0.0, |k| k == ItemKind::Summary)
            .is_empty());
    }
}
