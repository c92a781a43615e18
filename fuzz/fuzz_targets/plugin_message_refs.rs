//! An `assemble` reply with message references, decoded by the host's adapter
//! (`clawctx-plugin`). The input is `<flags><messages sent, a JSON array>\n<the reply>`; in the
//! reply, `@SENT@` stands for the `messages` array exactly as the request carried it (messages
//! or their ids), so the pass-through path is reachable. Never a panic; a reply that is the
//! sent array handed back gives the sent messages; every message of an accepted result is one
//! that was sent or one the reply spelled out.
#![no_main]

use clawctx_plugin::fuzzing::{assemble_reply, sent_messages_array};
use clawctx_protocol::AgentMessage;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    let (sent, reply) = text.split_once('\n').unwrap_or((text, "@SENT@"));
    let Ok(messages) = serde_json::from_str::<Vec<AgentMessage>>(sent) else {
        return;
    };
    let refs = flags & 1 == 1;
    let Ok(array) = sent_messages_array(messages.clone(), refs) else {
        return;
    };
    let reply = reply.replace("@SENT@", &array);
    if let Ok(result) = assemble_reply(messages.clone(), refs, &reply) {
        if reply == format!(r#"{{"messages":{array}}}"#) {
            assert_eq!(
                result.messages, messages,
                "the sent messages handed back are not the sent ones"
            );
        }
    }
    // The pass-through shape, always: must give back exactly what was sent.
    let echo = format!(r#"{{"messages":{array},"estimatedTokens":1}}"#);
    match assemble_reply(messages.clone(), refs, &echo) {
        Ok(result) => assert_eq!(
            result.messages, messages,
            "pass-through changed the messages"
        ),
        Err(e) => panic!("the sent messages handed back were refused: {e}"),
    }
});
