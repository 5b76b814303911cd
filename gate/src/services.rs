//! Gate services under `/v1/gate/services` (docs/gate.md#publishing-a-service;
//! docs/architecture.md: #scopes, #environments, #gate): create, list, get, update and delete (a
//! soft disable), in the calling key's environment.
//!
//! Only the interface's writable allowlist is accepted; any other member, nested ones included
//! (`branding.verified`, `status`, …), is a 422 naming it. A PATCH replaces each nested object
//! or array it names wholesale. The `webhook_secret` (at least 32 characters; `whsec_` and the
//! base64 of 32 random bytes when omitted) is shown in full only in the answer of the call
//! that set it, then as its last four characters; the id is fixed at creation; it is stored sealed, because Gate signs with
//! it. An organization has at most 5 services in each environment, disabled ones included
//! (`gate.service_limit_reached`). The built-in `vigil` service reads like any other and
//! cannot be changed.

use axum::extract::State;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use edge::body::{
    Fields, FromPath, GateServiceId, JsonObject, Member, PathParams, Reply, RequestBody,
    RequestBodyIn,
};
use edge::openapi::{BodyErrors, SecretKeyErrors};
use edge::policy::{ManageGateServices, ReadGateServices};
use edge::{ApiError, AuthContext, SecretKey};
use rand::TryRngCore;
use rand::rngs::OsRng;
use schemas::credential::Environment;
use schemas::error::ErrorCode;
use schemas::error::ErrorEnvelope;
use schemas::gate;
use schemas::resources::{List, Pagination, Single};
use schemas::time::{self, Timestamp};
use schemas::validate;
use sender::outbound::{self, Destinations};
use serde::Serialize;
use serde_json::Value;
use store::{
    GateBranding, GateConsent, GateEnvVar, GateSdk, GateServiceRecord, GateServiceStatus,
    GateServiceWrite,
};

use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use admin_api::AdminState;

pub fn router() -> OpenApiRouter<AdminState> {
    OpenApiRouter::new()
        .routes(routes!(list, create))
        .routes(routes!(read, update, disable))
}

/// A Gate service in the interface's shape.
#[derive(Serialize, utoipa::ToSchema)]
pub struct Service {
    id: String,
    #[schema(value_type = String, pattern = "^gate_service$")]
    object: &'static str,
    environment: Environment,
    #[schema(value_type = String, pattern = "^(active|disabled)$")]
    status: GateServiceStatus,
    discoverable: bool,
    name: String,
    description: String,
    website: String,
    /// The one member the interface lets be null.
    #[schema(required = true)]
    dashboard_login_url: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    webhook_url: Option<String>,
    /// In full in the answer of the call that set it; otherwise `••••` and its last four.
    webhook_secret: String,
    /// The variables a tool sets from the webhook's answer.
    #[schema(value_type = Vec<EnvVarBody>)]
    env_vars: Vec<GateEnvVar>,
    #[serde(skip_serializing_if = "Option::is_none")]
    docs_url: Option<String>,
    #[schema(value_type = Vec<SdkBody>)]
    sdks: Vec<GateSdk>,
    #[schema(value_type = gate::BrandingDoc)]
    branding: GateBranding,
    #[schema(value_type = ConsentBody)]
    consent: GateConsent,
    #[serde(serialize_with = "time::ser")]
    #[schema(value_type = String, format = DateTime)]
    created_at: Timestamp,
    #[serde(serialize_with = "time::ser")]
    #[schema(value_type = String, format = DateTime)]
    updated_at: Timestamp,
}

