//! `GET /v1/organizations/{organizationId}/events` (docs/api.md#events; docs/architecture.md:
//! #scopes, #lists, #environments, #events): the organization's events in the calling key's
//! environment, newest first, filtered by type and by the webhook endpoint they were delivered to,
//! each with its webhook deliveries (those the store has: the dispatcher that makes them comes
//! next).

use axum::extract::State;
use edge::body::{PathParams, QueryParams, Reply};
use edge::openapi::{PageQuery, SecretKeyErrors};
use edge::pagination::{encode_cursor, scan_page};
use edge::policy::ListEvents;
use edge::{ApiError, SecretKey};
use schemas::EventId;
use schemas::error::ErrorEnvelope;
use schemas::events::EventType;
use schemas::ids::WebhookEndpointId;
use schemas::resources::List;
use schemas::resources::Pagination;
use schemas::time;
use serde_json::Value;
use store::{EventRecord, WebhookDeliveryRecord};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::{AdminState, OrgPath, own_organization};

/// How many stored events one filtered request reads at most, so a filter that matches little
/// cannot make a request scan a whole partition; the cursor resumes after them.
const SCAN_BUDGET: usize = 2_000;

pub fn router() -> OpenApiRouter<AdminState> {
    OpenApiRouter::new().routes(routes!(list))
}

/// The filters of one request.
struct Filter {
    event_type: Option<EventType>,
    /// The endpoint id as deliveries spell it.
    endpoint: Option<String>,
}

impl Filter {
    fn is_empty(&self) -> bool {
        self.event_type.is_none() && self.endpoint.is_none()
    }

    fn matches(&self, event: &EventRecord, deliveries: &[Value]) -> bool {
        self.event_type.is_none_or(|t| event.event_type == t)
            && self.endpoint.as_deref().is_none_or(|e| {
                deliveries
                    .iter()
                    .any(|d| d.get("endpoint_id").and_then(Value::as_str) == Some(e))
            })
    }
}

/// A delivery in the interface's shape (`webhook_delivery`). What an attempt has not told yet
/// (the endpoint's answer before the first attempt, an error once one succeeded) is left out:
/// the interface types those members as integer and strings, never null.
#[derive(serde::Serialize)]
struct Delivery<'a> {
    id: schemas::ids::WebhookDeliveryId,
    object: &'static str,
    event_id: EventId,
    endpoint_id: WebhookEndpointId,
    event_type: EventType,
    status: store::DeliveryStatus,
    attempts: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_status: Option<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_body: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a str>,
    #[serde(serialize_with = "time::ser")]
    created_at: time::Timestamp,
    #[serde(serialize_with = "time::ser")]
    updated_at: time::Timestamp,
}

fn delivery(d: &WebhookDeliveryRecord) -> Delivery<'_> {
    Delivery {
        id: d.id,
        object: "webhook_delivery",
        event_id: d.event_id,
        endpoint_id: d.endpoint_id,
        event_type: d.event_type,
        status: d.status,
        attempts: d.attempts,
        response_status: d.response_status,
        response_body: d.response_body.as_deref(),
        error: d.error.as_deref(),
        created_at: d.created_at,
        updated_at: d.updated_at,
    }
}

/// The caller's environment's events, newest first, each with its deliveries.
#[utoipa::path(
    get,
    operation_id = "list_events",
    path = "/v1/organizations/{organizationId}/events",
    tag = "events",
    params(
        OrgPath,
        PageQuery,
        ("type" = Option<EventType>, Query, description = "Events of this type only."),
        ("endpoint_id" = Option<WebhookEndpointId>, Query,
            description = "Only events that produced a delivery for this endpoint."),
    ),
    security(("secret_key" = ["organizations:read"])),
    responses(
        (status = 200, description = "A page of events.", body = List<schemas::events::Event>),
        (status = 422, description = "`request.validation_failed`: a query parameter or path id (`details.parameter_set`).", body = ErrorEnvelope),
        (status = 404, description = "`resource.not_found`: not the caller's organization.", body = ErrorEnvelope),
        SecretKeyErrors,
    )
)]
async fn list(
    State(state): State<AdminState>,
    caller: SecretKey<ListEvents>,
    params: PathParams,
    query: QueryParams,
) -> Result<Reply, ApiError> {
    let org = own_organization(&caller, &params)?;
    query.only(&["limit", "cursor", "type", "endpoint_id"])?;
    let limit = query.limit(50, 200)? as usize;
    let event_type = query
        .one_of("type", &EventType::ALL)?
        .and_then(EventType::parse);
    let endpoint = match query.get("endpoint_id") {
        None => None,
        Some(raw) => Some(raw.parse::<WebhookEndpointId>().map_err(|e| {
            ApiError::invalid_field(
                "endpoint_id",
                format!("{e} (pattern ^we_[0-9a-f]{{32}}$)"),
                Some(Value::String(raw.into())),
            )
            .with_parameter_set("query")
        })?),
    };
    let filter = Filter {
        event_type,
        endpoint: endpoint.map(|e| e.to_string()),
    };
    let env = caller.environment();
    let binding = format!("events:{org}:{env}");
    let after = query.cursor::<EventId>(&state.auth.secret, &binding)?;
    // Each event is read with its deliveries, which the endpoint filter looks at.
    let store = &state.auth.store;
    let page = scan_page(
        limit,
        !filter.is_empty(),
        SCAN_BUDGET,
        after,
        move |after, n| async move {
            let events = store.list_events(org, env, after, n).await?;
            let mut read = Vec::with_capacity(events.len());
            for event in events {
                let deliveries = store.list_event_deliveries(org, env, event.id).await?;
                let deliveries = deliveries
                    .iter()
                    .map(|d| serde_json::to_value(delivery(d)))
                    .collect::<Result<Vec<Value>, _>>()
                    .map_err(|e| store::StoreError::Corrupt {
                        table: "webhook_deliveries",
                        detail: e.to_string(),
                    })?;
                read.push((event, deliveries));
            }
            Ok::<_, store::StoreError>(read)
        },
        |(e, _): &(EventRecord, Vec<Value>)| e.id,
        |(e, deliveries)| filter.matches(e, deliveries),
    )
    .await?;
    let (has_more, next) = (page.has_more, page.next);
    let next_cursor = match (has_more, next) {
        (true, Some(id)) => Some(encode_cursor(&state.auth.secret, &binding, &id.to_string())),
        _ => None,
    };
    let events = page
        .rows
        .into_iter()
        .map(|(event, deliveries)| event.to_event(deliveries))
        .collect();
    Ok(Reply::list(
        events,
        Pagination {
            limit: limit as u32,
            has_more,
            next_cursor,
        },
    ))
}
