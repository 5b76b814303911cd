//! Webhook endpoints under `/v1/organizations/{organizationId}/webhooks/endpoints`
//! (docs/api.md#webhook-endpoints; docs/architecture.md: #scopes, #environments, #webhooks):
//! create, list, get, update and delete (which disables), and signing-secret rotation, in the
//! calling key's environment. The signing secret (`whsec_` then the base64 of 32 random bytes) is
//! shown in full once, in the create or rotation answer; reads show its last four characters. It is
//! stored sealed under the server secret, because the dispatcher signs with it.

use axum::extract::State;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use edge::body::{
    Fields, FromPath, JsonObject, PathParams, QueryParams, Reply, RequestBody, RequestBodyIn,
};
use edge::openapi::{BodyErrors, PageQuery, SecretKeyErrors};
use edge::pagination::{encode_cursor, scan_page};
use edge::policy::{ManageWebhooks, ReadWebhooks};
use edge::{ApiError, AuthContext, SecretKey};
use rand::TryRngCore;
use rand::rngs::OsRng;
use schemas::ErrorCode;
use schemas::EventId;
use schemas::credential::Environment;
use schemas::error::ErrorEnvelope;
use schemas::events::{self, Event, EventData, EventSubject, EventType};
use schemas::ids::OrgId;
use schemas::ids::WebhookEndpointId;
use schemas::resources::{List, Pagination, Single};
use schemas::time::{self, Timestamp};
use schemas::validate;
use sender::outbound::{self, Destinations};
use serde::Serialize;
use store::{
    EndpointCaps, EndpointStatus, EndpointWrite, EventRecord, PreviousSecret, WebhookEndpointRecord,
};

use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::{AdminState, OrgPath, own_organization};

const SECRET_PREFIX: &str = "whsec_";

pub fn router() -> OpenApiRouter<AdminState> {
    OpenApiRouter::new()
        .routes(routes!(list, create))
        .routes(routes!(read, update, disable))
        .routes(routes!(rotate))
        .routes(routes!(test))
}

/// The path of one endpoint, for the OpenAPI description.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Path, names("organizationId", "endpointId"))]
struct EndpointPath(
    /// The caller's organization.
    #[allow(dead_code)]
    OrgId,
    /// An endpoint of the caller's environment; any other is a 404.
    #[allow(dead_code)]
    WebhookEndpointId,
);

/// A webhook endpoint in the interface's shape.
#[derive(Serialize, utoipa::ToSchema)]
struct Endpoint {
    id: WebhookEndpointId,
    #[schema(value_type = String, pattern = "^webhook_endpoint$")]
    object: &'static str,
    environment: Environment,
    name: String,
    url: String,
    #[schema(value_type = String, pattern = "^(active|disabled)$")]
    status: EndpointStatus,
    event_types: Vec<EventType>,
    /// In full in the create answer only; afterwards `whsec_••••` and its last four characters.
    signing_secret: String,
    #[serde(serialize_with = "time::ser")]
    #[schema(value_type = String, format = DateTime)]
    created_at: Timestamp,
    #[serde(serialize_with = "time::ser")]
    #[schema(value_type = String, format = DateTime)]
    updated_at: Timestamp,
}

/// The body of `POST .../webhooks/endpoints`.
// Read under the operator's `--allow-private-webhooks`, which decides what a URL may be.
#[derive(utoipa::ToSchema, RequestBody)]
#[request_body(context = Destinations, check = NewEndpoint::distinct_types)]
struct NewEndpoint {
    #[schema(
        min_length = 1,
        max_length = 200,
        pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f\\u061c\\u200e\\u200f\\u202a-\\u202e\\u2066-\\u2069]*$"
    )]
    #[member(check = validate::name)]
    name: String,
    /// Where deliveries go: an absolute `https` URL whose host is a public address.
    #[schema(value_type = String, format = "uri")]
    #[member(parse_in = Destinations::url)]
    url: url::Url,
    /// At least one, none twice.
    #[schema(min_items = 1)]
    event_types: Vec<EventType>,
}

impl NewEndpoint {
    fn distinct_types(&mut self, f: &mut Fields, _: &Destinations) {
        distinct(f, &self.event_types);
    }
}

