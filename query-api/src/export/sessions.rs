//! `GET /v1/sessions/export` (scope `sessions:list`): one row per session of the key's
//! organization and environment opened in the window, its latest decision flattened, newest
//! first. `verdict` and `search` filter as the list's do; `after=<session id>` resumes.

use std::cell::OnceCell;

use async_trait::async_trait;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use edge::body::QueryParams;
use edge::policy::ListSessions;
use edge::{ApiError, SecretKey};
use schemas::credential::Environment;
use schemas::decision::{Category, Decision};
use schemas::session_view::SessionView;
use schemas::{OrgId, SessionId};
use serde::Serialize;
use store::{SessionRecord, Store};

use super::columns::{Cell, Column, Kind};
use super::{Request, Source, Window};
use crate::QueryState;
use crate::sessions::VERDICTS;

pub(super) const EXPORT: &str = "sessions";
const EXTRA: &[&str] = &["verdict", "search", "after"];

/// A stored session with what its columns read: the latest decision, decoded once, and the
/// processor's view of the browser, decoded only if a column asks.
pub struct Row {
    record: SessionRecord,
    decision: Option<Decision>,
    view: OnceCell<SessionView>,
}

impl Row {
    fn view(&self) -> &SessionView {
        self.view
            .get_or_init(|| SessionView::of(&self.record.state))
    }

    fn category(&self, category: Category) -> Cell {
        Cell::optional_f32(
            self.decision
                .as_ref()
                .and_then(|d| d.score_breakdown.categories.get(&category))
                .map(|&score| f32::from(score)),
        )
    }
}

/// An enumerated value's name as the JSON API spells it.
fn name(value: impl Serialize) -> Cell {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(s)) => Cell::Text(s),
        _ => Cell::Null,
    }
}

fn decision_enum(row: &Row, pick: fn(&Decision) -> Cell) -> Cell {
    row.decision.as_ref().map_or(Cell::Null, pick)
}

/// The columns of the sessions export, version 1 (docs/analysts.md#sessions).
pub static COLUMNS: &[Column<Row>] = &[
    Column {
        name: "session_id",
        kind: Kind::Text,
        nullable: false,
        doc: "the session's id (sid_)",
        get: |r| Cell::text(r.record.id.to_string()),
    },
    Column {
        name: "visitor_id",
        kind: Kind::Text,
        nullable: true,
        doc: "the visitor it was linked to (vid_), once linked",
        get: |r| Cell::optional_text(r.record.visitor_id.map(|v| v.to_string())),
    },
    Column {
        name: "created_at",
        kind: Kind::Time,
        nullable: false,
        doc: "when the session was opened",
        get: |r| Cell::Time(r.record.opened_at),
    },
    Column {
        name: "updated_at",
        kind: Kind::Time,
        nullable: false,
        doc: "when the session was last scored",
        get: |r| Cell::Time(r.record.updated_at),
    },
    Column {
        name: "decided_at",
        kind: Kind::Time,
        nullable: true,
        doc: "when its latest decision was made",
        get: |r| Cell::optional_time(r.decision.as_ref().map(|d| d.evaluated_at)),
    },
    Column {
        name: "url",
        kind: Kind::Text,
        nullable: false,
        doc: "the page the session was opened on",
        get: |r| Cell::text(r.record.page_url.clone()),
    },
    Column {
        name: "user_agent",
        kind: Kind::Text,
        nullable: false,
        doc: "the HTTP user agent",
        get: |r| Cell::text(r.record.user_agent.clone()),
    },
    Column {
        name: "ip_address",
        kind: Kind::Text,
        nullable: false,
        doc: "the client address",
        get: |r| Cell::text(r.record.ip.clone()),
    },
    Column {
        name: "screen_width",
        kind: Kind::Int64,
        nullable: true,
        doc: "the screen's width in CSS pixels, as the browser reported it",
        get: |r| screen(r, |s| s.width),
    },
    Column {
        name: "screen_height",
        kind: Kind::Int64,
        nullable: true,
        doc: "the screen's height in CSS pixels, as the browser reported it",
        get: |r| screen(r, |s| s.height),
    },
    Column {
        name: "automation_status",
        kind: Kind::Enum,
        nullable: true,
        doc: "automated, human or uncertain",
        get: |r| decision_enum(r, |d| name(d.automation_status)),
    },
    Column {
        name: "verdict",
        kind: Kind::Enum,
        nullable: true,
        doc: "human, bot, verified_bot or suspicious",
        get: |r| decision_enum(r, |d| name(d.verdict)),
    },
    Column {
        name: "decision_status",
        kind: Kind::Enum,
        nullable: true,
        doc: "preliminary or final",
        get: |r| decision_enum(r, |d| name(d.decision_status)),
    },
    Column {
        name: "phase",
        kind: Kind::Enum,
        nullable: true,
        doc: "snapshot, behavioral or final",
        get: |r| decision_enum(r, |d| name(d.phase)),
    },
    Column {
        name: "manipulation",
        kind: Kind::Enum,
        nullable: true,
        doc: "the manipulation found, if any",
        get: |r| decision_enum(r, |d| d.manipulation.map_or(Cell::Null, name)),
    },
    Column {
        name: "risk_score",
        kind: Kind::Float32,
        nullable: true,
        doc: "0 to 100",
        get: |r| Cell::optional_f32(r.decision.as_ref().map(|d| f32::from(d.risk_score))),
    },
    Column {
        name: "rule",
        kind: Kind::Text,
        nullable: true,
        doc: "the row of the rules table that decided",
        get: |r| Cell::optional_text(r.decision.as_ref().map(|d| d.rule.clone())),
    },
    Column {
        name: "score_automation",
        kind: Kind::Float32,
        nullable: true,
        doc: "the automation category's score, 0 to 100",
        get: |r| r.category(Category::Automation),
    },
    Column {
        name: "score_integrity",
        kind: Kind::Float32,
        nullable: true,
        doc: "the integrity category's score, 0 to 100",
        get: |r| r.category(Category::Integrity),
    },
    Column {
        name: "score_network",
        kind: Kind::Float32,
        nullable: true,
        doc: "the network category's score, 0 to 100",
        get: |r| r.category(Category::Network),
    },
    Column {
        name: "score_behavior",
        kind: Kind::Float32,
        nullable: true,
        doc: "the behavior category's score, 0 to 100",
        get: |r| r.category(Category::Behavior),
    },
    Column {
        name: "score_consistency",
        kind: Kind::Float32,
        nullable: true,
        doc: "the consistency category's score, 0 to 100",
        get: |r| r.category(Category::Consistency),
    },
    Column {
        name: "signals",
        kind: Kind::TextList,
        nullable: true,
        doc: "the slugs of the signals that fired",
        get: |r| {
            r.decision.as_ref().map_or(Cell::Null, |d| {
                Cell::TextList(d.signals_fired.iter().map(|s| s.slug.clone()).collect())
            })
        },
    },
    Column {
        name: "web_bot_auth",
        kind: Kind::Enum,
        nullable: true,
        doc: "verified, invalid, unverified or absent: a signed agent's outcome",
        get: |r| {
            r.view()
                .context()
                .and_then(|c| c.web_bot_auth)
                .map_or(Cell::Null, name)
        },
    },
];

