//! `POST /v1/chat/completions` bodies (`clawctx-gateway`: the JSON extractor and
//! `chat_input`): any bytes are read into a turn or refused with a 4xx error naming the field,
//! never a panic or a 5xx.
#![no_main]

use clawctx_gateway::fuzzing::chat_completion;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let own = [
        "lcm_grep".to_owned(),
        "lcm_describe".to_owned(),
        "lcm_expand".to_owned(),
    ];
    match chat_completion(data, &own) {
        Ok(prompt) => assert!(
            // A continuation (tool results) has no prompt; a user turn has a non-blank one.
            prompt.is_empty() || !prompt.trim().is_empty(),
            "a blank prompt was accepted"
        ),
        Err(e) => assert!(
            e.status.is_client_error(),
            "refused with {}: {}",
            e.status,
            e.message
        ),
    }
});
