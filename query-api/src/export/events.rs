//! `GET /v1/organizations/{organizationId}/events/export` (scope `organizations:read`): one row
//! per event of the key's environment created in the window, newest first, with its data as
//! JSON text and how its webhook deliveries went. `after=<event id>` resumes.

use async_trait::async_trait;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use edge::body::{PathParams, QueryParams, path_param};
use edge::policy::ListEvents;
use edge::{ApiError, SecretKey};
use schemas::credential::Environment;
use schemas::{EventId, OrgId};
use store::{DeliveryStatus, EventRecord, Store, WebhookDeliveryRecord};

use super::columns::{Cell, Column, Kind};
use super::{Request, Source, Window};
use crate::QueryState;

pub(super) const EXPORT: &str = "events";
const EXTRA: &[&str] = &["after"];

/// An event with its deliveries.
pub struct Row {
    event: EventRecord,
    deliveries: Vec<WebhookDeliveryRecord>,
}

impl Row {
    fn count(&self, status: DeliveryStatus) -> Cell<'_> {
        Cell::Int64(
            self.deliveries
                .iter()
                .filter(|d| d.status == status)
                .count() as i64,
        )
    }
}

/// The columns of the events export, version 1 (docs/analysts.md#events).
pub static COLUMNS: &[Column<Row>] = &[
    Column {
        name: "event_id",
        kind: Kind::Text,
        nullable: false,
        doc: "the event's id (wevt_)",
        get: |r| Cell::text(r.event.id.to_string()),
    },
    Column {
        name: "type",
        kind: Kind::Enum,
        nullable: false,
        doc: "the event's type, such as session.result.persisted",
        get: |r| Cell::text(r.event.event_type.as_str()),
    },
    Column {
        name: "subject_kind",
        kind: Kind::Enum,
        nullable: false,
        doc: "what the event is about (session, gate_session, ...)",
        get: |r| Cell::text(r.event.subject.kind.clone()),
    },
    Column {
        name: "subject_id",
        kind: Kind::Text,
        nullable: false,
        doc: "the id of what the event is about",
        get: |r| Cell::text(r.event.subject.id.clone()),
    },
    Column {
        name: "created_at",
        kind: Kind::Time,
        nullable: false,
        doc: "when the event happened",
        get: |r| Cell::Time(r.event.created_at),
    },
    Column {
        name: "data",
        kind: Kind::Text,
        nullable: false,
        doc: "the event's data, as JSON text",
        get: |r| Cell::text(r.event.data.to_string()),
    },
    Column {
        name: "deliveries",
        kind: Kind::Int64,
        nullable: false,
        doc: "webhook deliveries made of it, one per endpoint",
        get: |r| Cell::Int64(r.deliveries.len() as i64),
    },
    Column {
        name: "deliveries_succeeded",
        kind: Kind::Int64,
        nullable: false,
        doc: "deliveries an endpoint accepted",
        get: |r| r.count(DeliveryStatus::Succeeded),
    },
    Column {
        name: "deliveries_failed",
        kind: Kind::Int64,
        nullable: false,
        doc: "deliveries given up on",
        get: |r| r.count(DeliveryStatus::Failed),
    },
    Column {
        name: "deliveries_pending",
        kind: Kind::Int64,
        nullable: false,
        doc: "deliveries still being attempted",
        get: |r| r.count(DeliveryStatus::Pending),
    },
    Column {
        name: "last_delivery_at",
        kind: Kind::Time,
        nullable: true,
        doc: "when a delivery of it last changed",
        get: |r| Cell::optional_time(r.deliveries.iter().map(|d| d.updated_at).max()),
    },
];

