//! API keys under `/v1/organizations/{organizationId}/api-keys` (docs/api.md#api-keys;
//! docs/architecture.md: #ids-and-credentials, #api-keys): create, list, read, update, revoke and
//! rotate; plus issuing keys, shared with the CLI.
//!
//! The environment model (docs/architecture.md#environments): organization state, its keys
//! included, is shared by both environments, and live is the stronger one. A live secret key
//! manages the keys of both environments, so the owner can revoke a leaked `sk_test_` with it; a
//! test secret key (often kept with less care) sees and manages test keys only, and can never mint
//! or revoke live ones.

use axum::extract::State;
use edge::auth::effective_rate_limit;
use edge::body::PathParams;
use edge::body::{Fields, FromPath, Member, QueryParams, Reply, RequestBody, Valid};
use edge::openapi::{BodyErrors, PageQuery, SecretKeyErrors};
use edge::pagination::encode_cursor;
use edge::policy::{ManageApiKeys, ReadApiKeys, RevokeApiKey, RotateApiKey};
use edge::{ApiError, SecretKey};
use schemas::credential::{Credential, Environment, KeyType};
use schemas::error::ErrorEnvelope;
use schemas::resources::{ApiKey, ApiKeyListItem, KeyStatus, List, Pagination, Single};
use schemas::{ErrorCode, KeyId, OrgId, Scope, validate};
use secrets::ServerSecret;
use store::{ApiKeyRecord, ApiKeyWrite, Store};

use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::{AdminState, OrgPath, own_organization};

pub fn router() -> OpenApiRouter<AdminState> {
    OpenApiRouter::new()
        .routes(routes!(create, list))
        .routes(routes!(read, update, revoke))
        .routes(routes!(rotate))
}

/// The path of one key, for the OpenAPI description.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Path, names("organizationId", "keyId"))]
struct KeyPath(
    /// The caller's organization.
    #[allow(dead_code)]
    OrgId,
    /// A key of an environment the caller manages; any other is a 404.
    #[allow(dead_code)]
    KeyId,
);

/// An origin a publishable key may be used from, normalised to the form browsers send in the
/// `Origin` header (`validate::origin`); the document gives its form as
/// `validate::ORIGIN_PATTERN`.
struct Origin(String);

impl utoipa::PartialSchema for Origin {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::Type;
        utoipa::openapi::ObjectBuilder::new()
            .schema_type(Type::String)
            .pattern(Some(validate::ORIGIN_PATTERN))
            .examples(["https://shop.example"])
            .into()
    }
}

impl utoipa::ToSchema for Origin {}

impl Member for Origin {
    const EXPECTED: &'static str = "string";

    fn read(f: &mut Fields, name: &str, value: edge::body::Value) -> Option<Self> {
        edge::body::parsed(f, name, value, validate::origin).map(Origin)
    }
}

/// The body of `POST .../api-keys`. Omitted, `type` is `secret` and `environment` the caller's
/// own; `allowed_origins` is for publishable keys and `scopes` for secret ones. A `rate_limit`
/// is accepted and ignored: the operator sets limits (`vigil keys set-rate-limit`).
#[derive(utoipa::ToSchema, RequestBody)]
#[request_body(ignore = ["rate_limit"], check = NewApiKey::fits_its_type)]
pub struct NewApiKey {
    #[schema(
        min_length = 1,
        max_length = 200,
        pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f\\u061c\\u200e\\u200f\\u202a-\\u202e\\u2066-\\u2069]*$"
    )]
    #[member(check = validate::name)]
    name: String,
    #[schema(nullable = false, rename = "type")]
    key_type: Option<KeyType>,
    #[schema(nullable = false)]
    environment: Option<Environment>,
    /// Origins (`scheme://host[:port]`) a publishable key may be used from; none: any.
    #[schema(nullable = false, max_items = 100)]
    allowed_origins: Option<Vec<Origin>>,
    /// Omitted: what the caller holds; never more than that.
    #[schema(nullable = false, min_items = 1)]
    scopes: Option<Vec<Scope>>,
}

