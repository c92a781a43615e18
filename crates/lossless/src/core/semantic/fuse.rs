//! Reciprocal rank fusion: one ranking from the lexical and the vector rankings.
//!
//! Why RRF: BM25 scores and cosines are on scales that cannot be added, and a fusion that
//! only reads ranks needs no calibration per model or corpus. An item's fused score is the sum
//! over the lists it appears in of `1 / (K + rank)` (rank from 1); `K = 60` is the constant of
//! the method's paper, which keeps one list's top item from outweighing agreement between both.

use std::collections::HashMap;
use std::hash::Hash;

/// The fusion constant.
pub const K: f64 = 60.0;

/// The items of `lists` (each best first) by fused score, best first; ties keep the order of
/// first appearance (the first list's order first). Each item comes back with its score.
pub fn rrf<T: Clone + Eq + Hash>(lists: &[&[T]]) -> Vec<(T, f64)> {
    let mut score: HashMap<T, (f64, usize)> = HashMap::new();
    let mut order = 0usize;
    for list in lists {
        for (rank, item) in list.iter().enumerate() {
            let e = score.entry(item.clone()).or_insert_with(|| {
                order += 1;
                (0.0, order)
            });
            e.0 += 1.0 / (K + rank as f64 + 1.0);
        }
    }
    let mut out: Vec<(T, f64, usize)> = score.into_iter().map(|(t, (s, o))| (t, s, o)).collect();
    out.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.2.cmp(&b.2)));
    out.into_iter().map(|(t, s, _)| (t, s)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agreement_beats_one_lists_top_item() {
        let lexical = [1, 2, 3];
        let vector = [9, 3, 1];
        let fused: Vec<i32> = rrf(&[&lexical, &vector])
            .into_iter()
            .map(|(t, _)| t)
            .collect();
        // 1: 1/61 + 1/63; 3: 1/63 + 1/62; 9: 1/61; 2: 1/62.
        assert_eq!(fused, vec![1, 3, 9, 2]);
        assert!(rrf::<i32>(&[&[], &[]]).is_empty());
        let one: Vec<i32> = rrf(&[&[5, 4]]).into_iter().map(|(t, _)| t).collect();
        assert_eq!(one, vec![5, 4]);
    }
}
