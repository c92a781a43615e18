//! The OpenAPI 3.1 document, `/openapi.json`, generated from the route table.
//!
//! Every route the gateway serves is one row of the route table in [`crate::router`]: its
//! method, path, handler and the Rust types of its body and answer. The router is built from
//! that table and the document is generated here from the same rows ([`OpDoc`]: a row without
//! its handler) with `schemars` (the protocol's wire types through `clawctx-protocol`'s
//! `schema` feature), so a route cannot be served without being documented and a documented
//! schema is the type the handler parses. The schemas are JSON Schema 2020-12, which OpenAPI
//! 3.1 uses as is; shared ones live in `components.schemas`. This module names no handler.

use schemars::generate::SchemaSettings;
use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde_json::{json, Map, Value};

use crate::api_error::ErrorBody;

/// How a row of the route table names a body's or an answer's type.
pub(crate) type SchemaFn = fn(&mut SchemaGenerator) -> Schema;

/// The [`SchemaFn`] of `T`.
pub(crate) fn schema<T: JsonSchema>(g: &mut SchemaGenerator) -> Schema {
    g.subschema_for::<T>()
}

/// The OpenAPI document.
pub(crate) fn document(ops_of: &[OpDoc]) -> Value {
    let mut settings = SchemaSettings::draft2020_12();
    settings.definitions_path = "/components/schemas".into();
    let mut generator = SchemaGenerator::new(settings);
    let error = generator.subschema_for::<ErrorBody>();
    let mut paths = Map::new();
    for o in ops_of {
        let mut responses = Map::new();
        let ok = match (o.response, o.produces) {
            (Some(f), media) => {
                let s = f(&mut generator);
                let content: Map<String, Value> = media
                    .split(", ")
                    .map(|m| (m.to_owned(), json!({"schema": s})))
                    .collect();
                json!({"description": "OK", "content": content})
            }
            (None, media) => json!({"description": "OK", "content": {media: {}}}),
        };
        responses.insert("200".into(), ok);
        let error_of = |description: &str| json!({"description": description, "content": {"application/json": {"schema": error}}});
        if o.request.is_some() {
            responses.insert(
                "415".into(),
                error_of("The body is not declared Content-Type: application/json"),
            );
        }
        let forbidden = if o.path == "/v1/engine/bootstrap" {
            "The request comes from a web page of another origin (its Origin is neither the gateway's own nor in gateway.http.allowedOrigins), \
             or (code path_not_allowed) it names a file the engine API may not read: only the session's own transcript in the state dir \
             or files under gateway.engineApi.transcriptRoots"
        } else {
            "The request comes from a web page of another origin (its Origin is neither the gateway's own nor in gateway.http.allowedOrigins)"
        };
        responses.insert("403".into(), error_of(forbidden));
        if o.auth {
            responses.insert(
                "421".into(),
                error_of("The Host header names a host the gateway does not serve (not a loopback name, its bind address, nor in gateway.http.allowedHosts)"),
            );
        }
        responses.insert(
            "default".into(),
            json!({"description": "An error in OpenAI's shape", "content": {"application/json": {"schema": error}}}),
        );
        let mut operation = json!({
            "operationId": o.id,
            "summary": o.summary,
            "tags": [o.tag],
            "responses": responses,
        });
        if let Some(f) = o.request {
            operation["requestBody"] = json!({"required": true, "content": {"application/json": {"schema": f(&mut generator)}}});
        }
        if !o.auth {
            operation["security"] = json!([]);
        }
        let entry = paths.entry(o.path.to_owned()).or_insert_with(|| json!({}));
        entry[o.method] = operation;
    }
    let schemas: Map<String, Value> = generator.take_definitions(true).into_iter().collect();
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "clawctx gateway",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "The context engine as a service: an OpenAI-compatible chat endpoint, the engine lifecycle \
                            with the plugin protocol's method names and wire types, recall, health and metrics. \
                            Every error is JSON in OpenAI's shape. Request bodies must be sent as \
                            Content-Type: application/json (415 otherwise); a request whose Origin is another \
                            site's (403) or whose Host is not a loopback name or listed in \
                            gateway.http.allowedHosts (421) is refused, so a web page cannot drive the gateway."
        },
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}
        },
        "security": [{"bearer": []}]
    })
}

/// What the document needs of a route (the router's route table hands one per route).
pub(crate) struct OpDoc {
    pub(crate) method: &'static str,
    pub(crate) path: &'static str,
    pub(crate) id: &'static str,
    pub(crate) summary: &'static str,
    pub(crate) tag: &'static str,
    pub(crate) request: Option<SchemaFn>,
    pub(crate) response: Option<SchemaFn>,
    pub(crate) produces: &'static str,
    pub(crate) auth: bool,
}
