//! The OpenAPI 3.1 document of the REST surface (docs/api.md#openapi), served at
//! `GET /v1/openapi.json` without a key and committed as `docs/openapi.json`. It is generated:
//! each described route's `#[utoipa::path]` sits on its handler, its bodies are the handler's
//! own types, and the routers that serve the routes are the ones that list them
//! (`utoipa_axum::OpenApiRouter`), so the document cannot name a route that is not served.
//! This module adds what no handler owns: the title, the security schemes, the headers that
//! layers around the handlers add (request id, rate limits, `Retry-After`, `Idempotency-Key`)
//! and the webhooks Vigil sends.

use std::sync::LazyLock;

use serde_json::{Map, Value, json};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{ComponentsBuilder, InfoBuilder, OpenApi, OpenApiBuilder};

/// The document, built once.
static DOCUMENT: LazyLock<String> = LazyLock::new(|| {
    serde_json::to_string_pretty(&document()).unwrap_or_else(|e| {
        format!("{{\"error\": \"the OpenAPI document does not serialize: {e}\"}}")
    })
});

/// The whole document: every role's routes, whichever roles this process serves, with the
/// layers' headers and the webhooks.
pub fn document() -> Value {
    let mut doc = match serde_json::to_value(routes()) {
        Ok(doc) => doc,
        Err(e) => return json!({"error": format!("the OpenAPI document does not serialize: {e}")}),
    };
    describe_layers(&mut doc);
    close_request_bodies(&mut doc);
    describe_webhooks(&mut doc);
    pattern_service_ids(&mut doc);
    doc
}

/// Every service id the document reads (a `serviceId` path parameter, a member of a request
/// body) gets its pattern from the one place that states it,
/// `schemas::gate::SERVICE_ID_PATTERN`, rather than from each route's annotation.
fn pattern_service_ids(doc: &mut Value) {
    let pattern = json!(schemas::gate::SERVICE_ID_PATTERN);
    for path in doc["paths"]
        .as_object_mut()
        .into_iter()
        .flat_map(|p| p.values_mut())
    {
        for operation in path
            .as_object_mut()
            .into_iter()
            .flat_map(|o| o.values_mut())
        {
            let parameters = operation
                .get_mut("parameters")
                .and_then(Value::as_array_mut);
            for parameter in parameters.into_iter().flatten() {
                if parameter["name"] == "serviceId" {
                    parameter["schema"]["pattern"] = pattern.clone();
                }
            }
        }
    }
    // The bodies that name a service (the committed document shows any one missed).
    let members = [
        ("LoginBody", "service_id"),
        ("ConsumeBody", "service_id"),
        ("Draft", "id"),
        ("NewService", "id"),
    ];
    for (schema, name) in members {
        let member = &mut doc["components"]["schemas"][schema]["properties"][name];
        if member.is_object() {
            member["pattern"] = pattern.clone();
        }
    }
}

/// What the handlers' annotations describe.
fn routes() -> OpenApi {
    let mut doc = OpenApiBuilder::new()
        .info(
            InfoBuilder::new()
                .title("Vigil")
                .version(env!("CARGO_PKG_VERSION"))
                .description(Some(
                    "Fraud signals and agent access: the REST surface of docs/api.md. Errors \
                     share one envelope; each code is described at /docs/errors.",
                ))
                .build(),
        )
        .components(Some(
            ComponentsBuilder::new()
                .security_scheme(
                    edge::openapi::SECRET_KEY,
                    bearer("A secret key (`sk_live_…`, `sk_test_…`), for backends only."),
                )
                .security_scheme(
                    edge::openapi::PUBLISHABLE_KEY,
                    bearer("A publishable key (`pk_live_…`, `pk_test_…`), for pages."),
                )
                .security_scheme(
                    "agent_token",
                    bearer("A Gate agent token (`agt_…`), which a signup delivered to a tool."),
                )
                .security_scheme(
                    "gate_poll_token",
                    bearer("A signup's poll token (`gtpoll_…`), for its own session only."),
                )
                .build(),
        ))
        .build();
    doc.merge(admin_api::openapi());
    doc.merge(gate::openapi());
    doc.merge(query_api::openapi());
    doc.merge(ingest::openapi());
    doc
}

fn bearer(description: &str) -> SecurityScheme {
    SecurityScheme::Http(
        HttpBuilder::new()
            .scheme(HttpAuthScheme::Bearer)
            .description(Some(description))
            .build(),
    )
}

