//! `GET /v1/sessions/export` (scope `sessions:list`): one row per session of the key's
//! organization and environment opened in the window, its latest decision flattened, newest
//! first. `verdict` and `search` filter as the list's do; `after=<session id>` resumes.

use edge::ApiError;
use edge::body::QueryParams;
use edge::policy::ListSessions;
use schemas::SessionId;
use schemas::session_digest::{DecisionDigest, SessionDigest};

use super::columns::{Cell, Column, Kind};
use super::windowed::{Listing, Page, Walked};
use crate::sessions::VERDICTS;

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

/// The columns of the sessions export, version 2 (docs/analysts.md#sessions).
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
    Column {
        name: "asn",
        kind: Kind::Int64,
        nullable: true,
        doc: "the address's autonomous system number, from the operator's IP data",
        get: |r| r.asn.map_or(Cell::Null, |n| Cell::Int64(i64::from(n))),
    },
    Column {
        name: "asn_organization",
        kind: Kind::Text,
        nullable: true,
        doc: "the autonomous system's organization",
        get: |r| Cell::optional_text(r.asn_organization.as_deref()),
    },
    Column {
        name: "country",
        kind: Kind::Text,
        nullable: true,
        doc: "the address's country, ISO 3166-1 alpha-2",
        get: |r| Cell::optional_text(r.country.as_deref()),
    },
    Column {
        name: "hosting",
        kind: Kind::Bool,
        nullable: true,
        doc: "whether the address's network is a hosting or cloud provider's",
        get: |r| r.hosting.map_or(Cell::Null, Cell::Bool),
    },
    Column {
        name: "tor_exit",
        kind: Kind::Bool,
        nullable: true,
        doc: "whether the address is a Tor exit",
        get: |r| r.tor_exit.map_or(Cell::Null, Cell::Bool),
    },
    Column {
        name: "vpn",
        kind: Kind::Bool,
        nullable: true,
        doc: "whether the session looks like it came through a VPN or relay",
        get: |r| r.vpn.map_or(Cell::Null, Cell::Bool),
    },
    Column {
        name: "ja4",
        kind: Kind::Text,
        nullable: true,
        doc: "the TLS client's JA4, when Vigil or a trusted proxy terminated TLS",
        get: |r| Cell::optional_text(r.ja4.as_deref()),
    },
];

export_routes! {
    listing: Sessions,
    scope: ListSessions = "sessions:list",
    rows: "export_sessions" at "/v1/sessions/export",
    schema: "export_sessions_schema" at "/v1/sessions/export/schema",
    path(),
    filters(crate::sessions::SessionFilters),
    tenancy: |caller| (caller.organization.id, caller.environment()),
}

/// The sessions of a window, newest first, with the list's filters: `verdict` picks in the
/// store, `search` among the page's digests.
#[derive(Default)]
pub(super) struct Sessions {
    verdict: Option<String>,
    search: Option<String>,
}

impl Listing for Sessions {
    const EXPORT: &'static str = "sessions";
    const COLUMNS: &'static [Column<Row>] = COLUMNS;
    const FILTERS: &'static [&'static str] = &["verdict", "search"];

    type Row = Row;

    fn from_query(query: &QueryParams) -> Result<Self, ApiError> {
        let verdict = query.one_of("verdict", &VERDICTS)?.map(str::to_owned);
        let search = query
            .get("search")
            .filter(|s| !s.is_empty())
            .map(str::to_owned);
        Ok(Sessions { verdict, search })
    }

    /// `verdict` picks in the store.
    async fn page(&self, at: Page<'_, SessionId>) -> Result<Vec<Row>, ApiError> {
        let verdict = self.verdict.as_deref();
        let (org, env) = (at.org, at.env);
        Ok(at
            .store
            .list_session_digests(org, env, verdict, Some(at.before), at.limit)
            .await?)
    }

    /// `search` among the page's digests: the session's id, its visitor's, its address or part
    /// of its URL.
    fn keep(&self, digest: &Row) -> bool {
        self.search.as_ref().is_none_or(|q| {
            digest.session_id.to_string() == *q
                || digest.visitor_id.is_some_and(|v| v.to_string() == *q)
                || digest.ip_address == *q
                || digest.url.contains(q.as_str())
        })
    }
}

impl Walked for Row {
    type Id = SessionId;

    fn id(&self) -> SessionId {
        self.session_id
    }
}
