//! A turn's parts in a compact binary form.
//!
//! Why not JSON: a 16k-token context holds some hundred raw messages, and as JSON objects
//! (kind, role, tokens, digest, id) they alone take 4-6 KB a turn; the target is 2 KB
//! for the whole trace. Here a raw message the store identified is 3 or 4 bytes: a tag byte
//! (kind, role, which optional fields follow), its tokens as a varint and its `msg_<n>` number
//! as the difference from the part before's (a tail of consecutive messages: 1 byte each).
//! Its position is implied when the parts are numbered in order (they are, but for the system
//! prompt addition), and its text's 32-bit digest is kept only when no id names it: a stored
//! message's text never changes, so its id is the reference and what the diff compares.
//! Version byte first, so a later form can be told; version 1 (every index and digest written,
//! ids whole) is still read.
//!
//! Layout (version 2): `2`, varint part count, a flags byte (bit 0: indexes in order, then a
//! varint first index follows), then per part: tag (bits 0-1 kind: 0 addition, 1 summary,
//! 2 recalled, 3 raw; bit 2 id; bit 3 span; bit 4 index; bits 5-7 role), varint tokens,
//! [u32 LE digest: no id], [varint index: not in order], [id: zigzag varint difference from
//! the last id of the same kind], summary: varint depth + 1 (0: no depth), [span: varint first
//! seq + 1, varint length], recalled: varint quote count and the quoted message numbers as
//! ascending deltas, then varint hit count and per hit (best first) the zigzag difference of
//! its message number from the hit before's, varint score × 100 + 1 (0: brought along, no
//! score) and varint terms matched.

use super::{RecallHitTrace, TracePart};

const VERSION: u8 = 2;
/// The first form: every index and digest written, ids whole.
const VERSION_1: u8 = 1;
/// Flags bit 0: the indexed parts are numbered in order from a first index.
const IN_ORDER: u8 = 1;
const KINDS: [&str; 4] = ["systemPromptAddition", "summary", "recalled", "raw"];
const ROLES: [&str; 7] = [
    "user",
    "assistant",
    "toolResult",
    "system",
    "compactionSummary",
    "branchSummary",
    "other",
];

fn put(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn byte(&mut self) -> Result<u8, String> {
        let v = *self
            .b
            .get(self.at)
            .ok_or_else(|| format!("parts end early at byte {}", self.at))?;
        self.at += 1;
        Ok(v)
    }

    fn var(&mut self) -> Result<u64, String> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(format!("a varint runs past 64 bits at byte {}", self.at))
    }

    fn u32(&mut self) -> Result<u32, String> {
        let mut a = [0u8; 4];
        for x in &mut a {
            *x = self.byte()?;
        }
        Ok(u32::from_le_bytes(a))
    }
}

/// The number in `prefix<n>`.
fn number(id: &str, prefix: &str) -> Option<u64> {
    id.strip_prefix(prefix)?.parse().ok()
}

/// Zigzag: small differences of either sign as small unsigned numbers.
fn zig(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzig(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

/// The first index when the indexed parts of `parts` are numbered in order from it.
fn in_order(parts: &[TracePart]) -> Option<u32> {
    let mut indexes = parts.iter().filter_map(|p| p.index);
    let first = indexes.next().unwrap_or(0);
    let mut want = first;
    for i in indexes {
        want = want.checked_add(1)?;
        if i != want {
            return None;
        }
    }
    Some(first)
}

/// Encodes `parts`. An id, role or quote the form cannot hold (not `sum_<n>`/`msg_<n>`, an
/// unusual role) is kept as what it can hold: no id, role `other`, the quote dropped.
pub(crate) fn encode(parts: &[TracePart]) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + parts.len() * 4);
    out.push(VERSION);
    put(&mut out, parts.len() as u64);
    let order = in_order(parts);
    match order {
        Some(first) => {
            out.push(IN_ORDER);
            put(&mut out, u64::from(first));
        }
        None => out.push(0),
    }
    // The last id of each kind (0 summary, 1 message), what the next is written against.
    let mut last = [0i64; 2];
    for p in parts {
        let kind = KINDS.iter().position(|k| *k == p.kind).unwrap_or(3) as u8;
        let prefix = if kind == 1 { "sum_" } else { "msg_" };
        let id =
            p.id.as_deref()
                .and_then(|i| number(i, prefix))
                .and_then(|n| i64::try_from(n).ok());
        let role = match p.role.as_deref() {
            None => 0u8,
            Some(r) => ROLES.iter().position(|x| *x == r).unwrap_or(6) as u8 + 1,
        };
        let mut tag = kind;
        if id.is_some() {
            tag |= 1 << 2;
        }
        if p.span.is_some() && kind == 1 {
            tag |= 1 << 3;
        }
        if p.index.is_some() {
            tag |= 1 << 4;
        }
        tag |= role << 5;
        out.push(tag);
        put(&mut out, p.tokens);
        if id.is_none() {
            let digest = u32::from_str_radix(&p.digest, 16).unwrap_or(0);
            out.extend_from_slice(&digest.to_le_bytes());
        }
        if let (Some(i), None) = (p.index, order) {
            put(&mut out, u64::from(i));
        }
        if let Some(n) = id {
            let slot = usize::from(kind != 1);
            put(&mut out, zig(n.wrapping_sub(last[slot])));
            last[slot] = n;
        }
        if kind == 1 {
            put(&mut out, p.depth.map_or(0, |d| d.max(0) as u64 + 1));
            if let Some([a, b]) = p.span {
                put(&mut out, (a.max(-1) + 1) as u64);
                put(&mut out, (b - a).max(0) as u64);
            }
        }
        if kind == 2 {
            let mut quoted: Vec<u64> = p.quotes.iter().filter_map(|q| number(q, "msg_")).collect();
            quoted.sort_unstable();
            put(&mut out, quoted.len() as u64);
            let mut last = 0;
            for q in quoted {
                put(&mut out, q - last);
                last = q;
            }
            let hits: Vec<(i64, &RecallHitTrace)> = p
                .hits
                .iter()
                .filter_map(|h| Some((i64::try_from(number(&h.id, "msg_")?).ok()?, h)))
                .collect();
            put(&mut out, hits.len() as u64);
            let mut last = 0i64;
            for (n, h) in hits {
                put(&mut out, zig(n.wrapping_sub(last)));
                last = n;
                let score = h
                    .score
                    .map_or(0, |s| (s.max(0.0) * 100.0).round().min(1e15) as u64 + 1);
                put(&mut out, score);
                put(&mut out, u64::from(h.matched));
            }
        }
    }
    out
}

