//! Transcript JSONL (`clawctx-transcript`, the protocol's entry shapes): any bytes index as a
//! session or give a `path:line` error, never a panic; the active branch and the
//! compaction-aware context are computed for whatever was read; every entry written back as a
//! line reads back as the same entry.
#![no_main]

use clawctx_protocol::transcript::{context_messages, to_model_message, TranscriptEntry};
use clawctx_transcript::SessionFile;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let file = match SessionFile::from_bytes("session.jsonl", data) {
        Ok(f) => f,
        Err(e) => {
            let shown = e.to_string();
            assert!(
                shown.contains("session.jsonl"),
                "the error does not name the file: {shown}"
            );
            return;
        }
    };
    let path: Vec<TranscriptEntry> = file.active_path().into_iter().cloned().collect();
    assert!(path.len() <= file.entries().len());
    for m in context_messages(&path) {
        let _ = to_model_message(&m);
    }
    let _ = file.build_context();
    let _ = file.visible_messages_after(None);
    for entry in file.entries() {
        let map = entry.to_json().expect("an entry that was read serializes");
        let line = serde_json::to_string(&map).expect("a map serializes");
        let back: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(&line).expect("a serialized entry is JSON");
        let again = TranscriptEntry::from_json(back)
            .unwrap_or_else(|e| panic!("an entry as written does not read back: {e}\n{line}"));
        assert_eq!(
            &again, entry,
            "an entry changed through a write and a read: {line}"
        );
    }
});
