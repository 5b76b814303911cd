//! `GET /v1/fingerprints/export` (scope `fingerprints:list`): one row per visitor fingerprint
//! of the key's organization and environment first seen in the window, newest first:
//! lifecycle, latest request, where its token was stored, and its anchors.
//! `after=<visitor id>` resumes.

use edge::ApiError;
use edge::policy::ListFingerprints;
use schemas::VisitorId;
use store::VisitorRecord;

use super::columns::{Cell, Column, Kind};
use super::windowed::{Listing, Page, Walked};

/// The columns of the fingerprints export, version 1 (docs/analysts.md#fingerprints).
pub static COLUMNS: &[Column<VisitorRecord>] = &[
    Column {
        name: "visitor_id",
        kind: Kind::Text,
        nullable: false,
        doc: "the fingerprint's id (vid_)",
        get: |v| Cell::text(v.id.to_string()),
    },
    Column {
        name: "first_seen_at",
        kind: Kind::Time,
        nullable: false,
        doc: "when a session was first linked to it",
        get: |v| Cell::Time(v.first_seen_at),
    },
    Column {
        name: "last_seen_at",
        kind: Kind::Time,
        nullable: false,
        doc: "when a session was last linked to it",
        get: |v| Cell::Time(v.last_seen_at),
    },
    Column {
        name: "expires_at",
        kind: Kind::Time,
        nullable: false,
        doc: "when it is forgotten unless seen again",
        get: |v| Cell::Time(v.expires_at),
    },
    Column {
        name: "seen_count",
        kind: Kind::Int64,
        nullable: false,
        doc: "how many sessions were linked to it",
        get: |v| Cell::Int64(i64::try_from(v.seen_count).unwrap_or(i64::MAX)),
    },
    Column {
        name: "user_agent",
        kind: Kind::Text,
        nullable: false,
        doc: "the latest session's HTTP user agent",
        get: |v| Cell::text(v.latest_request.user_agent.clone()),
    },
    Column {
        name: "ip_address",
        kind: Kind::Text,
        nullable: false,
        doc: "the latest session's client address",
        get: |v| Cell::text(v.latest_request.ip_address.clone()),
    },
    Column {
        name: "stored_in_cookies",
        kind: Kind::Bool,
        nullable: false,
        doc: "the visitor token was found in a cookie",
        get: |v| Cell::Bool(v.storage.cookies),
    },
    Column {
        name: "stored_in_local_storage",
        kind: Kind::Bool,
        nullable: false,
        doc: "the visitor token was found in localStorage",
        get: |v| Cell::Bool(v.storage.local_storage),
    },
    Column {
        name: "stored_in_indexed_db",
        kind: Kind::Bool,
        nullable: false,
        doc: "the visitor token was found in IndexedDB",
        get: |v| Cell::Bool(v.storage.indexed_db),
    },
    Column {
        name: "stored_in_service_worker",
        kind: Kind::Bool,
        nullable: false,
        doc: "the visitor token was found by a service worker",
        get: |v| Cell::Bool(v.storage.service_worker),
    },
    Column {
        name: "stored_in_window_name",
        kind: Kind::Bool,
        nullable: false,
        doc: "the visitor token was found in window.name",
        get: |v| Cell::Bool(v.storage.window_name),
    },
    Column {
        name: "webgl_hash",
        kind: Kind::Text,
        nullable: true,
        doc: "the WebGL rendering anchor",
        get: |v| Cell::optional_text(v.anchors.webgl_hash.clone()),
    },
    Column {
        name: "parameters_hash",
        kind: Kind::Text,
        nullable: true,
        doc: "the WebGL parameters anchor",
        get: |v| Cell::optional_text(v.anchors.parameters_hash.clone()),
    },
    Column {
        name: "audio_hash",
        kind: Kind::Text,
        nullable: true,
        doc: "the audio rendering anchor",
        get: |v| Cell::optional_text(v.anchors.audio_hash.clone()),
    },
    Column {
        name: "recent_sessions",
        kind: Kind::TextList,
        nullable: false,
        doc: "the most recent linked sessions' ids, newest first",
        get: |v| {
            Cell::text_list(
                v.recent_sessions
                    .iter()
                    .map(|s| s.to_string())
                    .collect::<Vec<_>>(),
            )
        },
    },
];

export_routes! {
    listing: Visitors,
    scope: ListFingerprints = "fingerprints:list",
    rows: "export_fingerprints" at "/v1/fingerprints/export",
    schema: "export_fingerprints_schema" at "/v1/fingerprints/export/schema",
    path(),
    filters(),
    tenancy: |caller| (caller.organization.id, caller.environment()),
}

/// The visitors first seen in a window (by id, minted when first seen), newest first.
#[derive(Default)]
pub(super) struct Visitors;

impl Listing for Visitors {
    const EXPORT: &'static str = "fingerprints";
    const COLUMNS: &'static [Column<VisitorRecord>] = COLUMNS;

    type Row = VisitorRecord;

    async fn page(&self, at: Page<'_, VisitorId>) -> Result<Vec<VisitorRecord>, ApiError> {
        let (org, env) = (at.org, at.env);
        Ok(at
            .store
            .list_visitors(org, env, Some(at.before), at.limit)
            .await?)
    }
}

impl Walked for VisitorRecord {
    type Id = VisitorId;

    fn id(&self) -> VisitorId {
        self.id
    }
}
