//! `POST /v1/organizations`, `GET` and `PATCH /v1/organizations/{organizationId}`: handlers,
//! their validation, and organization creation shared with the operator CLI.

use axum::extract::State;
use edge::body::PathParams;
use edge::body::{Reply, RequestBody, Valid};
use edge::openapi::{BodyErrors, SecretKeyErrors};
use edge::policy::{CreateOrganization, ReadOrganization, UpdateOrganization};
use edge::{ApiError, SecretKey};
use schemas::error::ErrorEnvelope;
use schemas::resources::{OrgStatus, Organization, Single};
use schemas::{OrgId, validate};
use store::{OrganizationRecord, Store, StoreError};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::{AdminState, OrgPath, own_organization};

pub fn router() -> OpenApiRouter<AdminState> {
    OpenApiRouter::new()
        .routes(routes!(create))
        .routes(routes!(read, update))
}

/// The body of `POST /v1/organizations`.
#[derive(utoipa::ToSchema, RequestBody)]
pub struct NewOrganization {
    /// Shown to people; at most 200 characters (`validate::NAME_MAX_CHARS`).
    #[member(check = validate::name)]
    #[schema(
        min_length = 1,
        max_length = 200,
        pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f\\u061c\\u200e\\u200f\\u202a-\\u202e\\u2066-\\u2069]*$"
    )]
    name: String,
    /// Unique across the service, fixed once created (`validate::SLUG_PATTERN`).
    #[schema(
        min_length = 1,
        max_length = 100,
        pattern = "^[a-z0-9]+(?:-[a-z0-9]+)*$"
    )]
    #[member(check = validate::slug)]
    slug: String,
}

/// The body of `PATCH /v1/organizations/{organizationId}`: any subset of the members.
#[derive(utoipa::ToSchema, RequestBody)]
#[request_body(forbid = ["slug"], because = "is immutable after creation")]
pub struct OrganizationChange {
    #[member(check = validate::name)]
    #[schema(
        nullable = false,
        min_length = 1,
        max_length = 200,
        pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f\\u061c\\u200e\\u200f\\u202a-\\u202e\\u2066-\\u2069]*$"
    )]
    name: Option<String>,
    /// `suspended` stops the organization's scoring and reads until set `active` again.
    #[schema(nullable = false)]
    status: Option<OrgStatus>,
}

pub fn resource(org: &OrganizationRecord) -> Organization {
    Organization {
        id: org.id,
        object: "organization",
        name: org.name.clone(),
        slug: org.slug.clone(),
        status: org.status,
        created_at: org.created_at,
        updated_at: org.updated_at,
    }
}

/// Creates an active organization; a taken slug is a 409.
pub async fn create_organization(
    store: &Store,
    name: String,
    slug: String,
) -> Result<OrganizationRecord, ApiError> {
    let org = new_organization(name, slug);
    store
        .create_organization(&org)
        .await
        .map_err(|e| slug_conflict(e, &org.slug))?;
    Ok(org)
}

/// An active organization, not yet written.
pub fn new_organization(name: String, slug: String) -> OrganizationRecord {
    let now = schemas::time::now();
    OrganizationRecord {
        id: OrgId::generate(),
        name,
        slug,
        status: OrgStatus::Active,
        created_at: now,
        updated_at: now,
    }
}

/// A store conflict on creating an organization is its slug being taken.
pub fn slug_conflict(e: StoreError, slug: &str) -> ApiError {
    match e {
        StoreError::Conflict(_) => ApiError::new(
            schemas::ErrorCode::Conflict,
            format!("the slug `{slug}` is already taken"),
        ),
        other => other.into(),
    }
}

/// Creates an organization (a live key with `organizations:create`).
#[utoipa::path(
    operation_id = "create_organization",
    post,
    path = "/v1/organizations",
    tag = "organizations",
    request_body = NewOrganization,
    security(("secret_key" = ["organizations:create"])),
    responses(
        (status = 201, description = "The organization, active.", body = Single<Organization>),
        (status = 409, description = "`resource.conflict`: the slug is taken.", body = ErrorEnvelope),
        BodyErrors,
        SecretKeyErrors,
    )
)]
async fn create(
    State(state): State<AdminState>,
    _caller: SecretKey<CreateOrganization>,
    Valid(body): Valid<NewOrganization>,
) -> Result<Reply, ApiError> {
    let org = create_organization(&state.auth.store, body.name, body.slug).await?;
    Ok(Reply::created(resource(&org)))
}

/// The caller's own organization; any other id is a 404.
#[utoipa::path(
    operation_id = "read_organization",
    get,
    path = "/v1/organizations/{organizationId}",
    tag = "organizations",
    params(OrgPath),
    security(("secret_key" = ["organizations:read"])),
    responses(
        (status = 200, description = "The organization.", body = Single<Organization>),
        (status = 404, description = "`resource.not_found`: not the caller's organization.", body = ErrorEnvelope),
        SecretKeyErrors,
    )
)]
async fn read(caller: SecretKey<ReadOrganization>, params: PathParams) -> Result<Reply, ApiError> {
    own_organization(&caller, &params)?;
    Ok(Reply::ok(resource(&caller.organization)))
}

/// Renames, suspends or reactivates the caller's organization (a live key).
#[utoipa::path(
    operation_id = "update_organization",
    patch,
    path = "/v1/organizations/{organizationId}",
    tag = "organizations",
    params(OrgPath),
    request_body = OrganizationChange,
    security(("secret_key" = ["organizations:update"])),
    responses(
        (status = 200, description = "The organization as changed.", body = Single<Organization>),
        (status = 404, description = "`resource.not_found`: not the caller's organization.", body = ErrorEnvelope),
        BodyErrors,
        SecretKeyErrors,
    )
)]
async fn update(
    State(state): State<AdminState>,
    caller: SecretKey<UpdateOrganization>,
    params: PathParams,
    Valid(OrganizationChange { name, status }): Valid<OrganizationChange>,
) -> Result<Reply, ApiError> {
    let id = own_organization(&caller, &params)?;
    // Re-read so that the update applies to the stored row, not the one seen at authentication.
    let mut org = state
        .auth
        .store
        .get_organization(id)
        .await?
        .ok_or_else(|| ApiError::not_found("organization"))?;
    if name.is_some() || status.is_some() {
        org.name = name.unwrap_or(org.name);
        org.status = status.unwrap_or(org.status);
        org.updated_at = schemas::time::now();
        state.auth.store.update_organization(&org).await?;
    }
    Ok(Reply::ok(resource(&org)))
}
