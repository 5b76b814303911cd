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
use edge::body::{Fields, FromPath, GateServiceId, JsonObject, PathParams, Reply, read_body};
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
use sender::outbound;
use serde::Serialize;
use serde_json::{Map, Value};
use store::{
    GateBranding, GateConsent, GateEnvVar, GateSdk, GateServiceRecord, GateServiceStatus,
    GateServiceWrite,
};

use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use admin_api::AdminState;

/// The most `env_vars` and `sdks` items.
const MAX_ITEMS: usize = 20;
/// The longest `description`, `install` line and `ascii_art`.
const MAX_DESCRIPTION_CHARS: usize = 1_000;
const MAX_INSTALL_CHARS: usize = 500;
const MAX_ASCII_ART_CHARS: usize = 4_000;
/// The longest `webhook_secret`.
const MAX_SECRET_CHARS: usize = 256;

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
    #[schema(value_type = Vec<gate::EnvVarDoc>)]
    env_vars: Vec<GateEnvVar>,
    #[serde(skip_serializing_if = "Option::is_none")]
    docs_url: Option<String>,
    #[schema(value_type = Vec<gate::SdkDoc>)]
    sdks: Vec<GateSdk>,
    #[schema(value_type = gate::BrandingDoc)]
    branding: GateBranding,
    #[schema(value_type = gate::ConsentDoc)]
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
fn text(max: usize) -> impl Fn(&str) -> Result<(), String> {
    move |s: &str| {
        if s.chars().count() > max {
            Err(format!("must be at most {max} characters"))
        } else {
            validate::shown_text(s, true)
        }
    }
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

fn nonempty_text(max: usize) -> impl Fn(&str) -> Result<(), String> {
    move |s: &str| {
        if s.trim().is_empty() {
            Err("must not be empty".into())
        } else {
            text(max)(s)
        }
    }
}

/// The writable members read from a body (a service's create or PATCH): `None` for each member
/// absent. `id`, `name` and `website` are required at creation.
#[derive(Default, utoipa::ToSchema)]
struct Draft {
    /// At creation only; a PATCH may repeat it unchanged.
    #[schema(nullable = false)]
    id: Option<String>,
    #[schema(
        nullable = false,
        min_length = 1,
        max_length = 200,
        pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f\\u061c\\u200e\\u200f\\u202a-\\u202e\\u2066-\\u2069]*$"
    )]
    name: Option<String>,
    #[schema(
        nullable = false,
        max_length = 1000,
        pattern = "^[^\\u0000-\\u0008\\u000b\\u000c\\u000e-\\u001f\\u007f-\\u009f\\u061c\\u200e\\u200f\\u202a-\\u202e\\u2066-\\u2069]*$"
    )]
    description: Option<String>,
    #[schema(
        nullable = false,
        max_length = 2048,
        pattern = "^https?://[^/?#\\s]+(?:[/?#]\\S*)?$"
    )]
    website: Option<String>,
    #[schema(nullable = false)]
    discoverable: Option<bool>,
    /// null clears it (in the code, `Some(None)`). Its host must resolve to public addresses.
    #[schema(value_type = Option<String>, max_length = 2048, pattern = "^https://")]
    dashboard_login_url: Option<Option<String>>,
    /// Where each signup's variables come from; its host must resolve to public addresses.
    #[schema(value_type = Option<String>, max_length = 2048, pattern = "^https://")]
    webhook_url: Option<Option<String>>,
    #[schema(nullable = false, min_length = 32, max_length = 256)]
    webhook_secret: Option<String>,
    #[schema(nullable = false, max_items = 20, value_type = Option<Vec<gate::EnvVarDoc>>)]
    env_vars: Option<Vec<GateEnvVar>>,
    #[schema(value_type = Option<String>, max_length = 2048, pattern = "^https?://[^/?#\\s]+(?:[/?#]\\S*)?$")]
    docs_url: Option<Option<String>>,
    #[schema(nullable = false, max_items = 20, value_type = Option<Vec<gate::SdkDoc>>)]
    sdks: Option<Vec<GateSdk>>,
    #[schema(nullable = false, value_type = Option<BrandingBody>)]
    branding: Option<GateBranding>,
    #[schema(nullable = false, value_type = Option<gate::ConsentDoc>)]
    consent: Option<GateConsent>,
}

