//! The engine API's request bodies (`clawctx-gateway`, `POST /v1/engine/<method>`): the first
//! byte picks the route, the rest is the body. Any body is accepted or refused with a 4xx error,
//! never a panic or a 5xx; an accepted protocol params object serializes and reads back equal.
#![no_main]

use clawctx_gateway::fuzzing::engine_body;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&route, body)) = data.split_first() else {
        return;
    };
    match engine_body(usize::from(route), body) {
        Ok(accepted) => assert!(
            accepted.round_trips != Some(false),
            "{} params changed through a write and a read: {}",
            accepted.route,
            String::from_utf8_lossy(&accepted.reserialized)
        ),
        Err(e) => assert!(
            e.status.is_client_error(),
            "refused with {}: {}",
            e.status,
            e.message
        ),
    }
});
