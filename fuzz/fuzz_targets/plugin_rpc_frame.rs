//! One line of a plugin's stdout as the host's reader thread splits it (`clawctx-plugin`):
//! never a panic; when the positional fast path takes a line that is valid JSON, the envelope
//! parser reads the same id and the same result bytes from it; results decode into the
//! lifecycle types or fail with an error.
#![no_main]

use clawctx_plugin::fuzzing::{envelope, read_line, Frame};
use clawctx_protocol::{AssembleResult, CompactResult, IngestBatchResult, IngestResult};
use libfuzzer_sys::fuzz_target;

fn decode_all(result: &str) {
    let _ = serde_json::from_str::<AssembleResult>(result);
    let _ = serde_json::from_str::<IngestResult>(result);
    let _ = serde_json::from_str::<IngestBatchResult>(result);
    let _ = serde_json::from_str::<CompactResult>(result);
    let _ = serde_json::from_str::<clawctx_plugin::InitializeResult>(result);
}

fuzz_target!(|data: &[u8]| {
    match read_line(data) {
        Frame::PlainResult { id, result } => {
            if let Some(r) = &result {
                decode_all(r);
            }
            if serde_json::from_slice::<serde_json::Value>(data).is_ok() {
                match envelope(data) {
                    Frame::Message {
                        id: Some(env_id),
                        result: env_result,
                        ..
                    } => {
                        assert_eq!(
                            env_id.as_u64(),
                            Some(id),
                            "the two readers disagree on the id"
                        );
                        let env_result = env_result.filter(|r| r.trim() != "null");
                        assert_eq!(
                            result.as_deref().map(str::trim),
                            env_result.as_deref().map(str::trim),
                            "the two readers disagree on the result"
                        );
                    }
                    other => panic!("the fast path took a line the envelope reads as {other:?}"),
                }
            }
        }
        Frame::Message {
            result: Some(r),
            params,
            ..
        } => {
            decode_all(&r);
            if let Some(p) = params {
                let _ = serde_json::from_str::<serde_json::Value>(&p);
            }
        }
        Frame::Message { .. } | Frame::Blank | Frame::Violation => {}
    }
});