impl NewApiKey {
    fn fits_its_type(&mut self, f: &mut Fields) {
        let key_type = self.key_type.unwrap_or(KeyType::Secret);
        fits_type(f, key_type, &mut self.allowed_origins, &mut self.scopes);
    }
}

/// `allowed_origins` is for publishable keys and `scopes` for secret ones; scopes are kept
/// sorted and once each.
fn fits_type(
    f: &mut Fields,
    key_type: KeyType,
    origins: &mut Option<Vec<Origin>>,
    scopes: &mut Option<Vec<Scope>>,
) {
    if key_type != KeyType::Publishable && origins.take().is_some() {
        f.issue(
            "allowed_origins",
            "applies to publishable keys only",
            None,
            None,
        );
    }
    if key_type != KeyType::Secret && scopes.take().is_some() {
        f.issue("scopes", "applies to secret keys only", None, None);
    }
    if let Some(scopes) = scopes {
        scopes.sort();
        scopes.dedup();
    }
}

/// The body of `PATCH .../api-keys/{keyId}`: any subset. What makes the credential (its type,
/// environment and key) is fixed; rotate the key to change it.
#[derive(utoipa::ToSchema, RequestBody)]
#[request_body(
    ignore = ["rate_limit"],
    forbid = ["type", "environment", "revealed_key", "key", "key_preview", "display_key"],
    because = "is immutable after creation; rotate the key to change its credential"
)]
pub struct ApiKeyChange {
    #[schema(
        nullable = false,
        min_length = 1,
        max_length = 200,
        pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f\\u061c\\u200e\\u200f\\u202a-\\u202e\\u2066-\\u2069]*$"
    )]
    #[member(check = validate::name)]
    name: Option<String>,
    /// Publishable keys only.
    #[schema(nullable = false, max_items = 100)]
    allowed_origins: Option<Vec<Origin>>,
    /// Secret keys only; never more than the caller holds.
    #[schema(nullable = false, min_items = 1)]
    scopes: Option<Vec<Scope>>,
}

/// What a new key is for; the credential itself is minted by [`issue_key`].
pub struct KeySpec {
    pub name: String,
    pub key_type: KeyType,
    pub environment: Environment,
    pub allowed_origins: Vec<String>,
    pub scopes: Vec<Scope>,
}

/// The most keys an organization may have in use (neither revoked nor replaced by a rotation),
/// over both environments (docs/api.md#api-keys). Keys cost nothing to mint, and every cap
/// counted per key (its rate limit, its exports) is multiplied by them.
pub const MAX_KEYS_IN_USE: usize = 100;

/// Mints a credential and stores the key: secret keys as their keyed hash only. The operator's
/// `vigil keys create` issues keys this way, past the cap the API holds to.
pub async fn issue_key(
    store: &Store,
    secret: &ServerSecret,
    organization: OrgId,
    spec: KeySpec,
) -> Result<(ApiKeyRecord, Credential), ApiError> {
    let (record, credential) = mint(secret, organization, spec);
    store.create_api_key(&record).await?;
    Ok((record, credential))
}

/// A fresh credential and the row that stores it, not yet written.
pub fn mint(
    secret: &ServerSecret,
    organization: OrgId,
    spec: KeySpec,
) -> (ApiKeyRecord, Credential) {
    let credential = Credential::generate(spec.key_type, spec.environment);
    let record = new_record(secret, organization, &credential, spec, None);
    (record, credential)
}