/// The body of `PATCH .../webhooks/endpoints/{endpointId}`: any subset. The signing secret is
/// the server's to make (`.../rotations`).
#[derive(utoipa::ToSchema, RequestBody)]
#[request_body(
    context = Destinations,
    forbid = ["signing_secret"],
    because = "is made by the server",
    check = EndpointChange::distinct_types
)]
struct EndpointChange {
    #[schema(
        nullable = false,
        min_length = 1,
        max_length = 200,
        pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f\\u061c\\u200e\\u200f\\u202a-\\u202e\\u2066-\\u2069]*$"
    )]
    #[member(check = validate::name)]
    name: Option<String>,
    #[schema(nullable = false, value_type = Option<String>, format = "uri")]
    #[member(parse_in = Destinations::url)]
    url: Option<url::Url>,
    #[schema(nullable = false, min_items = 1)]
    event_types: Option<Vec<EventType>>,
    #[schema(nullable = false, value_type = Option<String>, pattern = "^(active|disabled)$")]
    status: Option<EndpointStatus>,
}

impl EndpointChange {
    fn distinct_types(&mut self, f: &mut Fields, _: &Destinations) {
        if let Some(types) = &self.event_types {
            distinct(f, types);
        }
    }
}

/// The operator's rule for where deliveries may go.
fn outbound_rules(state: &AdminState) -> Destinations {
    Destinations {
        allow_private: state.allow_private_webhooks,
    }
}

/// An endpoint names each event type once.
fn distinct(f: &mut Fields, types: &[EventType]) {
    let mut unique = types.to_vec();
    unique.sort_by_key(|t| t.as_str());
    unique.dedup();
    if unique.len() != types.len() {
        f.issue(
            "event_types",
            "must not name a type twice",
            Some("array"),
            None,
        );
    }
}

fn resource(state: &AdminState, e: &WebhookEndpointRecord, secret: Option<&str>) -> Endpoint {
    Endpoint {
        id: e.id,
        object: "webhook_endpoint",
        environment: e.environment,
        name: e.name.clone(),
        url: e.url.clone(),
        status: e.status,
        event_types: e.event_types.clone(),
        signing_secret: match secret {
            Some(s) => s.to_owned(),
            None => masked(state, e),
        },
        created_at: e.created_at,
        updated_at: e.updated_at,
    }
}

/// `whsec_••••` and the secret's last four characters, enough to tell two secrets apart.
fn masked(state: &AdminState, e: &WebhookEndpointRecord) -> String {
    let opened = state
        .auth
        .secret
        .open(
            &e.sealed_secret,
            &WebhookEndpointRecord::secret_context(e.organization_id, e.id),
        )
        .and_then(|s| String::from_utf8(s).ok());
    let tail = opened
        .as_deref()
        .and_then(|s| s.get(s.len().saturating_sub(4)..))
        .unwrap_or("");
    format!("{SECRET_PREFIX}••••{tail}")
}

fn new_secret() -> String {
    let mut bytes = [0u8; 32];
    OsRng
        .try_fill_bytes(&mut bytes)
        .expect("the OS random source is readable");
    format!("{SECRET_PREFIX}{}", STANDARD.encode(bytes))
}

/// Active endpoints an organization may have in one environment: every event is fanned out
/// to each, so their number bounds the work (and the outbound requests) one event makes.
pub const MAX_ACTIVE_ENDPOINTS: usize = 20;
/// Endpoints an organization may have in one environment, disabled ones included: a disabled
/// endpoint is kept with its deliveries, so without it creating and deleting would grow the
/// table without end.
pub const MAX_ENDPOINTS: usize = 100;

/// The caps the store checks with every write of an endpoint (docs/api.md#webhook-endpoints).
const CAPS: EndpointCaps = EndpointCaps {
    active: MAX_ACTIVE_ENDPOINTS,
    total: MAX_ENDPOINTS,
};

/// Writes a changed endpoint, under the caps (enabling one counts).
async fn write_change(
    state: &AdminState,
    endpoint: &WebhookEndpointRecord,
) -> Result<(), ApiError> {
    written(
        state
            .auth
            .store
            .update_webhook_endpoint(endpoint, CAPS)
            .await?,
    )
}

