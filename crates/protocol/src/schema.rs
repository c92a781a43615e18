//! JSON Schemas of the two tagged records whose serde impls are hand-written (feature
//! `schema`): [`AgentMessage`] (by `role`) and [`ContentBlock`] (by `type`).
//!
//! Every other wire type derives `schemars::JsonSchema` next to its serde derives, so its schema
//! follows its serde attributes; these two are composed from their variants' derived schemas
//! plus the tag, exactly as their `Serialize` writes them. An unknown role or block type is kept
//! verbatim on the wire, so the schema admits any object with the tag as well.

use std::borrow::Cow;

use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};

use crate::message::*;

fn tagged(tag_key: &str, tag: &str, body: Schema) -> Schema {
    json_schema!({
        "allOf": [
            body,
            {"type": "object", "properties": {tag_key: {"const": tag}}, "required": [tag_key]}
        ]
    })
}

impl JsonSchema for AgentMessage {
    fn schema_name() -> Cow<'static, str> {
        "AgentMessage".into()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        let summary = generator.subschema_for::<SummaryMessage>();
        json_schema!({
            "description": "One message of the conversation, discriminated by `role`; unknown roles are kept verbatim.",
            "anyOf": [
                tagged("role", "user", generator.subschema_for::<UserMessage>()),
                tagged("role", "assistant", generator.subschema_for::<AssistantMessage>()),
                tagged("role", "toolResult", generator.subschema_for::<ToolResultMessage>()),
                tagged("role", "bashExecution", generator.subschema_for::<BashExecutionMessage>()),
                tagged("role", "custom", generator.subschema_for::<CustomMessage>()),
                tagged("role", "branchSummary", summary.clone()),
                tagged("role", "compactionSummary", summary),
                {"type": "object", "properties": {"role": {"type": "string"}}, "required": ["role"],
                 "description": "Any other role, kept verbatim."}
            ]
        })
    }
}

impl JsonSchema for ContentBlock {
    fn schema_name() -> Cow<'static, str> {
        "ContentBlock".into()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "One content block, discriminated by `type`; unknown types are kept verbatim.",
            "anyOf": [
                tagged("type", "text", generator.subschema_for::<TextContent>()),
                tagged("type", "thinking", generator.subschema_for::<ThinkingContent>()),
                tagged("type", "image", generator.subschema_for::<ImageContent>()),
                tagged("type", "toolCall", generator.subschema_for::<ToolCall>()),
                {"type": "object", "properties": {"type": {"type": "string"}}, "required": ["type"],
                 "description": "Any other block, kept verbatim."}
            ]
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use crate::AssembleParams;

    #[test]
    fn lifecycle_params_reference_the_message_schema_with_camel_case_fields() {
        let schema = schemars::schema_for!(AssembleParams);
        let v = serde_json::to_value(&schema).unwrap();
        let props = v["properties"].as_object().unwrap();
        for k in ["sessionId", "sessionKey", "messages", "tokenBudget"] {
            assert!(
                props.contains_key(k),
                "AssembleParams schema lacks {k}: {v}"
            );
        }
        let defs = v["$defs"].as_object().unwrap();
        assert!(
            defs.contains_key("AgentMessage") && defs.contains_key("UserMessage"),
            "{v}"
        );
        let roles: Vec<String> = defs["AgentMessage"]["anyOf"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|s| {
                s["allOf"][1]["properties"]["role"]["const"]
                    .as_str()
                    .map(str::to_owned)
            })
            .collect();
        assert_eq!(
            roles,
            [
                "user",
                "assistant",
                "toolResult",
                "bashExecution",
                "custom",
                "branchSummary",
                "compactionSummary"
            ]
        );
    }
}