fn resource(state: &AdminState, s: &GateServiceRecord, secret: Option<&str>) -> Service {
    let webhook_secret = match secret {
        Some(secret) => secret.to_owned(),
        None => {
            let opened = state
                .auth
                .secret
                .open(
                    &s.sealed_webhook_secret,
                    &GateServiceRecord::secret_context(&s.id),
                )
                .and_then(|s| String::from_utf8(s).ok())
                .unwrap_or_default();
            let tail: String = opened
                .chars()
                .rev()
                .take(4)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect();
            format!("••••{tail}")
        }
    };
    Service {
        id: s.id.clone(),
        object: "gate_service",
        environment: s.environment,
        status: s.status,
        discoverable: s.discoverable,
        name: s.name.clone(),
        description: s.description.clone(),
        website: s.website.clone(),
        dashboard_login_url: s.dashboard_login_url.clone(),
        webhook_url: s.webhook_url.clone(),
        webhook_secret,
        env_vars: s.env_vars.clone(),
        docs_url: s.docs_url.clone(),
        sdks: s.sdks.clone(),
        branding: s.branding.clone(),
        consent: s.consent.clone(),
        created_at: s.created_at,
        updated_at: s.updated_at,
    }
}

/// The built-in system service (docs/architecture.md#gate) in `env`.
pub fn system_service(env: Environment) -> GateServiceRecord {
    GateServiceRecord::system(env, edge::context::public_url())
}

fn new_secret() -> String {
    let mut bytes = [0u8; 32];
    OsRng
        .try_fill_bytes(&mut bytes)
        .expect("the OS random source is readable");
    format!("whsec_{}", STANDARD.encode(bytes))
}

/// Text the consent page shows a person, lines allowed.
fn lines(s: &str) -> Result<(), String> {
    validate::shown_text(s, true)
}

/// Such text with something besides white space in it.
fn nonblank_lines(s: &str) -> Result<(), String> {
    if s.trim().is_empty() {
        return Err("must not be empty".into());
    }
    lines(s)
}

/// A variable's key: a shell's name, and none that the tool keeps its agent tokens under, so a
/// service cannot overwrite another service's token in the developer's `.env`.
fn variable_key(s: &str) -> Result<(), String> {
    gate::env_var_key(s)?;
    if s.ends_with(gate::AGENT_TOKEN_SUFFIX) {
        return Err(format!(
            "must not end in {}: Gate delivers agent tokens under such names",
            gate::AGENT_TOKEN_SUFFIX
        ));
    }
    Ok(())
}

/// The writable members read from a body (a service's create or PATCH): `None` for each member
/// absent. `id`, `name` and `website` are required at creation.
#[derive(utoipa::ToSchema, RequestBody)]
#[request_body(context = Writing, check = Draft::distinct_keys)]
struct Draft {
    /// At creation only; a PATCH may repeat it unchanged.
    #[schema(nullable = false)]
    #[member(check_in = Writing::id, required_in = Writing::creation)]
    id: Option<String>,
    #[schema(
        nullable = false,
        min_length = 1,
        max_length = 200,
        pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f\\u061c\\u200e\\u200f\\u202a-\\u202e\\u2066-\\u2069]*$"
    )]
    #[member(check = validate::name, required_in = Writing::creation)]
    name: Option<String>,
    #[schema(
        nullable = false,
        max_length = 1000,
        pattern = "^[^\\u0000-\\u0008\\u000b\\u000c\\u000e-\\u001f\\u007f-\\u009f\\u061c\\u200e\\u200f\\u202a-\\u202e\\u2066-\\u2069]*$"
    )]
    #[member(check = lines)]
    description: Option<String>,
    #[schema(
        nullable = false,
        max_length = 2048,
        pattern = "^https?://[^/?#\\s]+(?:[/?#]\\S*)?$"
    )]
    #[member(check = validate::http_uri, required_in = Writing::creation)]
    website: Option<String>,
    #[schema(nullable = false)]
    discoverable: Option<bool>,
    /// null clears it (in the code, `Some(None)`). Its host must resolve to public addresses;
    /// `https`, or `http` on a server that allows private destinations.
    #[schema(value_type = Option<String>, max_length = 2048, pattern = "^https?://")]
    #[member(check_in = Writing::outbound)]
    dashboard_login_url: Option<Option<String>>,
    /// Where each signup's variables come from; its host must resolve to public addresses.
    #[schema(value_type = Option<String>, max_length = 2048, pattern = "^https?://")]
    #[member(check_in = Writing::outbound)]
    webhook_url: Option<Option<String>>,
    #[schema(nullable = false, min_length = 32, max_length = 256)]
    webhook_secret: Option<String>,
    #[schema(nullable = false, max_items = 20)]
    env_vars: Option<Vec<EnvVarBody>>,
    #[schema(value_type = Option<String>, max_length = 2048, pattern = "^https?://[^/?#\\s]+(?:[/?#]\\S*)?$")]
    #[member(check = validate::http_uri)]
    docs_url: Option<Option<String>>,
    #[schema(nullable = false, max_items = 20)]
    sdks: Option<Vec<SdkBody>>,
    #[schema(nullable = false)]
    branding: Option<BrandingBody>,
    #[schema(nullable = false)]
    consent: Option<ConsentBody>,
}

