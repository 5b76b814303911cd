//! `GET /v1/organizations/{organizationId}/events/export` (scope `organizations:read`): one row
//! per event of the key's environment created in the window, newest first, with its data as
//! JSON text and how its webhook deliveries went. `after=<event id>` resumes.

use async_trait::async_trait;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use edge::body::{FromPath, PathParams, QueryParams};
use edge::policy::ListEvents;
use edge::{ApiError, SecretKey};
use schemas::credential::Environment;
use schemas::{EventId, OrgId};
use store::{DeliveryStatus, EventRecord, Store, WebhookDeliveryRecord};

use super::columns::{Cell, Column, Kind};
use super::windowed::Listing;
use crate::QueryState;

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
        super::ExportRows,
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
    let tenancy = (own_organization(&caller, &params)?, caller.environment());
    super::answer::<Events>(&state, &caller, tenancy, &query, &headers)
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
        super::ExportSchema,
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
    super::schema_of::<Events>(&query, &headers)
}

/// The organization in the path, which must be the caller's own: any other is a 404.
fn own_organization(caller: &edge::AuthContext, params: &PathParams) -> Result<OrgId, ApiError> {
    let id: OrgId = FromPath::from_path(params)?;
    if id != caller.organization.id {
        return Err(ApiError::not_found("organization"));
    }
    Ok(id)
}

/// The events of a window, newest first, each with its deliveries.
#[derive(Default)]
pub(super) struct Events;

#[async_trait]
impl Listing for Events {
    const EXPORT: &'static str = "events";
    const COLUMNS: &'static [Column<Row>] = COLUMNS;
    const AFTER: &'static str = "must be the id (wevt_) of the last event received";

    type Id = EventId;
    type Item = EventRecord;
    type Row = Row;

    fn id(event: &EventRecord) -> EventId {
        event.id
    }

    async fn page(
        &self,
        store: &Store,
        (org, env): (OrgId, Environment),
        before: EventId,
        limit: usize,
    ) -> Result<Vec<EventRecord>, ApiError> {
        Ok(store.list_events(org, env, Some(before), limit).await?)
    }

    async fn rows(
        &self,
        store: &Store,
        (org, env): (OrgId, Environment),
        page: Vec<EventRecord>,
    ) -> Result<Vec<Row>, ApiError> {
        let mut rows = Vec::with_capacity(page.len());
        for event in page {
            let deliveries = store.list_event_deliveries(org, env, event.id).await?;
            rows.push(Row { event, deliveries });
        }
        Ok(rows)
    }
}
