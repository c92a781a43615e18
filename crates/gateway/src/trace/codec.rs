//! A turn's parts in a compact binary form.
//!
//! Why not JSON: a 16k-token context holds some hundred raw messages, and as JSON objects
//! (kind, role, tokens, digest, id) they alone take 4-6 KB a turn; the target is 2 KB
//! for the whole trace. Here a raw message is 7 to 10 bytes: a tag byte (kind, role, which
//! optional fields follow), its tokens and index as varints, its 32-bit digest, and its
//! `msg_<n>` number when the frontier told it. Version byte first, so a later form can be told.
//!
//! Layout: `1` (version), varint part count, then per part: tag (bits 0-1 kind: 0 addition,
//! 1 summary, 2 recalled, 3 raw; bit 2 id; bit 3 span; bit 4 index; bits 5-7 role), varint
//! tokens, u32 LE digest, [varint index], [varint id number], summary: varint depth + 1 (0: no
//! depth), [span: varint first seq + 1, varint length], recalled: varint quote count and the
//! quoted message numbers as ascending deltas.

use super::TracePart;

const VERSION: u8 = 1;
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

/// Encodes `parts`. An id, role or quote the form cannot hold (not `sum_<n>`/`msg_<n>`, an
/// unusual role) is kept as what it can hold: no id, role `other`, the quote dropped.
pub(crate) fn encode(parts: &[TracePart]) -> Vec<u8> {
    let mut out = Vec::with_capacity(2 + parts.len() * 10);
    out.push(VERSION);
    put(&mut out, parts.len() as u64);
    for p in parts {
        let kind = KINDS.iter().position(|k| *k == p.kind).unwrap_or(3) as u8;
        let prefix = if kind == 1 { "sum_" } else { "msg_" };
        let id = p.id.as_deref().and_then(|i| number(i, prefix));
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
        let digest = u32::from_str_radix(&p.digest, 16).unwrap_or(0);
        out.extend_from_slice(&digest.to_le_bytes());
        if let Some(i) = p.index {
            put(&mut out, u64::from(i));
        }
        if let Some(n) = id {
            put(&mut out, n);
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
        }
    }
    out
}

/// Decodes what [`encode`] wrote.
pub(crate) fn decode(b: &[u8]) -> Result<Vec<TracePart>, String> {
    let mut r = Reader { b, at: 0 };
    let version = r.byte()?;
    if version != VERSION {
        return Err(format!(
            "parts version {version} (this build reads {VERSION})"
        ));
    }
    let n = r.var()?;
    let mut parts = Vec::with_capacity(n.min(100_000) as usize);
    for _ in 0..n {
        let tag = r.byte()?;
        let kind = (tag & 3) as usize;
        let role = (tag >> 5) as usize;
        let tokens = r.var()?;
        let digest = format!("{:08x}", r.u32()?);
        let index = if tag & (1 << 4) != 0 {
            Some(u32::try_from(r.var()?).map_err(|_| "an index past u32".to_owned())?)
        } else {
            None
        };
        let id = if tag & (1 << 2) != 0 {
            let n = r.var()?;
            Some(if kind == 1 {
                format!("sum_{n}")
            } else {
                format!("msg_{n}")
            })
        } else {
            None
        };
        let (mut depth, mut span, mut quotes) = (None, None, Vec::new());
        if kind == 1 {
            let d = r.var()?;
            depth = (d > 0).then(|| d as i64 - 1);
            if tag & (1 << 3) != 0 {
                let a = r.var()? as i64 - 1;
                let len = r.var()? as i64;
                span = Some([a, a + len]);
            }
        }
        if kind == 2 {
            let count = r.var()?;
            let mut last = 0u64;
            for _ in 0..count {
                last += r.var()?;
                quotes.push(format!("msg_{last}"));
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
        }
    }

    #[test]
    fn every_field_survives_a_round_trip_and_raw_messages_take_about_ten_bytes() {
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
                ..part("recalled")
            },
            TracePart {
                index: Some(3),
                id: Some("msg_401".into()),
                role: Some("toolResult".into()),
                tokens: 1234,
                digest: "ffffffff".into(),
                ..part("raw")
            },
            TracePart {
                index: Some(4),
                role: Some("assistant".into()),
                tokens: 5,
                digest: "0000abcd".into(),
                ..part("raw")
            },
        ];
        let bytes = encode(&parts);
        let mut back = decode(&bytes).unwrap();
        // Quotes come back in ascending order.
        let mut expected = parts.clone();
        expected[3].quotes = vec!["msg_7".into(), "msg_40".into(), "msg_41".into()];
        assert_eq!(back, expected);
        // A raw message with an id: tag + 2 tokens + 4 digest + index + 2 id = 10 bytes.
        let one = encode(&parts[4..5]);
        assert_eq!(one.len() - 2, 10);
        // Damage is an error, not a panic.
        back.clear();
        assert!(decode(&bytes[..bytes.len() - 1]).is_err());
        assert!(decode(&[9]).is_err());
        let mut extra = bytes.clone();
        extra.push(0);
        assert!(decode(&extra).is_err());
    }
}
