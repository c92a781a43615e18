//! The LoCoMo reader (`clawctx-bench`, `locomo.rs`): any text gives conversations or an error
//! naming the file, never a panic; the replay built from what was read has strictly
//! increasing timestamps.
#![no_main]

use std::path::Path;

use clawctx_bench::locomo::{normalize_evidence, parse, parse_session_date};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = parse_session_date(text);
    let _ = normalize_evidence(text);
    let Ok(conversations) = parse(Path::new("locomo.json"), text) else {
        return;
    };
    for c in &conversations {
        let replay = c.replay();
        let mut last = i64::MIN;
        for m in &replay {
            let ts = m
                .message
                .timestamp_ms()
                .expect("every replayed message has a timestamp");
            assert!(
                ts > last,
                "replay timestamps must increase: {ts} after {last}"
            );
            last = ts;
        }
        let _ = c.turn_texts();
    }
});