/// The headers the layers around every handler add (edge::auth, edge::error, edge::idempotency),
/// which no handler's annotation can name: a request id on every answer, the key's rate limit
/// on a keyed route's success, `Retry-After` on 429 and 503, and `Idempotency-Key` on every
/// POST a secret key makes.
fn describe_layers(doc: &mut Value) {
    doc["components"]["headers"] = json!({
        "RequestId": {
            "description": "This request's id, as `meta.request_id` and the server's logs name it.",
            "required": true,
            "schema": {"type": "string", "pattern": "^req_"}
        },
        "RateLimitLimit": {
            "description": "Requests the key's bucket holds (docs/api.md#rate-limits).",
            "required": true,
            "schema": {"type": "integer", "minimum": 0}
        },
        "RateLimitRemaining": {
            "description": "Requests left in the key's bucket.",
            "required": true,
            "schema": {"type": "integer", "minimum": 0}
        },
        "RetryAfter": {
            "description": "Seconds to wait before retrying.",
            "required": true,
            "schema": {"type": "integer", "minimum": 1}
        }
    });
    doc["components"]["parameters"] = json!({
        "IdempotencyKey": {
            "name": "Idempotency-Key",
            "in": "header",
            "required": false,
            "description": "Makes the POST safe to retry: the same key and body answer the first \
                answer again for 24 hours (docs/api.md#idempotency).",
            "schema": {"type": "string", "minLength": 1, "maxLength": 255, "pattern": "^[!-~]+$"}
        }
    });
    let header = |name: &str| json!({"$ref": format!("#/components/headers/{name}")});
    let Some(paths) = doc["paths"].as_object_mut() else {
        return;
    };
    for (_, item) in paths.iter_mut() {
        let Some(item) = item.as_object_mut() else {
            continue;
        };
        for (method, operation) in item.iter_mut() {
            let schemes: Vec<String> = operation["security"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_object)
                .flat_map(|requirement| requirement.keys().cloned())
                .collect();
            let keyed = schemes
                .iter()
                .any(|s| s == edge::openapi::SECRET_KEY || s == edge::openapi::PUBLISHABLE_KEY);
            if method == "post" && schemes.iter().any(|s| s == edge::openapi::SECRET_KEY) {
                if let Some(parameters) = parameters(operation) {
                    parameters.push(json!({"$ref": "#/components/parameters/IdempotencyKey"}));
                }
                let conflict = "`request.idempotency_conflict`: this `Idempotency-Key` was used \
                    with another body, or its first request is still running.";
                match operation["responses"]["409"]["description"].as_str() {
                    Some(own) => {
                        operation["responses"]["409"]["description"] =
                            Value::String(format!("{own} {conflict}"))
                    }
                    None => {
                        operation["responses"]["409"] = json!({
                            "description": conflict,
                            "content": {"application/json": {"schema":
                                {"$ref": "#/components/schemas/ErrorEnvelope"}}}
                        })
                    }
                }
            }
            let has_parameters = operation["parameters"]
                .as_array()
                .is_some_and(|ps| ps.iter().any(|p| p["in"] == "path" || p["in"] == "query"));
            let Some(responses) = operation["responses"].as_object_mut() else {
                continue;
            };
            // Answers any route may give, from the layers: a malformed id or query parameter,
            // a client address's or key's limit, a server error.
            let envelope = || json!({"application/json": {"schema": {"$ref": "#/components/schemas/ErrorEnvelope"}}});
            if has_parameters && !responses.contains_key("422") {
                responses.insert(
                    "422".into(),
                    json!({
                        "description": "`request.validation_failed`: a path id or query parameter \
                            (`details.parameter_set`).",
                        "content": envelope()
                    }),
                );
            }
            if !responses.contains_key("429") {
                responses.insert(
                    "429".into(),
                    json!({
                        "description": "`rate.limited`: the client address's or the key's limit; \
                            retry after `Retry-After` seconds.",
                        "content": envelope()
                    }),
                );
            }
            if !responses.contains_key("5XX") {
                responses.insert(
                    "5XX".into(),
                    json!({
                        "description": "`internal.error` (logged with the request id) or \
                            `service.unavailable`.",
                        "content": envelope()
                    }),
                );
            }
            for (status, response) in responses.iter_mut() {
                if status == "101" {
                    continue;
                }
                let headers = response["headers"].as_object_mut().map(std::mem::take);
                let mut headers = headers.unwrap_or_default();
                headers.insert("X-Request-Id".into(), header("RequestId"));
                if keyed && status.starts_with('2') {
                    headers.insert("X-RateLimit-Limit".into(), header("RateLimitLimit"));
                    headers.insert("X-RateLimit-Remaining".into(), header("RateLimitRemaining"));
                }
                if status == "429" || status == "503" {
                    headers.insert("Retry-After".into(), header("RetryAfter"));
                }
                response["headers"] = Value::Object(headers);
            }
        }
    }
}