fn new_record(
    secret: &ServerSecret,
    organization: OrgId,
    credential: &Credential,
    spec: KeySpec,
    rate_limit_override: Option<u32>,
) -> ApiKeyRecord {
    ApiKeyRecord {
        id: KeyId::generate(),
        organization_id: organization,
        key_type: spec.key_type,
        environment: spec.environment,
        name: spec.name,
        key_hash: secret.hash_credential(credential),
        key_preview: credential.preview(),
        display_key: credential.display(),
        publishable_token: (spec.key_type == KeyType::Publishable)
            .then(|| credential.expose().to_owned()),
        allowed_origins: spec.allowed_origins,
        scopes: spec.scopes,
        rate_limit_override,
        created_at: schemas::time::now(),
        rotated_at: None,
        revoked_at: None,
        grace_expires_at: None,
        last_used_at: None,
        replaced_by: None,
    }
}

pub fn status(key: &ApiKeyRecord) -> KeyStatus {
    if key.revoked_at.is_some() {
        KeyStatus::Revoked
    } else if key
        .grace_expires_at
        .is_some_and(|t| t <= schemas::time::now())
    {
        KeyStatus::Expired
    } else {
        KeyStatus::Active
    }
}

/// The wire form. `revealed` is the secret credential, passed only by create and rotate.
pub fn resource(key: &ApiKeyRecord, revealed: Option<&Credential>) -> ApiKey {
    ApiKey {
        id: key.id,
        object: "api_key",
        key_type: key.key_type,
        environment: key.environment,
        name: key.name.clone(),
        status: status(key),
        allowed_origins: key.allowed_origins.clone(),
        scopes: key.scopes.clone(),
        rate_limit: effective_rate_limit(key),
        key_preview: key.key_preview.clone(),
        display_key: key.display_key.clone(),
        revealed_key: revealed
            .map(|c| c.expose().to_owned())
            .or_else(|| key.publishable_token.clone()),
        last_used_at: key.last_used_at,
        created_at: key.created_at,
        rotated_at: key.rotated_at,
        revoked_at: key.revoked_at,
        grace_expires_at: key.grace_expires_at,
    }
}

/// The scopes `caller` holds, the removed scope counted as its successors.
fn grants_of(caller: &edge::AuthContext) -> Vec<Scope> {
    let mut scopes: Vec<Scope> = caller
        .key
        .scopes
        .iter()
        .flat_map(|s| s.successors().iter().copied())
        .collect();
    scopes.sort();
    scopes.dedup();
    scopes
}

/// A key can grant only what it holds: the scopes of a key it creates, changes or rotates (and
/// so receives in full) must be among its own. The removed scope counts as its successors.
fn grantable(caller: &edge::AuthContext, wanted: &[Scope]) -> Result<(), ApiError> {
    let held = grants_of(caller);
    let missing: Vec<&str> = wanted
        .iter()
        .filter(|s| !held.contains(s))
        .map(|s| s.as_str())
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(ApiError::new(
            ErrorCode::InsufficientScope,
            "a key can grant only scopes it holds; name a subset of this key's scopes in `scopes`",
        )
        .with_allowed_values(missing))
    }
}

/// The environments whose keys `caller` manages: both for a live key, its own for a test key.
fn manageable(caller: &edge::AuthContext) -> &'static [Environment] {
    match caller.environment() {
        Environment::Live => &[Environment::Live, Environment::Test],
        Environment::Test => &[Environment::Test],
    }
}

/// Refuses a test key's reach into the live environment: 403 `auth.environment_not_allowed`.
fn check_manageable(caller: &edge::AuthContext, env: Environment) -> Result<(), ApiError> {
    if manageable(caller).contains(&env) {
        return Ok(());
    }
    Err(ApiError::new(
        ErrorCode::EnvironmentNotAllowed,
        format!(
            "a {} key manages {} keys only",
            caller.environment(),
            caller.environment()
        ),
    )
    .with_allowed_values(manageable(caller).iter().map(|e| e.as_str())))
}

