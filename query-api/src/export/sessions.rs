//! `GET /v1/sessions/export` (scope `sessions:list`): one row per session of the key's
//! organization and environment opened in the window, its latest decision flattened, newest
//! first. `verdict` and `search` filter as the list's do; `after=<session id>` resumes.

use async_trait::async_trait;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use edge::body::QueryParams;
use edge::policy::ListSessions;
use edge::{ApiError, SecretKey};
use schemas::credential::Environment;
use schemas::session_digest::{DecisionDigest, SessionDigest};
use schemas::{OrgId, SessionId};
use store::Store;

use super::columns::{Cell, Column, Kind};
use super::{Request, Source, Window};
use crate::QueryState;
use crate::sessions::VERDICTS;

pub(super) const EXPORT: &str = "sessions";
const EXTRA: &[&str] = &["verdict", "search", "after"];

/// A session as the export reads it: the digest its store keeps beside its row
/// (`schemas::session_digest`), so no session's whole state or decision is decoded.
type Row = SessionDigest;

fn decided(row: &Row, pick: fn(&DecisionDigest) -> Cell<'_>) -> Cell<'_> {
    row.decision.as_ref().map_or(Cell::Null, pick)
}

fn score(row: &Row, category: usize) -> Cell<'_> {
    Cell::optional_f32(
        row.decision
            .as_ref()
            .and_then(|d| d.scores[category])
            .map(f32::from),
    )
}

/// The columns of the sessions export, version 1 (docs/analysts.md#sessions).
pub static COLUMNS: &[Column<Row>] = &[
    Column {
        name: "session_id",
        kind: Kind::Text,
        nullable: false,
        doc: "the session's id (sid_)",
        get: |r| Cell::text(r.session_id.to_string()),
    },
    Column {
        name: "visitor_id",
        kind: Kind::Text,
        nullable: true,
        doc: "the visitor it was linked to (vid_), once linked",
        get: |r| Cell::optional_text(r.visitor_id.map(|v| v.to_string())),
    },
    Column {
        name: "created_at",
        kind: Kind::Time,
        nullable: false,
        doc: "when the session was opened",
        get: |r| Cell::Millis(r.created_at_ms),
    },
    Column {
        name: "updated_at",
        kind: Kind::Time,
        nullable: false,
        doc: "when the session was last scored",
        get: |r| Cell::Millis(r.updated_at_ms),
    },
    Column {
        name: "decided_at",
        kind: Kind::Time,
        nullable: true,
        doc: "when its latest decision was made",
        get: |r| decided(r, |d| Cell::Millis(d.decided_at_ms)),
    },
    Column {
        name: "url",
        kind: Kind::Text,
        nullable: false,
        doc: "the page the session was opened on",
        get: |r| Cell::text(r.url.as_str()),
    },
    Column {
        name: "user_agent",
        kind: Kind::Text,
        nullable: false,
        doc: "the HTTP user agent",
        get: |r| Cell::text(r.user_agent.as_str()),
    },
    Column {
        name: "ip_address",
        kind: Kind::Text,
        nullable: false,
        doc: "the client address",
        get: |r| Cell::text(r.ip_address.as_str()),
    },
    Column {
        name: "screen_width",
        kind: Kind::Int64,
        nullable: true,
        doc: "the screen's width in CSS pixels, as the browser reported it",
        get: |r| r.screen_width.map_or(Cell::Null, Cell::Int64),
    },
    Column {
        name: "screen_height",
        kind: Kind::Int64,
        nullable: true,
        doc: "the screen's height in CSS pixels, as the browser reported it",
        get: |r| r.screen_height.map_or(Cell::Null, Cell::Int64),
    },
    Column {
        name: "automation_status",
        kind: Kind::Enum,
        nullable: true,
        doc: "automated, human or uncertain",
        get: |r| decided(r, |d| Cell::text(d.automation_status.as_str())),
    },
    Column {
        name: "verdict",
        kind: Kind::Enum,
        nullable: true,
        doc: "human, bot, verified_bot or suspicious",
        get: |r| decided(r, |d| Cell::text(d.verdict.as_str())),
    },
    Column {
        name: "decision_status",
        kind: Kind::Enum,
        nullable: true,
        doc: "preliminary or final",
        get: |r| decided(r, |d| Cell::text(d.decision_status.as_str())),
    },
    Column {
        name: "phase",
        kind: Kind::Enum,
        nullable: true,
        doc: "snapshot, behavioral or final",
        get: |r| decided(r, |d| Cell::text(d.phase.as_str())),
    },
    Column {
        name: "manipulation",
        kind: Kind::Enum,
        nullable: true,
        doc: "the manipulation found, if any",
        get: |r| decided(r, |d| Cell::optional_text(d.manipulation.as_deref())),
    },
    Column {
        name: "risk_score",
        kind: Kind::Float32,
        nullable: true,
        doc: "0 to 100",
        get: |r| decided(r, |d| Cell::Float32(f32::from(d.risk_score))),
    },
    Column {
        name: "rule",
        kind: Kind::Text,
        nullable: true,
        doc: "the row of the rules table that decided",
        get: |r| decided(r, |d| Cell::text(d.rule.as_str())),
    },
    Column {
        name: "score_automation",
        kind: Kind::Float32,
        nullable: true,
        doc: "the automation category's score, 0 to 100",
        get: |r| score(r, 0),
    },
    Column {
        name: "score_integrity",
        kind: Kind::Float32,
        nullable: true,
        doc: "the integrity category's score, 0 to 100",
        get: |r| score(r, 1),
    },
    Column {
        name: "score_network",
        kind: Kind::Float32,
        nullable: true,
        doc: "the network category's score, 0 to 100",
        get: |r| score(r, 2),
    },
    Column {
        name: "score_behavior",
        kind: Kind::Float32,
        nullable: true,
        doc: "the behavior category's score, 0 to 100",
        get: |r| score(r, 3),
    },
    Column {
        name: "score_consistency",
        kind: Kind::Float32,
        nullable: true,
        doc: "the consistency category's score, 0 to 100",
        get: |r| score(r, 4),
    },
    Column {
        name: "signals",
        kind: Kind::TextList,
        nullable: true,
        doc: "the slugs of the signals that fired",
        get: |r| decided(r, |d| Cell::text_list(d.signals.as_slice())),
    },
    Column {
        name: "web_bot_auth",
        kind: Kind::Enum,
        nullable: true,
        doc: "verified, invalid, unverified or absent: a signed agent's outcome",
        get: |r| Cell::optional_text(r.web_bot_auth.as_deref()),
    },
];