/// Every request body refuses members it does not name (edge::body::Fields::finish), nested
/// objects too, so each body's schema, and each schema it names, says
/// `additionalProperties: false`.
fn close_request_bodies(doc: &mut Value) {
    let mut pending = Vec::new();
    for item in doc["paths"]
        .as_object_mut()
        .into_iter()
        .flat_map(|p| p.values_mut())
    {
        for operation in item
            .as_object_mut()
            .into_iter()
            .flat_map(|i| i.values_mut())
        {
            let Some(schema) =
                operation.pointer_mut("/requestBody/content/application~1json/schema")
            else {
                continue;
            };
            // An optional body (`Option<T>`) is one the request may leave out, which
            // `requestBody.required` says; sent, it is a `T`, never a JSON null.
            let null = json!({"type": "null"});
            let sent = match schema["oneOf"].as_array().map(Vec::as_slice) {
                Some([one, other]) if *other == null => Some(one.clone()),
                Some([one, other]) if *one == null => Some(other.clone()),
                _ => None,
            };
            if let Some(sent) = sent {
                *schema = sent;
            }
            pending.extend(refs(schema));
        }
    }
    let mut closed = std::collections::BTreeSet::new();
    while let Some(name) = pending.pop() {
        if !closed.insert(name.clone()) {
            continue;
        }
        let schema = &mut doc["components"]["schemas"][&name];
        if let Some(properties) = schema.get("properties") {
            pending.extend(
                properties
                    .as_object()
                    .into_iter()
                    .flat_map(|p| p.values())
                    .flat_map(refs),
            );
            schema["additionalProperties"] = Value::Bool(false);
        }
    }
}

/// The component schemas `schema` names, directly or through its items and alternatives.
fn refs(schema: &Value) -> Vec<String> {
    let mut names = Vec::new();
    if let Some(name) = schema["$ref"]
        .as_str()
        .and_then(|r| r.strip_prefix("#/components/schemas/"))
    {
        names.push(name.to_owned());
    }
    names.extend(refs_in(&schema["items"]));
    for alternatives in ["oneOf", "anyOf", "allOf"] {
        for alternative in schema[alternatives].as_array().into_iter().flatten() {
            names.extend(refs(alternative));
        }
    }
    names
}

fn refs_in(schema: &Value) -> Vec<String> {
    if schema.is_null() {
        Vec::new()
    } else {
        refs(schema)
    }
}

/// An operation's parameter list, made if it has none.
fn parameters(operation: &mut Value) -> Option<&mut Vec<Value>> {
    if operation.get("parameters").is_none() {
        operation["parameters"] = json!([]);
    }
    operation["parameters"].as_array_mut()
}

/// The events Vigil POSTs to webhook endpoints (docs/webhooks.md), one OpenAPI `webhooks` entry
/// per event type: the event as the events API lists it, without `webhook_deliveries`, its
/// `data` in its type's own schema, signed by the three Standard Webhooks headers.
fn describe_webhooks(doc: &mut Value) {
    let event = &doc["components"]["schemas"]["Event"];
    let mut payload = event.clone();
    if let Some(properties) = payload["properties"].as_object_mut() {
        properties.remove("webhook_deliveries");
    }
    if let Some(required) = payload["required"].as_array_mut() {
        required.retain(|r| r != "webhook_deliveries");
    }
    payload["description"] = json!("An event as a webhook delivery carries it.");
    let types: Vec<String> = doc["components"]["schemas"]["EventType"]["enum"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t.as_str().map(str::to_owned))
        .collect();
    doc["components"]["schemas"]["WebhookPayload"] = payload;
    let signed = |name: &str, description: &str| {
        json!({"name": name, "in": "header", "required": true, "description": description,
               "schema": {"type": "string"}})
    };
    let mut webhooks = Map::new();
    for event_type in types {
        // Its `data`, in the shape of its type (schemas/events.md).
        let data = schemas::events::EventType::parse(&event_type).map_or(
            json!({}),
            |t| json!({"$ref": format!("#/components/schemas/{}", t.data_schema())}),
        );
        webhooks.insert(
            event_type.clone(),
            json!({"post": {
                "operationId": format!("webhook_{}", event_type.replace('.', "_")),
                "summary": format!("A `{event_type}` event (docs/webhooks.md#what-arrives)."),
                "parameters": [
                    signed("webhook-id", "The event's id, the same on every retry."),
                    signed("webhook-timestamp", "When this attempt was signed, in Unix seconds."),
                    signed("webhook-signature", "`v1,` and the base64 HMAC-SHA256 of \
                        `{webhook-id}.{webhook-timestamp}.{body}` under the endpoint's secret; two, \
                        space-separated and newest first, while the secret rotates."),
                ],
                "requestBody": {"required": true, "content": {"application/json": {"schema": {
                    "allOf": [
                        {"$ref": "#/components/schemas/WebhookPayload"},
                        {"properties": {"type": {"const": event_type}, "data": data}}
                    ]
                }}}},
                "responses": {
                    "2XX": {"description": "Acknowledged, within the endpoint's timeout."},
                    "410": {"description": "Gone: the delivery fails and the endpoint is disabled."},
                    "default": {"description": "A failed attempt, retried on the schedule \
                        (at least as late as a `Retry-After` asks)."}
                }
            }}),
        );
    }
    doc["webhooks"] = Value::Object(webhooks);
}

/// `GET /v1/openapi.json`.
pub async fn serve() -> axum::response::Response {
    use axum::response::IntoResponse;
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        DOCUMENT.as_str(),
    )
        .into_response()
}