/// Decodes what [`encode`] wrote (either version).
pub(crate) fn decode(b: &[u8]) -> Result<Vec<TracePart>, String> {
    let mut r = Reader { b, at: 0 };
    let version = r.byte()?;
    if version != VERSION && version != VERSION_1 {
        return Err(format!(
            "parts version {version} (this build reads {VERSION_1} and {VERSION})"
        ));
    }
    let v1 = version == VERSION_1;
    let n = r.var()?;
    // `Some(next index)` when the indexes are implied.
    let mut next_index = if v1 {
        None
    } else {
        let flags = r.byte()?;
        if flags & IN_ORDER != 0 {
            Some(r.var()?)
        } else {
            None
        }
    };
    let mut last = [0i64; 2];
    let mut parts = Vec::with_capacity(n.min(100_000) as usize);
    for _ in 0..n {
        let tag = r.byte()?;
        let kind = (tag & 3) as usize;
        let role = (tag >> 5) as usize;
        let has_id = tag & (1 << 2) != 0;
        let tokens = r.var()?;
        let digest = if v1 || !has_id {
            format!("{:08x}", r.u32()?)
        } else {
            String::new()
        };
        let index = if tag & (1 << 4) != 0 {
            let i = match next_index.as_mut() {
                Some(next) => {
                    let i = *next;
                    *next = i.saturating_add(1);
                    i
                }
                None => r.var()?,
            };
            Some(u32::try_from(i).map_err(|_| "an index past u32".to_owned())?)
        } else {
            None
        };
        let id = if has_id {
            let n = if v1 {
                r.var()?
            } else {
                let slot = usize::from(kind != 1);
                let n = last[slot].wrapping_add(unzig(r.var()?));
                last[slot] = n;
                u64::try_from(n).map_err(|_| format!("a negative id before byte {}", r.at))?
            };
            Some(if kind == 1 {
                format!("sum_{n}")
            } else {
                format!("msg_{n}")
            })
        } else {
            None
        };
        let (mut depth, mut span, mut quotes, mut hits) = (None, None, Vec::new(), Vec::new());
        if kind == 1 {
            let d = r.var()?;
            depth = (d > 0).then(|| (d as i64).saturating_sub(1));
            if tag & (1 << 3) != 0 {
                let a = (r.var()? as i64).saturating_sub(1);
                let len = r.var()? as i64;
                span = Some([a, a.saturating_add(len)]);
            }
        }
        if kind == 2 {
            let count = r.var()?;
            let mut last = 0u64;
            for _ in 0..count {
                last = last.saturating_add(r.var()?);
                quotes.push(format!("msg_{last}"));
            }
            if !v1 {
                let count = r.var()?;
                let mut last = 0i64;
                for _ in 0..count {
                    last = last.wrapping_add(unzig(r.var()?));
                    let score = r.var()?;
                    let matched = r.var()?;
                    hits.push(RecallHitTrace {
                        id: format!("msg_{last}"),
                        score: (score > 0).then(|| (score - 1) as f64 / 100.0),
                        matched: u32::try_from(matched).unwrap_or(u32::MAX),
                    });
                }
            }
        }
        parts.push(TracePart {
            kind: KINDS[kind].to_owned(),
            index,
            id,
            depth,
            role: match role {
                0 => None,
                r => Some(ROLES.get(r - 1).copied().unwrap_or("other").to_owned()),
            },
            tokens,
            digest,
            span,
            quotes,
            hits,
        });
    }
    if r.at != b.len() {
        return Err(format!("{} bytes after the last part", b.len() - r.at));
    }
    Ok(parts)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn part(kind: &str) -> TracePart {
        TracePart {
            kind: kind.into(),
            index: None,
            id: None,
            depth: None,
            role: None,
            tokens: 0,
            digest: "00000000".into(),
            span: None,
            quotes: Vec::new(),
            hits: Vec::new(),
        }
    }

    /// A tool result the store named (`msg_401`) at position 3, with its digest.
    fn stored_tool_result() -> TracePart {
        TracePart {
            index: Some(3),
            id: Some("msg_401".into()),
            role: Some("toolResult".into()),
            tokens: 1234,
            digest: "ffffffff".into(),
            ..part("raw")
        }
    }

    #[test]
    fn every_field_survives_a_round_trip_and_a_tail_of_stored_messages_takes_three_bytes_each() {
        let parts = vec![
            TracePart {
                tokens: 57,
                digest: "deadbeef".into(),
                ..part("systemPromptAddition")
            },
            TracePart {
                index: Some(0),
                id: Some("sum_12".into()),
                depth: Some(2),
                role: Some("user".into()),
                tokens: 800,
                digest: "0badf00d".into(),
                span: Some([0, 399]),
                ..part("summary")
            },
            TracePart {
                index: Some(1),
                role: Some("compactionSummary".into()),
                tokens: 300,
                digest: "00000001".into(),
                ..part("summary")
            },
            TracePart {
                index: Some(2),
                role: Some("user".into()),
                tokens: 90,
                digest: "12345678".into(),
                quotes: vec!["msg_40".into(), "msg_7".into(), "msg_41".into()],
                hits: vec![
                    RecallHitTrace {
                        id: "msg_40".into(),
                        score: Some(7.25),
                        matched: 2,
                    },
                    RecallHitTrace {
                        id: "msg_41".into(),
                        score: None,
                        matched: 0,
                    },
                    RecallHitTrace {
                        id: "msg_7".into(),
                        score: Some(3.5),
                        matched: 1,
                    },
                ],
                ..part("recalled")
            },
            stored_tool_result(),
            TracePart {
                index: Some(4),
                role: Some("assistant".into()),
                tokens: 5,
                digest: "0000abcd".into(),
                ..part("raw")
            },
        ];
        let bytes = encode(&parts);
        let back = decode(&bytes).unwrap();
        // Quotes come back in ascending order; a part with an id is referred to by it, its
        // digest not kept.
        let mut expected = parts.clone();
        expected[3].quotes = vec!["msg_7".into(), "msg_40".into(), "msg_41".into()];
        expected[1].digest = String::new();
        expected[4].digest = String::new();
        assert_eq!(back, expected);

        // Indexes out of order are written, and read back, one by one.
        let mut shuffled = parts.clone();
        shuffled[4].index = Some(9);
        let mut expected_shuffled = expected.clone();
        expected_shuffled[4].index = Some(9);
        assert_eq!(decode(&encode(&shuffled)).unwrap(), expected_shuffled);

        // A tail of consecutive stored messages of under 128 tokens: tag + tokens + id
        // difference = 3 bytes each; ids going back are differences of the other sign.
        let tail: Vec<TracePart> = [500u64, 501, 502, 503, 7, 504]
            .iter()
            .enumerate()
            .map(|(i, n)| TracePart {
                index: Some(i as u32 + 4),
                id: Some(format!("msg_{n}")),
                role: Some("assistant".into()),
                tokens: 90,
                ..part("raw")
            })
            .collect();
        let one = encode(&tail[..1]).len();
        let six = encode(&tail).len();
        // The five after the first: 3 bytes each but the jumps back and forth (2 bytes each).
        assert_eq!(six - one, 3 + 3 + 3 + 4 + 4);
        let mut tail_back = tail.clone();
        for p in &mut tail_back {
            p.digest = String::new();
        }
        assert_eq!(decode(&encode(&tail)).unwrap(), tail_back);

        // Damage is an error, not a panic.
        assert!(decode(&bytes[..bytes.len() - 1]).is_err());
        assert!(decode(&[9]).is_err());
        let mut extra = bytes.clone();
        extra.push(0);
        assert!(decode(&extra).is_err());
        for cut in 0..bytes.len() {
            let mut damaged = bytes.clone();
            damaged[cut] ^= 0xff;
            let _ = decode(&damaged);
        }
    }

    #[test]
    fn the_first_form_is_still_read() {
        // Version 1: one raw part, tag (raw | id | index | role toolResult), tokens 1234,
        // digest ffffffff, index 3, id 401, all written whole.
        let v1 = [
            1u8, 1, 119, 0xd2, 0x09, 0xff, 0xff, 0xff, 0xff, 3, 0x91, 0x03,
        ];
        let parts = decode(&v1).unwrap();
        assert_eq!(parts, vec![stored_tool_result()]);
    }
}