/// The members a service's creation must have (`required_in = Writing::creation`), as
/// [`NewService`] documents them.
const REQUIRED_AT_CREATION: [&str; 3] = ["id", "name", "website"];

/// What a draft is read for: a creation, or a change of the service with this id; and where
/// Gate may call on the service's behalf (docs/architecture.md#webhooks).
struct Writing {
    changing: Option<String>,
    destinations: Destinations,
}

impl Writing {
    fn creation(&self) -> bool {
        self.changing.is_none()
    }

    /// `id` is writable at creation only; a PATCH may carry it unchanged (a client sending
    /// back the resource it read), never a new one.
    fn id(id: &str, writing: &Writing) -> Result<(), String> {
        match &writing.changing {
            None => gate::service_id(id),
            Some(current) if current == id => Ok(()),
            Some(current) => Err(format!(
                "cannot be changed after creation, since agent tokens and the registry name the \
                 service by it: it must be {current}"
            )),
        }
    }

    fn outbound(url: &str, writing: &Writing) -> Result<(), String> {
        Destinations::url(url, &writing.destinations).map(|_| ())
    }
}

impl Draft {
    fn distinct_keys(&mut self, f: &mut Fields, _: &Writing) {
        let Some(vars) = &self.env_vars else { return };
        for (i, var) in vars.iter().enumerate() {
            if vars[..i].iter().any(|earlier| earlier.key == var.key) {
                f.issue(
                    &format!("env_vars[{i}].key"),
                    "must not repeat another variable's key",
                    None,
                    Some(Value::String(var.key.clone())),
                );
            }
        }
    }
}

/// A variable a tool sets from the service's webhook answer at each signup.
#[derive(utoipa::ToSchema, Member)]
#[schema(as = GateEnvVar)]
pub(crate) struct EnvVarBody {
    #[schema(
        min_length = 1,
        max_length = 200,
        pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f\\u061c\\u200e\\u200f\\u202a-\\u202e\\u2066-\\u2069]*$"
    )]
    #[member(check = validate::name)]
    name: String,
    /// A shell variable's name; none ending in `_GATE_AGENT_TOKEN`.
    #[schema(pattern = "^[A-Z_][A-Z0-9_]{0,63}$")]
    #[member(check = variable_key)]
    key: String,
    /// Whether the value is a secret (kept out of logs and shown masked).
    secret: bool,
}

/// An SDK the consent and registry pages list.
#[derive(utoipa::ToSchema, Member)]
#[schema(as = GateSdk)]
pub(crate) struct SdkBody {
    #[schema(
        min_length = 1,
        max_length = 200,
        pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f\\u061c\\u200e\\u200f\\u202a-\\u202e\\u2066-\\u2069]*$"
    )]
    #[member(check = validate::name)]
    label: String,
    /// The install command.
    #[schema(
        max_length = 500,
        pattern = "^[^\\u0000-\\u0008\\u000b\\u000c\\u000e-\\u001f\\u007f-\\u009f\\u061c\\u200e\\u200f\\u202a-\\u202e\\u2066-\\u2069]*[^\\u0000-\\u0008\\u000b\\u000c\\u000e-\\u001f\\u007f-\\u009f\\u061c\\u200e\\u200f\\u202a-\\u202e\\u2066-\\u2069\\s][^\\u0000-\\u0008\\u000b\\u000c\\u000e-\\u001f\\u007f-\\u009f\\u061c\\u200e\\u200f\\u202a-\\u202e\\u2066-\\u2069]*$"
    )]
    #[member(check = nonblank_lines)]
    install: String,
    #[schema(max_length = 2048, pattern = "^https?://[^/?#\\s]+(?:[/?#]\\S*)?$")]
    #[member(check = validate::http_uri)]
    url: String,
}