#[utoipa::path(
    get,
    operation_id = "export_events",
    path = "/v1/organizations/{organizationId}/events/export",
    tag = "exports",
    params(
        ("organizationId" = schemas::OrgId, Path, description = "The caller's organization."),
        super::ExportQuery,
    ),
    security(("secret_key" = ["organizations:read"])),
    responses(
        (status = 200, description = "The events of the window, newest first.", content(
            (edge::openapi::Binary = "application/vnd.apache.arrow.stream"),
            (String = "application/x-ndjson"),
        )),
        super::ExportErrors,
        edge::openapi::SecretKeyErrors,
    )
)]
pub(super) async fn export(
    State(state): State<QueryState>,
    caller: SecretKey<ListEvents>,
    params: PathParams,
    query: QueryParams,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let org = own_organization(&caller, &params)?;
    let tenancy = (org, caller.environment());
    let (request, source) = open(state.auth.store.clone(), tenancy, &query, &headers)?;
    super::stream(&state, &caller, EXPORT, request, source)
}

/// The export's request and its walk of the store, from the query.
pub(super) fn open(
    store: Store,
    tenancy: (OrgId, Environment),
    query: &QueryParams,
    headers: &HeaderMap,
) -> Result<(Request<Row>, Events), ApiError> {
    let (request, after) = read(query, headers)?;
    let source = Events::new(store, tenancy, request.window, after);
    Ok((request, source))
}

/// The export's query, every parameter checked: the request and its `after`.
fn read(
    query: &QueryParams,
    headers: &HeaderMap,
) -> Result<(Request<Row>, Option<EventId>), ApiError> {
    let request = Request::parse(query, headers, COLUMNS, EXTRA)?;
    let after =
        super::after::<EventId>(query, "must be the id (wevt_) of the last event received")?;
    Ok((request, after))
}

#[utoipa::path(
    get,
    operation_id = "export_events_schema",
    path = "/v1/organizations/{organizationId}/events/export/schema",
    tag = "exports",
    params(
        ("organizationId" = schemas::OrgId, Path, description = "The caller's organization."),
        super::ExportQuery,
    ),
    security(("secret_key" = ["organizations:read"])),
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
    caller: SecretKey<ListEvents>,
    params: PathParams,
    query: QueryParams,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    own_organization(&caller, &params)?;
    super::schema_only(EXPORT, read(&query, &headers)?.0)
}

/// The organization in the path, which must be the caller's own: any other is a 404.
fn own_organization(caller: &edge::AuthContext, params: &PathParams) -> Result<OrgId, ApiError> {
    let id: OrgId = path_param(params, "organizationId")?;
    if id != caller.organization.id {
        return Err(ApiError::not_found("organization"));
    }
    Ok(id)
}

/// A walk of one organization's and environment's events, newest first, from the window's end
/// (or `after`) down to its start, each with its deliveries.
pub(super) struct Events {
    store: Store,
    tenancy: (OrgId, Environment),
    after: EventId,
    lower: ulid::Ulid,
    exhausted: bool,
}

impl Events {
    fn new(
        store: Store,
        tenancy: (OrgId, Environment),
        window: Window,
        after: Option<EventId>,
    ) -> Self {
        let (lower, upper) = window.id_bounds();
        let upper = EventId::from_ulid(upper);
        Events {
            store,
            tenancy,
            after: after.filter(|a| *a < upper).unwrap_or(upper),
            lower,
            exhausted: false,
        }
    }
}

#[async_trait]
impl Source for Events {
    type Row = Row;

    async fn next(&mut self, limit: usize) -> Result<Vec<Row>, ApiError> {
        if self.exhausted {
            return Ok(Vec::new());
        }
        let (org, env) = self.tenancy;
        let mut page = self
            .store
            .list_events(org, env, Some(self.after), limit)
            .await?;
        self.exhausted = page.len() < limit;
        if let Some(cut) = page.iter().position(|e| e.id.ulid() < self.lower) {
            page.truncate(cut);
            self.exhausted = true;
        }
        if let Some(last) = page.last() {
            self.after = last.id;
        }
        let mut rows = Vec::with_capacity(page.len());
        for event in page {
            let deliveries = self.store.list_event_deliveries(org, env, event.id).await?;
            rows.push(Row { event, deliveries });
        }
        Ok(rows)
    }
}
