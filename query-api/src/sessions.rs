//! `GET /v1/sessions` and `GET /v1/sessions/{sessionId}` (interface "Sessions", D3, D4, D7):
//! handlers, query validation and the shapes they answer. A session of another organization or
//! environment is a 404.

use axum::Router;
use axum::extract::State;
use axum::routing::get;
use edge::body::PathParams;
use edge::body::{QueryParams, Reply, path_param};
use edge::pagination::{decode_cursor, encode_cursor, scan_page};
use edge::policy::{ListSessions, ReadSession};
use edge::{ApiError, SecretKey};
use schemas::SessionId;
use schemas::resources::Pagination;
use schemas::time::{self, Timestamp};
use serde::Serialize;
use serde_json::{Value, json};
use store::RawJson;
use store::SessionRecord;

use crate::QueryState;

/// The verdict enumeration (D10), the values of `verdict=`.
pub const VERDICTS: [&str; 4] = ["human", "bot", "verified_bot", "suspicious"];
/// How many stored sessions one `search` request reads at most while filtering, so a search
/// that matches little cannot make a request scan a whole partition; the cursor resumes after
/// them.
const SCAN_BUDGET: usize = 2_000;

pub fn router() -> Router<QueryState> {
    Router::new()
        .route("/v1/sessions", get(list))
        .route("/v1/sessions/{sessionId}", get(read))
}

#[derive(Serialize)]
struct SessionRow {
    id: SessionId,
    object: &'static str,
    visitor_id: Option<String>,
    page_url: String,
    ip_address: String,
    user_agent: String,
    #[serde(serialize_with = "time::ser")]
    created_at: Timestamp,
    #[serde(serialize_with = "time::ser")]
    updated_at: Timestamp,
    latest_decision: Value,
}

/// The summary of a decision that list rows carry.
fn summary(decision: &Value) -> Value {
    let keep = [
        "event_id",
        "verdict",
        "risk_score",
        "automation_status",
        "decision_status",
        "phase",
        "manipulation",
        "evaluated_at",
    ];
    let mut out = serde_json::Map::new();
    for k in keep {
        out.insert(k.into(), decision.get(k).cloned().unwrap_or(Value::Null));
    }
    Value::Object(out)
}

fn row(s: &SessionRecord) -> SessionRow {
    SessionRow {
        id: s.id,
        object: "session",
        visitor_id: s.visitor_id.map(|v| v.to_string()),
        page_url: s.page_url.clone(),
        ip_address: s.ip.clone(),
        user_agent: s.user_agent.clone(),
        created_at: s.opened_at,
        updated_at: s.updated_at,
        latest_decision: s
            .latest_decision
            .as_ref()
            .map(|d| summary(&d.to_value()))
            .unwrap_or(Value::Null),
    }
}

/// `search` (D4): a session id, a visitor id, an IP address or a URL substring.
fn matches(s: &SessionRecord, verdict: Option<&str>, search: Option<&str>) -> bool {
    if let Some(v) = verdict {
        #[derive(serde::Deserialize)]
        struct Verdict {
            verdict: Option<String>,
        }
        let stored = s
            .latest_decision
            .as_ref()
            .and_then(|d| d.decode::<Verdict>().ok())
            .and_then(|d| d.verdict);
        if stored.as_deref() != Some(v) {
            return false;
        }
    }
    match search {
        None => true,
        Some(q) => {
            s.id.to_string() == q
                || s.visitor_id.is_some_and(|v| v.to_string() == q)
                || s.ip == q
                || s.page_url.contains(q)
        }
    }
}

async fn list(
    State(state): State<QueryState>,
    caller: SecretKey<ListSessions>,
    query: QueryParams,
) -> Result<Reply, ApiError> {
    query.only(&["limit", "cursor", "verdict", "search"])?;
    let limit = query.limit(50, 200)? as usize;
    let verdict = query.one_of("verdict", &VERDICTS)?;
    let search = query.get("search").filter(|s| !s.is_empty());
    let (org, env) = (caller.organization.id, caller.environment());
    let binding = format!("sessions:{org}:{env}");
    let after = match query.get("cursor") {
        None => None,
        Some(c) => Some(
            decode_cursor(&state.auth.secret, &binding, c)?
                .parse::<SessionId>()
                .map_err(|e| ApiError::internal("cursor position", e))?,
        ),
    };
    // A verdict is read from its index table (`sessions_by_verdict`), so its pages are full
    // until the last; only `search` filters, reading at most SCAN_BUDGET rows.
    let store = &state.auth.store;
    let page = scan_page(
        limit,
        search.is_some(),
        SCAN_BUDGET,
        after,
        move |after, n| match verdict {
            Some(v) => store.list_sessions_by_verdict(org, env, v, after, n),
            None => store.list_sessions(org, env, after, n),
        },
        |s: &SessionRecord| s.id,
        |s| matches(s, verdict, search),
    )
    .await?;
    let (has_more, next) = (page.has_more, page.next);
    let next_cursor = match (has_more, next) {
        (true, Some(id)) => Some(encode_cursor(&state.auth.secret, &binding, &id.to_string())),
        _ => None,
    };
    let rows: Vec<SessionRow> = page.rows.iter().map(row).collect();
    Ok(Reply::list(
        rows,
        Pagination {
            limit: limit as u32,
            has_more,
            next_cursor,
        },
    ))
}