/// A service's branding as a body writes it (`verified` is Vigil's to set).
#[derive(utoipa::ToSchema, Member)]
#[request_body(forbid = ["verified"], because = "is managed by Vigil and cannot be written")]
struct BrandingBody {
    #[schema(
        nullable = false,
        max_length = 2048,
        pattern = "^https?://[^/?#\\s]+(?:[/?#]\\S*)?$"
    )]
    #[member(check = validate::http_uri)]
    logo_url: Option<String>,
    #[schema(
        nullable = false,
        pattern = "^#(?:[0-9A-Fa-f]{3,4}|[0-9A-Fa-f]{6}|[0-9A-Fa-f]{8})$"
    )]
    #[member(check = gate::color)]
    primary_color: Option<String>,
    #[schema(
        nullable = false,
        pattern = "^#(?:[0-9A-Fa-f]{3,4}|[0-9A-Fa-f]{6}|[0-9A-Fa-f]{8})$"
    )]
    #[member(check = gate::color)]
    secondary_color: Option<String>,
    #[schema(
        nullable = false,
        max_length = 4000,
        pattern = "^[^\\u0000-\\u0008\\u000b\\u000c\\u000e-\\u001f\\u007f-\\u009f\\u061c\\u200e\\u200f\\u202a-\\u202e\\u2066-\\u2069]*$"
    )]
    #[member(check = lines)]
    ascii_art: Option<String>,
}

/// The links a consent page shows, each left out when unset.
#[derive(utoipa::ToSchema, Member)]
#[schema(as = GateConsent)]
pub(crate) struct ConsentBody {
    #[schema(
        nullable = false,
        max_length = 2048,
        pattern = "^https?://[^/?#\\s]+(?:[/?#]\\S*)?$"
    )]
    #[member(check = validate::http_uri)]
    terms_url: Option<String>,
    #[schema(
        nullable = false,
        max_length = 2048,
        pattern = "^https?://[^/?#\\s]+(?:[/?#]\\S*)?$"
    )]
    #[member(check = validate::http_uri)]
    privacy_url: Option<String>,
}

/// A service's creation body, as the document shows it: a [`Draft`] whose
/// [`REQUIRED_AT_CREATION`] members are required.
struct NewService;

impl utoipa::PartialSchema for NewService {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::RefOr;
        use utoipa::openapi::schema::Schema;
        let mut schema = <Draft as utoipa::PartialSchema>::schema();
        if let RefOr::T(Schema::Object(object)) = &mut schema {
            object.required = REQUIRED_AT_CREATION.map(String::from).to_vec();
            object.description =
                Some("A new service: `id`, `name` and `website` are required.".into());
        }
        schema
    }
}

impl utoipa::ToSchema for NewService {}

/// The operator's rule for where Gate may call.
fn outbound_rules(state: &AdminState) -> Destinations {
    Destinations {
        allow_private: state.allow_private_webhooks,
    }
}

/// Refuses a webhook or dashboard URL whose host resolves to a non-public address
/// (docs/architecture.md#webhooks).
async fn destinations(draft: &Draft, allow_private: bool) -> Result<(), ApiError> {
    for (name, value) in [
        ("webhook_url", &draft.webhook_url),
        ("dashboard_login_url", &draft.dashboard_login_url),
    ] {
        if let Some(Some(raw)) = value {
            let url = url::Url::parse(raw).map_err(|e| {
                ApiError::invalid_field(name, e.to_string(), Some(Value::String(raw.clone())))
            })?;
            outbound::resolve_public(&url, allow_private)
                .await
                .map_err(|issue| {
                    ApiError::invalid_field(name, issue, Some(Value::String(raw.clone())))
                })?;
        }
    }
    Ok(())
}