/// A service's branding as a body writes it (`verified` is Vigil's to set).
#[derive(utoipa::ToSchema)]
#[allow(dead_code)] // described; read by `branding`
struct BrandingBody {
    #[schema(
        nullable = false,
        max_length = 2048,
        pattern = "^https?://[^/?#\\s]+(?:[/?#]\\S*)?$"
    )]
    logo_url: Option<String>,
    #[schema(
        nullable = false,
        pattern = "^#(?:[0-9A-Fa-f]{3,4}|[0-9A-Fa-f]{6}|[0-9A-Fa-f]{8})$"
    )]
    primary_color: Option<String>,
    #[schema(
        nullable = false,
        pattern = "^#(?:[0-9A-Fa-f]{3,4}|[0-9A-Fa-f]{6}|[0-9A-Fa-f]{8})$"
    )]
    secondary_color: Option<String>,
    #[schema(
        nullable = false,
        max_length = 4000,
        pattern = "^[^\\u0000-\\u0008\\u000b\\u000c\\u000e-\\u001f\\u007f-\\u009f\\u061c\\u200e\\u200f\\u202a-\\u202e\\u2066-\\u2069]*$"
    )]
    ascii_art: Option<String>,
}

/// A service's creation body, as the document shows it: a [`Draft`] whose `id`, `name` and
/// `website` are required.
struct NewService;

impl utoipa::PartialSchema for NewService {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::RefOr;
        use utoipa::openapi::schema::Schema;
        let mut schema = <Draft as utoipa::PartialSchema>::schema();
        if let RefOr::T(Schema::Object(object)) = &mut schema {
            object.required = ["id", "name", "website"].map(String::from).to_vec();
            object.description =
                Some("A new service: `id`, `name` and `website` are required.".into());
        }
        schema
    }
}

impl utoipa::ToSchema for NewService {}

/// Reads the allowlist from `f`; every problem is recorded on `f` (reported by `finish`).
fn read_draft(f: &mut Fields, creating: bool, allow_private: bool) -> Draft {
    let mut d = Draft {
        id: f.checked_string("id", creating, gate::service_id),
        name: f.checked_string("name", creating, validate::name),
        description: f.checked_string("description", false, text(MAX_DESCRIPTION_CHARS)),
        website: f.checked_string("website", creating, validate::http_uri),
        webhook_secret: f.checked_string("webhook_secret", false, |s| {
            let n = s.chars().count();
            if n < gate::MIN_WEBHOOK_SECRET_CHARS {
                Err(format!(
                    "must be at least {} characters",
                    gate::MIN_WEBHOOK_SECRET_CHARS
                ))
            } else if n > MAX_SECRET_CHARS {
                Err(format!("must be at most {MAX_SECRET_CHARS} characters"))
            } else {
                Ok(())
            }
        }),
        ..Draft::default()
    };
    if let Some(v) = f.take("discoverable") {
        match v {
            Value::Bool(b) => d.discoverable = Some(b),
            other => f.issue(
                "discoverable",
                "must be a boolean",
                Some("boolean"),
                Some(other),
            ),
        }
    }
    // Gate calls these on the service's behalf, so they follow the outbound rule
    // (docs/architecture.md#webhooks).
    let outbound_uri = |s: &str| outbound::check_url(s, allow_private).map(|_| ());
    d.dashboard_login_url = nullable(f, "dashboard_login_url", &outbound_uri);
    d.webhook_url = nullable(f, "webhook_url", &outbound_uri);
    d.docs_url = nullable(f, "docs_url", &validate::http_uri);
    if let Some(v) = f.take("env_vars") {
        d.env_vars = env_vars(f, v);
    }
    if let Some(v) = f.take("sdks") {
        d.sdks = sdks(f, v);
    }
    if let Some(v) = f.take("branding") {
        d.branding = branding(f, v);
    }
    if let Some(v) = f.take("consent") {
        d.consent = consent(f, v);
    }
    d
}

