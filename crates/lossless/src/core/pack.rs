//! Message text compressed at rest.
//!
//! Text is most of a store's bytes, and conversation text (prose, code, logs, JSON) shrinks
//! about 2× under LZ4 and 3–4× under zstd. Texts from [`PACK_MIN_BYTES`] are stored as a
//! tagged LZ4 block in a BLOB, texts of [`ZSTD_MIN_BYTES`] or more (large tool outputs) as a
//! zstd frame, shorter ones as TEXT. LZ4 for everything chat- and tool-sized because ingest
//! pays for compression on every message: on the 2–6 KB tool outputs of the benchmark
//! workload zstd at its fastest level costs ~3× LZ4's time for 0.28 instead of 0.44 of the
//! raw bytes, and its frames cost a few microseconds of table setup to decompress, which
//! assembly does hundreds of times a turn. Above [`ZSTD_MIN_BYTES`] texts are rare and big,
//! and zstd's ratio is worth its time. The SQL function `unpack(x)` (registered on the
//! store's connection) turns either back into TEXT; the `message_rows` view applies it, so
//! readers never see the difference. Rows written before compression existed are TEXT and
//! read as they are. The full-text index is built from the original text, never from the
//! stored bytes.

/// Texts shorter than this are stored as they are (a frame's overhead would eat the gain).
pub const PACK_MIN_BYTES: usize = 256;
/// From this size texts get zstd; below it LZ4 (see the module header). The same size as the
/// store's default threshold for large payloads, which are stored once per content.
pub const ZSTD_MIN_BYTES: usize = 8 * 1024;
/// First byte of an LZ4 frame of ours (a zstd frame starts with its magic, `28 B5 2F FD`).
const LZ4_TAG: u8 = b'L';
const ZSTD_MAGIC: [u8; 4] = [0x28, 0xB5, 0x2F, 0xFD];
/// zstd level: the fastest; higher levels cost more time than they save bytes here.
const LEVEL: i32 = 1;
/// A stored frame never inflates to more than this (a corrupt or hostile frame is refused).
const MAX_UNPACKED_BYTES: usize = 512 << 20;
/// The most bytes of output one byte of an LZ4 block can stand for.
const LZ4_MAX_RATIO: usize = 255;

/// The bytes to store for `text`: a zstd frame (large texts) or a tagged LZ4 block (chat-sized
/// ones) when that is worth it, else `None` (store the text itself).
pub fn pack(text: &str) -> Option<Vec<u8>> {
    if text.len() < PACK_MIN_BYTES {
        return None;
    }
    let frame = if text.len() >= ZSTD_MIN_BYTES {
        // A compression context allocates its tables when created: one per thread, reused.
        thread_local! {
            static COMPRESSOR: std::cell::RefCell<Option<zstd::bulk::Compressor<'static>>> =
                std::cell::RefCell::new(zstd::bulk::Compressor::new(LEVEL).ok());
        }
        COMPRESSOR.with(|c| {
            c.borrow_mut()
                .as_mut()
                .and_then(|c| c.compress(text.as_bytes()).ok())
        })?
    } else {
        // The tag, the length (little-endian u32, the layout of `lz4_flex`'s
        // `compress_prepend_size`, which wrote these frames before), then the block,
        // compressed in place by liblz4 (`lzzzz`): it keeps one compression state per thread
        // and resets it in constant time, where `lz4_flex` zeroed an 8 KiB table for every
        // text (a third of the compression's instructions).
        let len = u32::try_from(text.len()).ok()?;
        let mut out = Vec::with_capacity(1 + 4 + lzzzz::lz4::max_compressed_size(text.len()));
        out.push(LZ4_TAG);
        out.extend_from_slice(&len.to_le_bytes());
        lzzzz::lz4::compress_to_vec(text.as_bytes(), &mut out, lzzzz::lz4::ACC_LEVEL_DEFAULT)
            .ok()?;
        out
    };
    (frame.len() + 16 < text.len()).then_some(frame)
}

/// The text a stored frame holds.
pub fn unpack(frame: &[u8]) -> Result<String, String> {
    let bytes = if frame.starts_with(&ZSTD_MAGIC) {
        let cap = zstd::zstd_safe::get_frame_content_size(frame)
            .ok()
            .flatten()
            .map(|n| n as usize)
            .unwrap_or(frame.len() * 8);
        if cap > MAX_UNPACKED_BYTES {
            return Err(format!("stored text frame claims {cap} bytes"));
        }
        thread_local! {
            static DECOMPRESSOR: std::cell::RefCell<Option<zstd::bulk::Decompressor<'static>>> =
                std::cell::RefCell::new(zstd::bulk::Decompressor::new().ok());
        }
        DECOMPRESSOR
            .with(|d| match d.borrow_mut().as_mut() {
                Some(d) => d.decompress(frame, cap.max(1)),
                None => zstd::bulk::decompress(frame, cap.max(1)),
            })
            .map_err(|e| format!("stored text frame: {e}"))?
    } else if let Some((&LZ4_TAG, block)) = frame.split_first() {
        let mut out = Vec::new();
        lz4_into(block, &mut out)?;
        out
    } else {
        return Err("stored text frame of an unknown kind".into());
    };
    String::from_utf8(bytes).map_err(|e| format!("stored text is not UTF-8: {e}"))
}