/// Applies a draft's members to `service`; a nested object or array replaces the stored one.
fn apply(service: &mut GateServiceRecord, d: Draft) {
    if let Some(id) = d.id {
        service.id = id;
    }
    if let Some(v) = d.name {
        service.name = v;
    }
    if let Some(v) = d.description {
        service.description = v;
    }
    if let Some(v) = d.website {
        service.website = v;
    }
    if let Some(v) = d.discoverable {
        service.discoverable = v;
    }
    if let Some(v) = d.dashboard_login_url {
        service.dashboard_login_url = v;
    }
    if let Some(v) = d.webhook_url {
        service.webhook_url = v;
    }
    if let Some(v) = d.env_vars {
        service.env_vars = v
            .into_iter()
            .map(|EnvVarBody { name, key, secret }| GateEnvVar { name, key, secret })
            .collect();
    }
    if let Some(v) = d.docs_url {
        service.docs_url = v;
    }
    if let Some(v) = d.sdks {
        service.sdks = v
            .into_iter()
            .map(
                |SdkBody {
                     label,
                     install,
                     url,
                 }| GateSdk {
                    label,
                    install,
                    url,
                },
            )
            .collect();
    }
    if let Some(b) = d.branding {
        service.branding = GateBranding {
            logo_url: b.logo_url,
            primary_color: b.primary_color,
            secondary_color: b.secondary_color,
            ascii_art: b.ascii_art,
            verified: service.branding.verified,
        };
    }
    if let Some(c) = d.consent {
        service.consent = GateConsent {
            terms_url: c.terms_url,
            privacy_url: c.privacy_url,
        };
    }
}

/// The agent-token variable is Gate's: no declared variable may take its name; and declared
/// variables need the webhook their values come from.
fn check_variables(service: &GateServiceRecord) -> Result<(), ApiError> {
    if !service.env_vars.is_empty() && service.webhook_url.is_none() {
        return Err(ApiError::invalid_field(
            "webhook_url",
            "is required when env_vars are declared: their values come from it at each signup",
            None,
        ));
    }
    let reserved = gate::agent_token_variable(&service.id);
    match service.env_vars.iter().position(|e| e.key == reserved) {
        Some(i) => Err(ApiError::invalid_field(
            &format!("env_vars[{i}].key"),
            format!("`{reserved}` is where Gate delivers the agent token"),
            Some(Value::String(reserved)),
        )),
        None => Ok(()),
    }
}

/// The caller's service `serviceId` in its environment; the system service is read-only.
async fn stored(
    state: &AdminState,
    ctx: &AuthContext,
    params: &PathParams,
) -> Result<GateServiceRecord, ApiError> {
    let GateServiceId(id) = FromPath::from_path(params)?;
    if id == gate::SYSTEM_SERVICE_ID {
        return Ok(system_service(ctx.environment()));
    }
    state
        .auth
        .store
        .get_gate_service(&id)
        .await?
        .filter(|s| s.organization_id == ctx.organization.id && s.environment == ctx.environment())
        .ok_or_else(|| ApiError::not_found("gate service"))
}

fn read_only_system_service() -> ApiError {
    ApiError::new(
        ErrorCode::Conflict,
        "the built-in `vigil` service belongs to Vigil and cannot be changed",
    )
}