/// The key in the path, which must belong to the caller's organization and to an environment
/// the caller manages; any other is a 404, as if it did not exist.
async fn own_key(
    state: &AdminState,
    ctx: &edge::AuthContext,
    params: &PathParams,
) -> Result<ApiKeyRecord, ApiError> {
    let org = own_organization(ctx, params)?;
    let id: KeyId = FromPath::from_path(params)?;
    for env in manageable(ctx) {
        if let Some(key) = state.auth.store.get_api_key(org, *env, id).await? {
            return Ok(key);
        }
    }
    Err(ApiError::not_found("API key"))
}

/// Issues a key; its full credential is in `revealed_key` of this answer only (for a secret
/// key).
#[utoipa::path(
    operation_id = "create_api_key",
    post,
    path = "/v1/organizations/{organizationId}/api-keys",
    tag = "api keys",
    params(OrgPath),
    request_body = NewApiKey,
    security(("secret_key" = ["api_keys:manage"])),
    responses(
        (status = 201, description = "The key, with `revealed_key`.", body = Single<ApiKey>),
        (status = 404, description = "`resource.not_found`: not the caller's organization.", body = ErrorEnvelope),
        (status = 409, description = "`organization.api_key_limit_reached`: 100 keys in use already.", body = ErrorEnvelope),
        BodyErrors,
        SecretKeyErrors,
    )
)]
async fn create(
    State(state): State<AdminState>,
    caller: SecretKey<ManageApiKeys>,
    params: PathParams,
    Valid(body): Valid<NewApiKey>,
) -> Result<Reply, ApiError> {
    let org = own_organization(&caller, &params)?;
    let NewApiKey {
        name,
        key_type,
        environment,
        allowed_origins: origins,
        scopes,
    } = body;
    // Omitted, `type` is secret and `environment` the caller's own
    // (docs/architecture.md#environments).
    let key_type = key_type.unwrap_or(KeyType::Secret);
    let environment = environment.unwrap_or(caller.environment());
    check_manageable(&caller, environment)?;
    let spec = KeySpec {
        name,
        key_type,
        environment,
        allowed_origins: origins
            .unwrap_or_default()
            .into_iter()
            .map(|Origin(o)| o)
            .collect(),
        // Omitted scopes grant what the caller holds: the full set for a full key, never more.
        scopes: match key_type {
            KeyType::Secret => scopes.unwrap_or_else(|| grants_of(&caller)),
            KeyType::Publishable => Vec::new(),
        },
    };
    grantable(&caller, &spec.scopes)?;
    let (record, credential) = mint(&state.auth.secret, org, spec);
    match state
        .auth
        .store
        .create_api_key_capped(&record, MAX_KEYS_IN_USE)
        .await?
    {
        ApiKeyWrite::Written => {
            Ok(Reply::created(resource(&record, Some(&credential))).showing_secrets())
        }
        ApiKeyWrite::CapReached => Err(ApiError::new(
            ErrorCode::ApiKeyLimitReached,
            format!(
                "the organization has {MAX_KEYS_IN_USE} API keys in use already (over both environments); revoke one it no longer uses first"
            ),
        )),
    }
}