/// What the store's answer to a write of an endpoint means for the request.
fn written(write: EndpointWrite) -> Result<(), ApiError> {
    match write {
        EndpointWrite::Written => Ok(()),
        EndpointWrite::Missing => Err(ApiError::not_found("webhook endpoint")),
        EndpointWrite::ActiveCapReached => Err(ApiError::new(
            ErrorCode::WebhookEndpointLimitReached,
            format!(
                "the organization has {MAX_ACTIVE_ENDPOINTS} active webhook endpoints in this \
                 environment already; delete one it no longer needs first"
            ),
        )),
        EndpointWrite::TotalCapReached => Err(ApiError::new(
            ErrorCode::WebhookEndpointLimitReached,
            format!(
                "the organization has {MAX_ENDPOINTS} webhook endpoints in this environment, \
                 disabled ones included; change and enable a disabled one instead"
            ),
        )),
    }
}

/// Refuses a URL whose host resolves to a non-public address (docs/architecture.md#webhooks), as a
/// 422 on `url`.
async fn destination(url: &url::Url, allow_private: bool) -> Result<(), ApiError> {
    outbound::resolve_public(url, allow_private)
        .await
        .map(|_| ())
        .map_err(|issue| {
            ApiError::invalid_field(
                "url",
                issue,
                Some(serde_json::Value::String(url.to_string())),
            )
        })
}

async fn stored(
    state: &AdminState,
    ctx: &AuthContext,
    params: &PathParams,
) -> Result<WebhookEndpointRecord, ApiError> {
    let org = own_organization(ctx, params)?;
    let id: WebhookEndpointId = FromPath::from_path(params)?;
    state
        .auth
        .store
        .get_webhook_endpoint(org, ctx.environment(), id)
        .await?
        .ok_or_else(|| ApiError::not_found("webhook endpoint"))
}

/// Registers an endpoint in the caller's environment; its signing secret is shown in full here
/// only.
#[utoipa::path(
    post,
    operation_id = "create_webhook_endpoint",
    path = "/v1/organizations/{organizationId}/webhooks/endpoints",
    tag = "webhook endpoints",
    params(OrgPath),
    request_body = NewEndpoint,
    security(("secret_key" = ["organizations:update"])),
    responses(
        (status = 201, description = "The endpoint, with its signing secret.", body = Single<Endpoint>),
        (status = 404, description = "`resource.not_found`: not the caller's organization.", body = ErrorEnvelope),
        (status = 409, description = "`webhook.endpoint_limit_reached`: 20 active endpoints, or 100 in all, already.", body = ErrorEnvelope),
        BodyErrors,
        SecretKeyErrors,
    )
)]
async fn create(
    State(state): State<AdminState>,
    caller: SecretKey<ManageWebhooks>,
    params: PathParams,
    body: JsonObject,
) -> Result<Reply, ApiError> {
    let org = own_organization(&caller, &params)?;
    let NewEndpoint {
        name,
        url,
        event_types,
    } = NewEndpoint::from_object_in(body, &outbound_rules(&state))?;
    destination(&url, state.allow_private_webhooks).await?;
    let id = WebhookEndpointId::generate();
    let secret = new_secret();
    let now = time::now();
    let endpoint = WebhookEndpointRecord {
        id,
        organization_id: org,
        environment: caller.environment(),
        name,
        url: url.to_string(),
        status: EndpointStatus::Active,
        event_types,
        sealed_secret: state.auth.secret.seal(
            secret.as_bytes(),
            &WebhookEndpointRecord::secret_context(org, id),
        ),
        previous_secret: None,
        created_at: now,
        updated_at: now,
    };
    // Every event is sent to every endpoint: their number is bounded, in the store's own step.
    written(
        state
            .auth
            .store
            .create_webhook_endpoint(&endpoint, CAPS)
            .await?,
    )?;
    Ok(Reply::created(resource(&state, &endpoint, Some(&secret))).showing_secrets())
}