/// Registers a service for Gate; its webhook secret is shown in full here only.
#[utoipa::path(
    post,
    operation_id = "create_gate_service",
    path = "/v1/gate/services",
    tag = "gate",
    request_body = NewService,
    security(("secret_key" = ["gate:services:manage"])),
    responses(
        (status = 201, description = "The service, with its webhook secret.", body = Single<Service>),
        (status = 409, description = "`resource.conflict` (the id is taken) or \
            `gate.service_limit_reached`.", body = ErrorEnvelope),
        BodyErrors,
        SecretKeyErrors,
    )
)]
async fn create(
    State(state): State<AdminState>,
    caller: SecretKey<ManageGateServices>,
    body: JsonObject,
) -> Result<Reply, ApiError> {
    let writing = Writing {
        changing: None,
        destinations: outbound_rules(&state),
    };
    let draft = Draft::from_object_in(body, &writing)?;
    destinations(&draft, state.allow_private_webhooks).await?;
    let now = time::now();
    let secret = draft.webhook_secret.clone().unwrap_or_else(new_secret);
    let mut service = GateServiceRecord {
        id: String::new(),
        organization_id: caller.organization.id,
        environment: caller.environment(),
        status: GateServiceStatus::Active,
        discoverable: false,
        name: String::new(),
        description: String::new(),
        website: String::new(),
        dashboard_login_url: None,
        webhook_url: None,
        sealed_webhook_secret: Vec::new(),
        env_vars: Vec::new(),
        docs_url: None,
        sdks: Vec::new(),
        branding: GateBranding::default(),
        consent: GateConsent::default(),
        created_at: now,
        updated_at: now,
    };
    apply(&mut service, draft);
    check_variables(&service)?;
    service.sealed_webhook_secret = state.auth.secret.seal(
        secret.as_bytes(),
        &GateServiceRecord::secret_context(&service.id),
    );
    match state
        .auth
        .store
        .create_gate_service(&service, gate::MAX_SERVICES_PER_ORGANIZATION)
        .await?
    {
        GateServiceWrite::Written => {
            Ok(Reply::created(resource(&state, &service, Some(&secret))).showing_secrets())
        }
        GateServiceWrite::IdTaken | GateServiceWrite::Missing => Err(id_taken(&service.id)),
        GateServiceWrite::CapReached => Err(ApiError::new(
            ErrorCode::GateServiceLimitReached,
            format!(
                "the organization has {} Gate services in this environment already (disabled \
                 ones count)",
                gate::MAX_SERVICES_PER_ORGANIZATION
            ),
        )),
    }
}

fn id_taken(id: &str) -> ApiError {
    ApiError::new(
        ErrorCode::Conflict,
        format!("the Gate service id `{id}` is taken"),
    )
}

/// The caller's environment's services, the built-in `vigil` one first.
#[utoipa::path(
    get,
    operation_id = "list_gate_services",
    path = "/v1/gate/services",
    tag = "gate",
    security(("secret_key" = ["gate:services:read"])),
    responses(
        (status = 200, description = "Every service (at most five, and `vigil`).", body = List<Service>),
        SecretKeyErrors,
    )
)]
async fn list(
    State(state): State<AdminState>,
    caller: SecretKey<ReadGateServices>,
) -> Result<Reply, ApiError> {
    let services = state
        .auth
        .store
        .list_gate_services(caller.organization.id, caller.environment())
        .await?;
    let limit = gate::MAX_SERVICES_PER_ORGANIZATION as u32;
    Ok(Reply::list(
        services.iter().map(|s| resource(&state, s, None)).collect(),
        Pagination {
            limit,
            has_more: false,
            next_cursor: None,
        },
    ))
}

/// One service.
#[utoipa::path(
    get,
    operation_id = "read_gate_service",
    path = "/v1/gate/services/{serviceId}",
    tag = "gate",
    params(("serviceId" = String, Path, example = "acme-cli",
        description = "A service of the caller's environment, or `vigil`.")),
    security(("secret_key" = ["gate:services:read"])),
    responses(
        (status = 200, description = "The service.", body = Single<Service>),
        (status = 404, description = "`resource.not_found`: no such service for the caller.", body = ErrorEnvelope),
        SecretKeyErrors,
    )
)]
async fn read(
    State(state): State<AdminState>,
    caller: SecretKey<ReadGateServices>,
    params: PathParams,
) -> Result<Reply, ApiError> {
    let service = stored(&state, &caller, &params).await?;
    Ok(Reply::ok(resource(&state, &service, None)))
}

