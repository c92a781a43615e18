//! Entry points for the fuzz targets in `fuzz/` (not an API: hidden from the docs, may change
//! with them).
//!
//! Request bodies are the gateway's outside input. Each function here runs, on bytes given by
//! the fuzzer, exactly what a route does with its body before any engine, store or model is
//! involved: the JSON extractor with its field-naming errors, then the route's own checks
//! (`chat_input` for chat completions, the lane key and required fields for the engine API).
//! A refusal must be an [`ApiError`] with a 4xx status; anything else is a bug.

use clawctx_protocol::*;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::api_error::{parse, ApiError};
use crate::engine_api::{check_advancement_key, lane_key, RollbackRequest};
use crate::openai_wire::ChatCompletionRequest;
use crate::recall::{DescribeRequest, ExpandRequest, GrepRequest};

/// Reads a `POST /v1/chat/completions` body as the route does, with `own_tools` as the
/// gateway's own tool names. Answers the prompt the turn would run with.
pub fn chat_completion(body: &[u8], own_tools: &[String]) -> Result<String, ApiError> {
    let request: ChatCompletionRequest = parse(body)?;
    let input = crate::chat_input::read(&request, own_tools)?;
    Ok(input.prompt)
}

/// The engine API's routes with a JSON body, in a fixed order (a fuzz input picks one by
/// index).
pub const ENGINE_ROUTES: [&str; 14] = [
    "bootstrap",
    "ingest",
    "ingestBatch",
    "assemble",
    "compact",
    "maintain",
    "afterTurn",
    "commitTurn",
    "onSubagentEnded",
    "prepareSubagentSpawn",
    "rollback",
    "lcm_grep",
    "lcm_describe",
    "lcm_expand",
];

/// What a body that was accepted turned out to be, for the round-trip check.
#[derive(Debug)]
pub struct Accepted {
    /// The route.
    pub route: &'static str,
    /// The params serialized again (compact JSON).
    pub reserialized: Vec<u8>,
    /// Whether parsing `reserialized` gives a value equal to the first parse (only checked for
    /// the protocol's types, which compare).
    pub round_trips: Option<bool>,
}

fn protocol<T>(
    route: &'static str,
    body: &[u8],
    key: impl Fn(&T) -> Result<String, ApiError>,
) -> Result<Accepted, ApiError>
where
    T: DeserializeOwned + Serialize + PartialEq,
{
    let p: T = parse(body)?;
    key(&p)?;
    let reserialized = serde_json::to_vec(&p)
        .map_err(|e| ApiError::internal(format!("serializing {route} params: {e}")))?;
    let again: Option<T> = parse(&reserialized).ok();
    Ok(Accepted {
        route,
        round_trips: Some(again.as_ref() == Some(&p)),
        reserialized,
    })
}

fn gateway_own<T>(
    route: &'static str,
    body: &[u8],
    check: impl Fn(&T) -> Result<(), ApiError>,
) -> Result<Accepted, ApiError>
where
    T: DeserializeOwned + Serialize,
{
    let p: T = parse(body)?;
    check(&p)?;
    let reserialized = serde_json::to_vec(&p)
        .map_err(|e| ApiError::internal(format!("serializing {route} body: {e}")))?;
    Ok(Accepted {
        route,
        round_trips: None,
        reserialized,
    })
}

/// Reads a `POST /v1/engine/<route>` body (`route` is an index into [`ENGINE_ROUTES`], taken
/// modulo its length) as the route does before it calls the engine or the store.
pub fn engine_body(route: usize, body: &[u8]) -> Result<Accepted, ApiError> {
    let route = ENGINE_ROUTES[route % ENGINE_ROUTES.len()];
    let by_session = |k: &Option<String>, id: &str| lane_key(k.as_deref(), id);
    match route {
        "bootstrap" => protocol(route, body, |p: &BootstrapParams| {
            by_session(&p.session_key, &p.session_id)
        }),
        "ingest" => protocol(route, body, |p: &IngestParams| {
            by_session(&p.session_key, &p.session_id)
        }),
        "ingestBatch" => protocol(route, body, |p: &IngestBatchParams| {
            by_session(&p.session_key, &p.session_id)
        }),
        "assemble" => protocol(route, body, |p: &AssembleParams| {
            by_session(&p.session_key, &p.session_id)
        }),
        "compact" => protocol(route, body, |p: &CompactParams| {
            by_session(&p.session_key, &p.session_id)
        }),
        "maintain" => protocol(route, body, |p: &MaintainParams| {
            by_session(&p.session_key, &p.session_id)
        }),
        "afterTurn" => protocol(route, body, |p: &AfterTurnParams| {
            by_session(&p.session_key, &p.session_id)
        }),
        "commitTurn" => protocol(route, body, |p: &CommitTurnParams| {
            let key = by_session(&p.session_key, &p.session_id)?;
            check_advancement_key(p)?;
            Ok(key)
        }),
        "onSubagentEnded" => protocol(route, body, |p: &SubagentEndedParams| {
            lane_key(Some(&p.child_session_key), "")
        }),
        "prepareSubagentSpawn" => protocol(route, body, |p: &PrepareSubagentSpawnParams| {
            if p.parent_session_key.trim().is_empty() {
                return Err(ApiError::invalid(
                    "parentSessionKey",
                    "`parentSessionKey` must not be empty",
                ));
            }
            lane_key(Some(&p.child_session_key), "")
        }),
        "rollback" => gateway_own(route, body, |_: &RollbackRequest| Ok(())),
        "lcm_grep" => gateway_own(route, body, |r: &GrepRequest| {
            if r.query.trim().is_empty() {
                return Err(ApiError::invalid("query", "`query` must not be empty"));
            }
            Ok(())
        }),
        "lcm_describe" => gateway_own(route, body, |_: &DescribeRequest| Ok(())),
        _ => gateway_own(route, body, |_: &ExpandRequest| Ok(())),
    }
}
