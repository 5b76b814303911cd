//! `GET /v1/sessions` and `GET /v1/sessions/{sessionId}` (documented in
//! docs/api.md#sessions-fingerprints-and-handoffs; docs/architecture.md: #scopes, #lists,
//! #environments): handlers, query validation and the shapes they answer. A session of another
//! organization or environment is a 404.

use axum::extract::State;
use edge::body::{InPath, QueryParams, Reply};
use edge::openapi::{PageQuery, SecretKeyErrors};
use edge::pagination::{encode_cursor, scan_page};
use edge::policy::{ListSessions, ReadSession};
use edge::{ApiError, SecretKey};
use schemas::SessionId;
use schemas::decision::{FiredSignal, Highlight};
use schemas::error::ErrorEnvelope;
use schemas::resources::{List, Pagination, Single};
use schemas::time::{self, Timestamp};
use serde::Serialize;
use store::SessionRecord;

use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::evidence::{
    AutomationEvidence, ClientTelemetry, ConnectionFingerprint, DecisionDetail, DecisionSummary,
    Evidence, IntegrityEvidence, NetworkEvidence, VisitorLink, WebBotAuthEvidence,
};
use crate::{QueryState, latest_decision};

/// The verdict enumeration (docs/architecture.md#decisions), the values of `verdict=`.
pub const VERDICTS: [&str; 4] = ["human", "bot", "verified_bot", "suspicious"];
/// How many stored sessions one `search` request reads at most while filtering, so a search
/// that matches little cannot make a request scan a whole partition; the cursor resumes after
/// them.
const SCAN_BUDGET: usize = 2_000;

pub fn router() -> OpenApiRouter<QueryState> {
    OpenApiRouter::new()
        .routes(routes!(list))
        .routes(routes!(read))
}

/// The filters of the session list and the sessions export, for the OpenAPI description.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)] // read from the query by the handlers
pub(crate) struct SessionFilters {
    /// Sessions whose latest decision has this verdict.
    #[param(pattern = "^(human|bot|verified_bot|suspicious)$")]
    verdict: Option<String>,
    /// A session id, a visitor id, an IP address or part of a page URL.
    search: Option<String>,
}

/// A session as the list shows it.
#[derive(Serialize, utoipa::ToSchema)]
struct SessionRow {
    id: SessionId,
    #[schema(value_type = String, pattern = "^session$")]
    object: &'static str,
    /// The linked visitor (`vid_…`), once the probes came.
    #[schema(required = true)]
    visitor_id: Option<String>,
    page_url: String,
    ip_address: String,
    user_agent: String,
    #[serde(serialize_with = "time::ser")]
    #[schema(value_type = String, format = DateTime)]
    created_at: Timestamp,
    #[serde(serialize_with = "time::ser")]
    #[schema(value_type = String, format = DateTime)]
    updated_at: Timestamp,
    /// The latest decision's summary; null before the first.
    #[schema(required = true)]
    latest_decision: Option<DecisionSummary>,
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
        latest_decision: latest_decision(s).as_ref().map(DecisionSummary::of),
    }
}

/// `search` (docs/architecture.md#lists): a session id, a visitor id, an IP address or a URL
/// substring.
fn matches(s: &SessionRecord, verdict: Option<&str>, search: Option<&str>) -> bool {
    if let Some(v) = verdict
        && latest_decision(s).map(|d| d.verdict.as_str()) != Some(v)
    {
        return false;
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

/// The caller's environment's sessions, newest first.
#[utoipa::path(
    get,
    operation_id = "list_sessions",
    path = "/v1/sessions",
    tag = "sessions",
    params(
        PageQuery,
        SessionFilters,
    ),
    security(("secret_key" = ["sessions:list"])),
    responses(
        (status = 200, description = "A page of sessions.", body = List<SessionRow>),
        (status = 422, description = "`request.validation_failed`: a query parameter or path id (`details.parameter_set`).", body = ErrorEnvelope),
        SecretKeyErrors,
    )
)]
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
    let after = query.cursor::<SessionId>(&state.auth.secret, &binding)?;
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
#[derive(Serialize, utoipa::ToSchema)]
struct SessionDetail {
    id: SessionId,
    #[schema(value_type = String, pattern = "^session$")]
    object: &'static str,
    decision: DecisionDetail,
    /// At most five, concerning first.
    highlights: Vec<Highlight>,
    automation: AutomationEvidence,
    web_bot_auth: WebBotAuthEvidence,
    network: NetworkEvidence,
    runtime_integrity: IntegrityEvidence,
    visitor_fingerprint: VisitorLink,
    connection_fingerprint: ConnectionFingerprint,
    signals_fired: Vec<FiredSignal>,
    client_telemetry: ClientTelemetry,
    #[serde(serialize_with = "time::ser")]
    #[schema(value_type = String, format = DateTime)]
    created_at: Timestamp,
    #[serde(serialize_with = "time::ser")]
    #[schema(value_type = String, format = DateTime)]
    updated_at: Timestamp,
}

fn detail(s: &SessionRecord) -> SessionDetail {
    let e = Evidence::of(s);
    SessionDetail {
        id: s.id,
        object: "session",
        decision: e.decision,
        highlights: e.highlights,
        automation: e.automation,
        web_bot_auth: e.web_bot_auth,
        network: e.network,
        runtime_integrity: e.runtime_integrity,
        visitor_fingerprint: e.visitor_fingerprint,
        connection_fingerprint: e.connection_fingerprint,
        signals_fired: e.signals_fired,
        client_telemetry: e.client_telemetry,
        created_at: s.opened_at,
        updated_at: s.updated_at,
    }
}

/// One session with its decision and evidence.
#[utoipa::path(
    get,
    operation_id = "read_session",
    path = "/v1/sessions/{sessionId}",
    tag = "sessions",
    params(("sessionId" = SessionId, Path, description = "A session of the caller's environment.")),
    security(("secret_key" = ["sessions:read"])),
    responses(
        (status = 200, description = "The session.", body = Single<SessionDetail>),
        (status = 404, description = "`resource.not_found`: no such session for the caller.", body = ErrorEnvelope),
        SecretKeyErrors,
    )
)]
async fn read(
    State(state): State<QueryState>,
    caller: SecretKey<ReadSession>,
    InPath(id): InPath<SessionId>,
) -> Result<Reply, ApiError> {
    let session = state
        .auth
        .store
        .get_session(caller.organization.id, caller.environment(), id)
        .await?
        .ok_or_else(|| ApiError::not_found("session"))?;
    Ok(Reply::ok(detail(&session)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_verdict_filter_takes_every_verdict_a_decision_can_have() {
        let verdicts: Vec<_> = schemas::decision::Verdict::ALL
            .iter()
            .map(|v| v.as_str())
            .collect();
        assert_eq!(verdicts, VERDICTS);
        for v in schemas::decision::Verdict::ALL {
            assert_eq!(serde_json::to_value(v).unwrap(), v.as_str());
        }
    }
}