/// Changes any subset of a service's writable members (not its id).
#[utoipa::path(
    patch,
    operation_id = "update_gate_service",
    path = "/v1/gate/services/{serviceId}",
    tag = "gate",
    params(("serviceId" = String, Path, example = "acme-cli",
        description = "A service of the caller's environment, or `vigil`.")),
    request_body = Draft,
    security(("secret_key" = ["gate:services:manage"])),
    responses(
        (status = 200, description = "The service as changed.", body = Single<Service>),
        (status = 404, description = "`resource.not_found`: no such service for the caller.", body = ErrorEnvelope),
        (status = 409, description = "`resource.conflict`: the built-in `vigil` service.", body = ErrorEnvelope),
        BodyErrors,
        SecretKeyErrors,
    )
)]
async fn update(
    State(state): State<AdminState>,
    caller: SecretKey<ManageGateServices>,
    params: PathParams,
    body: JsonObject,
) -> Result<Reply, ApiError> {
    let mut service = stored(&state, &caller, &params).await?;
    if service.id == gate::SYSTEM_SERVICE_ID {
        return Err(read_only_system_service());
    }
    let writing = Writing {
        changing: Some(service.id.clone()),
        destinations: outbound_rules(&state),
    };
    let draft = Draft::from_object_in(body, &writing)?;
    destinations(&draft, state.allow_private_webhooks).await?;
    let previous_id = service.id.clone();
    let old_secret = state.auth.secret.open(
        &service.sealed_webhook_secret,
        &GateServiceRecord::secret_context(&previous_id),
    );
    let new_secret = draft.webhook_secret.clone();
    apply(&mut service, draft);
    check_variables(&service)?;
    // The seal is bound to the id: a new secret, or a new id, seals again.
    let secret = new_secret.clone().map(String::into_bytes).or(old_secret);
    if new_secret.is_some() || service.id != previous_id {
        let Some(secret) = &secret else {
            return Err(ApiError::internal(
                "gate service update",
                "the stored webhook secret does not open",
            ));
        };
        service.sealed_webhook_secret = state
            .auth
            .secret
            .seal(secret, &GateServiceRecord::secret_context(&service.id));
    }
    service.updated_at = time::now();
    match state
        .auth
        .store
        .update_gate_service(&previous_id, &service)
        .await?
    {
        GateServiceWrite::Written => {
            Ok(Reply::ok(resource(&state, &service, new_secret.as_deref())).showing_secrets())
        }
        GateServiceWrite::IdTaken => Err(id_taken(&service.id)),
        GateServiceWrite::Missing | GateServiceWrite::CapReached => {
            Err(ApiError::not_found("gate service"))
        }
    }
}

/// Disables a service: it takes no signup or login from then on.
#[utoipa::path(
    delete,
    operation_id = "disable_gate_service",
    path = "/v1/gate/services/{serviceId}",
    tag = "gate",
    params(("serviceId" = String, Path, example = "acme-cli",
        description = "A service of the caller's environment, or `vigil`.")),
    security(("secret_key" = ["gate:services:manage"])),
    responses(
        (status = 200, description = "The service, disabled.", body = Single<Service>),
        (status = 404, description = "`resource.not_found`: no such service for the caller.", body = ErrorEnvelope),
        (status = 409, description = "`resource.conflict`: the built-in `vigil` service.", body = ErrorEnvelope),
        SecretKeyErrors,
    )
)]
async fn disable(
    State(state): State<AdminState>,
    caller: SecretKey<ManageGateServices>,
    params: PathParams,
) -> Result<Reply, ApiError> {
    let mut service = stored(&state, &caller, &params).await?;
    if service.id == gate::SYSTEM_SERVICE_ID {
        return Err(read_only_system_service());
    }
    if service.status != GateServiceStatus::Disabled {
        service.status = GateServiceStatus::Disabled;
        service.updated_at = time::now();
        let id = service.id.clone();
        if state.auth.store.update_gate_service(&id, &service).await? != GateServiceWrite::Written {
            return Err(ApiError::not_found("gate service"));
        }
    }
    Ok(Reply::ok(resource(&state, &service, None)))
}