/// The bytes of the text a stored frame holds, decompressed into `buf` (its old contents
/// replaced, its allocation reused): a scan over many rows decompresses every one, and a fresh
/// zeroed buffer a row cost more than the bytes it checks. Not checked for UTF-8 (the caller
/// matches bytes); [`unpack`] is the checked form.
pub fn unpack_into(frame: &[u8], buf: &mut Vec<u8>) -> Result<(), String> {
    match frame.split_first() {
        Some((&LZ4_TAG, block)) => lz4_into(block, buf),
        _ => {
            let text = unpack(frame)?;
            buf.clear();
            buf.extend_from_slice(text.as_bytes());
            Ok(())
        }
    }
}

/// Decompresses an LZ4 frame's body (length, then block) into `buf`, which ends up exactly
/// the text's length; only the bytes past its old length are zeroed first.
fn lz4_into(block: &[u8], buf: &mut Vec<u8>) -> Result<(), String> {
    let claimed = block
        .get(..4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
        .ok_or("stored text frame: truncated")?;
    if claimed > MAX_UNPACKED_BYTES {
        return Err(format!("stored text frame claims {claimed} bytes"));
    }
    let body = block.get(4..).unwrap_or_default();
    // An LZ4 block yields at most 255 bytes per byte of it (a run of match-length bytes of
    // 255), so a header claiming more is damaged: refused before zeroing what it claims (a
    // 24-byte frame claiming 300 MB took seconds and 300 MB of memory to refuse).
    if claimed > body.len().saturating_mul(LZ4_MAX_RATIO) + 64 {
        return Err(format!(
            "stored text frame claims {claimed} bytes from a {}-byte block",
            body.len()
        ));
    }
    buf.resize(claimed, 0);
    let n = lzzzz::lz4::decompress(body, buf).map_err(|e| format!("stored text frame: {e}"))?;
    if n != claimed {
        return Err(format!(
            "stored text frame holds {n} bytes where its header says {claimed}"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_leaves_short_text_alone() {
        assert_eq!(pack("short"), None);
        for n in [6, 60, 200] {
            let long = "the build failed because the config parser rejected the value; ".repeat(n);
            let frame = pack(&long).unwrap();
            assert!(frame.len() * 2 < long.len(), "{n}: {} bytes", frame.len());
            assert_eq!(frame.starts_with(&ZSTD_MAGIC), long.len() >= ZSTD_MIN_BYTES);
            assert_eq!(unpack(&frame).unwrap(), long);
        }
        assert!(unpack(b"not a frame").is_err());
        assert!(unpack(b"L").is_err());
        assert!(
            unpack(b"L\xff\xff\xff\x7fxx").is_err(),
            "a huge claimed size is refused"
        );
        // Non-ASCII survives.
        let uni = "Привет, café — 日本語 ".repeat(30);
        assert_eq!(unpack(&pack(&uni).unwrap()).unwrap(), uni);
    }

    #[test]
    fn a_frame_whose_block_is_shorter_than_its_header_says_is_refused() {
        let long = "the build failed because the config parser rejected the value; ".repeat(8);
        let mut frame = pack(&long).unwrap();
        let claimed = u32::try_from(long.len() + 10).unwrap();
        frame[1..5].copy_from_slice(&claimed.to_le_bytes());
        let err = unpack(&frame).unwrap_err();
        assert!(err.contains("header says"), "{err}");
    }

    /// Found by the `lossless_codec` fuzz target (a timeout): a 24-byte frame whose header
    /// claims 300 MB was zeroed out to that size before LZ4 refused it.
    #[test]
    fn a_frame_claiming_more_than_its_block_can_hold_is_refused_at_once() {
        let frame = b"L\0\0*\x13Ha\x88\xee\0\x05\0\0L\x05\0\0\0\0\0\0\0\0\0";
        let err = unpack(frame).unwrap_err();
        assert!(err.contains("from a 19-byte block"), "{err}");
        let mut buf = Vec::new();
        let err = unpack_into(frame, &mut buf).unwrap_err();
        assert!(err.contains("from a 19-byte block"), "{err}");
        assert!(
            buf.capacity() < 1 << 20,
            "{} bytes allocated",
            buf.capacity()
        );
        // The bound leaves room for the most compressible text there is.
        let zeros = "\0".repeat(ZSTD_MIN_BYTES - 1);
        assert_eq!(unpack(&pack(&zeros).unwrap()).unwrap(), zeros);
    }

    proptest::proptest! {
        /// Every text comes back from its frame, and frames written by the LZ4 library the
        /// store used before (`lz4_flex`, same block format) still read.
        #[test]
        fn every_text_round_trips_and_old_frames_read(
            words in proptest::collection::vec("[a-z]{1,8}|[0-9]{1,5}|[ .,;\n]|é|日本", 0..3000),
        ) {
            let text: String = words.concat();
            // `None`: the text is stored as it is (short, or it did not shrink).
            if let Some(frame) = pack(&text) {
                proptest::prop_assert_eq!(unpack(&frame).unwrap(), text.clone());
            }
            let mut old = vec![LZ4_TAG];
            old.extend(lz4_flex::block::compress_prepend_size(text.as_bytes()));
            if !text.is_empty() {
                proptest::prop_assert_eq!(unpack(&old).unwrap(), text);
            }
        }
    }
}
