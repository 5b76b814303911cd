//! `GET /v1/organizations/{organizationId}/events/export` (scope `organizations:read`): one row
//! per event of the key's environment created in the window, newest first, with its data as
//! JSON text and how its webhook deliveries went. `after=<event id>` resumes.

use edge::ApiError;
use edge::body::{FromPath, PathParams};
use edge::policy::ListEvents;
use schemas::{EventId, OrgId};
use store::{DeliveryStatus, EventRecord, WebhookDeliveryRecord};

use super::columns::{Cell, Column, Kind};
use super::windowed::{Listing, Page, Walked};

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

export_routes! {
    listing: Events,
    scope: ListEvents = "organizations:read",
    rows: "export_events" at "/v1/organizations/{organizationId}/events/export",
    schema: "export_events_schema" at "/v1/organizations/{organizationId}/events/export/schema",
    path(("organizationId" = schemas::OrgId, Path, description = "The caller's organization."),),
    filters(),
    tenancy: |caller, params| (own_organization(&caller, &params)?, caller.environment()),
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

impl Listing for Events {
    const EXPORT: &'static str = "events";
    const COLUMNS: &'static [Column<Row>] = COLUMNS;

    type Row = Row;

    /// Each event of the page in the window with its deliveries, read one event at a time.
    async fn page(&self, at: Page<'_, EventId>) -> Result<Vec<Row>, ApiError> {
        let (store, org, env) = (at.store, at.org, at.env);
        let events = store
            .list_events(org, env, Some(at.before), at.limit)
            .await?;
        let mut rows = Vec::with_capacity(events.len());
        for event in events.into_iter().take_while(|e| e.id.ulid() >= at.lower) {
            let deliveries = store.list_event_deliveries(org, env, event.id).await?;
            rows.push(Row { event, deliveries });
        }
        Ok(rows)
    }
}

impl Walked for Row {
    type Id = EventId;

    fn id(&self) -> EventId {
        self.event.id
    }
}
