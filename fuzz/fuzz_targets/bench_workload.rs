//! The workload reader (`clawctx-bench`, `workload.rs`): a session file read back as turns.
//! Any bytes give turns or an error naming the file and line, never a panic; every turn is
//! non-empty and starts with the user message that opened it (except the first).
#![no_main]

use std::io::Write;

use clawctx_bench::workload::JsonlTurns;
use clawctx_protocol::AgentMessage;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // The reader takes a path: one temporary file per input (in memory where the OS has it).
    let dir = if std::path::Path::new("/dev/shm").is_dir() {
        "/dev/shm"
    } else {
        "."
    };
    let Ok(mut f) = tempfile::NamedTempFile::new_in(dir) else {
        return;
    };
    if f.write_all(data).is_err() {
        return;
    }
    let Ok(turns) = JsonlTurns::open(f.path()) else {
        return;
    };
    for (i, turn) in turns.enumerate() {
        match turn {
            Ok(t) => {
                assert!(!t.messages.is_empty(), "turn {i} is empty");
                assert_eq!(t.index, i as u64, "turns are numbered in order");
                if i > 0 {
                    assert!(
                        matches!(t.messages[0], AgentMessage::User(_)),
                        "turn {i} does not start with a user message"
                    );
                }
            }
            Err(e) => {
                let shown = e.to_string();
                assert!(!shown.is_empty());
                break;
            }
        }
    }
});