/// A member that is a string checked by `rule`, or null.
fn nullable(
    f: &mut Fields,
    name: &str,
    rule: &dyn Fn(&str) -> Result<(), String>,
) -> Option<Option<String>> {
    match f.take(name)? {
        Value::Null => Some(None),
        v => checked(f, name, v, rule).map(Some),
    }
}

/// A string value checked by `rule`; `None` (with the issue recorded) otherwise.
fn checked(
    f: &mut Fields,
    name: &str,
    v: Value,
    rule: &dyn Fn(&str) -> Result<(), String>,
) -> Option<String> {
    match v {
        Value::String(s) => match rule(&s) {
            Ok(()) => Some(s),
            Err(issue) => {
                f.issue(name, issue, None, Some(Value::String(s)));
                None
            }
        },
        other => {
            f.issue(name, "must be a string", Some("string"), Some(other));
            None
        }
    }
}

/// The members of a nested object: each allowed one taken out and checked by `read`, any
/// other reported as not writable (`forbidden` ones with their reason).
fn object(
    f: &mut Fields,
    name: &str,
    v: Value,
    forbidden: &[(&str, &str)],
) -> Option<Map<String, Value>> {
    match v {
        Value::Object(map) => {
            let mut map = map;
            for (member, why) in forbidden {
                if let Some(v) = map.remove(*member) {
                    f.issue(&format!("{name}.{member}"), *why, None, Some(v));
                }
            }
            Some(map)
        }
        other => {
            f.issue(name, "must be an object", Some("object"), Some(other));
            None
        }
    }
}

fn leftovers(f: &mut Fields, name: &str, map: Map<String, Value>) -> bool {
    let clean = map.is_empty();
    for (member, v) in map {
        f.issue(
            &format!("{name}.{member}"),
            "is not a writable field",
            None,
            Some(v),
        );
    }
    clean
}

/// A nullable string member of a nested object.
fn member(
    f: &mut Fields,
    map: &mut Map<String, Value>,
    name: &str,
    rule: &dyn Fn(&str) -> Result<(), String>,
) -> Result<Option<String>, ()> {
    match map.remove(name.rsplit('.').next().unwrap_or(name)) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => checked(f, name, v, rule).map(Some).ok_or(()),
    }
}

fn required_member(
    f: &mut Fields,
    map: &mut Map<String, Value>,
    name: &str,
    rule: &dyn Fn(&str) -> Result<(), String>,
) -> Result<String, ()> {
    match member(f, map, name, rule)? {
        Some(s) => Ok(s),
        None => {
            f.issue(name, "is required", Some("string"), None);
            Err(())
        }
    }
}

fn array(f: &mut Fields, name: &str, v: Value) -> Option<Vec<Value>> {
    match v {
        Value::Array(items) if items.len() <= MAX_ITEMS => Some(items),
        Value::Array(_) => {
            f.issue(
                name,
                format!("must have at most {MAX_ITEMS} items"),
                Some("array"),
                None,
            );
            None
        }
        other => {
            f.issue(name, "must be an array", Some("array"), Some(other));
            None
        }
    }
}

fn env_vars(f: &mut Fields, v: Value) -> Option<Vec<GateEnvVar>> {
    let items = array(f, "env_vars", v)?;
    let mut out = Vec::new();
    let mut ok = true;
    for (i, item) in items.into_iter().enumerate() {
        let at = format!("env_vars[{i}]");
        let Some(mut map) = object(f, &at, item, &[]) else {
            ok = false;
            continue;
        };
        let name = required_member(f, &mut map, &format!("{at}.name"), &validate::name);
        let key = required_member(f, &mut map, &format!("{at}.key"), &variable_key);
        let secret = match map.remove("secret") {
            Some(Value::Bool(b)) => Some(b),
            None => {
                f.issue(
                    &format!("{at}.secret"),
                    "is required",
                    Some("boolean"),
                    None,
                );
                None
            }
            Some(other) => {
                f.issue(
                    &format!("{at}.secret"),
                    "must be a boolean",
                    Some("boolean"),
                    Some(other),
                );
                None
            }
        };
        let clean = leftovers(f, &at, map);
        match (name, key, secret) {
            (Ok(name), Ok(key), Some(secret)) if clean => {
                if out.iter().any(|e: &GateEnvVar| e.key == key) {
                    f.issue(
                        &format!("{at}.key"),
                        "must not repeat another variable's key",
                        None,
                        Some(Value::String(key)),
                    );
                    ok = false;
                } else {
                    out.push(GateEnvVar { name, key, secret });
                }
            }
            _ => ok = false,
        }
    }
    ok.then_some(out)
}

