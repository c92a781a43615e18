//! The lossless store's codec (`clawctx-lossless`, `core/codec.rs` and `core/pack.rs`): the
//! columns of a stored row (role, text, skeleton, timestamp) and a stored text frame, read
//! back. Rows come from the file, which another process or a bad disk may have damaged: any
//! columns decode to a message or a `Corrupt` error, any frame unpacks or fails, never a panic.
//! A message given as JSON is encoded and decoded again, with the canonical and the stored
//! skeleton, and comes back equal; its packed text unpacks to its text.
//!
//! Input: JSON of one message, or `<role byte><skeleton>\xff<text>` (the skeleton empty for
//! none); both readings are tried on every input.
#![no_main]

use clawctx_lossless::core::codec::{decode, encode};
use clawctx_lossless::core::pack::{unpack, unpack_into};
use clawctx_protocol::AgentMessage;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = unpack(data);
    let mut buf = Vec::new();
    let _ = unpack_into(data, &mut buf);

    if let Ok(m) = serde_json::from_slice::<AgentMessage>(data) {
        if let Ok(e) = encode(&m) {
            let back = decode(e.role, &e.text, e.skeleton.as_deref(), e.ts)
                .unwrap_or_else(|err| panic!("an encoded message does not decode: {err}"));
            assert_eq!(back, m, "a message changed through the codec");
            let stored = decode(e.role, &e.text, e.stored_skeleton.as_deref(), e.ts)
                .unwrap_or_else(|err| panic!("a stored skeleton does not decode: {err}"));
            assert_eq!(stored, m, "a message changed through the stored skeleton");
            if let Some(frame) = &e.packed {
                assert_eq!(
                    unpack(frame).as_deref(),
                    Ok(e.text.as_str()),
                    "packed text changed"
                );
            }
            // The same skeleton over a damaged text: an error or a message, never a panic.
            for cut in [0, e.text.len() / 2, e.text.len().saturating_sub(1)] {
                if let Some(t) = e.text.get(..cut) {
                    let _ = decode(e.role, t, e.stored_skeleton.as_deref(), e.ts);
                    let _ = decode(e.role, t, e.skeleton.as_deref(), e.ts);
                }
            }
        }
    }

    let Some((&role, rest)) = data.split_first() else {
        return;
    };
    let (skeleton, text) = match rest.iter().position(|&b| b == 0xff) {
        Some(i) => (&rest[..i], &rest[i + 1..]),
        None => (&rest[..0], rest),
    };
    let (Ok(skeleton), Ok(text)) = (std::str::from_utf8(skeleton), std::str::from_utf8(text))
    else {
        return;
    };
    let role = i64::from(role % 5) - 1;
    let skeleton = (!skeleton.is_empty()).then_some(skeleton);
    let _ = decode(role, text, skeleton, Some(1_700_000_000_000));
    let _ = decode(role, text, skeleton, None);
});