fn screen(row: &Row, side: fn(&schemas::session_view::ScreenView) -> Option<f64>) -> Cell {
    row.view()
        .probes()
        .and_then(|p| p.screen.as_ref())
        .and_then(side)
        .filter(|v| v.is_finite() && *v >= 0.0)
        .map_or(Cell::Null, |v| Cell::Int64(v as i64))
}

pub(super) async fn export(
    State(state): State<QueryState>,
    caller: SecretKey<ListSessions>,
    query: QueryParams,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let tenancy = (caller.organization.id, caller.environment());
    let (request, source) = open(state.auth.store.clone(), tenancy, &query, &headers)?;
    super::stream(&state, caller.key.id, EXPORT, request, source)
}

/// The export's request and its walk of the store, from the query.
pub(super) fn open(
    store: Store,
    tenancy: (OrgId, Environment),
    query: &QueryParams,
    headers: &HeaderMap,
) -> Result<(Request<Row>, Sessions), ApiError> {
    let request = Request::parse(query, headers, COLUMNS, EXTRA)?;
    let verdict = query.one_of("verdict", &VERDICTS)?.map(str::to_owned);
    let search = query
        .get("search")
        .filter(|s| !s.is_empty())
        .map(str::to_owned);
    let after =
        super::after::<SessionId>(query, "must be the id (sid_) of the last session received")?;
    let source = Sessions::new(store, tenancy, request.window, after, verdict, search);
    Ok((request, source))
}

pub(super) async fn schema(
    _caller: SecretKey<ListSessions>,
    query: QueryParams,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    super::schema_only(EXPORT, COLUMNS, &query, &headers, EXTRA)
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
            let page = match &self.verdict {
                Some(v) => {
                    self.store
                        .list_sessions_by_verdict(org, env, v, Some(self.after), limit)
                        .await?
                }
                None => {
                    self.store
                        .list_sessions(org, env, Some(self.after), limit)
                        .await?
                }
            };
            self.exhausted = page.len() < limit;
            for record in page {
                if record.id.ulid() < self.lower {
                    self.exhausted = true;
                    break;
                }
                self.after = record.id;
                if let Some(q) = &self.search
                    && !(record.id.to_string() == *q
                        || record.visitor_id.is_some_and(|v| v.to_string() == *q)
                        || record.ip == *q
                        || record.page_url.contains(q.as_str()))
                {
                    continue;
                }
                let decision = crate::latest_decision(&record);
                rows.push(Row {
                    record,
                    decision,
                    view: OnceCell::new(),
                });
            }
        }
        Ok(rows)
    }
}