fn sdks(f: &mut Fields, v: Value) -> Option<Vec<GateSdk>> {
    let items = array(f, "sdks", v)?;
    let mut out = Vec::new();
    let mut ok = true;
    for (i, item) in items.into_iter().enumerate() {
        let at = format!("sdks[{i}]");
        let Some(mut map) = object(f, &at, item, &[]) else {
            ok = false;
            continue;
        };
        let label = required_member(f, &mut map, &format!("{at}.label"), &validate::name);
        let install = required_member(
            f,
            &mut map,
            &format!("{at}.install"),
            &nonempty_text(MAX_INSTALL_CHARS),
        );
        let url = required_member(f, &mut map, &format!("{at}.url"), &validate::http_uri);
        let clean = leftovers(f, &at, map);
        match (label, install, url) {
            (Ok(label), Ok(install), Ok(url)) if clean => out.push(GateSdk {
                label,
                install,
                url,
            }),
            _ => ok = false,
        }
    }
    ok.then_some(out)
}

fn branding(f: &mut Fields, v: Value) -> Option<GateBranding> {
    let mut map = object(
        f,
        "branding",
        v,
        &[("verified", "is managed by Vigil and cannot be written")],
    )?;
    let logo_url = member(f, &mut map, "branding.logo_url", &validate::http_uri);
    let primary = member(f, &mut map, "branding.primary_color", &gate::color);
    let secondary = member(f, &mut map, "branding.secondary_color", &gate::color);
    let art = member(
        f,
        &mut map,
        "branding.ascii_art",
        &text(MAX_ASCII_ART_CHARS),
    );
    let clean = leftovers(f, "branding", map);
    match (logo_url, primary, secondary, art) {
        (Ok(logo_url), Ok(primary_color), Ok(secondary_color), Ok(ascii_art)) if clean => {
            Some(GateBranding {
                logo_url,
                primary_color,
                secondary_color,
                ascii_art,
                verified: false,
            })
        }
        _ => None,
    }
}

fn consent(f: &mut Fields, v: Value) -> Option<GateConsent> {
    let mut map = object(f, "consent", v, &[])?;
    let terms = member(f, &mut map, "consent.terms_url", &validate::http_uri);
    let privacy = member(f, &mut map, "consent.privacy_url", &validate::http_uri);
    let clean = leftovers(f, "consent", map);
    match (terms, privacy) {
        (Ok(terms_url), Ok(privacy_url)) if clean => Some(GateConsent {
            terms_url,
            privacy_url,
        }),
        _ => None,
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
        service.env_vars = v;
    }
    if let Some(v) = d.docs_url {
        service.docs_url = v;
    }
    if let Some(v) = d.sdks {
        service.sdks = v;
    }
    if let Some(mut v) = d.branding {
        v.verified = service.branding.verified;
        service.branding = v;
    }
    if let Some(v) = d.consent {
        service.consent = v;
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
    let draft = read_body(body, |f| {
        Some(read_draft(f, true, state.allow_private_webhooks))
    })?;
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
    let draft = read_body(body, |f| {
        // `id` is writable at creation only; a PATCH may carry it unchanged (a client sending
        // back the resource it read), never a new one.
        if let Some(given) = f.take("id")
            && given.as_str() != Some(service.id.as_str())
        {
            f.issue(
                "id",
                "cannot be changed after creation: agent tokens and the registry name the service by it",
                Some(&service.id),
                Some(given),
            );
        }
        Some(read_draft(f, false, state.allow_private_webhooks))
    })?;
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