/// The caller's environment's endpoints, newest first.
#[utoipa::path(
    get,
    operation_id = "list_webhook_endpoints",
    path = "/v1/organizations/{organizationId}/webhooks/endpoints",
    tag = "webhook endpoints",
    params(
        OrgPath,
        PageQuery,
    ),
    security(("secret_key" = ["organizations:read"])),
    responses(
        (status = 200, description = "A page of endpoints.", body = List<Endpoint>),
        (status = 422, description = "`request.validation_failed`: a query parameter or path id (`details.parameter_set`).", body = ErrorEnvelope),
        (status = 404, description = "`resource.not_found`: not the caller's organization.", body = ErrorEnvelope),
        SecretKeyErrors,
    )
)]
async fn list(
    State(state): State<AdminState>,
    caller: SecretKey<ReadWebhooks>,
    params: PathParams,
    query: QueryParams,
) -> Result<Reply, ApiError> {
    let org = own_organization(&caller, &params)?;
    query.only(&["limit", "cursor"])?;
    let limit = query.limit(50, 200)? as usize;
    let env = caller.environment();
    let binding = format!("webhook_endpoints:{org}:{env}");
    let after = query.cursor::<WebhookEndpointId>(&state.auth.secret, &binding)?;
    let store = &state.auth.store;
    let page = scan_page(
        limit,
        false,
        limit + 1,
        after,
        move |after, n| store.list_webhook_endpoints(org, env, after, n),
        |e: &WebhookEndpointRecord| e.id,
        |_| true,
    )
    .await?;
    let next_cursor = match (page.has_more, page.next) {
        (true, Some(id)) => Some(encode_cursor(&state.auth.secret, &binding, &id.to_string())),
        _ => None,
    };
    Ok(Reply::list(
        page.rows
            .iter()
            .map(|e| resource(&state, e, None))
            .collect(),
        Pagination {
            limit: limit as u32,
            has_more: page.has_more,
            next_cursor,
        },
    ))
}

/// One endpoint.
#[utoipa::path(
    get,
    operation_id = "read_webhook_endpoint",
    path = "/v1/organizations/{organizationId}/webhooks/endpoints/{endpointId}",
    tag = "webhook endpoints",
    params(EndpointPath),
    security(("secret_key" = ["organizations:read"])),
    responses(
        (status = 200, description = "The endpoint.", body = Single<Endpoint>),
        (status = 404, description = "`resource.not_found`: no such endpoint for the caller.", body = ErrorEnvelope),
        SecretKeyErrors,
    )
)]
async fn read(
    State(state): State<AdminState>,
    caller: SecretKey<ReadWebhooks>,
    params: PathParams,
) -> Result<Reply, ApiError> {
    let endpoint = stored(&state, &caller, &params).await?;
    Ok(Reply::ok(resource(&state, &endpoint, None)))
}

/// Renames an endpoint, moves it, changes its event types, or disables or reactivates it.
#[utoipa::path(
    patch,
    operation_id = "update_webhook_endpoint",
    path = "/v1/organizations/{organizationId}/webhooks/endpoints/{endpointId}",
    tag = "webhook endpoints",
    params(EndpointPath),
    request_body = EndpointChange,
    security(("secret_key" = ["organizations:update"])),
    responses(
        (status = 200, description = "The endpoint as changed.", body = Single<Endpoint>),
        (status = 404, description = "`resource.not_found`: no such endpoint for the caller.", body = ErrorEnvelope),
        (status = 409, description = "`webhook.endpoint_limit_reached`: enabling a 21st active endpoint.", body = ErrorEnvelope),
        BodyErrors,
        SecretKeyErrors,
    )
)]
async fn update(
    State(state): State<AdminState>,
    caller: SecretKey<ManageWebhooks>,
    params: PathParams,
    body: JsonObject,
) -> Result<Reply, ApiError> {
    let mut endpoint = stored(&state, &caller, &params).await?;
    let EndpointChange {
        name,
        url,
        event_types: types,
        status,
    } = EndpointChange::from_object_in(body, &outbound_rules(&state))?;
    if let Some(url) = &url {
        destination(url, state.allow_private_webhooks).await?;
        endpoint.url = url.to_string();
    }
    if let Some(name) = name {
        endpoint.name = name;
    }
    if let Some(types) = types {
        endpoint.event_types = types;
    }
    if let Some(status) = status {
        endpoint.status = status;
    }
    endpoint.updated_at = time::now();
    write_change(&state, &endpoint).await?;
    Ok(Reply::ok(resource(&state, &endpoint, None)))
}