/// The keys of the environments the caller manages (a test key: test keys only), newest first.
#[utoipa::path(
    operation_id = "list_api_keys",
    get,
    path = "/v1/organizations/{organizationId}/api-keys",
    tag = "api keys",
    params(
        OrgPath,
        PageQuery,
        ("environment" = Option<Environment>, Query, description = "One environment only."),
    ),
    security(("secret_key" = ["api_keys:read"])),
    responses(
        (status = 200, description = "A page of keys.", body = List<ApiKeyListItem>),
        (status = 422, description = "`request.validation_failed`: a query parameter or path id (`details.parameter_set`).", body = ErrorEnvelope),
        (status = 404, description = "`resource.not_found`: not the caller's organization.", body = ErrorEnvelope),
        SecretKeyErrors,
    )
)]
async fn list(
    State(state): State<AdminState>,
    caller: SecretKey<ReadApiKeys>,
    params: PathParams,
    query: QueryParams,
) -> Result<Reply, ApiError> {
    let org = own_organization(&caller, &params)?;
    query.only(&["limit", "cursor", "environment"])?;
    let limit = query.limit(50, 200)?;
    let environments: Vec<Environment> = match query
        .one_of("environment", &Environment::ALL)?
        .and_then(Environment::parse)
    {
        Some(env) => {
            check_manageable(&caller, env)?;
            vec![env]
        }
        None => manageable(&caller).to_vec(),
    };
    let filter: Vec<&str> = environments.iter().map(|e| e.as_str()).collect();
    let binding = format!("api_keys:{org}:{}", filter.join(","));
    let after = query.cursor::<KeyId>(&state.auth.secret, &binding)?;
    // Each environment's keys are newest first by id; the page is the newest of their union.
    let mut rows = Vec::new();
    for env in environments {
        rows.extend(
            state
                .auth
                .store
                .list_api_keys(org, env, after, limit as usize + 1)
                .await?,
        );
    }
    rows.sort_by_key(|k| std::cmp::Reverse(k.id));
    let has_more = rows.len() > limit as usize;
    rows.truncate(limit as usize);
    let next_cursor = if has_more {
        rows.last()
            .map(|k| encode_cursor(&state.auth.secret, &binding, &k.id.to_string()))
    } else {
        None
    };
    let items: Vec<ApiKeyListItem> = rows.iter().map(|k| resource(k, None).into()).collect();
    Ok(Reply::list(
        items,
        Pagination {
            limit,
            has_more,
            next_cursor,
        },
    ))
}

/// One key.
#[utoipa::path(
    operation_id = "read_api_key",
    get,
    path = "/v1/organizations/{organizationId}/api-keys/{keyId}",
    tag = "api keys",
    params(KeyPath),
    security(("secret_key" = ["api_keys:read"])),
    responses(
        (status = 200, description = "The key.", body = Single<ApiKey>),
        (status = 404, description = "`resource.not_found`: no such key for the caller.", body = ErrorEnvelope),
        SecretKeyErrors,
    )
)]
async fn read(
    State(state): State<AdminState>,
    caller: SecretKey<ReadApiKeys>,
    params: PathParams,
) -> Result<Reply, ApiError> {
    let key = own_key(&state, &caller, &params).await?;
    Ok(Reply::ok(resource(&key, None)))
}

/// Renames a key, or changes its origins (publishable) or scopes (secret).
#[utoipa::path(
    operation_id = "update_api_key",
    patch,
    path = "/v1/organizations/{organizationId}/api-keys/{keyId}",
    tag = "api keys",
    params(KeyPath),
    request_body = ApiKeyChange,
    security(("secret_key" = ["api_keys:manage"])),
    responses(
        (status = 200, description = "The key as changed.", body = Single<ApiKey>),
        (status = 404, description = "`resource.not_found`: no such key for the caller.", body = ErrorEnvelope),
        (status = 409, description = "`resource.conflict`: the key is revoked.", body = ErrorEnvelope),
        BodyErrors,
        SecretKeyErrors,
    )
)]
async fn update(
    State(state): State<AdminState>,
    caller: SecretKey<ManageApiKeys>,
    params: PathParams,
    body: edge::body::JsonObject,
) -> Result<Reply, ApiError> {
    let mut key = own_key(&state, &caller, &params).await?;
    let ApiKeyChange {
        name,
        allowed_origins: origins,
        scopes,
    } = ApiKeyChange::from_object_then(body, |change, f| {
        // What a PATCH may say depends on the key's type, which the body does not carry.
        fits_type(
            f,
            key.key_type,
            &mut change.allowed_origins,
            &mut change.scopes,
        )
    })?;
    if key.revoked_at.is_some() {
        return Err(ApiError::new(
            ErrorCode::Conflict,
            "a revoked key cannot be changed",
        ));
    }
    if let Some(name) = name {
        key.name = name;
    }
    if let Some(origins) = origins {
        key.allowed_origins = origins.into_iter().map(|Origin(o)| o).collect();
    }
    if let Some(scopes) = scopes {
        grantable(&caller, &scopes)?;
        key.scopes = scopes;
    }
    state.auth.store.update_api_key(&key).await?;
    Ok(Reply::ok(resource(&key, None)))
}