#[utoipa::path(
    get,
    operation_id = "export_sessions",
    path = "/v1/sessions/export",
    tag = "exports",
    params(
        super::ExportQuery,
        crate::sessions::SessionFilters,
    ),
    security(("secret_key" = ["sessions:list"])),
    responses(
        (status = 200, description = "The sessions of the window, newest first, as an Arrow stream or NDJSON.", content(
            (edge::openapi::Binary = "application/vnd.apache.arrow.stream"),
            (String = "application/x-ndjson"),
        )),
        super::ExportErrors,
        edge::openapi::SecretKeyErrors,
    )
)]
pub(super) async fn export(
    State(state): State<QueryState>,
    caller: SecretKey<ListSessions>,
    query: QueryParams,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let tenancy = (caller.organization.id, caller.environment());
    let (request, source) = open(state.auth.store.clone(), tenancy, &query, &headers)?;
    super::stream(&state, &caller, EXPORT, request, source)
}

/// The export's request and its walk of the store, from the query.
pub(super) fn open(
    store: Store,
    tenancy: (OrgId, Environment),
    query: &QueryParams,
    headers: &HeaderMap,
) -> Result<(Request<Row>, Sessions), ApiError> {
    let (request, filters) = read(query, headers)?;
    let source = Sessions::new(
        store,
        tenancy,
        request.window,
        filters.after,
        filters.verdict,
        filters.search,
    );
    Ok((request, source))
}

/// What a sessions export's query chooses besides its window, format and columns.
struct Filters {
    verdict: Option<String>,
    search: Option<String>,
    after: Option<SessionId>,
}

/// The export's query, every parameter checked.
fn read(query: &QueryParams, headers: &HeaderMap) -> Result<(Request<Row>, Filters), ApiError> {
    let request = Request::parse(query, headers, COLUMNS, EXTRA)?;
    let verdict = query.one_of("verdict", &VERDICTS)?.map(str::to_owned);
    let search = query
        .get("search")
        .filter(|s| !s.is_empty())
        .map(str::to_owned);
    let after =
        super::after::<SessionId>(query, "must be the id (sid_) of the last session received")?;
    Ok((
        request,
        Filters {
            verdict,
            search,
            after,
        },
    ))
}

#[utoipa::path(
    get,
    operation_id = "export_sessions_schema",
    path = "/v1/sessions/export/schema",
    tag = "exports",
    params(
        super::ExportQuery,
        crate::sessions::SessionFilters,
    ),
    security(("secret_key" = ["sessions:list"])),
    responses(
        (status = 200, description = "The export's schema: an Arrow stream with no rows (empty for NDJSON).", content(
            (edge::openapi::Binary = "application/vnd.apache.arrow.stream"),
            (String = "application/x-ndjson"),
        )),
        super::ExportErrors,
        edge::openapi::SecretKeyErrors,
    )
)]
pub(super) async fn schema(
    _caller: SecretKey<ListSessions>,
    query: QueryParams,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    super::schema_only(EXPORT, read(&query, &headers)?.0)
}

/// A walk of one organization's and environment's sessions, newest first, from the window's
/// end (or `after`) down to its start.
pub(super) struct Sessions {
    store: Store,
    tenancy: (OrgId, Environment),
    /// The last id read (exclusive bound of the next page).
    after: SessionId,
    lower: ulid::Ulid,
    verdict: Option<String>,
    search: Option<String>,
    exhausted: bool,
}

impl Sessions {
    fn new(
        store: Store,
        tenancy: (OrgId, Environment),
        window: Window,
        after: Option<SessionId>,
        verdict: Option<String>,
        search: Option<String>,
    ) -> Self {
        let (lower, upper) = window.id_bounds();
        let upper = SessionId::from_ulid(upper);
        Sessions {
            store,
            tenancy,
            after: after.filter(|a| *a < upper).unwrap_or(upper),
            lower,
            verdict,
            search,
            exhausted: false,
        }
    }
}

#[async_trait]
impl Source for Sessions {
    type Row = Row;

    async fn next(&mut self, limit: usize) -> Result<Vec<Row>, ApiError> {
        let (org, env) = self.tenancy;
        let mut rows = Vec::new();
        // A search keeps reading until it has matches or the window is done.
        while rows.is_empty() && !self.exhausted {
            let page = self
                .store
                .list_session_digests(org, env, self.verdict.as_deref(), Some(self.after), limit)
                .await?;
            self.exhausted = page.len() < limit;
            for digest in page {
                if digest.session_id.ulid() < self.lower {
                    self.exhausted = true;
                    break;
                }
                self.after = digest.session_id;
                if let Some(q) = &self.search
                    && !(digest.session_id.to_string() == *q
                        || digest.visitor_id.is_some_and(|v| v.to_string() == *q)
                        || digest.ip_address == *q
                        || digest.url.contains(q.as_str()))
                {
                    continue;
                }
                rows.push(digest);
            }
        }
        Ok(rows)
    }
}