/// `DELETE`: the endpoint is disabled, not erased (docs/architecture.md#webhooks), so its
/// deliveries stay readable.
#[utoipa::path(
    delete,
    operation_id = "disable_webhook_endpoint",
    path = "/v1/organizations/{organizationId}/webhooks/endpoints/{endpointId}",
    tag = "webhook endpoints",
    params(EndpointPath),
    security(("secret_key" = ["organizations:update"])),
    responses(
        (status = 200, description = "The endpoint, disabled.", body = Single<Endpoint>),
        (status = 404, description = "`resource.not_found`: no such endpoint for the caller.", body = ErrorEnvelope),
        SecretKeyErrors,
    )
)]
async fn disable(
    State(state): State<AdminState>,
    caller: SecretKey<ManageWebhooks>,
    params: PathParams,
) -> Result<Reply, ApiError> {
    let mut endpoint = stored(&state, &caller, &params).await?;
    if endpoint.status != EndpointStatus::Disabled {
        endpoint.status = EndpointStatus::Disabled;
        endpoint.updated_at = time::now();
        write_change(&state, &endpoint).await?;
    }
    Ok(Reply::ok(resource(&state, &endpoint, None)))
}

/// `POST …/{endpointId}/rotations`: a new signing secret, shown in full in the answer only.
/// The one it replaces keeps signing beside it for `--rotation-grace`, so a receiver can
/// deploy the new secret while deliveries carry both signatures (docs/architecture.md#webhooks); a
/// secret still in its overlap from an earlier rotation stops signing at once.
#[utoipa::path(
    post,
    operation_id = "rotate_webhook_endpoint_secret",
    path = "/v1/organizations/{organizationId}/webhooks/endpoints/{endpointId}/rotations",
    tag = "webhook endpoints",
    params(EndpointPath),
    security(("secret_key" = ["organizations:update"])),
    responses(
        (status = 200, description = "The endpoint, with its new signing secret.", body = Single<Endpoint>),
        (status = 404, description = "`resource.not_found`: no such endpoint for the caller.", body = ErrorEnvelope),
        SecretKeyErrors,
    )
)]
async fn rotate(
    State(state): State<AdminState>,
    caller: SecretKey<ManageWebhooks>,
    params: PathParams,
) -> Result<Reply, ApiError> {
    let mut endpoint = stored(&state, &caller, &params).await?;
    let secret = new_secret();
    let now = time::now();
    let sealed = state.auth.secret.seal(
        secret.as_bytes(),
        &WebhookEndpointRecord::secret_context(endpoint.organization_id, endpoint.id),
    );
    endpoint.previous_secret = Some(PreviousSecret {
        sealed: std::mem::replace(&mut endpoint.sealed_secret, sealed),
        until: now + state.rotation_grace,
    });
    endpoint.updated_at = now;
    write_change(&state, &endpoint).await?;
    Ok(Reply::ok(resource(&state, &endpoint, Some(&secret))).showing_secrets())
}

/// `POST …/{endpointId}/test`: emits a `webhook.test` event for this endpoint only (its
/// `data.endpoint_id` names it; docs/architecture.md#events). The event is published to `events.v1`
/// first and then recorded, as the processor does with session events, so one that is listed was
/// published. Answers the event (201). A disabled endpoint's test event is recorded but not
/// delivered.
#[utoipa::path(
    post,
    operation_id = "test_webhook_endpoint",
    path = "/v1/organizations/{organizationId}/webhooks/endpoints/{endpointId}/test",
    tag = "webhook endpoints",
    params(EndpointPath),
    security(("secret_key" = ["organizations:update"])),
    responses(
        (status = 201, description = "The `webhook.test` event.", body = Single<Event>),
        (status = 404, description = "`resource.not_found`: no such endpoint for the caller.", body = ErrorEnvelope),
        (status = 503, description = "`service.unavailable`: the log cannot take the event now.", body = ErrorEnvelope),
        SecretKeyErrors,
    )
)]
async fn test(
    State(state): State<AdminState>,
    caller: SecretKey<ManageWebhooks>,
    params: PathParams,
) -> Result<Reply, ApiError> {
    let endpoint = stored(&state, &caller, &params).await?;
    let data = EventData::WebhookTest(events::WebhookTest {
        endpoint_id: endpoint.id,
        message: "A test event from Vigil: this endpoint is reachable and verifies its signature."
            .to_owned(),
    });
    let event = EventRecord {
        id: EventId::generate(),
        organization_id: endpoint.organization_id,
        environment: endpoint.environment,
        event_type: data.event_type(),
        subject: EventSubject {
            kind: "webhook_endpoint".into(),
            id: endpoint.id.to_string(),
        },
        data: data.into_value(),
        created_at: time::now(),
    };
    crate::emit_event(&state, &event).await?;
    Ok(Reply::created(event.to_event(Vec::new())))
}