/// Revokes a key at once (again: no change).
#[utoipa::path(
    operation_id = "revoke_api_key",
    delete,
    path = "/v1/organizations/{organizationId}/api-keys/{keyId}",
    tag = "api keys",
    params(KeyPath),
    security(("secret_key" = ["api_keys:manage"])),
    responses(
        (status = 200, description = "The key, revoked.", body = Single<ApiKey>),
        (status = 404, description = "`resource.not_found`: no such key for the caller.", body = ErrorEnvelope),
        SecretKeyErrors,
    )
)]
async fn revoke(
    State(state): State<AdminState>,
    caller: SecretKey<RevokeApiKey>,
    params: PathParams,
) -> Result<Reply, ApiError> {
    let mut key = own_key(&state, &caller, &params).await?;
    if key.revoked_at.is_none() {
        key.revoked_at = Some(schemas::time::now());
        state.auth.store.update_api_key(&key).await?;
    }
    Ok(Reply::ok(resource(&key, None)))
}

/// Issues a replacement with the same grants; the old key keeps working until its
/// `grace_expires_at`.
#[utoipa::path(
    operation_id = "rotate_api_key",
    post,
    path = "/v1/organizations/{organizationId}/api-keys/{keyId}/rotations",
    tag = "api keys",
    params(KeyPath),
    security(("secret_key" = ["api_keys:manage"])),
    responses(
        (status = 201, description = "The replacement, with `revealed_key`.", body = Single<ApiKey>),
        (status = 404, description = "`resource.not_found`: no such key for the caller.", body = ErrorEnvelope),
        (status = 409, description = "`resource.conflict`: revoked, or rotated already.", body = ErrorEnvelope),
        SecretKeyErrors,
    )
)]
async fn rotate(
    State(state): State<AdminState>,
    caller: SecretKey<RotateApiKey>,
    params: PathParams,
) -> Result<Reply, ApiError> {
    let mut old = own_key(&state, &caller, &params).await?;
    if old.revoked_at.is_some() {
        return Err(ApiError::new(
            ErrorCode::Conflict,
            "a revoked key cannot be rotated",
        ));
    }
    if let Some(replacement) = old.replaced_by {
        return Err(ApiError::new(
            ErrorCode::Conflict,
            format!("this key was already rotated; rotate its replacement {replacement}"),
        ));
    }
    // The replacement carries the same grants, with the removed scope turned into its successors.
    let mut scopes: Vec<Scope> = old
        .scopes
        .iter()
        .flat_map(|s| s.successors().iter().copied())
        .collect();
    scopes.sort();
    scopes.dedup();
    grantable(&caller, &scopes)?;
    let spec = KeySpec {
        name: old.name.clone(),
        key_type: old.key_type,
        environment: old.environment,
        allowed_origins: old.allowed_origins.clone(),
        scopes,
    };
    let credential = Credential::generate(old.key_type, old.environment);
    let replacement = new_record(
        &state.auth.secret,
        old.organization_id,
        &credential,
        spec,
        old.rate_limit_override,
    );
    let now = replacement.created_at;
    old.rotated_at = Some(now);
    old.grace_expires_at = Some(now + state.rotation_grace);
    old.replaced_by = Some(replacement.id);
    state.auth.store.rotate_api_key(&old, &replacement).await?;
    Ok(Reply::created(resource(&replacement, Some(&credential))).showing_secrets())
}