/// The session detail: members in the interface's order of importance (most actionable first,
/// then continuity, then evidence and telemetry).
#[derive(Serialize)]
struct SessionDetail {
    id: SessionId,
    object: &'static str,
    decision: Value,
    highlights: Value,
    automation: Value,
    web_bot_auth: Value,
    network: Value,
    runtime_integrity: Value,
    visitor_fingerprint: Value,
    connection_fingerprint: Value,
    signals_fired: Value,
    client_telemetry: Value,
    #[serde(serialize_with = "time::ser")]
    created_at: Timestamp,
    #[serde(serialize_with = "time::ser")]
    updated_at: Timestamp,
}

fn signals_of(decision: &Value, category: &str) -> Value {
    let fired = decision
        .get("signals_fired")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    Value::Array(
        fired
            .into_iter()
            .filter(|s| s.get("category").and_then(Value::as_str) == Some(category))
            .collect(),
    )
}

fn detail(s: &SessionRecord) -> SessionDetail {
    let d = s
        .latest_decision
        .as_ref()
        .map(RawJson::to_value)
        .unwrap_or(Value::Null);
    let state = s.state.to_value();
    let probes = state
        .pointer("/observations/probes")
        .cloned()
        .unwrap_or(Value::Null);
    let context = state.get("context").cloned().unwrap_or(Value::Null);
    let mut decision = serde_json::Map::new();
    for k in [
        "event_id",
        "automation_status",
        "decision_status",
        "verdict",
        "risk_score",
        "phase",
        "manipulation",
        "score_breakdown",
        "is_provisional",
        "evaluation_duration_ms",
        "evaluated_at",
        "rule",
    ] {
        decision.insert(k.into(), d.get(k).cloned().unwrap_or(Value::Null));
    }
    SessionDetail {
        id: s.id,
        object: "session",
        decision: Value::Object(decision),
        highlights: d.get("highlights").cloned().unwrap_or(json!([])),
        automation: json!({
            "status": d.get("automation_status"),
            "webdriver": probes.pointer("/automation/webdriver"),
            "signals": signals_of(&d, "automation"),
        }),
        web_bot_auth: json!({
            "status": context.get("web_bot_auth"),
            "signature_agent": context.get("signature_agent"),
        }),
        network: json!({
            "ip_address": s.ip,
            "ping_rtts_ms": probes.pointer("/network/ping_rtts_ms"),
            "server_ping_arrivals": context.get("ping_arrivals"),
            "network_check_consistent": context.get("network_check_consistent"),
            "signals": signals_of(&d, "network"),
        }),
        runtime_integrity: json!({
            "tampered_natives": probes.pointer("/integrity/tampered_natives"),
            "descriptor_anomalies": probes.pointer("/integrity/descriptor_anomalies"),
            "signals": signals_of(&d, "integrity"),
        }),
        visitor_fingerprint: json!({ "id": s.visitor_id.map(|v| v.to_string()) }),
        connection_fingerprint: json!({
            "user_agent": s.user_agent,
            "header_names": context.pointer("/request/header_names"),
        }),
        signals_fired: d.get("signals_fired").cloned().unwrap_or(json!([])),
        client_telemetry: json!({
            "user_agent": probes.pointer("/automation/user_agent"),
            "platform": probes.pointer("/browser/platform"),
            "languages": probes.pointer("/automation/languages"),
            "timezone": probes.pointer("/locale/timezone"),
            "screen": probes.get("screen"),
            "webgl_renderer": probes.pointer("/rendering/webgl_renderer"),
            "collected_in_ms": probes.get("collected_in_ms"),
            "timed_out": probes.get("timed_out"),
        }),
        created_at: s.opened_at,
        updated_at: s.updated_at,
    }
}

async fn read(
    State(state): State<QueryState>,
    caller: SecretKey<ReadSession>,
    params: PathParams,
) -> Result<Reply, ApiError> {
    let id: SessionId = path_param(&params, "sessionId")?;
    let session = state
        .auth
        .store
        .get_session(caller.organization.id, caller.environment(), id)
        .await?
        .ok_or_else(|| ApiError::not_found("session"))?;
    Ok(Reply::ok(detail(&session)))
}
